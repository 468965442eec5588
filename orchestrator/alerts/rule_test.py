"""Try a rule on what a run already logged, without firing it: the "Test" button beside a rule.

A metric rule is checked against every stored point of its keys (a fresh reward track, as if the
run's whole curve arrived in one batch); a time rule against the run's heartbeat and update now.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.utils import timezone

from orchestrator.alerts import rules
from orchestrator.alerts.models import RunWatch
from orchestrator.experiments.models import Run
from orchestrator.metrics.chunks import as_float, live_points


@dataclass(frozen=True)
class TestResult:
    run_id: int
    run_name: str
    fires: bool
    message: str


def rule_try(*, rule: rules.Rule, run: Run) -> TestResult:
    """Would `rule` fire on `run` as it stands? The first firing's message, or why not."""
    if rule.kind in rules.TIME_KINDS:
        return _try_time_rule(rule, run)
    keys = rules.KEYS[rule.kind]
    points = {
        key: sorted(
            (step, as_float(value, special))
            for step, value, special in zip(pts.steps.tolist(), pts.values.tolist(), pts.specials.tolist(), strict=True)
        )
        for (_, key), pts in live_points([run.pk], keys).items()
    }
    if not points:
        return TestResult(run.pk, run.name, False, f"no points of {', '.join(keys)} logged yet")
    firings = rules.check_batch({rule.kind: rule}, points, rules.RewardTrack())
    if firings:
        return TestResult(run.pk, run.name, True, firings[0].message)
    count = sum(len(p) for p in points.values())
    return TestResult(run.pk, run.name, False, f"would not fire on its {count} logged point(s)")


def _try_time_rule(rule: rules.Rule, run: Run) -> TestResult:
    if run.state != Run.State.RUNNING:
        return TestResult(run.pk, run.name, False, f"checked only while running; the run is {run.state}")
    now = timezone.now()
    if rule.kind == rules.NO_HEARTBEAT:
        beat = run.last_heartbeat or run.started_at
        quiet = (now - beat).total_seconds() if beat else 0.0
        what = f"last heartbeat {quiet:.0f} s ago"
    else:
        seen = RunWatch.objects.filter(run=run).values_list("step_seen_at", flat=True).first()
        quiet = (now - seen).total_seconds() if seen else 0.0
        what = f"update {run.step} for {quiet:.0f} s"
    fires = quiet > rule.window_s
    return TestResult(
        run.pk, run.name, fires, f"{what}: {'over' if fires else 'within'} the limit of {rule.window_s} s"
    )
