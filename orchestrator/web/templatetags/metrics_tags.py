"""What the chart partials of the run and experiment pages need: the metrics of the runs, and the
saved views of their project."""

from django import template
from django.urls import reverse

from orchestrator.experiments.access import visible_runs
from orchestrator.experiments.progress import progress
from orchestrator.metrics import selectors
from orchestrator.metrics.access import MAX_COMPARE_RUNS
from orchestrator.metrics.compare_charts import compare_data
from orchestrator.metrics.panels import X_AXES, panels_for
from orchestrator.workspace.selectors import view_to_apply, views_config

register = template.Library()


@register.simple_tag
def run_metrics_config(run, request=None) -> dict:
    """What the run page's charts need: panels resolved for this run's keys, the URLs, and the
    saved view it applies (?view=<id>, else its project's default)."""
    views = {}
    if request is not None:
        project = run.experiment.project
        applied = view_to_apply(request.user, request.GET.get("view"), project)
        views = views_config(request.user, project, applied, f"run:{run.pk}")
    return {
        "views": views,
        "run": run.pk,
        "state": run.state,
        "terminal": run.is_terminal,
        "keys": (keys := selectors.run_keys(run.pk)),  # asking for any other key is a 404
        "panels": panels_for(keys, [run.config], bundled=run.uses_bundled_trainer),
        "keys_url": reverse("metrics-keys", args=[run.pk]),
        "x_axes": X_AXES,
        "series_url": reverse("metrics-ingest", args=[run.pk]),
        "stream_url": reverse("metrics-stream", args=[run.pk]),
        "run_url": reverse("api-run-detail", args=[run.pk]),
        "compare_url": reverse("metrics-compare") + f"?runs={run.pk}",
        "progress": progress(run.step, run.total_steps, run.config),
    }


@register.simple_tag
def experiment_compare_config(experiment, user, request=None) -> dict:
    """The compare charts of an experiment's runs, for its page: grouped by the swept field; the
    first MAX_COMPARE_RUNS runs (the series API's limit), with the total for the page to say so.
    Given the request, the saved view of ?view=<id> (else the project's default) applies."""
    runs = visible_runs(user).filter(experiment=experiment).order_by("id")
    shown = list(runs[:MAX_COMPARE_RUNS])
    page, _ = compare_data(shown, experiment=experiment)
    if request is not None:
        applied = view_to_apply(user, request.GET.get("view"), experiment.project)
        page["views"] = views_config(user, experiment.project, applied, f"experiment:{experiment.pk}")
    page["total_runs"] = len(shown) if len(shown) < MAX_COMPARE_RUNS else runs.count()
    return page
