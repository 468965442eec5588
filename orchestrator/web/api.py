"""JSON API for experiments, runs, projects and tags (/api/v1). Request bodies are the pydantic
models in schemas.py, from which orchestrator/web/openapi.py builds the OpenAPI document."""

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.http import require_http_methods

from orchestrator.accounts.decorators import api_view
from orchestrator.experiments.access import (
    get_experiment_for_user,
    get_project_for_user,
    get_run_for_user,
    get_run_to_cancel,
    visible_experiments,
    visible_projects,
    visible_tags,
)
from orchestrator.experiments.config_paths import run_reader
from orchestrator.experiments.forks import fork_plan
from orchestrator.experiments.invitations import (
    invitation_accept,
    invitation_decline,
    invitation_of,
    invitation_to_dict,
    invitation_withdraw,
    invitations_for,
    project_invite,
)
from orchestrator.experiments.models import Experiment, Membership, Project, ProjectInvitation, Run
from orchestrator.experiments.runconfig import ConfigError, experiment_fields
from orchestrator.experiments.schemas import ExperimentIn, PriorityIn, ProjectIn, ProjectPatchIn, RunAnnotationIn
from orchestrator.experiments.services import (
    LastOwnerError,
    experiment_cancel,
    experiment_pause,
    experiment_plan,
    experiment_resume,
    experiment_set_priority,
    project_create,
    project_name_not_a_users,
    project_remove_member,
    project_set_limits,
    run_move_to_top,
    run_retry,
    run_set_notes,
    run_set_priority,
    run_set_tags,
    run_stop,
)
from orchestrator.lib.api import json_error, validate_body
from orchestrator.lib.bounds import parse_id
from orchestrator.metrics.schemas import KEY_PATTERN
from orchestrator.metrics.summaries import encode_summary, run_summaries
from orchestrator.metrics.updates import summary_values, user_summaries
from orchestrator.studies.warmup import check_warmup, experiment_create_with_warmup, forks_planned
from orchestrator.web.selectors import RunFilter, filtered_runs

MAX_PER_PAGE = 500


def experiment_to_dict(experiment: Experiment, counts: dict | None = None) -> dict[str, Any]:
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "project": experiment.project.name,
        "owner": experiment.owner.get_username(),
        "state": experiment.state,
        "priority": experiment.priority,
        "sweep": experiment.sweep,
        "random": experiment.random,
        "seeds": experiment.seeds,
        "notes": experiment.notes,
        "created_at": experiment.created_at.isoformat(),
        **({"runs_by_state": counts} if counts is not None else {}),
    }


# --- experiments -------------------------------------------------------------------------------


@api_view
@require_http_methods(["GET", "POST"])
def experiments(request: HttpRequest):
    if request.method == "GET":
        rows = visible_experiments(request.user).order_by("-id")[:500]
        return JsonResponse({"experiments": [experiment_to_dict(e) for e in rows]})
    spec, error = validate_body(ExperimentIn, request)
    if error:
        return error
    try:
        experiment = experiment_create_with_warmup(owner=request.user, **spec.model_dump())
    except ConfigError as exc:
        return json_error(400, "invalid experiment", experiment_fields(exc.errors))
    except Http404 as exc:
        return json_error(404, str(exc), [{"field": "project", "message": str(exc)}])
    except PermissionDenied as exc:
        return json_error(403, str(exc), [{"field": "project", "message": str(exc)}])
    run_ids = list(experiment.runs.order_by("id").values_list("id", flat=True))
    body = {"id": experiment.pk, "runs": run_ids}
    if spec.warmup_run:
        body["warmup_run"] = experiment.runs.values_list("parent_id", flat=True).first()
    return JsonResponse(body, status=201)


@api_view
@require_http_methods(["POST"])
def experiments_preview(request: HttpRequest):
    """Expand and validate without creating anything: the count and every run's name and values."""
    spec, error = validate_body(ExperimentIn, request)
    if error:
        return error
    try:
        warmup = check_warmup(spec.name, spec.config, spec.warmup_run)
        planned = experiment_plan(
            name=spec.name,
            config=spec.config,
            sweep=spec.sweep,
            random=spec.random,
            seeds=spec.seeds,
            may_read_run=run_reader(request.user),
        )
        if not warmup:  # a fork's checks against its parent (with a warm-up run, the runs fork from that)
            fork_plan(user=request.user, configs=[p.config for p in planned])
        planned = forks_planned(planned, spec.warmup_run)  # once per warm-up
    except ConfigError as exc:
        return json_error(400, "invalid experiment", experiment_fields(exc.errors))
    return JsonResponse(
        {
            "count": len(planned),
            "warmup_runs": warmup,
            "runs": [{"name": p.name, "values": p.values, "seed": p.seed} for p in planned],
        }
    )


@api_view
@require_http_methods(["GET"])
def experiment_detail(request: HttpRequest, experiment_id: int):
    from django.db.models import Count

    experiment = get_experiment_for_user(request.user, experiment_id)
    counts = {r["state"]: r["n"] for r in experiment.runs.values("state").annotate(n=Count("id"))}
    body = experiment_to_dict(experiment, counts)
    body["runs"] = list(experiment.runs.order_by("id").values_list("id", flat=True))
    return JsonResponse(body)


