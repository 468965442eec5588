from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "orchestrator.cluster"
    label = "cluster"

    def ready(self) -> None:
        from orchestrator.experiments.signals import cancel_requested

        cancel_requested.connect(_enqueue_cancel, dispatch_uid="cluster-cancel-run")


def _enqueue_cancel(sender, run_id: int, **kwargs) -> None:
    """A user asked to stop an active run (experiments.services.run_stop): the cluster stops its job."""
    from orchestrator.cluster.tasks import cancel_run

    cancel_run.delay(run_id)
