"""The experiment page's statistics section (loaded by htmx) and its CSV, JSON and Markdown exports."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from orchestrator.experiments.access import get_experiment_for_user
from orchestrator.experiments.bounds import safe_filename
from orchestrator.studies.report import experiment_runs, study_report
from orchestrator.studies.table import as_csv, as_json, as_markdown, build_table

EXPORTS = {"csv": ("text/csv", as_csv), "json": ("application/json", None), "md": ("text/markdown", as_markdown)}


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
        raise Http404(f"statistics.{fmt[:10]}: export as csv, json or md")
    experiment = get_experiment_for_user(request.user, experiment_id)
    report = study_report(experiment, request.GET)
    # no metrics yet: the same table, every cell empty, rather than an error
    table, verdicts = (report.table, report.verdicts) if report else (build_table(experiment_runs(experiment)), None)
    content_type, render_table = EXPORTS[fmt]
    body = as_json(table, verdicts) if fmt == "json" else render_table(table)
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{safe_filename(experiment.name)}-statistics.{fmt}"'
    return response
