"""What the run page's header, facts card (attempt, reason, progress) and actions show, and a
version of it, so one polled fragment (the job card, cluster/views.py run_job) can bring them
all up to date together the moment any of it changes, and leave them alone otherwise (a
reader's open form is not reset every few seconds)."""

from __future__ import annotations

import hashlib

from orchestrator.experiments.access import can_cancel, can_write
from orchestrator.experiments.models import Run


def status_version(run: Run, *, writer: bool, queue_text: str = "", canceller: bool = False) -> str:
    """Changes whenever something the header or the facts card shows changes."""
    seen = (
        run.state,
        run.state_reason,
        run.attempt,
        run.max_attempts,
        run.cancel_requested,
        run.step,
        run.total_steps,
        run.priority,
        run.notes,
        sorted(t.name for t in run.tags.all()),
        queue_text,
        writer,
        canceller,
    )
    return hashlib.sha1(repr(seen).encode()).hexdigest()[:16]


def status_context(user, run: Run) -> dict:
    """The context of experiments/_run_facts.html and _run_state.html for this user."""
    from orchestrator.experiments.queue import waiting_reasons

    writer = can_write(user, run.owner_id, run.experiment.project_id)
    canceller = writer or can_cancel(user, run)
    queue_text = waiting_reasons([run]).get(run.pk, "") if run.state == Run.State.QUEUED else ""
    return {
        "run": run,
        "can_write": writer,
        "can_cancel": canceller,
        "status_version": status_version(run, writer=writer, queue_text=queue_text, canceller=canceller),
    }
