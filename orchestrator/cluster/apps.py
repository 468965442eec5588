from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "orchestrator.cluster"
    label = "cluster"
