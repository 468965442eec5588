"""Alert webhooks reach public addresses only: loopback, private, link-local and
metadata addresses are refused unless OPL_WEBHOOK_ALLOW names them, the request goes to the
address that was checked (no DNS rebinding), redirects are not followed, and what comes back to
the project's owner is a status class and a short reason, never the answer or the port's fate.

Every request these tests send goes to loopback: real HTTP servers on 127.0.0.1. The other
ranges are checked where the address is judged, before anything connects. `socket.getaddrinfo`
is replaced where a test needs a name to resolve to chosen addresses (there is no DNS here)."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from orchestrator.alerts import webhook
from orchestrator.alerts.models import Alert, ProjectNotifications
from orchestrator.alerts.services import alert_notify
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.helpers import T0, make_run

pytestmark = pytest.mark.django_db


class Receiver:
    """A webhook on 127.0.0.1: records (path, Host header, body); answers `status` with `body`."""

    def __init__(self, status=200, body=b"", headers=None):
        self.received, self.status, self.body, self.headers = [], status, body, headers or {}
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((self.path, self.headers["Host"], json.loads(data)))
                self.send_response(receiver.status)
                for name, value in receiver.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    servers = []

    def make(**kwargs):
        servers.append(Receiver(**kwargs))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


@pytest.fixture
def fired(alice, tiny_config):
    run = make_run(alice, tiny_config)[0]
    metrics_ingest(run=run, attempt=1, points=[{"step": 7, "key": "actor/pg_loss", "value": "NaN", "time": T0}])
    return Alert.objects.get(run=run)


def hook(alert, url):
    ProjectNotifications.objects.create(project=alert.run.experiment.project, webhook_url=url, email_owner=False)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.3.4.5"])
def test_this_machine_is_refused_unless_allowed_and_nothing_is_sent(fired, receiver, settings, host):
    settings.OPL_WEBHOOK_ALLOW = []
    server = receiver()
    hook(fired, f"http://{host}:{server.port}/hook")
    alert_notify(alert_id=fired.pk)  # refused for good: no exception, so the task does not retry it
    fired.refresh_from_db()
    assert server.received == []
    assert fired.webhook_failures == 1 and fired.webhook_sent_at is None
    assert "non-public address" in fired.last_error and "OPL_WEBHOOK_ALLOW" in fired.last_error
    assert str(server.port) not in fired.last_error


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "172.16.0.9",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "::ffff:127.0.0.1",
        "fe80::1",
        "fd00::1",
        "224.0.0.1",
    ],
)
def test_every_non_public_range_is_refused_where_the_address_is_judged(monkeypatch, settings, address):
    settings.OPL_WEBHOOK_ALLOW = []
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(family, socket.SOCK_STREAM, 6, "", (address, 80))])
    with pytest.raises(webhook.WebhookError) as refused:
        webhook.resolve_checked("hooks.example.org", 80)
    assert refused.value.permanent and "non-public" in refused.value.reason
    url = f"http://[{address}]/" if ":" in address else f"http://{address}/"
    assert webhook.literal_problem(url) is not None


def test_a_name_with_one_private_address_among_public_ones_is_refused(monkeypatch, settings):
    settings.OPL_WEBHOOK_ALLOW = []
    answers = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, 443)) for a in ("93.184.215.14", "10.0.0.5")]
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: answers)
    with pytest.raises(webhook.WebhookError, match="10.0.0.5"):
        webhook.resolve_checked("hooks.example.org", 443)


def test_setting_a_private_webhook_is_a_400_naming_the_field(fired, api_client, alice, settings):
    settings.OPL_WEBHOOK_ALLOW = []
    url = f"/api/v1/projects/{fired.run.experiment.project.name}/alerts"
    for target in (
        "http://127.0.0.1:6379/",
        "http://localhost:8000/",
        "http://[::1]/",
        "http://169.254.169.254/latest/",
    ):
        response = api_client(alice).post(
            url, data=json.dumps({"notifications": {"webhook_url": target}}), content_type="application/json"
        )
        assert response.status_code == 400, target
        assert [e["field"] for e in response.json()["errors"]] == ["notifications.webhook_url"]
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.1"]
    response = api_client(alice).post(
        url, data=json.dumps({"notifications": {"webhook_url": "http://127.0.0.1:9/"}}), content_type="application/json"
    )
    assert response.status_code == 200


def test_an_allowed_address_gets_the_post(fired, receiver, settings):
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.0/8"]
    server = receiver()
    hook(fired, f"http://127.0.0.1:{server.port}/hook")
    alert_notify(alert_id=fired.pk)
    fired.refresh_from_db()
    assert [(path, body["text"][:14]) for path, _, body in server.received] == [("/hook", "[OffPolicy Lab")]
    assert fired.webhook_sent_at is not None and fired.webhook_failures == 0


def test_the_request_goes_to_the_address_that_was_checked(fired, receiver, settings, monkeypatch):
    """DNS rebinding: the name passes the check as 127.0.0.1 (allowed), then would answer
    127.0.0.2 (not allowed, nothing listens there). One resolution, one connection, to the
    checked address, with the name kept in the Host header."""
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.1"]
    server = receiver()
    lookups, real = [], socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.example.org":
            return real(host, port, *args, **kwargs)  # the connect of an address: no lookup
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "127.0.0.2"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    hook(fired, f"http://rebind.example.org:{server.port}/hook")
    alert_notify(alert_id=fired.pk)
    assert lookups == ["rebind.example.org"]
    assert [(path, host) for path, host, _ in server.received] == [("/hook", f"rebind.example.org:{server.port}")]


def test_redirects_are_not_followed(fired, receiver, settings):
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.1"]
    inner = receiver()
    outer = receiver(status=302, headers={"Location": f"http://127.0.0.1:{inner.port}/internal"})
    hook(fired, f"http://127.0.0.1:{outer.port}/hook")
    alert_notify(alert_id=fired.pk)  # a redirect is the URL's fault: not retried
    fired.refresh_from_db()
    assert len(outer.received) == 1 and inner.received == []
    assert fired.last_error == "webhook: HTTP 3xx: redirects are not followed"


def test_the_answer_is_not_echoed_only_its_status_class(fired, receiver, settings, api_client, alice):
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.1"]
    server = receiver(status=503, body=b"redis_version:7.0.15 internal-secret")
    hook(fired, f"http://127.0.0.1:{server.port}/hook")
    with pytest.raises(webhook.WebhookError) as failed:  # may pass: the task retries it
        alert_notify(alert_id=fired.pk)
    assert not failed.value.permanent
    fired.refresh_from_db()
    assert fired.last_error == "webhook: HTTP 5xx"
    answer = api_client(alice).get(f"/api/v1/runs/{fired.run_id}/alerts").content.decode()
    assert "internal-secret" not in answer and "503" not in answer


def test_a_closed_port_and_a_silent_one_read_the_same(fired, receiver, settings):
    """No port oracle: refused, reset and timed out connections give one reason, without the port."""
    settings.OPL_WEBHOOK_ALLOW = ["127.0.0.1"]
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(0)  # accepts the connection, never answers
    reasons = []
    try:
        for port in (closed_port, silent.getsockname()[1]):
            with pytest.raises(webhook.WebhookError) as failed:
                webhook.post_json(f"http://127.0.0.1:{port}/", {"text": "x"}, timeout_s=0.5)
            reasons.append(failed.value.reason)
    finally:
        silent.close()
    assert reasons == ["no answer (connection failed or timed out)"] * 2
