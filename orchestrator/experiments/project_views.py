"""The projects page: your projects with their members, roles and limits; create one; owners add
members, change roles and remove members."""

from django.contrib import messages
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.experiments.access import get_project_for_user, visible_projects
from orchestrator.experiments.bounds import MAX_DESCRIPTION
from orchestrator.experiments.limits import limit
from orchestrator.experiments.models import Membership
from orchestrator.experiments.schemas import NAME_RE
from orchestrator.experiments.services import LastOwnerError, project_add_member, project_create, project_remove_member


def project_list(request):
    projects = list(
        visible_projects(request.user)
        .order_by("name")
        .prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username"))
        )
    )
    for project in projects:
        mine = next((m.role for m in project.memberships.all() if m.user_id == request.user.pk), None)
        project.my_role = mine or ("staff" if request.user.is_staff else "")
        project.can_manage = request.user.is_staff or mine == Membership.Role.OWNER
    return render(
        request,
        "experiments/projects.html",
        {
            "projects": projects,
            "roles": Membership.Role.values,
            "default_runs": limit("OPL_PROJECT_MAX_ACTIVE_RUNS"),
            "default_gpus": limit("OPL_PROJECT_MAX_GPUS"),
        },
    )


@require_POST
def project_new(request):
    name = (request.POST.get("name") or "").strip()
    description = request.POST.get("description", "")
    if not NAME_RE.match(name) or len(name) > 100:
        messages.error(request, "name: letters, digits, '.', '_' and '-' only (at most 100)")
        return redirect("exp-project-list")
    if len(description) > MAX_DESCRIPTION or "\x00" in description:
        messages.error(request, f"description: at most {MAX_DESCRIPTION} characters")
        return redirect("exp-project-list")
    try:
        with transaction.atomic():
            project_create(owner=request.user, name=name, description=description)
    except IntegrityError:
        messages.error(request, f"name: a project named {name!r} already exists")
    return redirect("exp-project-list")


@require_POST
def project_member_add(request, name: str):
    """Add a member with a role, or change a member's role (owners and staff only)."""
    project = get_project_for_user(request.user, name, manage=True)
    username = (request.POST.get("username") or "").strip()
    role = request.POST.get("role") or Membership.Role.MEMBER
    user = User.objects.filter(username=username).first() if "\x00" not in username else None
    if role not in Membership.Role.values:
        messages.error(request, f"role: one of {', '.join(Membership.Role.values)}")
    elif user is None:
        messages.error(request, f"username: no user named {username[:150]!r}")
    else:
        try:
            project_add_member(project=project, user=user, role=role)
        except LastOwnerError as exc:
            messages.error(request, f"role: {exc}")
    return redirect("exp-project-list")


@require_POST
def project_member_remove(request, name: str):
    project = get_project_for_user(request.user, name, manage=True)
    username = (request.POST.get("username") or "").strip()
    user = (
        User.objects.filter(username=username, opl_memberships__project=project).first()
        if "\x00" not in username
        else None
    )
    if user is None:
        messages.error(request, f"username: {username[:150]!r} is not a member")
    else:
        try:
            project_remove_member(project=project, user=user)
        except LastOwnerError as exc:
            messages.error(request, f"username: {exc}")
    return redirect("exp-project-list")
