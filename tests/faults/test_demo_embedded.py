"""The demo's load on the embedded default, as a new user meets it: SQLite file, uvicorn, a
Celery worker with 2 processes and beat, the local backend, and a 4-run sweep of real trainers
pushing metrics. Nothing may meet "database is locked", every run must end, and a cancel made
while its run trains must be visible at once and honoured within the grace period."""

import time

import pytest

from tests.faults.stack import LOCKED, wait_until

pytestmark = [pytest.mark.integration]

SWEEP_CONFIG = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic"},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 8},
    "algorithm": {"objective": "m2po", "updates_per_step": 1},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 120, "seed": 1, "torch_threads": 1},
    "eval": {"every": 0},
    "checkpoint": {"every": 40, "keep": 1},
}


def test_a_four_run_sweep_on_sqlite_runs_clean_and_a_cancel_is_honoured(stack):
    status, body = stack.api("POST", "/api/v1/experiments", {"name": "sweep4", "config": SWEEP_CONFIG, "seeds": 4})
    assert status == 201, body
    experiment, run_ids = body["id"], body["runs"]
    assert len(run_ids) == 4

    # the local default is one trainer per core: 2 here, not 4
    wait_until(lambda: sum(r["state"] == "running" for r in stack.runs(experiment).values()) >= 1, 120, "a running run")
    active = sum(r["state"] in ("submitted", "pending", "running") for r in stack.runs(experiment).values())
    assert active <= 2, stack.runs(experiment)

    victim = next(r for r in stack.runs(experiment).values() if r["state"] == "running")["id"]
    wait_until(lambda: stack.runs(experiment)[victim]["step"] >= 2, 60, "the run to train a few steps")
    asked = time.monotonic()
    status, body = stack.api("POST", f"/api/v1/runs/{victim}/cancel")
    assert status == 200, body
    run = stack.runs(experiment)[victim]
    # visible at once: flagged, a reason, a history line (the state changes when the job stops)
    assert run["cancel_requested"] and run["state_reason"].startswith("cancelling"), run
    events = stack.query("SELECT detail FROM experiments_runevent WHERE run_id = ?", victim)
    assert ("cancel requested",) in events, events
    page = stack.api("GET", f"/api/v1/runs/{victim}")[1]
    assert page["state_reason"].startswith("cancelling"), page

    wait_until(lambda: stack.runs(experiment)[victim]["state"] == "cancelled", 60, "the cancelled run to end")
    assert time.monotonic() - asked < 20 + 6, "final state later than the grace period plus two syncs"

    wait_until(lambda: all(r["finished_at"] for r in stack.runs(experiment).values()), 420, "every run to end")
    runs = stack.runs(experiment)
    states = {rid: r["state"] for rid, r in runs.items()}
    assert states[victim] == "cancelled" and runs[victim]["exit_code"] == 130, runs[victim]
    assert all(s == "succeeded" for rid, s in states.items() if rid != victim), runs
    assert all(r["job_id"] for r in runs.values()), runs
    trainer_log = stack.logs()[f"runs/run-{victim}/logs/attempt-1.out"]
    assert "cancelled; checkpointing" in trainer_log and "stopping for requeue" not in trainer_log

    assert stack.count_in_logs(LOCKED) == {}, stack.count_in_logs(LOCKED)
    tracebacks = stack.count_in_logs("Traceback")
    assert tracebacks == {}, {name: stack.logs()[name][-3000:] for name in tracebacks}
