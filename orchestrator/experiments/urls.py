from django.urls import path

from orchestrator.experiments import api, views

urlpatterns = [
    path("", views.run_list, name="exp-run-list"),
    path("runs/<int:run_id>/", views.run_detail, name="exp-run-detail"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="exp-run-cancel"),
    path("experiments/new/", views.experiment_new, name="exp-experiment-new"),
    # JSON API
    path("api/v1/experiments", api.experiments_create, name="api-experiments"),
    path("api/v1/runs/<int:run_id>", api.run_detail, name="api-run-detail"),
    path("api/v1/runs/<int:run_id>/cancel", api.run_cancel, name="api-run-cancel"),
]
