from django.apps import AppConfig


class SamplesConfig(AppConfig):
    name = "orchestrator.samples"
    label = "samples"
