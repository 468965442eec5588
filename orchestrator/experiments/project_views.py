"""The projects page: your projects with their members, roles and limits; create one; owners invite
members, change roles and remove members; the invitations you have, to accept or decline."""

from django.contrib import messages
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from orchestrator.experiments.access import get_project_for_user, visible_projects
from orchestrator.experiments.invitations import (
    invitation_accept,
    invitation_decline,
    invitation_of,
    invitation_withdraw,
    invitations_for,
    project_invite,
)
from orchestrator.experiments.limits import limit
from orchestrator.experiments.models import Membership, ProjectInvitation
from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.schemas import NAME_RE
from orchestrator.experiments.services import (
    LastOwnerError,
    project_create,
    project_name_not_a_users,
    project_remove_member,
)
from orchestrator.lib.bounds import MAX_DESCRIPTION


def project_list(request):
    projects = list(
        visible_projects(request.user)
        .order_by("name")
        .prefetch_related(
            Prefetch("memberships", queryset=Membership.objects.select_related("user").order_by("user__username")),
            Prefetch(
                "invitations", queryset=ProjectInvitation.objects.select_related("user").order_by("user__username")
            ),
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
            "invitations": invitations_for(request.user),
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
        project_name_not_a_users(name, request.user)
        with transaction.atomic():
            project_create(owner=request.user, name=name, description=description)
    except ConfigError as exc:
        messages.error(request, "; ".join(f"{e['field']}: {e['message']}" for e in exc.errors))
    except IntegrityError:
        messages.error(request, f"name: a project named {name!r} already exists")
    return redirect("exp-project-list")


@require_POST
def project_member_add(request, name: str):
    """Invite a user with a role, or change a member's role (owners and staff only)."""
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
            if project_invite(project=project, user=user, role=role, by=request.user):
                messages.success(request, f"{user.get_username()} is invited as {role}: they join when they accept")
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
        invited = User.objects.filter(username=username).first() if "\x00" not in username else None
        if invited is None or not invitation_withdraw(project=project, user=invited):
            messages.error(request, f"username: {username[:150]!r} is not a member")
    else:
        try:
            project_remove_member(project=project, user=user)
        except LastOwnerError as exc:
            messages.error(request, f"username: {exc}")
    return redirect("exp-project-list")


@require_POST
def project_invitation_answer(request, name: str, answer: str):
    """The invited user accepts (joins with the offered role) or declines an invitation."""
    invitation = invitation_of(request.user, name)
    if invitation is None:
        raise Http404(f"you have no invitation to a project named {name!r}")
    if answer == "accept":
        invitation_accept(invitation=invitation)
        messages.success(request, f"you joined {name} as {invitation.role}")
    else:
        invitation_decline(invitation=invitation)
    return redirect("exp-project-list")
