"""A user queues a launcher's run in headless Chromium: from the new-experiment page to the
launchers list, the form built from the launcher's typed parameters, a bad value refused next to
its field, then the run queued and its page open."""

import pytest
from django.contrib.auth.models import User

from orchestrator.experiments.models import Run
from orchestrator.launchers.services import launcher_upsert
from tests.unit.launchers.helpers import tiny_sdk

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_launcher_run_is_queued_from_its_form(browser_page, live_url, alice):
    launcher_upsert(by=User.objects.create_user("sam", is_staff=True), data=tiny_sdk())
    page = browser_page
    page.goto(live_url + "/experiments/new/")
    page.click("text=Run a launcher instead")
    page.click("a[href='/launchers/tiny-sdk/run']")
    assert page.input_value("#f-param-steps") == "5" and page.input_value("#f-param-note") == "none"
    page.fill("#f-param-steps", "0")
    page.fill("#f-param-note", "--rm -rf /")
    page.fill("#f-name", "from-the-form")
    page.evaluate("document.getElementById('launcher-form').noValidate = true")  # the server's check, not the browser's
    page.click("#launcher-form button[type=submit]")
    assert page.inner_text("#err-param-steps") == "must be at least 1, got 0"
    assert "must not start with '-'" in page.inner_text("#err-param-note")
    assert page.input_value("#f-param-note") == "--rm -rf /"  # what was typed stays in the form
    page.fill("#f-param-steps", "12")
    page.fill("#f-param-note", "a b; $(id)")
    page.click("#launcher-form button[type=submit]")
    run = Run.objects.get(owner=alice)
    page.wait_for_url(f"{live_url}/runs/{run.pk}/")
    assert run.name == "from-the-form" and run.config["launcher"]["params"] == {
        "steps": 12,
        "lr": 0.1,
        "sleep": 0.2,
        "note": "a b; $(id)",
    }
    assert page.console_errors == []
    assert [e for e in page.http_errors if "/launchers/tiny-sdk/run" not in e] == []  # the refused post is a 400
