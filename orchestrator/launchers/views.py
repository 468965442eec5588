"""The launcher pages: pick a launcher, fill its typed parameters, queue the run."""

from django.http import Http404
from django.shortcuts import redirect, render

from orchestrator.experiments.runconfig import ConfigError
from orchestrator.launchers.forms import param_fields, posted_params
from orchestrator.launchers.selectors import enabled_launchers
from orchestrator.launchers.services import enabled_launcher, launcher_run_create


def launcher_list(request):
    return render(request, "launchers/launcher_list.html", {"launchers": enabled_launchers()})


def last_project(user) -> str:
    """The project of the user's newest experiment, where they may still add one: the form's
    default, so a run goes where the user works, not into a personal project they never chose."""
    from orchestrator.experiments.access import can_write
    from orchestrator.experiments.models import Experiment

    for experiment in Experiment.objects.filter(owner=user).select_related("project").order_by("-id")[:20]:
        if can_write(user, user.pk, experiment.project_id):
            return experiment.project.name
    return ""


def launcher_run_new(request, name: str):
    try:
        definition = enabled_launcher(name)
    except ConfigError as exc:
        raise Http404(exc.errors[0]["message"]) from None
    errors: dict[str, list[str]] = {}
    posted = request.POST if request.method == "POST" else None
    if posted is not None:
        try:
            run = launcher_run_create(
                owner=request.user,
                launcher=name,
                params=posted_params(definition, posted),
                name=posted.get("name", "").strip(),
                project=posted.get("project", "").strip() or None,
            )
            return redirect("exp-run-detail", run_id=run.pk)
        except ConfigError as exc:  # a project the user may not add to is a 404 or 403, as on the experiment form
            for e in exc.errors:
                errors.setdefault(e["field"], []).append(e["message"])
    fields = param_fields(definition, posted)
    for f in fields:
        f["errors"] = errors.pop(f"params.{f['name']}", [])
    context = {
        "launcher": definition,
        "fields": fields,
        "errors": errors,
        "other_errors": [f"{k}: {m}" for k, ms in errors.items() if k not in ("name", "project") for m in ms],
        "form": posted or {"project": last_project(request.user)},
    }
    return render(request, "launchers/launcher_run_new.html", context, status=400 if posted is not None else 200)
