from django.urls import path

from orchestrator.alerts import views

urlpatterns = [
    path("api/v1/runs/<int:run_id>/alerts", views.run_alerts, name="api-run-alerts"),
    path("api/v1/projects/<str:name>/alerts", views.project_alerts, name="api-project-alerts"),
]
