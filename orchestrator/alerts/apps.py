from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "orchestrator.alerts"
    label = "alerts"
