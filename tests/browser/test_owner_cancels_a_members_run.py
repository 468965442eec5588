"""A project's owner stops a member's run from the run page: the page offers them "Cancel run" (as
the API and the POST endpoint allow), while another member of the project is not offered it."""

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from orchestrator.experiments.models import Membership, Run
from orchestrator.experiments.services import experiment_create, project_add_member, project_create

pytestmark = pytest.mark.browser


@pytest.fixture
def members_run(alice, bob, tiny_config) -> Run:
    project = project_create(owner=alice, name="projA")
    project_add_member(project=project, user=bob)
    return experiment_create(owner=bob, name="bobs", config=tiny_config, project="projA").runs.get()


def test_the_projects_owner_cancels_a_members_run_from_its_page(browser_login, live_url, alice, members_run):
    assert members_run.state == Run.State.QUEUED and members_run.owner.username == "bob"
    page = browser_login(alice)
    page.goto(f"{live_url}/runs/{members_run.pk}/")
    cancel = page.locator("#run-facts button", has_text="Cancel run")
    expect(cancel).to_be_visible()
    cancel.click()  # the confirmation is accepted
    expect(page.locator("#run-state")).to_have_text("cancelled")
    expect(page.locator("#run-facts button", has_text="Cancel run")).to_have_count(0)
    assert Run.objects.get(pk=members_run.pk).state == Run.State.CANCELLED
    assert not page.console_errors and not page.http_errors


def test_another_member_is_not_offered_the_cancel(browser_login, live_url, members_run):
    carol = User.objects.create_user("carol")
    Membership.objects.create(project=members_run.experiment.project, user=carol, role=Membership.Role.MEMBER)
    page = browser_login(carol)
    page.goto(f"{live_url}/runs/{members_run.pk}/")
    expect(page.locator("#run-facts")).to_contain_text("bob")
    expect(page.locator("#run-facts button", has_text="Cancel run")).to_have_count(0)
