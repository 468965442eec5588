"""Auth hardening (issue 22): a login rate limit per user name and address (django-axes); the
production settings block (HSTS, secure cookies, CSP, Referrer-Policy) on when DEBUG is off and
the site is served over HTTPS, checked by Django's own deployment checklist and on the headers a
page answers with; personal tokens that expire and may be read-only (the authorization matrix
holds every endpoint to that: test_authorization_matrix.py)."""
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import api_token_create

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_wrong_passwords_lock_out_that_user_from_that_address_only(alice):
    def login(password, address="10.0.0.7", username="alice"):
        return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})

    for _ in range(4):
        assert login("guess").status_code == 200  # the form again, with its error
    assert login("guess").status_code == 429  # the fifth locks alice out from this address
    locked = login("alice-pass-123")
    assert locked.status_code == 429 and "_auth_user_id" not in locked.client.session  # the right one, too late
    assert login("alice-pass-123", address="10.0.0.8").status_code == 302  # alice elsewhere logs in
    for _ in range(2):
        login("guess", username="bob")
    assert login("alice-pass-123", address="10.0.0.9").status_code == 302


@pytest.mark.django_db
def test_a_success_resets_the_count(alice):
    client = Client(REMOTE_ADDR="10.0.0.5")
    for _ in range(4):
        client.post("/login/", {"username": "alice", "password": "guess"})
    assert client.post("/login/", {"username": "alice", "password": "alice-pass-123"}).status_code == 302
    for _ in range(4):
        assert Client(REMOTE_ADDR="10.0.0.5").post("/login/", {"username": "alice", "password": "guess"}).status_code == 200
    assert Client(REMOTE_ADDR="10.0.0.5").post("/login/", {"username": "alice", "password": "alice-pass-123"}).status_code == 302


def _django(code: str, **env) -> subprocess.CompletedProcess:
    """Python with the project's settings loaded from `env` (settings are read once, at import)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPL_HTTPS", "DEBUG"))}
    base.update(DJANGO_SETTINGS_MODULE="orchestrator.settings", SECRET_KEY="k" * 20 + os.urandom(24).hex(),
                ALLOWED_HOSTS="lab.example.org", **env)
    return subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + code], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=120)


CHECK_DEPLOY = "from django.core.management import call_command\ncall_command('check', deploy=True, fail_level='ERROR')"
PAGE_HEADERS = """
import json
from django.test import Client
client = Client(HTTP_HOST='lab.example.org')
page = client.get('/login/', secure=True)
cookies = {name: {'secure': bool(c['secure']), 'httponly': bool(c['httponly'])} for name, c in page.cookies.items()}
plain = client.get('/login/')
print(json.dumps({'headers': dict(page.headers), 'cookies': cookies, 'plain': [plain.status_code, plain.get('Location')]}))
"""


# What the block must settle: HSTS, the https redirect, secure session and CSRF cookies, and that
# DEBUG, the secret key and ALLOWED_HOSTS are production's. HSTS for subdomains (W005) and the
# preload list (W021) stay the site's choice (OPL_HSTS_INCLUDE_SUBDOMAINS): they bind other hosts.
MUST_PASS = ("security.W004", "security.W008", "security.W009", "security.W012", "security.W016", "security.W018",
             "security.W020")


def test_served_over_https_the_deployment_checklist_passes_and_pages_carry_the_headers():
    checked = _django(CHECK_DEPLOY, DEBUG="false", OPL_PUBLIC_URL="https://lab.example.org")
    reported = checked.stdout + checked.stderr
    assert "Traceback" not in reported and [w for w in MUST_PASS if w in reported] == [], reported[-2000:]
    allowed = _django(CHECK_DEPLOY, DEBUG="false", OPL_PUBLIC_URL="https://lab.example.org", OPL_HSTS_INCLUDE_SUBDOMAINS="true")
    assert "security.W005" not in allowed.stdout + allowed.stderr
    answer = _django(PAGE_HEADERS, DEBUG="false", OPL_PUBLIC_URL="https://lab.example.org")
    assert answer.returncode == 0, answer.stderr[-2000:]
    seen = json.loads(answer.stdout.strip().splitlines()[-1])
    headers = seen["headers"]
    assert headers["Strict-Transport-Security"].startswith("max-age=31536000")
    assert headers["Referrer-Policy"] == "same-origin" and headers["X-Content-Type-Options"] == "nosniff"
    csp = headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
    assert seen["cookies"]["csrftoken"]["secure"]
    assert seen["plain"] == [301, "https://lab.example.org/login/"]  # http:// goes to https://


def test_without_https_the_checklist_names_what_is_missing():
    checked = _django(CHECK_DEPLOY, DEBUG="false", OPL_PUBLIC_URL="http://127.0.0.1:8000")
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):  # HSTS, redirect, cookies
        assert warning in checked.stdout + checked.stderr


@pytest.mark.django_db
def test_a_read_only_token_reads_and_cannot_write(alice, tiny_config):
    client = Client(HTTP_AUTHORIZATION=f"Bearer {api_token_create(user=alice, name='ro', scope='read')}")
    assert client.get("/api/v1/runs").status_code == 200
    body = {"name": "x", "config": tiny_config}
    answer = client.post("/api/v1/experiments", data=json.dumps(body), content_type="application/json")
    assert answer.status_code == 403 and "read-only" in answer.json()["error"]


@pytest.mark.django_db
def test_an_expired_token_is_refused_everywhere(alice, tiny_config):
    from tests.unit.metrics.helpers import make_run

    run = make_run(alice, tiny_config)[0]
    token = api_token_create(user=alice, name="old", days=1)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get(f"/api/v1/runs/{run.pk}").status_code == 200
    ApiToken.objects.filter(user=alice).update(expires_at=timezone.now() - timedelta(seconds=1))
    answer = client.get(f"/api/v1/runs/{run.pk}")
    assert answer.status_code == 401 and "expired" in answer.json()["error"]
    assert client.get(f"/api/v1/runs/{run.pk}/metrics/stream").status_code == 401  # the live stream too


@pytest.mark.django_db
def test_the_tokens_page_creates_tokens_with_a_lifetime_and_a_scope(alice, client):
    client.force_login(alice)
    page = client.post("/account/tokens/", {"name": "ci", "days": "30", "scope": "read"}).content.decode()
    assert 'id="new-token"' in page
    token = ApiToken.objects.get(user=alice)
    assert token.scope == "read" and timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    assert "read only" in page and token.expires_at.strftime("%Y-%m-%d") in page
    for days in ("0", "100000", "soon"):
        refused = client.post("/account/tokens/", {"name": "x", "days": days})
        assert refused.status_code == 400 and "days:" in refused.content.decode()
    refused = client.post("/account/tokens/", {"name": "x", "days": "7", "scope": "admin"})
    assert refused.status_code == 400 and "scope:" in refused.content.decode()
    assert ApiToken.objects.filter(user=alice).count() == 1
