from django.urls import path

from orchestrator.metrics import glance_views, views

urlpatterns = [
    path("api/v1/runs/<int:run_id>/metrics", views.run_metrics, name="metrics-ingest"),
    path("api/v1/runs/<int:run_id>/metrics/keys", views.run_metric_keys, name="metrics-keys"),
    path("api/v1/runs/<int:run_id>/metrics/stream", views.run_stream, name="metrics-stream"),
    path("api/v1/runs/<int:run_id>/heartbeat", views.run_heartbeat_view, name="metrics-heartbeat"),
    path("api/v1/runs/<int:run_id>/updates", views.run_updates, name="metrics-updates"),
    path("api/v1/runs/<int:run_id>/histograms", views.run_histograms, name="metrics-histograms"),
    path("api/v1/runs/<int:run_id>/tables", views.run_tables, name="metrics-tables"),
    path("api/v1/metrics/compare", views.compare_series, name="metrics-compare-api"),
    path("api/v1/metrics/glance", glance_views.glance, name="metrics-glance-api"),
]
