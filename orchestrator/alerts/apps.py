from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "orchestrator.alerts"
    label = "alerts"

    def ready(self) -> None:
        """Ride on metric ingestion, and take a trainer's own alerts, through the registries metrics
        owns (metrics never imports alerts)."""
        from orchestrator.alerts.batch_check import BatchCheck
        from orchestrator.metrics import ingest_hooks

        ingest_hooks.register(BatchCheck.for_batch)
        from orchestrator.alerts.trainer_alerts import trainer_alert_create
        from orchestrator.metrics import updates

        updates.receive("alert", trainer_alert_create)
