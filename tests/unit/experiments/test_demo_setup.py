"""Restarting `make demo`: demo_setup, run on each start with the kept password and
token file, keeps the browser logged in, reuses the API token and queues the demo run once."""

import io

import pytest
from django.core.management import call_command
from django.test import Client

from orchestrator.experiments.models import Run

pytestmark = pytest.mark.django_db


def setup(tmp_path, password="kept-pass-1", *extra) -> str:
    out = io.StringIO()
    call_command("demo_setup", "--password", password, "--token-file", str(tmp_path / "api_token"), *extra, stdout=out)
    return out.getvalue()


def logged_in(username: str, password: str) -> Client:
    """A browser that logged in through the login form (as a person does)."""
    browser = Client()
    answer = browser.post("/login/", {"username": username, "password": password})
    assert answer.status_code == 302, answer.content.decode()[:300]
    return browser


def line(text: str, label: str) -> str:
    return next(t for t in text.splitlines() if t.startswith(label)).split(":", 1)[1].strip()


def test_a_restart_keeps_the_login_the_token_and_the_one_demo_run(tmp_path):
    first = setup(tmp_path)
    browser = logged_in("demo", "kept-pass-1")
    assert browser.get("/").status_code == 200
    assert (tmp_path / "api_token").stat().st_mode & 0o777 == 0o600

    second = setup(tmp_path)  # the next `make demo`
    assert browser.get("/").status_code == 200  # still logged in: the password's hash was kept
    assert line(second, "api token") == line(first, "api token")
    assert Run.objects.count() == 1
    assert line(second, "demo run").split()[0] == line(first, "demo run").split()[0]
    assert "from an earlier start; DEMO_NEW_RUN=1 make demo queues another" in second and "(queued now)" in first
    api = Client(HTTP_AUTHORIZATION=f"Bearer {line(second, 'api token')}")
    assert api.get("/api/v1/runs").status_code == 200

    third = setup(tmp_path, "kept-pass-1", "--new-run")
    assert Run.objects.count() == 2 and "(queued now)" in third


def test_a_reset_password_logs_out_and_a_revoked_token_is_replaced(tmp_path):
    first = setup(tmp_path)
    browser = logged_in("demo", "kept-pass-1")
    (tmp_path / "api_token").write_text("not-a-token\n")
    second = setup(tmp_path, "new-pass-2")  # DEMO_RESET_PASSWORD=1 make demo
    assert browser.get("/").status_code == 302  # a new password: sessions end, as after any change
    assert logged_in("demo", "new-pass-2").get("/").status_code == 200
    assert line(second, "api token") not in (line(first, "api token"), "not-a-token")
    assert (tmp_path / "api_token").read_text().strip() == line(second, "api token")
