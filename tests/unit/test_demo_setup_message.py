"""On a restart the demo says how to queue another run the way the README does (DEMO_NEW_RUN=1
make demo): `make demo` passes no flag the user could add."""

import io

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_a_restart_names_the_readmes_way_to_queue_another_run(tmp_path, settings):
    settings.RUNS_DIR = tmp_path / "runs"
    args = ["demo_setup", "--password", "demo-pass-1234", "--token-file", str(tmp_path / "token")]
    call_command(*args, stdout=io.StringIO())
    out = io.StringIO()
    call_command(*args, stdout=out)
    assert "from an earlier start; DEMO_NEW_RUN=1 make demo queues another" in out.getvalue()
    assert "DEMO_NEW_RUN=1 make demo" in open(settings.BASE_DIR / "README.md").read()
