from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client

from orchestrator.accounts.services import api_token_create

BROWSER_TESTS = Path(__file__).parent / "browser"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Browser tests run last. Playwright's sync API keeps an event loop running in the main thread
    from the first browser test to the end of the session, and any later test that calls an async
    view through Django's test client (async_to_sync) would fail on it."""
    items.sort(key=lambda item: Path(str(item.fspath)).parent == BROWSER_TESTS)


@pytest.fixture
def alice(db) -> User:
    """Owner of the runs under test."""
    return User.objects.create_user("alice", password="alice-pass-123")


@pytest.fixture
def bob(db) -> User:
    """A member of alice's projects who does not own her runs."""
    return User.objects.create_user("bob", password="bob-pass-123")


@pytest.fixture
def charlie(db) -> User:
    """A user with no access to alice's projects."""
    return User.objects.create_user("charlie", password="charlie-pass-123")


@pytest.fixture
def api_client():
    """A client authenticating with a personal API token: api_client(user) -> Client."""

    def make(user: User) -> Client:
        token = api_token_create(user=user, name="test")
        return Client(HTTP_AUTHORIZATION=f"Bearer {token}")

    return make


TINY_CONFIG = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic"},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 8},
    "algorithm": {"objective": "m2po", "updates_per_step": 2},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 4, "seed": 1},
    "eval": {"every": 0},
    "checkpoint": {"every": 2, "keep": 2},
}


@pytest.fixture
def tiny_config() -> dict:
    """A run config the tiny model trains on in a few seconds of CPU."""
    import copy

    return copy.deepcopy(TINY_CONFIG)
