"""Migration 0003: the members table becomes Membership without losing a member; each project's
earliest member becomes its owner, and names that cannot go into a URL are renamed."""

import pytest

from tests.migrations import latest, migrate

BEFORE = ("experiments", "0002_queue_tags_limits")


@pytest.mark.django_db(transaction=True)
def test_members_keep_their_access_the_first_owns_and_unsafe_names_are_renamed(alice, bob):
    old = migrate([BEFORE])
    Project = old.get_model("experiments", "Project")
    slashed = Project.objects.create(name="team/a b")
    slashed.members.add(bob.pk)  # the earliest member
    slashed.members.add(alice.pk)
    Project.objects.create(name="team_a_b")  # the first safe spelling is taken

    migrate(latest())

    from orchestrator.experiments.models import Membership
    from orchestrator.experiments.models import Project as NewProject

    renamed = NewProject.objects.get(pk=slashed.pk)
    assert renamed.name == "team_a_b-2"
    roles = dict(Membership.objects.filter(project=renamed).values_list("user__username", "role"))
    assert roles == {"bob": "owner", "alice": "member"}
