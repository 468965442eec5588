"""Browser pages for experiments (sweeps): the generated form with live validation, preview,
presets, clone, YAML import/export; the experiments list and a sweep's page with its actions."""

import hashlib
import re
from urllib.parse import quote

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.experiments.access import (
    can_write,
    check_can_add_experiments,
    get_experiment_for_user,
    get_run_for_user,
    visible_experiments,
)
from orchestrator.experiments.config_paths import run_reader
from orchestrator.experiments.experiment_file import dump_experiment_yaml, parse_experiment_yaml
from orchestrator.experiments.forks import fork_plan, fork_spec
from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.presets import get_preset, list_presets
from orchestrator.experiments.progress import staleness_updates
from orchestrator.experiments.runconfig import ConfigError, experiment_fields, validate_run_config
from orchestrator.experiments.schema_form import fields_by_path, minimal_config
from orchestrator.experiments.services import (
    experiment_cancel,
    experiment_pause,
    experiment_plan,
    experiment_resume,
    experiment_set_priority,
)
from orchestrator.lib.bounds import MAX_YAML_BYTES, parse_id, parse_priority, safe_filename
from orchestrator.studies.warmup import SUFFIX as WARMUP_SUFFIX
from orchestrator.studies.warmup import experiment_create_with_warmup, forks_planned, warmup_plans
from orchestrator.web.experiment_form import (
    Draft,
    draft_from_post,
    errors_by_slot,
    flat_from_spec,
    fold_pasted,
    form_context,
)
from orchestrator.web.run_columns import STAT_LABELS
from orchestrator.web.run_views import compare_url
from orchestrator.web.selectors import RunFilter, runs_page

PREVIEW_ROWS = 200
PROJECT_COMMENT = re.compile(r"^# project: ([A-Za-z0-9][A-Za-z0-9_.-]*)$", re.MULTILINE)
STALENESS_PATHS = {
    "staleness.k",
    "staleness.mode",
    "staleness.max_staleness",
    "algorithm.updates_per_step",
    "algorithm.epochs",
}
START = {"name": "my-experiment", "config": {"model": {"name": "tiny"}, "train": {"device": "cpu"}}}


def _page(request, flat: dict, errors: list, status: int = 200):
    context = form_context(flat, errors)
    context["presets"] = list_presets()
    context["current_preset"] = request.GET.get("preset", "")
    return render(request, "experiments/experiment_new.html", context, status=status)


def _initial_spec(request) -> dict:
    if slug := request.GET.get("preset"):
        if preset := get_preset(slug):
            return preset.spec()
        messages.error(request, f"preset: no preset named {slug!r}")
    if fork := request.GET.get("fork"):
        return _fork_spec(request, fork)
    if clone := request.GET.get("clone"):
        run_id = parse_id(clone)
        if run_id is None:
            raise Http404(f"clone: not a run id: {clone[:40]!r}")
        run = get_run_for_user(request.user, run_id)
        return {
            "name": f"{run.name}-clone",
            "project": run.experiment.project.name,
            "config": minimal_config(run.config),
            "tags": sorted(t.name for t in run.tags.all()),
        }
    return START


def _fork_spec(request, fork: str) -> dict:
    """ "Fork from here": the parent's config, starting from its checkpoint at ?step= (its newest
    when absent), in the parent's project when the user may add experiments there."""
    run_id, raw_step = parse_id(fork), request.GET.get("step", "")
    step = parse_id(raw_step) if raw_step else None
    if run_id is None or (raw_step and step is None):
        raise Http404(f"fork: not a run id and step: {fork[:40]!r}, {raw_step[:40]!r}")
    run = get_run_for_user(request.user, run_id)
    try:
        check_can_add_experiments(request.user, run.experiment.project)
        project = run.experiment.project.name
    except (Http404, PermissionDenied):
        project = None  # a viewer forks into their own project
    return fork_spec(run, step, project=project)


def _checked(draft: Draft, user) -> tuple[list, list]:
    """(planned runs, errors): the form's own errors plus the trainer's, on every planned run, and
    a fork's (init.from_run) checks against its parent, as the user types. A warm-up run, when
    the form has one, is the first planned run."""
    spec = draft.spec
    try:
        if draft.errors:  # the plan cannot be built; still show the trainer's verdict on the config
            validate_run_config(spec["config"], may_read_run=run_reader(user))
            return [], draft.errors
        warmup = warmup_plans(spec["name"], spec["config"], spec.get("warmup_run"))
        planned = experiment_plan(
            name=spec["name"],
            config=spec["config"],
            sweep=spec["sweep"],
            random=spec["random"],
            seeds=spec["seeds"],
            may_read_run=run_reader(user),
        )
        if not spec.get("warmup_run"):  # with a warm-up run, the runs fork from it (not created yet)
            fork_plan(user=user, configs=[plan.config for plan in planned])
        return warmup + forks_planned(planned, spec.get("warmup_run")), []  # once per warm-up
    except ConfigError as exc:
        unreadable = {f"config.{e['field']}" for e in draft.errors}
        return [], draft.errors + [
            draft.place(e) for e in experiment_fields(exc.errors) if e["field"] not in unreadable
        ]