@api_view
@require_http_methods(["POST"])
def experiment_action(request: HttpRequest, experiment_id: int, action: str):
    experiment = get_experiment_for_user(request.user, experiment_id, write=True)
    if action == "priority":
        body, error = validate_body(PriorityIn, request)
        if error:
            return error
        experiment_set_priority(experiment=experiment, priority=body.priority)
    elif action == "pause" and not experiment_pause(experiment=experiment):
        return json_error(409, f"experiment {experiment.pk} is {experiment.state} and cannot be paused")
    elif action == "resume" and not experiment_resume(experiment=experiment):
        return json_error(409, f"experiment {experiment.pk} is {experiment.state} and cannot be resumed")
    elif action == "cancel":
        if experiment.state in (Experiment.State.CANCELLED, Experiment.State.ENDED):
            return json_error(409, f"experiment {experiment.pk} is already {experiment.state}")
        experiment_cancel(experiment=experiment)
    return JsonResponse(experiment_to_dict(experiment))


# --- runs --------------------------------------------------------------------------------------


@api_view
@require_http_methods(["GET"])
def runs(request: HttpRequest):
    f = RunFilter.from_params(request.GET)
    qs = filtered_runs(request.user, f).prefetch_related("tags")
    if f.state and f.state not in Run.State.values:
        f.errors.append({"field": "state", "message": f"one of {', '.join(Run.State.values)}, got {f.state[:40]!r}"})
    f.errors.extend(e for e in f.column_errors if e["field"] == "stat")  # the API has no cols; its sort has stat
    if f.errors:
        return json_error(400, "invalid filter", f.errors)
    raw = request.GET.get("per_page", "50")
    per_page = parse_id(raw)
    if per_page is None or not 1 <= per_page <= MAX_PER_PAGE:
        return json_error(
            400,
            "invalid request",
            [{"field": "per_page", "message": f"a whole number from 1 to {MAX_PER_PAGE}, got {raw[:40]!r}"}],
        )
    keys = _summary_keys(request)
    if isinstance(keys, JsonResponse):
        return keys
    page = Paginator(qs, per_page).get_page(f.page)
    return JsonResponse(
        {
            "count": page.paginator.count,
            "page": page.number,
            "pages": page.paginator.num_pages,
            "runs": with_summaries(list(page.object_list), keys),
        }
    )


def with_summaries(runs: list, keys: list[str] | None = None) -> list[dict[str, Any]]:
    """The runs' dicts, each with "summary": {key: {last, min, max, tail_mean, count, last_step}}."""
    ids = [run.pk for run in runs]
    found, own = run_summaries(ids, keys), user_summaries(ids)
    out = []
    for run in runs:
        summary = {k: encode_summary(v) for k, v in sorted(found.get(run.pk, {}).items())}
        row = own.get(run.pk)
        if row is not None and keys is not None:  # ?summary_keys= limits the run's own values too
            row.values = {k: v for k, v in row.values.items() if k in keys}
        out.append({**run.to_dict(), "summary": summary_values(summary, row)})
    return out


def _summary_keys(request: HttpRequest) -> list[str] | None | JsonResponse:
    """?summary_keys=a,b limits each run's summary to those metric keys (default: all)."""
    raw = ",".join(request.GET.getlist("summary_keys"))
    if not raw:
        return None
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if bad := [k for k in keys if not KEY_PATTERN.match(k)]:
        return json_error(
            400, "invalid request", [{"field": "summary_keys", "message": f"not a metric key: {bad[0][:80]!r}"}]
        )
    return keys


@api_view
@require_http_methods(["GET", "PATCH"])
def run_detail(request: HttpRequest, run_id: int):
    if request.method == "GET":
        return JsonResponse(with_summaries([get_run_for_user(request.user, run_id)])[0])
    run = get_run_for_user(request.user, run_id, write=True)
    body, error = validate_body(RunAnnotationIn, request)
    if error:
        return error
    try:
        if body.tags is not None:
            run_set_tags(run=run, tags=body.tags)
        if body.notes is not None:
            run_set_notes(run=run, notes=body.notes)
    except ConfigError as exc:
        return json_error(400, "invalid request", exc.errors)
    return JsonResponse(run.to_dict())


@api_view
@require_http_methods(["POST"])
def run_action(request: HttpRequest, run_id: int, action: str):
    if action == "cancel":
        run = get_run_to_cancel(request.user, run_id)
    else:
        run = get_run_for_user(request.user, run_id, write=True)
    if action == "cancel":
        done, why = run_stop(run=run), "cannot be cancelled"
    elif action == "retry":
        done, why = (
            run_retry(run=run),
            "cannot be retried (only failed, lost or cancelled runs of a sweep that is not cancelled)",
        )
    elif action == "move-to-top":
        done, why = run_move_to_top(run=run), "is not queued"
    elif action == "priority":
        body, error = validate_body(PriorityIn, request)
        if error:
            return error
        done, why = run_set_priority(run=run, priority=body.priority), "is no longer queued: its priority is fixed"
    else:
        return json_error(404, f"no run action {action!r}")
    if not done:
        return json_error(409, f"run {run.pk} is {run.state} and {why}")
    run.refresh_from_db()
    return JsonResponse(run.to_dict())


