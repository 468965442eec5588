"""A run's lineage for its page: the run it was forked from (at which step) and the runs forked
from it. Only runs the user may read are shown; a parent the user cannot read shows as its id."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User

from orchestrator.experiments.access import visible_runs
from orchestrator.experiments.models import Run

MAX_CHILDREN = 200


@dataclass
class Lineage:
    parent_id: int | None
    parent_step: int | None  # None with a parent: its final checkpoint, fixed when the fork is submitted
    parent: Run | None  # None when there is none or the user cannot read it
    children: list[Run]
    children_count: int

    @property
    def empty(self) -> bool:
        return self.parent_id is None and not self.children_count


def run_lineage(user: User, run: Run) -> Lineage:
    """Two queries: the parent, and the (visible) children with their fork steps."""
    parent = visible_runs(user).filter(pk=run.parent_id).first() if run.parent_id else None
    children = visible_runs(user).filter(parent_id=run.pk).order_by("parent_step", "id")
    shown = list(children[:MAX_CHILDREN])
    count = len(shown) if len(shown) < MAX_CHILDREN else children.count()
    return Lineage(run.parent_id, run.parent_step, parent, shown, count)