def experiment_new(request):
    if request.method != "POST":
        return _page(request, flat_from_spec(_initial_spec(request)), [])
    draft = draft_from_post(request.POST)
    planned, errors = _checked(draft, request.user)
    if errors:  # re-rendered as typed, each error next to its field
        return _page(request, request.POST.dict(), errors)
    try:
        experiment = experiment_create_with_warmup(owner=request.user, **draft.spec)
    except ConfigError as exc:  # checks that need the database (tag names)
        return _page(request, request.POST.dict(), experiment_fields(exc.errors))
    except (Http404, PermissionDenied) as exc:  # another team's project (404: as if it did not exist)
        return _page(
            request,
            request.POST.dict(),
            [{"field": "project", "message": str(exc)}],
            status=404 if isinstance(exc, Http404) else 403,
        )
    messages.success(request, f"Queued {len(planned)} run(s) of {experiment.name}.")
    return redirect("exp-experiment-detail", experiment_id=experiment.pk)


@require_POST
def experiment_validate(request):
    """Live validation: every field's error slot (emptied when valid) as out-of-band swaps."""
    draft = draft_from_post(request.POST)
    planned, errors = _checked(draft, request.user)
    flat = request.POST.dict()
    slots = errors_by_slot(errors, flat)
    all_slots = ["form", "name", "project", "seeds", "priority", "tags", "config_yaml", "sweep", "random"]
    all_slots += [p.replace(".", "__") for p in fields_by_path()]
    all_slots += [k.rsplit("-", 1)[0] for k in flat if k.startswith(("sweep-", "random-")) and k.endswith("-field")]
    return render(
        request,
        "experiments/_validation.html",
        {
            "slots": [(slot, slots.get(slot, [])) for slot in dict.fromkeys(all_slots)],
            "count": len(planned),
            "error_count": len(errors),
        },
    )


@require_POST
def experiment_preview(request):
    draft = draft_from_post(request.POST)
    planned, errors = _checked(draft, request.user)
    paths = list(dict.fromkeys(p for plan in planned for p in plan.values))
    show_s = bool(STALENESS_PATHS & set(paths))
    folded = fold_pasted(draft)
    fields = {}
    if folded is not None:  # the fields take the pasted values, so the form shows what is queued
        texts, all_placed = folded
        fields = {
            "sections": form_context({**request.POST.dict(), **texts}, [])["sections"],
            "clear_pasted": all_placed,
        }
    return render(
        request,
        "experiments/_preview.html",
        {
            **fields,
            "folded": folded is not None,
            "count": len(planned),
            "paths": paths,
            "errors": errors,
            "warmup": bool(planned and draft.spec.get("warmup_run")),
            "show_staleness": show_s,
            "planned_rows": [
                (
                    plan,
                    [plan.values.get(p, "") for p in paths],
                    staleness_updates(plan.config) if show_s else None,
                    i == 0 and WARMUP_SUFFIX in plan.name and bool(draft.spec.get("warmup_run")),
                )
                for i, plan in enumerate(planned[:PREVIEW_ROWS])
            ],
        },
    )


@require_POST
def experiment_export(request):
    """Download the form as YAML: a plain run config, or an experiment file when it has a sweep."""
    draft = draft_from_post(request.POST)
    if draft.errors:
        return _page(request, request.POST.dict(), draft.errors, status=400)
    spec = {**draft.spec, "config": minimal_config(draft.spec["config"])}
    response = HttpResponse(dump_experiment_yaml(spec), content_type="application/yaml")
    response["Content-Disposition"] = f'attachment; filename="{safe_filename(spec["name"], "experiment")}.yaml"'
    return response


@require_POST
def experiment_import(request):
    """Fill the form from an uploaded (or pasted) YAML file; nothing is queued yet."""
    upload = request.FILES.get("file")
    if upload is not None and upload.size > MAX_YAML_BYTES:  # refused before reading or parsing it
        return _page(
            request,
            flat_from_spec(START),
            [{"field": "import", "message": f"file: larger than {MAX_YAML_BYTES // 1024} KiB"}],
            status=413,
        )
    text = upload.read().decode("utf-8", errors="replace") if upload else request.POST.get("yaml", "")
    default_name = safe_filename(upload.name.rsplit(".", 1)[0], "imported")[:100] if upload else "imported"
    try:
        spec = parse_experiment_yaml(text, default_name=default_name)
    except ConfigError as exc:
        return _page(
            request,
            flat_from_spec(START),
            [{"field": "import", "message": f"{e['field']}: {e['message']}"} for e in exc.errors],
            status=400,
        )
    if "project" not in spec and (named := PROJECT_COMMENT.search(text)):  # a run config exported from its page
        spec["project"] = named.group(1)
    planned, errors = _checked(Draft(spec={"seeds": 1, **spec}), request.user)
    return _page(request, flat_from_spec(spec), errors, status=400 if errors else 200)


