"""Joining a project is the joiner's choice. An owner's "add member" offers the role as an
invitation; the user becomes a member by accepting it and may decline it. A lab's projects hold
private configs and results, and what a member logs (an SDK run naming the project) lands there:
being added by someone else must not put a user's runs, or their name, into a project they never
chose. A member's role changes at once: they chose the project already."""

from django.contrib.auth.models import User
from django.db import transaction

from orchestrator.experiments.models import Membership, Project, ProjectInvitation
from orchestrator.experiments.services import project_add_member


def project_invite(*, project: Project, user: User, role: str, by: User | None) -> bool:
    """Offer `user` the role in the project, or set the role of a member; True when invited."""
    if Membership.objects.filter(project=project, user=user).exists():
        project_add_member(project=project, user=user, role=role)
        return False
    ProjectInvitation.objects.update_or_create(project=project, user=user, defaults={"role": role, "invited_by": by})
    return True


def invitation_withdraw(*, project: Project, user: User) -> bool:
    return ProjectInvitation.objects.filter(project=project, user=user).delete()[0] > 0


def invitations_for(user: User):
    return ProjectInvitation.objects.filter(user=user).select_related("project", "invited_by").order_by("created_at")


def invitation_of(user: User, project_name: str) -> ProjectInvitation | None:
    return invitations_for(user).filter(project__name=project_name).first()


@transaction.atomic
def invitation_accept(*, invitation: ProjectInvitation) -> Membership:
    membership, _ = Membership.objects.get_or_create(
        project=invitation.project, user=invitation.user, defaults={"role": invitation.role}
    )
    invitation.delete()
    return membership


def invitation_decline(*, invitation: ProjectInvitation) -> None:
    invitation.delete()


def invitation_to_dict(invitation: ProjectInvitation) -> dict:
    return {
        "project": invitation.project.name,
        "role": invitation.role,
        "invited_by": invitation.invited_by.get_username() if invitation.invited_by else None,
        "created_at": invitation.created_at.isoformat(),
    }
