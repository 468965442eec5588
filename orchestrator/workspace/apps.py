from django.apps import AppConfig


class WorkspaceConfig(AppConfig):
    name = "orchestrator.workspace"
    label = "workspace"