def experiment_list(request):
    experiments = visible_experiments(request.user).order_by("-id")[:200]
    return render(request, "experiments/experiment_list.html", {"experiments": _with_counts(experiments)})


def _with_counts(experiments):
    experiments = list(experiments)
    counts: dict = {}
    for row in Run.objects.filter(experiment__in=experiments).values("experiment_id", "state").annotate(n=Count("id")):
        counts.setdefault(row["experiment_id"], {})[row["state"]] = row["n"]
    for e in experiments:
        e.counts = counts.get(e.pk, {})
        e.total = sum(e.counts.values())
        e.active = sum(e.counts.get(state, 0) for state in Run.ACTIVE)
        e.failed = e.counts.get(Run.State.FAILED, 0) + e.counts.get(Run.State.LOST, 0)
        e.cancelled = e.counts.get(Run.State.CANCELLED, 0)
        e.state_counts = [
            (state, e.counts[state]) for state in Run.State.values if e.counts.get(state)
        ]  # lifecycle order
        e.finished = e.total > 0 and e.active == 0 and not e.counts.get(Run.State.QUEUED)
    return experiments


def experiment_detail(request, experiment_id: int):
    experiment = get_experiment_for_user(request.user, experiment_id)
    if request.headers.get("HX-Request") and request.headers.get("HX-Target") == "experiment-facts":
        return _experiment_facts(request, experiment)
    params = request.GET.copy()
    params["experiment"] = str(experiment.pk)
    f = RunFilter.from_params(params)
    context = {
        **_facts_context(request.user, experiment),
        "page": runs_page(request.user, f),
        "f": f,
        "key_metrics": f.cols,
        "stat_label": STAT_LABELS[f.stat],
        "compare_url": compare_url(),
        "sweep_yaml": dump_experiment_yaml(
            {
                "name": experiment.name,
                "project": experiment.project.name,
                "sweep": experiment.sweep,
                "random": experiment.random,
                "seeds": experiment.seeds,
                "config": minimal_config(experiment.base_config),
            }
        ),
        "query_string": "&".join(
            [
                f"experiment={experiment.pk}",
                *(f"{k}={quote(v, safe='/,')}" for k, v in (("cols", ",".join(f.cols)), ("stat", f.stat))),
            ]
        ),
    }
    if request.headers.get("HX-Request") and request.headers.get("HX-Target") == "runs-table":
        return render(request, "experiments/_runs_table.html", context)
    return render(request, "experiments/experiment_detail.html", context)


def _facts_context(user, experiment: Experiment) -> dict:
    experiment = _with_counts([experiment])[0]
    writer = can_write(user, experiment.owner_id, experiment.project_id)
    seen = (experiment.state, experiment.priority, experiment.state_counts, writer)
    return {
        "experiment": experiment,
        "can_write": writer,
        "facts_version": hashlib.sha1(repr(seen).encode()).hexdigest()[:16],
    }


def _experiment_facts(request, experiment: Experiment):
    """The polled facts card: 204 (nothing to swap) while what it shows is unchanged, else the card
    and the header's state badge, so an experiment whose last run ended shows it without a reload."""
    context = _facts_context(request.user, experiment)
    if request.GET.get("seen") == context["facts_version"]:
        return HttpResponse(status=204)
    return render(request, "experiments/_experiment_facts_poll.html", context)


@require_POST
def experiment_action(request, experiment_id: int, action: str):
    experiment = get_experiment_for_user(request.user, experiment_id, write=True)
    failed = f"{action}: not possible while the experiment is {experiment.state}"
    if action == "pause":
        done = experiment_pause(experiment=experiment)
    elif action == "resume":
        done = experiment_resume(experiment=experiment)
    elif action == "cancel":
        done = experiment.state not in (Experiment.State.CANCELLED, Experiment.State.ENDED)
        experiment_cancel(experiment=experiment)
    else:  # priority
        priority = parse_priority(request.POST.get("priority", ""))
        if priority is None:
            done, failed = False, "priority: a whole number is required (32 bits)"
        else:
            done = experiment_set_priority(experiment=experiment, priority=priority) >= 0
    if not done:
        messages.error(request, failed)
    return redirect("exp-experiment-detail", experiment_id=experiment.pk)
