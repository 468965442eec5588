from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "orchestrator.experiments"
    label = "experiments"
