"""Alert rules edited in a real browser: on the run page, alice raises the entropy floor,
tries it (Test: nothing logged yet), saves it; the next metric batch the run posts fires it. A
value out of the API's bounds shows the API's message beside the form."""

import pytest
from playwright.sync_api import expect

from orchestrator.alerts.models import Alert, AlertRule
from tests.unit.metrics.helpers import make_run, points

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_edited_rule_fires_on_the_next_batch(browser_page, live_url, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    page = browser_page
    page.goto(f"/runs/{run.pk}/", wait_until="domcontentloaded", timeout=60_000)  # a busy CI machine
    page.click("#run-alert-rules summary")
    rule = page.locator("#run-alerts form[data-rule='entropy_floor']")
    expect(rule.locator("input[name=threshold]")).to_have_value("0.01")  # the default floor

    rule.locator("input[name=threshold]").fill("1.5e12")
    rule.locator("button[type=submit]").click()
    expect(page.locator("#run-alerts p.error[data-field=threshold]")).to_contain_text(
        "threshold: must be a finite number under 1e12 in size, got 1500000000000.0"
    )
    rule = page.locator("#run-alerts form[data-rule='entropy_floor']")  # the card was swapped
    rule.locator("input[name=threshold]").fill("0.5")
    rule.locator("select[name=action]").select_option("notify")
    rule.locator("button", has_text="Test").click()
    expect(page.locator("#run-alerts .rule-test")).to_contain_text("no points of actor/entropy logged yet")
    expect(page.locator("#run-alerts form[data-rule='entropy_floor'] input[name=threshold]")).to_have_value("0.5")
    page.locator("#run-alerts form[data-rule='entropy_floor'] button[type=submit]").click()
    expect(page.locator("#run-alerts .rule-saved")).to_have_attribute("data-saved", "entropy_floor")
    assert AlertRule.objects.get(run=run, kind="entropy_floor").threshold == 0.5
    assert not Alert.objects.filter(run=run).exists()

    # the run's next batch, through the ingestion endpoint with its own token: entropy 0.9 -> 0.4,
    # far above the default floor (0.01), under the edited one (0.5)
    answer = page.request.post(
        f"{live_url}/api/v1/runs/{run.pk}/metrics",
        headers={"Authorization": f"Bearer {token}"},
        data={"attempt": 1, "points": points("actor/entropy", range(1, 7), lambda s: 1.0 - s / 10)},
    )
    assert answer.status == 202, answer.text()
    alert = Alert.objects.get(run=run)
    assert (alert.kind, alert.step) == ("entropy_floor", 6)  # 0.4: the first value under 0.5
    page.reload(wait_until="domcontentloaded", timeout=60_000)
    expect(page.locator("#run-alerts .alert-row[data-alert=entropy_floor]")).to_contain_text("under the floor 0.5")
    assert page.console_errors == [] and page.http_errors == []
