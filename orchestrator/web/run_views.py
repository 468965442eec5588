"""Browser pages for runs: the runs table, the run page and the run actions.

Views stay thin: access helper, form or parse, one service, render. An htmx request gets the
fragment it changed (STYLE.md §5): the table for a filter, the row or the facts card for an action.
"""

from urllib.parse import urlsplit

from django.contrib import messages
from django.http import HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from orchestrator.experiments.access import (
    can_write,
    get_run_for_user,
    get_run_to_cancel,
    visible_projects,
    visible_tags,
)
from orchestrator.experiments.checkpoints import run_checkpoints
from orchestrator.experiments.forks import may_fork
from orchestrator.experiments.lineage import run_lineage
from orchestrator.experiments.models import Run
from orchestrator.experiments.queue import waiting_reasons
from orchestrator.experiments.run_status import status_context
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.services import (
    run_move_to_top,
    run_retry,
    run_set_notes,
    run_set_priority,
    run_set_tags,
    run_stop,
)
from orchestrator.experiments.yaml_text import dump_yaml
from orchestrator.lib.bounds import parse_priority, safe_filename
from orchestrator.web.run_columns import STAT_LABELS, column_values
from orchestrator.web.selectors import RunFilter, runs_page
from trainer.metric_keys import METRIC_KEYS


def compare_url() -> str:
    try:
        return reverse("metrics-compare")
    except NoReverseMatch:  # the metrics app adds the compare page
        return "/compare/"


def run_list(request):
    f = RunFilter.from_params(request.GET)
    context = {
        "page": runs_page(request.user, f),
        "f": f,
        "key_metrics": f.cols,
        "states": Run.State.values,
        "compare_url": compare_url(),
        "query_string": _without_page(request.GET),
        "stat_label": STAT_LABELS[f.stat],
    }
    if request.headers.get("HX-Request"):
        return render(request, "experiments/_runs_table.html", context)
    context["projects"] = visible_projects(request.user).order_by("name").values_list("name", flat=True)
    context["tags"] = visible_tags(request.user)
    context["metric_keys"] = sorted(METRIC_KEYS)
    context["stats"] = list(STAT_LABELS.items())
    return render(request, "experiments/run_list.html", context)


def _without_page(params) -> str:
    """The current filter as a query string, for sort and page links (which add their own)."""
    params = params.copy()
    params.pop("page", None)
    params.pop("sort", None)
    return params.urlencode()


def run_detail(request, run_id: int):
    run = get_run_for_user(request.user, run_id)
    return render(
        request,
        "experiments/run_detail.html",
        {
            **status_context(request.user, run),
            "config_yaml": dump_yaml(run.config),
            "events": run.events.all(),
            **fork_context(request.user, run),
        },
    )


def fork_context(user, run: Run) -> dict:
    """The run page's checkpoints (each with "Fork from here") and lineage partials."""
    lineage = run_lineage(user, run)
    family = [run.parent_id] if lineage.parent else []
    family += [run.pk] + [c.pk for c in lineage.children]
    return {
        "checkpoints": run_checkpoints(run),
        "lineage": lineage,
        "can_fork": may_fork(user, run),
        "compare_lineage_url": f"{compare_url()}?runs={','.join(map(str, family))}&lineage=1"
        if len(family) > 1
        else "",
    }


def run_config_yaml(request, run_id: int):
    """The run's whole config as the YAML file `python -m trainer run --config` takes: every field
    as it ran (not a diff from today's defaults, which may change), headed by comments naming the
    run, its experiment and its project; importing the file into the form keeps that project."""
    run = get_run_for_user(request.user, run_id)
    header = (
        f"# OffPolicy Lab run {run.pk} {run.name!r} of experiment {run.experiment.name!r} (#{run.experiment_id})\n"
        f"# project: {run.experiment.project.name}\n"
    )
    response = HttpResponse(header + dump_yaml(run.config), content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{safe_filename(run.name, f"run-{run.pk}")}.yaml"'
    return response


def _after_action(request, run: Run, done: bool, failed: str):
    if not done:
        messages.error(request, failed)
    if request.headers.get("HX-Request"):
        run.refresh_from_db()
        context = {
            "run": run,
            "can_write": can_write(request.user, run.owner_id, run.experiment.project_id),
            "action_error": "" if done else failed,
        }
        if request.headers.get("HX-Target") == "run-facts":  # the run page: also update its state badge
            return render(
                request,
                "experiments/_run_facts.html",
                {**status_context(request.user, run), "action_error": context["action_error"], "oob_state": True},
            )
        shown = RunFilter.from_params(QueryDict(urlsplit(request.headers.get("HX-Current-URL", "")).query))
        run.latest = column_values([run.pk], shown.cols, shown.stat)[run.pk]  # the table's own columns
        run.waiting = waiting_reasons([run]).get(run.pk, "")
        return render(request, "experiments/_run_row.html", context)
    return redirect(_safe_next(request) or reverse("exp-run-detail", args=[run.pk]))


def _safe_next(request) -> str | None:
    """`next` only when it stays on this site (no open redirect to another host or scheme)."""
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return None


@require_POST
def run_cancel(request, run_id: int):
    run = get_run_to_cancel(request.user, run_id)
    return _after_action(request, run, run_stop(run=run), f"run {run.pk} is {run.state} and cannot be cancelled")


@require_POST
def run_retry_view(request, run_id: int):
    run = get_run_for_user(request.user, run_id, write=True)
    return _after_action(
        request,
        run,
        run_retry(run=run),
        f"only failed, lost or cancelled runs can be retried (this one is {run.state})",
    )


@require_POST
def run_top(request, run_id: int):
    run = get_run_for_user(request.user, run_id, write=True)
    return _after_action(request, run, run_move_to_top(run=run), "only a queued run can move to the top")


@require_POST
def run_priority(request, run_id: int):
    run = get_run_for_user(request.user, run_id, write=True)
    priority = parse_priority(request.POST.get("priority", ""))
    if priority is None:
        return _after_action(request, run, False, "priority: a whole number is required (32 bits)")
    return _after_action(
        request,
        run,
        run_set_priority(run=run, priority=priority),
        "the priority can change only while the run is queued",
    )


@require_POST
def run_annotate(request, run_id: int):
    run = get_run_for_user(request.user, run_id, write=True)
    try:
        run_set_tags(run=run, tags=request.POST.get("tags", "").split(","))
        run_set_notes(run=run, notes=request.POST.get("notes", ""))
    except ConfigError as exc:
        return _after_action(request, run, False, str(exc))
    return _after_action(request, run, True, "")
