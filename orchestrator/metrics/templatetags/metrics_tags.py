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
        "keys": (keys := selectors.run_keys(run.pk)),  # asking for any other key is a 404
        "panels": panels_for(keys, [run.config]),
        "keys_url": reverse("metrics-keys", args=[run.pk]),
        "x_axes": X_AXES,
        "series_url": reverse("metrics-ingest", args=[run.pk]),
        "stream_url": reverse("metrics-stream", args=[run.pk]),
        "run_url": reverse("api-run-detail", args=[run.pk]),
        "compare_url": reverse("metrics-compare") + f"?runs={run.pk}",
        "progress": progress(run.step, run.total_steps, run.config),
    }


@register.simple_tag
def experiment_compare_config(experiment, user) -> dict:
    """The compare charts of an experiment's runs, for its page: grouped by the swept field; the
    first MAX_COMPARE_RUNS runs (the series API's limit), with the total for the page to say so."""
    from orchestrator.experiments.access import visible_runs
    from orchestrator.metrics.views import MAX_COMPARE_RUNS, compare_data

    runs = visible_runs(user).filter(experiment=experiment).order_by("id")
    shown = list(runs[:MAX_COMPARE_RUNS])
    page, _ = compare_data(shown, experiment=experiment)
    page["total_runs"] = len(shown) if len(shown) < MAX_COMPARE_RUNS else runs.count()
    return page
