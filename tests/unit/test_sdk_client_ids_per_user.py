"""SDK client ids belong to the user who chose them: another user's id opens a run of the caller's
own, answered exactly as a free id is, so an id says nothing about who else uses it; and an
`opl import` id, derived predictably from the file and project, cannot be taken first by another
user to make the real import fail (tests/integration/test_import_ids_per_user.py)."""

import json

from django.test import Client

from orchestrator.experiments.external_runs import logging_token_create
from orchestrator.experiments.models import ExternalRun, Run


def open_run(token: str, client_id: str, project: str, name: str = "verl-7b"):
    body = {"client_id": client_id, "name": name, "project": project, "config": {"staleness": 4}}
    return Client().post(
        "/api/v1/sdk/runs", json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )


def shape(answer) -> tuple:
    body = answer.json()
    return answer.status_code, sorted(body), body["created"], body["state"], body["attempt"]


def test_someone_elses_client_id_opens_the_callers_own_run_as_a_free_one_does(db, alice, bob):
    _, alices = logging_token_create(user=alice)
    _, bobs = logging_token_create(user=bob)
    alices_run = open_run(alices, "shared-id-0001", "alice-lab")
    assert alices_run.status_code == 201

    taken, free = open_run(bobs, "shared-id-0001", "bob-lab"), open_run(bobs, "never-used-01", "bob-lab")
    assert (
        shape(taken) == shape(free) == (201, ["attempt", "created", "id", "state", "token", "url"], True, "running", 1)
    )
    bobs_run = Run.objects.get(pk=taken.json()["id"])
    assert bobs_run.owner == bob and bobs_run.experiment.project.name == "bob-lab"
    assert bobs_run.pk != alices_run.json()["id"] and taken.json()["token"] != alices_run.json()["token"]

    # each finds their own again with the same id
    again = open_run(alices, "shared-id-0001", "alice-lab")
    assert (again.status_code, again.json()["id"]) == (200, alices_run.json()["id"])
    again = open_run(bobs, "shared-id-0001", "bob-lab")
    assert (again.status_code, again.json()["id"]) == (200, bobs_run.pk)
    assert ExternalRun.objects.filter(client_id="shared-id-0001").count() == 2
