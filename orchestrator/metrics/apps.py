from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "orchestrator.metrics"
    label = "metrics"
