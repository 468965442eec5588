"""Template helpers for the metrics partials included in other apps' pages."""
from django import template
from django.urls import reverse

from orchestrator.experiments.progress import progress
from orchestrator.metrics import selectors
from orchestrator.metrics.panels import X_AXES, panels_for

register = template.Library()


@register.simple_tag
def run_metrics_config(run) -> dict:
    """What the run page's charts need: panels resolved for this run's keys, and the URLs."""
    return {
        "run": run.pk,
        "state": run.state,
        "terminal": run.is_terminal,
        "panels": panels_for(selectors.run_keys(run.pk), [run.config]),
        "x_axes": X_AXES,
        "series_url": reverse("metrics-ingest", args=[run.pk]),
        "stream_url": reverse("metrics-stream", args=[run.pk]),
        "run_url": reverse("api-run-detail", args=[run.pk]),
        "compare_url": reverse("metrics-compare") + f"?runs={run.pk}",
        "progress": progress(run.step, run.total_steps, run.config),
    }
