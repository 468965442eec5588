"""Shared fixtures for browser tests: Debian's Chromium driven by Playwright against a live server.

    def test_something(browser_page, live_url): browser_page.goto(live_url + "/")

`browser_page` is a page logged in as alice; `browser_login(user)` opens one for any user. A test
that needs Chromium and cannot find it fails (never skips): CI must not count it as passing.
Install it with `apt-get install -y --no-install-recommends chromium` (see reference/BROWSER_TESTS.md).
"""

import os
import shutil
from pathlib import Path

import pytest
from django.db import connection

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create, run_transition
from orchestrator.metrics.services import metrics_ingest
from tests.unit.metrics.asgi_server import serve_asgi, session_cookie
from tests.unit.metrics.helpers import points

# Playwright's sync API keeps an event loop in this thread; Django refuses ORM calls from a thread
# with an event loop unless told otherwise. The test body only reads and writes test data.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = os.environ.get("OPL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).parent == Path(__file__).parent:
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")
    if not path:
        pytest.fail(
            f"Chromium not found at {CHROMIUM} (set OPL_CHROMIUM): install Debian's package with "
            "`apt-get install -y --no-install-recommends chromium`",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def live_url(live_server) -> str:
    """The live server's base URL, without a trailing slash."""
    return live_server.url.rstrip("/")


@pytest.fixture
def browser_login(browser, live_url):
    """browser_login(user) -> a Playwright page whose session is logged in as user.

    Confirmation dialogs (hx-confirm, confirm()) are accepted. Script errors are collected on
    page.console_errors, and answers >= 400 (except the absent /favicon.ico) on page.http_errors.
    """
    from django.conf import settings
    from django.test import Client

    contexts = []

    def login(user):
        client = Client()
        client.force_login(user)
        context = browser.new_context(base_url=live_url)
        context.add_cookies(
            [
                {
                    "name": settings.SESSION_COOKIE_NAME,
                    "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                    "url": live_url,
                }
            ]
        )
        context.set_default_timeout(10_000)
        contexts.append(context)
        page = context.new_page()
        page.console_errors, page.http_errors = [], []
        page.on(
            "console",
            lambda msg: (
                msg.type == "error"
                and not msg.text.startswith("Failed to load resource")
                and page.console_errors.append(msg.text)
            ),
        )
        page.on("pageerror", lambda exc: page.console_errors.append(str(exc)))
        page.on(
            "response",
            lambda r: (
                r.status >= 400
                and not r.url.endswith("/favicon.ico")
                and page.http_errors.append(f"{r.status} {r.request.method} {r.url}")
            ),
        )
        page.on("dialog", lambda dialog: dialog.accept())
        return page

    yield login
    for context in contexts:
        context.close()


@pytest.fixture
def browser_page(browser_login, alice):
    """A page logged in as alice (see tests/conftest.py for the users)."""
    return browser_login(alice)


# A real uvicorn (the ASGI path the live stream needs; the shared live_server is WSGI).
@pytest.fixture
def server(transactional_db):
    with serve_asgi() as url:
        yield url


@pytest.fixture
def page_as(browser, server, client):
    """page_as(user) -> a Playwright page logged in as user on the uvicorn server."""
    contexts = []

    def make(user):
        client.force_login(user)
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        context.add_cookies([{"name": "sessionid", "value": session_cookie(client)["sessionid"], "url": server}])
        contexts.append(context)
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and print("browser:", m.text))
        return page

    yield make
    for context in contexts:
        context.close()


# Nine runs of a 2 x 5 sweep with 9-digit ids, two of them on Slurm nodes: the widest pages (layout tests).
@pytest.fixture
def lab(alice, tiny_config, settings):
    settings.MAX_ACTIVE_RUNS = 2
    with connection.cursor() as cur:  # 9-digit run ids, as the full suite reaches them: the widest case
        cur.execute(
            "SELECT setval(pg_get_serial_sequence(%s, 'id'), "
            f"GREATEST(100000000, (SELECT COALESCE(MAX(id), 0) FROM {Run._meta.db_table})))",
            [Run._meta.db_table],
        )
    experiment = experiment_create(
        owner=alice,
        name="a-rather-long-experiment-name",
        config=tiny_config,
        sweep={"algorithm.objective": ["m2po", "grpo"], "staleness.k": [0, 1, 2, 4, 8]},
        seeds=1,
        tags=["staleness", "paper"],
    )
    runs = list(experiment.runs.order_by("id"))
    for run in runs[:2]:
        run_transition(run=run, to=Run.State.SUBMITTED)
        Run.objects.filter(pk=run.pk).update(job_id="1234567", node_list="gpu-node-017", backend="slurm")
    for i, run in enumerate(runs):
        metrics_ingest(
            run=run,
            attempt=1,
            points=points("train/reward_mean", range(30), lambda s, i=i: s * i / 100)
            + points("eval/avg_acc", [0, 29], lambda s: 0.4)
            + points("actor/m2", range(30), lambda s: 0.05),
        )
    return experiment, runs


HTMX_BUSY = ".htmx-request, .htmx-swapping, .htmx-settling, .htmx-added"  # htmx's classes while it works


def wait_htmx_idle(page) -> None:
    """Until htmx has no request in flight and has settled what it swapped in: a click or a change
    made before that can reach an element whose handler is not attached yet, and send nothing."""
    page.wait_for_function(f"() => !document.querySelector('{HTMX_BUSY}')")
