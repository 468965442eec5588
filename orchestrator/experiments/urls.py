from django.urls import path
from django.views.generic import RedirectView

from orchestrator.experiments import api, experiment_views, external_api, logging_token_views, project_views, views

urlpatterns = [
    # runs
    path("", views.run_list, name="exp-run-list"),
    # where a run page's URL points up to
    path("runs/", RedirectView.as_view(pattern_name="exp-run-list", query_string=True)),
    path("runs/<int:run_id>/", views.run_detail, name="exp-run-detail"),
    path("runs/<int:run_id>/config.yaml", views.run_config_yaml, name="exp-run-config"),
    path("runs/<int:run_id>/cancel", views.run_cancel, name="exp-run-cancel"),
    path("runs/<int:run_id>/retry", views.run_retry_view, name="exp-run-retry"),
    path("runs/<int:run_id>/top", views.run_top, name="exp-run-top"),
    path("runs/<int:run_id>/priority", views.run_priority, name="exp-run-priority"),
    path("runs/<int:run_id>/annotate", views.run_annotate, name="exp-run-annotate"),
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
    # projects
    path("projects/", project_views.project_list, name="exp-project-list"),
    path("projects/new", project_views.project_new, name="exp-project-new"),
    path("projects/<str:name>/members", project_views.project_member_add, name="exp-project-member-add"),
    path("projects/<str:name>/members/remove", project_views.project_member_remove, name="exp-project-member-remove"),
    path(
        "projects/<str:name>/invitation/accept",
        project_views.project_invitation_answer,
        {"answer": "accept"},
        name="exp-project-invitation-accept",
    ),
    path(
        "projects/<str:name>/invitation/decline",
        project_views.project_invitation_answer,
        {"answer": "decline"},
        name="exp-project-invitation-decline",
    ),
    # JSON API
    path("api/v1/experiments", api.experiments, name="api-experiments"),
    # the `opl` logging SDK: runs logged from outside the lab's queue
    path("api/v1/sdk/runs", external_api.external_runs, name="api-sdk-runs"),
    path("api/v1/sdk/runs/<int:run_id>/finish", external_api.external_run_finish_view, name="api-sdk-run-finish"),
    path("api/v1/sdk/tokens", external_api.logging_tokens, name="api-sdk-tokens"),
    path("api/v1/sdk/tokens/<int:token_id>", external_api.logging_token_detail, name="api-sdk-token-detail"),
    path(
        "account/logging-tokens/<int:token_id>/revoke",
        logging_token_views.logging_token_revoke_view,
        name="sdk-logging-token-revoke",
    ),
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
