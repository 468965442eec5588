from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    name = "orchestrator.experiments"
    label = "experiments"

    def ready(self):
        from django.db.models.signals import pre_delete

        from orchestrator.experiments.forks import release_pins_of_deleted
        from orchestrator.experiments.models import Run

        pre_delete.connect(release_pins_of_deleted, sender=Run, dispatch_uid="experiments-release-pins-of-deleted")
