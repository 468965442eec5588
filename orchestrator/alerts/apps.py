from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "orchestrator.alerts"
    label = "alerts"

    def ready(self) -> None:
        """Ride on metric ingestion through the registry metrics owns (metrics never imports alerts)."""
        from orchestrator.alerts.batch_check import BatchCheck
        from orchestrator.metrics import ingest_hooks

        ingest_hooks.register(BatchCheck.for_batch)
