"""What the experiments app announces to the apps below it, so that they never have to be called
back up: the cluster app (orchestrator/cluster/apps.py) listens and acts."""

from django.dispatch import Signal

# sent once the transaction that flagged an active run for cancelling has committed; kwargs: run_id
cancel_requested = Signal()
