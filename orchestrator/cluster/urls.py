from django.urls import path

from orchestrator.cluster import views

urlpatterns: list = [
    path("runs/<int:run_id>/job", views.run_job, name="cluster-run-job"),
    path("cluster/health", views.cluster_health, name="cluster-health"),
    path("cluster/queue", views.cluster_queue_fragment, name="cluster-queue"),
]
