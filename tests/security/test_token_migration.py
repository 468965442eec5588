"""Migration accounts 0003: a personal token made before tokens had an expiry gets the longest
lifetime a new one may have, from the upgrade on, so no token is valid forever."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.migrations import latest, migrate

BEFORE = ("accounts", "0002_token_expiry_and_scope")


@pytest.mark.django_db(transaction=True)
def test_a_token_made_before_expiry_gets_the_longest_lifetime(alice, settings):
    settings.OPL_API_TOKEN_MAX_DAYS = 90
    old = migrate([BEFORE])
    ApiToken = old.get_model("accounts", "ApiToken")
    legacy = ApiToken.objects.create(user_id=alice.pk, name="legacy", token_hash="a" * 64)
    dated = ApiToken.objects.create(
        user_id=alice.pk, name="dated", token_hash="b" * 64, expires_at=timezone.now() + timedelta(days=7)
    )
    started = timezone.now()

    migrate(latest())

    from orchestrator.accounts.models import ApiToken as NewToken

    legacy, dated = NewToken.objects.get(pk=legacy.pk), NewToken.objects.get(pk=dated.pk)
    assert started + timedelta(days=90) <= legacy.expires_at <= timezone.now() + timedelta(days=90)
    assert not legacy.expired()
    assert dated.expires_at < started + timedelta(days=8)  # a token with its own expiry keeps it
