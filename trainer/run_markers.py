"""Files the orchestrator writes into a run directory to say how a stop is meant; trainer/cli.py
reads them when a signal arrives. No torch and no Django: both sides import this."""

CANCEL_MARKER = "cancel-requested"  # written into the run directory by the orchestrator's cancel
NO_CHECKPOINT_MARKER = "cancel-no-checkpoint"  # written by an alert's cancel (orchestrator/alerts)
