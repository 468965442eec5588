"""/runs/ (where a run page's URL points up to) is the runs list, and /favicon.ico, which
browsers ask for on their own, is the product's icon, for anyone (the login page shows it too)."""

import pytest

pytestmark = pytest.mark.django_db


def test_runs_is_the_runs_list(client, alice):
    client.force_login(alice)
    response = client.get("/runs/?state=running")
    assert response.status_code == 302 and response["Location"] == "/?state=running"
    assert client.get(response["Location"]).status_code == 200


def test_the_favicon_is_served_to_anyone(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"].endswith("favicon.svg")
    assert client.get("/runs/").status_code == 302  # the runs list, behind the login as before
