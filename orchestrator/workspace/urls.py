from django.urls import path

from orchestrator.workspace import api, views

urlpatterns = [
    path("api/v1/projects/<str:name>/views", api.project_views, name="api-project-views"),
    path("api/v1/views/<int:view_id>", api.view_detail, name="api-view-detail"),
    path("views/<int:view_id>/", views.view_open, name="workspace-view-open"),
]
