"""Several submits of one run at once create one Slurm job, on the live test cluster.

After a slurmrestd outage the dispatcher has enqueued a queued run once per beat tick while its
submit task waited to retry, so two pool processes run submit_run for the same run at once: one
claims it, the other finds it submitted without a job id. The Slurm backend's submit is a look-up
by name and then a POST (two requests, not atomic), so both used to find nothing and both
submitted: the restd-outage fault row's duplicate job, whose twin trainer shared the run's
folder. This is the cause, reproduced without the outage's timing."""

import os
import shutil
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from orchestrator.cluster.backends.slurm import client_from_settings
from orchestrator.cluster.models import ClusterProfile, Job
from orchestrator.cluster.services import run_submit, submit_stale_after
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from tests.faults.stack import REPO
from tests.slurm_rest import ENV_DIR, ensure_slurmrestd

pytestmark = [pytest.mark.slurm, pytest.mark.integration, pytest.mark.django_db(transaction=True)]
SLURM_ENV = ENV_DIR / "host.env"
SHARED = Path(os.environ.get("OPL_SLURM_SHARED_DIR", "/var/lib/opl-test"))


@pytest.fixture
def slurm(settings, tmp_path):
    if not SLURM_ENV.exists():
        pytest.skip("the Slurm test cluster is not up (scripts/slurm/cluster-up.sh)")
    env = ensure_slurmrestd(SLURM_ENV, "host", "slurm-22.05")  # whatever ran before may have stopped it
    settings.CLUSTER_BACKEND = "slurm"
    settings.SLURM_REST_URL = env["SLURM_REST_URL"]
    settings.SLURM_REST_USER = env["SLURM_REST_USER"]
    settings.SLURM_JWT = ""
    settings.SLURM_JWT_KEY_FILE = env["SLURM_JWT_KEY_FILE"]
    settings.SLURM_RUN_DIR_MODE = "1777"
    settings.RUNS_DIR = SHARED / f"race-{os.getpid()}-{time.time_ns() % 10**9}"
    settings.RUNS_DIR.mkdir(parents=True)
    os.chmod(settings.RUNS_DIR, 0o1777)
    ClusterProfile.objects.create(
        name="race",
        is_default=True,
        partition=env.get("SLURM_PARTITION", ""),
        setup_lines=f"export PYTHONPATH={REPO}\nexport HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1",
    )
    # run ids unique across sessions: Slurm remembers the names (opl-<run>-a<n>) of finished jobs
    start = int(time.time() * 10) % 10_000_000 * 100
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("DELETE FROM sqlite_sequence WHERE name = 'experiments_run'")
            cur.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('experiments_run', %s)", [start])
        else:
            cur.execute("SELECT setval(pg_get_serial_sequence('experiments_run', 'id'), %s)", [start])
    client = client_from_settings()
    runs: list[Run] = []
    yield client, runs
    for job in client.jobs():
        if any(job.name.startswith(f"opl-{run.pk}-a") for run in runs) and job.state in ("PENDING", "RUNNING"):
            client.cancel(job.job_id)
    shutil.rmtree(settings.RUNS_DIR, ignore_errors=True)


def at_once(*calls):
    """Run the calls in threads released together; their results in order."""
    gate, out = threading.Barrier(len(calls)), [None] * len(calls)

    def go(i, call):
        gate.wait()
        try:
            out[i] = call()
        except Exception as exc:
            out[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def jobs_of(client, run: Run) -> list[str]:
    return sorted(j.job_id for j in client.jobs() if j.name == f"opl-{run.pk}-a1")


def test_a_second_submit_task_of_a_claimed_run_does_not_submit_it_again(slurm, alice, tiny_config):
    client, runs = slurm
    run = experiment_create(owner=alice, name="race", config=tiny_config).runs.get()
    runs.append(run)

    def second():  # a duplicate task that arrives once the first has claimed the run
        deadline = time.monotonic() + 30
        while Run.objects.get(pk=run.pk).state == Run.State.QUEUED:
            assert time.monotonic() < deadline
            time.sleep(0.001)
        return run_submit(run_id=run.pk)

    results = at_once(lambda: run_submit(run_id=run.pk), second)
    assert not any(isinstance(r, Exception) for r in results), results
    assert sum(r is not None for r in results) == 1, results  # one of them submitted
    run.refresh_from_db()
    assert jobs_of(client, run) == [run.job_id]
    assert Job.objects.get(run=run, attempt=1).job_id == run.job_id


def test_a_stale_claim_taken_over_by_two_at_once_gets_one_job(slurm, alice, tiny_config):
    client, runs = slurm
    run = experiment_create(owner=alice, name="stale", config=tiny_config).runs.get()
    runs.append(run)
    from orchestrator.experiments.services import run_transition
    from orchestrator.experiments.tokens import new_salt

    assert run_transition(run=run, to=Run.State.SUBMITTED, attempt=1, token_salt=new_salt(), backend="slurm")
    # its submit task died before the POST; the claim is stale (e.g. two syncs repair it at once)
    old = timezone.now() - submit_stale_after("slurm") - timedelta(seconds=1)
    Run.objects.filter(pk=run.pk).update(submitted_at=old)
    results = at_once(lambda: run_submit(run_id=run.pk), lambda: run_submit(run_id=run.pk))
    assert not any(isinstance(r, Exception) for r in results), results
    run.refresh_from_db()
    assert run.attempt == 1 and jobs_of(client, run) == [run.job_id]
