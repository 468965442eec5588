"""Tokens: from settings, or minted from the key file and renewed; never shown."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging

import httpx
import pytest

from orchestrator.cluster.slurm.auth import SlurmCredentials, mint_token, token_expiry
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.cluster.slurm.errors import SlurmUnreachable


def test_minted_token_is_a_valid_hs256_jwt():
    token = mint_token(b"secret-key", "slurmtest", lifespan_s=600, now=1000)
    head, claims, sig = token.split(".")
    expected = (
        base64.urlsafe_b64encode(hmac.new(b"secret-key", f"{head}.{claims}".encode(), hashlib.sha256).digest())
        .rstrip(b"=")
        .decode()
    )
    assert sig == expected
    body = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    assert body == {"exp": 1600, "iat": 1000, "sun": "slurmtest"}
    assert token_expiry(token) == 1600
    assert token_expiry("garbage") is None


def test_key_file_tokens_are_minted_and_reused(tmp_path):
    key = tmp_path / "jwt.key"
    key.write_bytes(b"k" * 32)
    creds = SlurmCredentials("slurmtest", key_file=key, lifespan_s=3600)
    first = creds.headers()
    assert first["X-SLURM-USER-NAME"] == "slurmtest"
    assert creds.headers() == first  # not re-minted on every call
    assert first["X-SLURM-USER-TOKEN"] not in repr(creds)


def test_missing_credentials_name_the_setting():
    with pytest.raises(ValueError, match="SLURM_REST_USER"):
        SlurmCredentials("", token="x")
    with pytest.raises(ValueError, match="SLURM_JWT"):
        SlurmCredentials("u")


def test_unreachable_names_the_url_and_retries_connection_errors_only(caplog):
    calls = []

    def refuse(request):
        calls.append(request)
        raise httpx.ConnectError("connection refused")

    client = SlurmClient(
        "http://10.255.255.1:6820",
        SlurmCredentials("u", token="secret.token.value"),
        api_version="v0.0.42",
        transport=httpx.MockTransport(refuse),
        connect_retries=2,
        backoff_s=0.01,
    )
    with (
        caplog.at_level(logging.DEBUG),
        pytest.raises(SlurmUnreachable, match=r"unreachable at http://10\.255\.255\.1:6820"),
    ):
        client.ping()
    assert len(calls) == 3
    assert "secret.token.value" not in caplog.text

    answered = []

    def server_error(request):
        answered.append(request)
        return httpx.Response(502, text="bad gateway")

    client = SlurmClient(
        "http://h:1",
        SlurmCredentials("u", token="t"),
        api_version="v0.0.42",
        transport=httpx.MockTransport(server_error),
        connect_retries=2,
        backoff_s=0.01,
    )
    with pytest.raises(Exception, match="502"):
        client.ping()
    assert len(answered) == 1  # an answer, even a bad one, is not retried


def test_bad_url_and_version_settings_are_refused():
    with pytest.raises(ValueError, match="SLURM_REST_URL"):
        SlurmClient("slurm-head:6820", SlurmCredentials("u", token="t"))
    with pytest.raises(ValueError, match="SLURM_REST_API_VERSION"):
        SlurmClient("http://h:1", SlurmCredentials("u", token="t"), api_version="v0.0.39")
