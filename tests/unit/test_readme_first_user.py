"""The README gives the first user of a new deployment a command, and that user signs in to the
runs page with it (createsuperuser, non-interactive here with the variables Django reads)."""

import re

import pytest
from django.conf import settings
from django.core.management import call_command


@pytest.mark.django_db
def test_the_readmes_first_user_command_makes_a_user_who_signs_in(client, monkeypatch):
    readme = (settings.BASE_DIR / "README.md").read_text()
    line = next(line for line in readme.splitlines() if "first user" in line)
    commands = re.findall(r"python manage\.py (\w+)", line)
    assert commands == ["migrate", "createsuperuser"]
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "first-user-pass-9")
    call_command("createsuperuser", "--noinput", "--username", "lead", "--email", "lead@lab.example")
    signed_in = client.post("/login/", {"username": "lead", "password": "first-user-pass-9"})
    assert signed_in.status_code == 302
    assert client.get("/").status_code == 200 and client.get("/admin/").status_code == 200
