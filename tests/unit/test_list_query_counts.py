"""Every list page and list endpoint answers in a number of queries that does not grow with the
number of rows it lists. Each is measured with a few rows and with several times as many: an N+1
query (a per-row lookup that a select_related or prefetch should have folded in) makes the second
count larger."""

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext

from orchestrator.experiments.models import Project
from orchestrator.experiments.services import experiment_create

LIST_PAGES = ["/", "/experiments/", "/projects/", "/launchers/", "/cluster/queue", "/account/tokens/"]
LIST_ENDPOINTS = ["/api/v1/runs", "/api/v1/experiments", "/api/v1/projects", "/api/v1/tags", "/api/v1/launchers"]


def fill(owner: User, tiny_config: dict, experiments: int, start: int = 0) -> None:
    """`experiments` experiments of 3 runs each, each in its own project with a member."""
    for index in range(start, start + experiments):
        experiment_create(
            owner=owner,
            name=f"exp-{index}",
            project=f"lab-{index}",
            config=tiny_config,
            sweep={"train.steps": [1, 2, 3]},
        )
        member = User.objects.create_user(f"member-{index}")
        Project.objects.get(name=f"lab-{index}").members.add(member)


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return len(captured)


@pytest.mark.parametrize("url", LIST_PAGES)
def test_list_pages_do_not_query_per_row(client, alice, tiny_config, url):
    client.force_login(alice)
    fill(alice, tiny_config, 2)
    few = queries(client, url)
    fill(alice, tiny_config, 6, start=2)
    assert queries(client, url) == few, f"{url} queries once per row"


@pytest.mark.parametrize("url", LIST_ENDPOINTS)
def test_list_endpoints_do_not_query_per_row(alice, api_client, tiny_config, url):
    client = api_client(alice)
    fill(alice, tiny_config, 2)
    few = queries(client, url)
    fill(alice, tiny_config, 6, start=2)
    assert queries(client, url) == few, f"{url} queries once per row"
