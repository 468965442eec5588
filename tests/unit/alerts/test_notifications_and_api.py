"""Notifications (Django's locmem email backend; a real HTTP server on localhost as the webhook),
failures counted on the alert; the run's alerts in the API and on its page; rule errors name
the field; outsiders are refused."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from orchestrator.alerts.models import Alert, ProjectNotifications
from orchestrator.alerts.services import alert_notify
from orchestrator.alerts.webhook import WebhookError
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import T0, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def webhook(settings):
    """A Slack-like receiver on 127.0.0.1 (allowed by OPL_WEBHOOK_ALLOW): records JSON bodies;
    answers `status` (200 unless changed)."""
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.1"]
    received, state = [], {"status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(state["status"])
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook", received, state
    server.shutdown()


@pytest.fixture
def fired(alice, tiny_config):
    alice.email = "alice@example.org"
    alice.save()
    run = make_run(alice, tiny_config)[0]
    metrics_ingest(run=run, attempt=1, points=[{"step": 7, "key": "actor/pg_loss", "value": "NaN", "time": T0}])
    return Alert.objects.get(run=run)


def test_an_alert_goes_by_email_and_to_the_projects_webhook(fired, webhook, mailoutbox):
    url, received, _ = webhook
    ProjectNotifications.objects.create(project=fired.run.experiment.project, webhook_url=url, emails="lab@example.org")
    alert_notify(alert_id=fired.pk)
    assert [m.to for m in mailoutbox] == [["alice@example.org", "lab@example.org"]]
    assert "actor/pg_loss is nan at update 7" in mailoutbox[0].body
    assert len(received) == 1 and set(received[0]) == {"text"} and "nonfinite" in received[0]["text"]
    alert_notify(alert_id=fired.pk)  # a retried task sends nothing twice
    assert len(mailoutbox) == 1 and len(received) == 1


def test_a_failing_webhook_is_counted_shown_and_raised_for_the_tasks_retry(fired, webhook, mailoutbox, client, alice):
    url, received, state = webhook
    state["status"] = 500
    ProjectNotifications.objects.create(project=fired.run.experiment.project, webhook_url=url)
    with pytest.raises(WebhookError):
        alert_notify(alert_id=fired.pk)
    fired.refresh_from_db()
    assert fired.webhook_failures == 1 and fired.last_error == "webhook: HTTP 5xx" and fired.webhook_sent_at is None
    assert len(mailoutbox) == 1  # the email went regardless
    client.force_login(alice)
    page = client.get(f"/runs/{fired.run_id}/").content.decode()
    assert "actor/pg_loss is nan at update 7" in page and "webhook 1" in page


def test_the_api_lists_a_runs_alerts_and_effective_rules(fired, api_client, alice, charlie):
    body = api_client(alice).get(f"/api/v1/runs/{fired.run_id}/alerts").json()
    assert [a["kind"] for a in body["alerts"]] == ["nonfinite"] and body["alerts"][0]["value"] == "nan"
    assert {r["kind"] for r in body["rules"]} == {
        "nonfinite",
        "reward_drop",
        "entropy_floor",
        "clip_ceiling",
        "neg_adv_tail",
        "no_heartbeat",
        "no_progress",
        "staleness_bound",
    }
    assert api_client(charlie).get(f"/api/v1/runs/{fired.run_id}/alerts").status_code == 404


def test_setting_a_rule_through_the_api_names_the_bad_field(fired, api_client, alice):
    client = api_client(alice)
    url = f"/api/v1/runs/{fired.run_id}/alerts"

    def post(body):
        return client.post(url, data=json.dumps(body), content_type="application/json")

    for body, field in [
        ({"kind": "loss_spike"}, "kind"),
        ({"kind": "clip_ceiling", "threshold": 1.5}, "threshold"),
        ({"kind": "no_heartbeat", "window_s": 1}, "window_s"),
        ({"kind": "nonfinite", "action": "explode"}, "action"),
        ({"kind": "nonfinite", "colour": "red"}, "colour"),
        ({"kind": "nonfinite", "window_s": 2**40}, "window_s"),
        ({"kind": "nonfinite", "window_s": -1}, "window_s"),
        ({"kind": "reward_drop", "threshold": 1e300}, "threshold"),
    ]:
        response = post(body)
        assert response.status_code == 400, body
        assert [e["field"] for e in response.json()["errors"]] == [field], response.json()
    response = post({"kind": "entropy_floor", "threshold": 0.2, "action": "cancel"})
    assert response.status_code == 200
    rule = next(r for r in response.json()["rules"] if r["kind"] == "entropy_floor")
    assert (rule["threshold"], rule["action"], rule["source"]) == (0.2, "cancel", "run")


def test_a_projects_owner_sets_its_rules_and_where_alerts_go_with_errors_naming_the_field(
    alice, bob, api_client, fired
):
    from orchestrator.experiments.services import project_add_member

    project = fired.run.experiment.project
    url = f"/api/v1/projects/{project.name}/alerts"
    client = api_client(alice)

    def post(body, who=client):
        return who.post(url, data=json.dumps(body), content_type="application/json")

    for body, field in [
        ({"rule": {"kind": "clip_ceiling", "threshold": 0}}, "rule.threshold"),
        ({"notifications": {"webhook_url": "ftp://x"}}, "notifications.webhook_url"),
        ({"notifications": {"emails": ["not-an-address"]}}, "notifications.emails"),
        ({"notifications": {"emails": [f"{'a' * 60}{i}@example.org" for i in range(19)]}}, "notifications.emails"),
    ]:
        response = post(body)
        assert response.status_code == 400 and [e["field"] for e in response.json()["errors"]] == [field], (
            response.json()
        )
    response = post(
        {
            "rule": {"kind": "reward_drop", "threshold": 0.1, "action": "stop"},
            "notifications": {"webhook_url": "https://hooks.example.org/T1", "emails": ["lab@example.org"]},
        }
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["notifications"] == {
        "webhook_url": "https://hooks.example.org/T1",
        "emails": ["lab@example.org"],
        "email_owner": True,
        "masked": False,
    }
    assert next(r for r in body["rules"] if r["kind"] == "reward_drop")["source"] == "project"
    # the project's rule reaches its runs
    run_rules = client.get(f"/api/v1/runs/{fired.run_id}/alerts").json()["rules"]
    assert next(r for r in run_rules if r["kind"] == "reward_drop")["action"] == "stop"
    project_add_member(project=project, user=bob)
    assert api_client(bob).get(url).status_code == 200
    assert post({"rule": {"kind": "nonfinite"}}, api_client(bob)).status_code == 403  # owners only
