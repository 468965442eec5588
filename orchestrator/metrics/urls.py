from django.urls import path

from orchestrator.metrics import views

urlpatterns = [
    path("api/v1/runs/<int:run_id>/metrics", views.run_metrics, name="metrics-ingest"),
    path("api/v1/runs/<int:run_id>/heartbeat", views.run_heartbeat_view, name="metrics-heartbeat"),
]
