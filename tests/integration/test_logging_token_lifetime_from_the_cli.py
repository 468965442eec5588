"""`opl logging-token` against a dashboard whose tokens live at most 30 days: without --days it
gets the dashboard's default lifetime (it does not ask for more than the server allows), and a
--days over the maximum is refused with a message naming --days and the limit."""

import io
from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.accounts.services import api_token_create
from orchestrator.experiments.models import LoggingToken
from tests.unit.metrics.asgi_server import serve_asgi

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def opl(transactional_db, alice, tmp_path, monkeypatch, settings):
    """`opl ... logging-token` with alice's personal token on a dashboard capped at 30 days."""
    from opl_client import cli

    settings.OPL_API_TOKEN_MAX_DAYS = 30
    monkeypatch.setenv("OPL_CONFIG", str(tmp_path / "no-config"))
    personal = api_token_create(user=alice, name="laptop", days=30)
    with serve_asgi() as url:

        def run(*args: str) -> tuple[int, str]:
            out = io.StringIO()
            code = cli.main(["--url", url, "--token", personal, "logging-token", *args], out=out)
            return code, out.getvalue()

        yield run


def test_without_days_the_dashboards_default_lifetime_applies(opl, alice):
    code, out = opl("--name", "cluster")
    assert code == 0 and out.strip().startswith("opllog_")
    made = LoggingToken.objects.get(user=alice, name="cluster")
    assert made.expires_at <= timezone.now() + timedelta(days=30)


def test_days_over_the_maximum_is_refused_naming_days(opl, alice, capsys):
    code, out = opl("--name", "long", "--days", "400")
    assert code == 1 and out == ""
    err = capsys.readouterr().err
    assert "--days 400 refused" in err and "from 1 to 30" in err and "leave --days out" in err
    assert not LoggingToken.objects.filter(user=alice, name="long").exists()
