from django.apps import AppConfig


class LaunchersConfig(AppConfig):
    name = "orchestrator.launchers"
    label = "launchers"
    verbose_name = "Launchers"
