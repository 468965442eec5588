"""Alert rules in the browser: saved, switched off and tried from the run page and the
project's alerts page, with the API's bounds and messages; only those who may change them can."""

import pytest
from django.test import Client

from orchestrator.alerts.models import AlertRule
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import make_run, points

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(alice, bob, tiny_config):
    run = make_run(alice, tiny_config)[0]
    run.experiment.project.members.add(bob)  # a member who does not own the run
    return run


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_owner_saves_and_switches_off_a_runs_rule(alice, run):
    page = client_for(alice).post(
        f"/runs/{run.pk}/alerts/rules", {"kind": "entropy_floor", "enabled": "on", "threshold": "0.25"}
    )
    assert page.status_code == 200 and 'data-saved="entropy_floor"' in page.content.decode()
    rule = AlertRule.objects.get(run=run, kind="entropy_floor")
    assert (rule.enabled, rule.threshold, rule.action) == (True, 0.25, "notify")
    assert 'value="0.25"' in page.content.decode()  # the card shows the new value

    client_for(alice).post(f"/runs/{run.pk}/alerts/rules", {"kind": "entropy_floor", "threshold": "0.25"})
    assert not AlertRule.objects.get(run=run, kind="entropy_floor").enabled  # the box unticked: off
    html = client_for(alice).get(f"/runs/{run.pk}/").content.decode()
    assert 'data-rule="entropy_floor" data-enabled="no"' in html


@pytest.mark.parametrize(
    "form, api_body",
    [
        ({"kind": "clip_ceiling", "threshold": "1.5"}, {"kind": "clip_ceiling", "threshold": 1.5}),
        ({"kind": "no_heartbeat", "window_s": "5"}, {"kind": "no_heartbeat", "window_s": 5}),
        ({"kind": "nonfinite", "action": "explode"}, {"kind": "nonfinite", "action": "explode"}),
        ({"kind": "banana"}, {"kind": "banana"}),
    ],
)
def test_the_form_refuses_what_the_api_refuses_with_the_same_message(alice, run, form, api_body):
    page = client_for(alice).post(f"/runs/{run.pk}/alerts/rules", form).content.decode()
    api = client_for(alice).post(f"/api/v1/runs/{run.pk}/alerts", api_body, content_type="application/json")
    assert api.status_code == 400
    error = api.json()["errors"][0]
    assert f'data-field="{error["field"]}"' in page
    assert f"{error['field']}: {error['message']}".replace("'", "&#x27;") in page
    assert not AlertRule.objects.filter(run=run).exists()


def test_a_number_field_with_words_names_the_field(alice, run):
    page = client_for(alice).post(f"/runs/{run.pk}/alerts/rules", {"kind": "reward_drop", "threshold": "lots"})
    assert "threshold: must be a number, got &#x27;lots&#x27;" in page.content.decode()


def test_test_tries_the_rule_on_the_logged_points_without_firing(alice, bob, run):
    metrics_ingest(run=run, attempt=1, points=points("actor/entropy", range(10), lambda s: 1.0 - s / 10))
    assert not run.alerts.exists()  # the default floor (0.01) is never crossed
    member = client_for(bob)  # members may try a rule, not save it
    page = member.post(f"/runs/{run.pk}/alerts/rules/test", {"kind": "entropy_floor", "threshold": "0.5"})
    html = page.content.decode()
    assert 'data-fires="yes"' in html and "actor/entropy = 0.4 at update 6, under the floor 0.5" in html
    page = member.post(f"/runs/{run.pk}/alerts/rules/test", {"kind": "entropy_floor", "threshold": "0.05"})
    assert (
        'data-fires="no"' in page.content.decode()
        and "would not fire on its 10 logged point(s)" in page.content.decode()
    )
    assert not run.alerts.exists() and not AlertRule.objects.exists()
    assert member.post(f"/runs/{run.pk}/alerts/rules", {"kind": "entropy_floor"}).status_code == 403


def test_project_rules_page_saves_for_owners_and_tries_on_its_runs(alice, bob, charlie, run):
    name = run.experiment.project.name
    assert f'href="/projects/{name}/alerts/"' in client_for(alice).get("/projects/").content.decode()
    html = client_for(bob).get(f"/projects/{name}/alerts/").content.decode()
    assert 'data-rule="reward_drop"' in html and "<form" not in html.split('id="project-rules"')[1]  # read-only
    assert client_for(bob).post(f"/projects/{name}/alerts/rules", {"kind": "reward_drop"}).status_code == 403
    assert client_for(charlie).get(f"/projects/{name}/alerts/").status_code == 404

    saved = client_for(alice).post(
        f"/projects/{name}/alerts/rules", {"kind": "reward_drop", "enabled": "on", "threshold": "0.1", "action": "stop"}
    )
    assert saved.status_code == 200 and 'data-saved="reward_drop"' in saved.content.decode()
    rule = AlertRule.objects.get(project=run.experiment.project, kind="reward_drop")
    assert (rule.threshold, rule.action, rule.run_id) == (0.1, "stop", None)
    tried = client_for(bob).post(f"/projects/{name}/alerts/rules/test", {"kind": "reward_drop", "threshold": "0.1"})
    assert f'data-run="{run.pk}" data-fires="no"' in tried.content.decode()
    assert "no points of train/reward_mean logged yet" in tried.content.decode()
