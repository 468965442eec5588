from django.apps import AppConfig


class StudiesConfig(AppConfig):
    name = "orchestrator.studies"
    label = "studies"
