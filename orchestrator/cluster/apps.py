from django.apps import AppConfig


class ClusterConfig(AppConfig):
    name = "orchestrator.cluster"
    label = "cluster"

    def ready(self) -> None:
        from orchestrator.experiments.limits import fixed_gpus_from
        from orchestrator.experiments.signals import cancel_requested

        cancel_requested.connect(_enqueue_cancel, dispatch_uid="cluster-cancel-run")
        fixed_gpus_from(_fixed_gpus)


def _enqueue_cancel(sender, run_id: int, **kwargs) -> None:
    """A user asked to stop an active run (experiments.services.run_stop): the cluster stops its job."""
    from orchestrator.cluster.tasks import cancel_run

    cancel_run.delay(run_id)


def _fixed_gpus() -> int | None:
    """What the configured backend gives every job, asked each time: settings may change it."""
    from orchestrator.cluster.backends import configured_backend

    return configured_backend().fixed_gpus()
