"""Tokens made before tokens expired (expires_at null) get the longest lifetime a new token may
have (OPL_API_TOKEN_MAX_DAYS), counted from this upgrade: they keep working, and stop like the rest."""
from datetime import timedelta

from django.conf import settings
from django.db import migrations
from django.utils import timezone


def expire_legacy_tokens(apps, schema_editor):
    ApiToken = apps.get_model("accounts", "ApiToken")
    days = getattr(settings, "OPL_API_TOKEN_MAX_DAYS", 365)
    ApiToken.objects.filter(expires_at__isnull=True).update(expires_at=timezone.now() + timedelta(days=days))


class Migration(migrations.Migration):
    dependencies = [("accounts", "0002_token_expiry_and_scope")]
    operations = [migrations.RunPython(expire_legacy_tokens, migrations.RunPython.noop)]
