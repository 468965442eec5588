"""Auth hardening: a login rate limit per user name and address (django-axes); the
production settings block (HSTS, secure cookies, CSP, Referrer-Policy) on when DEBUG is off and
the site is served over HTTPS, checked by Django's own deployment checklist and on the headers a
page answers with; personal tokens that expire and may be read-only (the authorization matrix
holds every endpoint to that: test_authorization_matrix.py)."""

import json
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import api_token_create


@pytest.fixture
def quick_passwords(settings, alice):
    """A fast hasher (the limit is about counting attempts, not about hashing)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    alice.set_password("alice-pass-123")
    alice.save()


@pytest.mark.django_db
def test_wrong_passwords_lock_out_that_user_from_that_address_only(alice, quick_passwords):
    def login(password, address="10.0.0.7", username="alice"):
        return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})

    for _ in range(4):
        assert login("guess").status_code == 200  # the form again, with its error
    assert login("guess").status_code == 429  # the fifth locks alice out from this address
    locked = login("alice-pass-123")
    assert locked.status_code == 429 and "_auth_user_id" not in locked.client.session  # the right one, too late
    assert login("alice-pass-123", address="10.0.0.8").status_code == 302  # alice elsewhere logs in
    # a success resets the count: four more wrong ones from there are not a lockout
    for _ in range(4):
        assert login("guess", address="10.0.0.8").status_code == 200
    assert login("alice-pass-123", address="10.0.0.8").status_code == 302


SECURITY_SETTINGS = (
    "SECURE_HSTS_SECONDS",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_PROXY_SSL_HEADER",
    "CONTENT_SECURITY_POLICY",
    "SECURE_REFERRER_POLICY",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "X_FRAME_OPTIONS",
)


def settings_from(monkeypatch, **env) -> dict:
    """The security settings orchestrator/settings.py makes from this environment (the file is run
    afresh as a module of its own: Django's settings stay as they are)."""
    import importlib.util

    from django.conf import global_settings

    import orchestrator.settings as module

    for name in ("OPL_HTTPS", "DEBUG", "OPL_PUBLIC_URL"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    spec = importlib.util.spec_from_file_location("settings_probe", module.__file__)
    made = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(made)
    monkeypatch.undo()
    return {k: getattr(made, k, getattr(global_settings, k, None)) for k in SECURITY_SETTINGS}


def deploy_warnings() -> set[str]:
    from django.core import checks

    return {m.id for m in checks.run_checks(include_deployment_checks=True, tags=[checks.Tags.security])}


# What the block must settle: HSTS, the https redirect, secure session and CSRF cookies. HSTS for
# subdomains (W005) and the preload list (W021) stay the site's choice: they bind other hosts.
MUST_PASS = {"security.W004", "security.W008", "security.W012", "security.W016"}


@pytest.mark.django_db
def test_served_over_https_the_deployment_checklist_passes_and_pages_carry_the_headers(monkeypatch, settings):
    made = settings_from(monkeypatch, DEBUG="false", OPL_PUBLIC_URL="https://lab.example.org")
    for name, value in made.items():
        setattr(settings, name, value)
    assert MUST_PASS & deploy_warnings() == set()
    client = Client()
    page = client.get("/login/", secure=True)
    assert page["Strict-Transport-Security"].startswith("max-age=31536000")
    assert page["Referrer-Policy"] == "same-origin" and page["X-Content-Type-Options"] == "nosniff"
    csp = page["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
    assert page.cookies["csrftoken"]["secure"]
    plain = client.get("/login/")
    assert (plain.status_code, plain["Location"]) == (301, "https://testserver/login/")  # http:// goes to https://


@pytest.mark.django_db
def test_without_https_the_checklist_names_what_is_missing(monkeypatch, settings):
    for env in (
        {"DEBUG": "false", "OPL_PUBLIC_URL": "http://127.0.0.1:8000"},
        {"DEBUG": "false", "OPL_PUBLIC_URL": "https://lab.example.org", "OPL_HTTPS": "false"},
    ):
        for name, value in settings_from(monkeypatch, **env).items():
            setattr(settings, name, value)
        assert deploy_warnings() >= MUST_PASS, env
        assert "Content-Security-Policy" not in Client().get("/login/")


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


@pytest.mark.django_db(transaction=True)
def test_behind_a_reverse_proxy_the_lockout_is_per_client_address(alice, quick_passwords):
    """Served as deployed (uvicorn): a proxy on this host sends X-Forwarded-For, and uvicorn, which
    trusts the proxy headers of FORWARDED_ALLOW_IPS (127.0.0.1 unless set), hands Django the
    client's address. So a guesser behind the proxy locks out alice from its own address only."""
    import re

    import httpx

    from tests.unit.metrics.asgi_server import serve_asgi

    def login(base: str, password: str, client_address: str) -> httpx.Response:
        with httpx.Client(base_url=base, headers={"X-Forwarded-For": f"198.51.100.1, {client_address}"}) as http:
            form = http.get("/login/")
            token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
            return http.post("/login/", data={"username": "alice", "password": password, "csrfmiddlewaretoken": token})

    with serve_asgi() as base:
        for _ in range(4):
            assert login(base, "guess", "203.0.113.7").status_code == 200
        assert login(base, "guess", "203.0.113.7").status_code == 429
        assert login(base, "alice-pass-123", "203.0.113.7").status_code == 429
        # the same user from another client behind the same proxy is not locked out
        assert login(base, "alice-pass-123", "203.0.113.8").status_code == 302
