from django.urls import path

from orchestrator.experiments import external_api, logging_token_views, project_views

urlpatterns = [
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
]
