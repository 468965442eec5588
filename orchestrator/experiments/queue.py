"""Which queued runs the dispatcher submits next."""
from django.conf import settings

from orchestrator.experiments.models import Experiment, Run


def runs_to_dispatch() -> list[int]:
    """Ids of the queued runs to submit now: highest priority first, then oldest, within the
    global limit on active runs. Paused or cancelled experiments submit nothing."""
    capacity = settings.MAX_ACTIVE_RUNS - Run.objects.filter(state__in=Run.ACTIVE).count()
    if capacity <= 0:
        return []
    return list(
        Run.objects.filter(state=Run.State.QUEUED, experiment__state=Experiment.State.ACTIVE)
        .order_by("-priority", "id")
        .values_list("id", flat=True)[:capacity]
    )
