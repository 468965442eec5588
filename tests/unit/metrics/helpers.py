"""Shared by the metrics tests: runs with ingestion tokens, and posting batches."""

import json

from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from orchestrator.experiments.tokens import derive_token, token_hash

T0 = 1764400000.0


def make_run(owner, config, *, name="exp") -> tuple[Run, str]:
    run = experiment_create(owner=owner, name=name, config=config).runs.get()
    return start_attempt(run, 1)


def start_attempt(run: Run, attempt: int) -> tuple[Run, str]:
    """Put the run on `attempt` (as a requeue does) and return its new token."""
    run.attempt, run.token_salt, run.state = attempt, f"salt{attempt}", Run.State.RUNNING
    token = derive_token(run.pk, attempt, run.token_salt)
    run.token_hash = token_hash(token)
    run.save()
    return run, token


def points(key: str, steps, value=lambda s: s / 10) -> list[dict]:
    return [{"step": s, "key": key, "value": value(s), "time": T0 + s} for s in steps]


def push(client, run_id, token, body):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    return client.post(
        f"/api/v1/runs/{run_id}/metrics", data=json.dumps(body), content_type="application/json", **headers
    )
