"""The pages and the JSON API that read several apps: runs, experiments, the runs table."""

from django.urls import path
from django.views.generic import RedirectView

from orchestrator.web import api, compare_views, experiment_views, openapi, run_views

urlpatterns = [
    # runs
    path("", run_views.run_list, name="exp-run-list"),
    # where a run page's URL points up to
    path("runs/", RedirectView.as_view(pattern_name="exp-run-list", query_string=True)),
    path("runs/<int:run_id>/", run_views.run_detail, name="exp-run-detail"),
    path("runs/<int:run_id>/config.yaml", run_views.run_config_yaml, name="exp-run-config"),
    path("runs/<int:run_id>/cancel", run_views.run_cancel, name="exp-run-cancel"),
    path("runs/<int:run_id>/retry", run_views.run_retry_view, name="exp-run-retry"),
    path("runs/<int:run_id>/top", run_views.run_top, name="exp-run-top"),
    path("runs/<int:run_id>/priority", run_views.run_priority, name="exp-run-priority"),
    path("runs/<int:run_id>/annotate", run_views.run_annotate, name="exp-run-annotate"),
    # experiments (sweeps)
    path("experiments/", experiment_views.experiment_list, name="exp-experiment-list"),
    path("experiments/new/", experiment_views.experiment_new, name="exp-experiment-new"),
    path("experiments/validate", experiment_views.experiment_validate, name="exp-experiment-validate"),
    path("experiments/preview", experiment_views.experiment_preview, name="exp-experiment-preview"),
    path("experiments/export", experiment_views.experiment_export, name="exp-experiment-export"),
    path("experiments/import", experiment_views.experiment_import, name="exp-experiment-import"),
    path("experiments/<int:experiment_id>/", experiment_views.experiment_detail, name="exp-experiment-detail"),
    *(
        path(
            f"experiments/<int:experiment_id>/{action}",
            experiment_views.experiment_action,
            {"action": action},
            name=f"exp-experiment-{action}",
        )
        for action in ("pause", "resume", "cancel", "priority")
    ),
    # runs side by side
    path("compare/", compare_views.compare_page, name="metrics-compare"),
    # JSON API
    path("api/v1/openapi.json", openapi.openapi_json, name="api-openapi"),
    path("api/v1/schema/runconfig", openapi.runconfig_schema, name="api-runconfig-schema"),
    path("api/v1/experiments", api.experiments, name="api-experiments"),
    path("api/v1/experiments/preview", api.experiments_preview, name="api-experiments-preview"),
    path("api/v1/experiments/<int:experiment_id>", api.experiment_detail, name="api-experiment-detail"),
    *(
        path(
            f"api/v1/experiments/<int:experiment_id>/{action}",
            api.experiment_action,
            {"action": action},
            name=f"api-experiment-{action}",
        )
        for action in ("pause", "resume", "cancel", "priority")
    ),
    path("api/v1/runs", api.runs, name="api-runs"),
    path("api/v1/runs/<int:run_id>", api.run_detail, name="api-run-detail"),
    # explicit actions: the metrics app owns other paths under api/v1/runs/<id>/
    *(
        path(f"api/v1/runs/<int:run_id>/{action}", api.run_action, {"action": action}, name=f"api-run-{action}")
        for action in ("cancel", "retry", "move-to-top", "priority")
    ),
    path("api/v1/projects", api.projects, name="api-projects"),
    path("api/v1/projects/<str:name>", api.project_detail, name="api-project-detail"),
    path("api/v1/projects/<str:name>/invitation", api.project_invitation, name="api-project-invitation"),
    path("api/v1/tags", api.tags, name="api-tags"),
]
