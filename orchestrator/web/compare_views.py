"""The compare page: a set of runs' charts overlaid, with the saved views of their project."""

from django.db.models import Count
from django.http import HttpRequest
from django.shortcuts import render

from orchestrator.experiments.access import visible_runs
from orchestrator.experiments.models import Experiment
from orchestrator.metrics.access import compared_runs
from orchestrator.metrics.compare_charts import compare_data
from orchestrator.workspace.selectors import view_to_apply, views_config


def compare_page(request: HttpRequest):
    """/compare/?runs=1,2,3 or ?experiment=<id>: overlaid panels, grouping, diff, summary, heatmap.
    Without either, a picker of recent runs and experiments."""
    if not request.GET.get("runs") and not request.GET.get("experiment"):
        recent = visible_runs(request.user).order_by("-id")[:100]
        experiments = (
            Experiment.objects.filter(runs__in=visible_runs(request.user))
            .distinct()
            .annotate(n_runs=Count("runs", distinct=True))
            .order_by("-id")[:30]
        )
        return render(request, "metrics/compare_pick.html", {"runs": recent, "experiments": experiments})
    runs, experiment = compared_runs(request)
    page, diff_rows = compare_data(runs)
    project = experiment.project if experiment else runs[0].experiment.project if runs else None
    applied = view_to_apply(request.user, request.GET.get("view"), project)
    page["views"] = views_config(request.user, project, applied, "compare")
    return render(
        request,
        "metrics/compare.html",
        {
            "runs": runs,
            "experiment": experiment,
            "diff_rows": diff_rows,
            "page": page,
        },
    )
