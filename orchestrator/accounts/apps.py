from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "orchestrator.accounts"
    label = "accounts"
