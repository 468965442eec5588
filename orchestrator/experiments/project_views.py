"""The projects page: your projects with their members and limits; create one, add a member."""
from django.contrib import messages
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.experiments.access import get_project_for_user, visible_projects
from orchestrator.experiments.experiment_form import NAME_RE
from orchestrator.experiments.limits import limit
from orchestrator.experiments.services import project_add_member, project_create


def project_list(request):
    return render(request, "experiments/projects.html", {
        "projects": visible_projects(request.user).order_by("name").prefetch_related(
            Prefetch("members", queryset=User.objects.order_by("username"))),
        "default_runs": limit("OPL_PROJECT_MAX_ACTIVE_RUNS"), "default_gpus": limit("OPL_PROJECT_MAX_GPUS"),
    })


@require_POST
def project_new(request):
    name = (request.POST.get("name") or "").strip()
    if not NAME_RE.match(name) or len(name) > 100:
        messages.error(request, "name: letters, digits, '.', '_' and '-' only (at most 100)")
        return redirect("exp-project-list")
    try:
        with transaction.atomic():
            project_create(owner=request.user, name=name, description=request.POST.get("description", ""))
    except IntegrityError:
        messages.error(request, f"name: a project named {name!r} already exists")
    return redirect("exp-project-list")


@require_POST
def project_member_add(request, name: str):
    project = get_project_for_user(request.user, name)  # members may invite
    username = (request.POST.get("username") or "").strip()
    user = User.objects.filter(username=username).first()
    if user is None:
        messages.error(request, f"username: no user named {username!r}")
    else:
        project_add_member(project=project, user=user)
    return redirect("exp-project-list")
