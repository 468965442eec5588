from django.apps import AppConfig


class SamplesConfig(AppConfig):
    name = "orchestrator.samples"
    label = "samples"

    def ready(self) -> None:
        """Take logged tables as samples through the registry metrics owns (metrics never imports samples)."""
        from orchestrator.metrics import updates
        from orchestrator.samples.tables import samples_from_table

        updates.receive("table", samples_from_table)