# --- projects and tags -------------------------------------------------------------------------

MEMBERSHIPS = Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username"))
INVITATIONS = Prefetch("invitations", queryset=ProjectInvitation.objects.select_related("user"))


def project_to_dict(project: Project) -> dict[str, Any]:
    memberships = list(project.memberships.all())
    return {
        "name": project.name,
        "description": project.description,
        "members": [m.user.get_username() for m in memberships],
        "roles": {m.user.get_username(): m.role for m in memberships},
        "invited": {i.user.get_username(): i.role for i in project.invitations.all()},
        "personal": project.personal_for_id is not None,
        "max_active_runs": project.max_active_runs,
        "max_gpus": project.max_gpus,
    }


@api_view
@require_http_methods(["GET", "POST"])
def projects(request: HttpRequest):
    if request.method == "GET":
        rows = visible_projects(request.user).prefetch_related(MEMBERSHIPS, INVITATIONS).order_by("name")
        return JsonResponse(
            {
                "projects": [project_to_dict(p) for p in rows],
                "invitations": [invitation_to_dict(i) for i in invitations_for(request.user)],
            }
        )
    body, error = validate_body(ProjectIn, request)
    if error:
        return error
    try:
        project_name_not_a_users(body.name, request.user)
        with transaction.atomic():
            project = project_create(owner=request.user, name=body.name, description=body.description)
    except ConfigError as exc:
        return json_error(400, "invalid request", exc.errors)
    except IntegrityError:
        return json_error(409, f"project {body.name!r} already exists", [{"field": "name", "message": "already taken"}])
    return JsonResponse(project_to_dict(project), status=201)


@api_view
@require_http_methods(["GET", "PATCH"])
def project_detail(request: HttpRequest, name: str):
    if request.method == "GET":
        return JsonResponse(project_to_dict(_project_with_members(request.user, name)))
    body, error = validate_body(ProjectPatchIn, request)
    if error:
        return error
    limits_given = "max_active_runs" in body.model_fields_set or "max_gpus" in body.model_fields_set
    members_given = bool(body.add_members or body.set_roles or body.remove_members)
    project = get_project_for_user(request.user, name, manage=members_given)
    if limits_given and not request.user.is_staff:
        return json_error(403, "only staff change project limits")
    changes = [(n, body.role) for n in body.add_members] + list(body.set_roles.items())
    named = {n for n, _ in changes} | set(body.remove_members)
    users = {u.username: u for u in User.objects.filter(username__in=named)}
    for field, names in (
        ("add_members", body.add_members),
        ("set_roles", list(body.set_roles)),
        ("remove_members", body.remove_members),
    ):
        if missing := [n for n in names if n not in users]:
            return json_error(
                400, "invalid request", [{"field": field, "message": f"no such user: {', '.join(missing)}"}]
            )
    try:
        with transaction.atomic():
            for username, role in changes:  # a member's role changes; anyone else is invited
                project_invite(project=project, user=users[username], role=role, by=request.user)
            for username in body.remove_members:
                if not invitation_withdraw(project=project, user=users[username]):
                    project_remove_member(project=project, user=users[username])
    except LastOwnerError as exc:
        return json_error(
            409, str(exc), [{"field": "set_roles" if body.set_roles else "remove_members", "message": str(exc)}]
        )
    if limits_given:
        project_set_limits(project=project, max_active_runs=body.max_active_runs, max_gpus=body.max_gpus)
    return JsonResponse(project_to_dict(_project_with_members(request.user, name)))


@api_view
@require_http_methods(["GET", "POST", "DELETE"])
def project_invitation(request: HttpRequest, name: str):
    """The caller's invitation to a project: read it, accept it (POST: join with its role) or
    decline it (DELETE). 404 when there is none."""
    invitation = invitation_of(request.user, name)
    if invitation is None:
        return json_error(404, f"you have no invitation to a project named {name[:100]!r}")
    if request.method == "GET":
        return JsonResponse(invitation_to_dict(invitation))
    if request.method == "DELETE":
        invitation_decline(invitation=invitation)
        return JsonResponse({"declined": name})
    invitation_accept(invitation=invitation)
    return JsonResponse(project_to_dict(_project_with_members(request.user, name)))


def _project_with_members(user, name: str) -> Project:
    get_project_for_user(user, name)
    return Project.objects.prefetch_related(MEMBERSHIPS, INVITATIONS).get(name=name)


@api_view
@require_http_methods(["GET"])
def tags(request: HttpRequest):
    """The tags on runs the caller can see: tag names of other teams' projects stay private."""
    return JsonResponse({"tags": list(visible_tags(request.user))})
