from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "orchestrator.web"
    label = "web"
