"""The runs table offers `cancel` on a member's run to the project's owners (as the run page and
the POST endpoint do), not to the project's other members; the owner's click cancels it."""

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from orchestrator.experiments.models import Membership, Run
from orchestrator.experiments.services import experiment_create, project_add_member, project_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def members_run(alice, bob, tiny_config) -> Run:
    project = project_create(owner=alice, name="projA")
    project_add_member(project=project, user=bob)
    return experiment_create(owner=bob, name="bobs", config=tiny_config, project="projA").runs.get()


def table_as(user) -> str:
    browser = Client()
    browser.force_login(user)
    answer = browser.get(reverse("exp-run-list"), HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    return answer.content.decode()


def test_the_owner_is_offered_cancel_on_a_members_run_and_it_cancels(alice, members_run):
    cancel_url = reverse("exp-run-cancel", args=[members_run.pk])
    assert f'hx-post="{cancel_url}"' in table_as(alice)
    browser = Client()
    browser.force_login(alice)
    row = browser.post(cancel_url, HTTP_HX_REQUEST="true", HTTP_HX_TARGET=f"run-row-{members_run.pk}")
    assert row.status_code == 200 and "state-cancelled" in row.content.decode()
    assert Run.objects.get(pk=members_run.pk).state == Run.State.CANCELLED


def test_another_member_is_not_offered_cancel(members_run):
    carol = User.objects.create_user("carol")
    Membership.objects.create(project=members_run.experiment.project, user=carol, role=Membership.Role.MEMBER)
    page = table_as(carol)
    assert f'data-run="{members_run.pk}"' in page
    assert reverse("exp-run-cancel", args=[members_run.pk]) not in page
