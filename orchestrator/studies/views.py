"""The experiment page's statistics section (loaded by htmx) and its CSV, JSON and Markdown exports."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from orchestrator.experiments.access import get_experiment_for_user
from orchestrator.lib.bounds import safe_filename
from orchestrator.studies.claims import Thresholds
from orchestrator.studies.report import experiment_runs, runs_csv, study_report
from orchestrator.studies.table import as_csv, as_json, as_markdown, build_table

EXPORTS = {
    "csv": ("text/csv", as_csv),
    "json": ("application/json", None),
    "md": ("text/markdown", as_markdown),
    "runs.csv": ("text/csv", None),  # the table of runs the verdicts judge (study_verdicts reads it)
}


@require_GET
def experiment_statistics(request: HttpRequest, experiment_id: int):
    experiment = get_experiment_for_user(request.user, experiment_id)
    report = study_report(experiment, request.GET)
    return render(
        request,
        "studies/_statistics.html",
        {"experiment": experiment, "report": report, "query": request.GET.urlencode()},
    )


@require_GET
def experiment_statistics_export(request: HttpRequest, experiment_id: int, fmt: str):
    if fmt not in EXPORTS:
        raise Http404(f"statistics.{fmt[:10]}: export as csv, json, md or runs.csv")
    experiment = get_experiment_for_user(request.user, experiment_id)
    report = study_report(experiment, request.GET)
    # no metrics yet: the same table, every cell empty, rather than an error
    table, verdicts = (report.table, report.verdicts) if report else (build_table(experiment_runs(experiment)), None)
    content_type, render_table = EXPORTS[fmt]
    if fmt == "runs.csv":
        body = runs_csv(table, report.options.thresholds if report else Thresholds())
    else:
        body = as_json(table, verdicts) if fmt == "json" else render_table(table)
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    name = "runs.csv" if fmt == "runs.csv" else f"statistics.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{safe_filename(experiment.name)}-{name}"'
    return response
