"""The API tokens page lists the user's logging tokens, and its revoke button (a form with the
CSRF token) ends one: in Chromium, as a user does it."""

from orchestrator.accounts.models import ApiToken
from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.external_runs import logging_token_create, logging_token_lookup


def test_a_logging_token_is_listed_and_revoked_on_the_tokens_page(browser_page, live_url, alice):
    api_token_create(user=alice, name="laptop")
    laptop = ApiToken.objects.get(user=alice, name="laptop")
    kept, kept_token = logging_token_create(user=alice, name="kept")
    ended, ended_token = logging_token_create(user=alice, name="cluster-a", made_with=laptop)
    page = browser_page
    page.goto("/account/tokens/", wait_until="domcontentloaded", timeout=60_000)
    row = page.locator(f'#logging-tokens tr[data-logging-token="{ended.pk}"]')
    assert "cluster-a" in row.inner_text() and "laptop" in row.inner_text()
    assert ended_token not in page.content()
    with page.expect_navigation(wait_until="domcontentloaded"):  # the form posts, then the page comes back
        row.get_by_role("button", name="revoke").click()
    assert page.locator(f'#logging-tokens tr[data-logging-token="{ended.pk}"]').count() == 0
    assert page.locator(f'#logging-tokens tr[data-logging-token="{kept.pk}"]').count() == 1
    assert logging_token_lookup(ended_token) is None and logging_token_lookup(kept_token) is not None
    assert page.console_errors == [] and page.http_errors == []
