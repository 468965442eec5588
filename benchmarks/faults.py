"""Fault trials on the real components, with figures: one table of trials, failures, duplicate
jobs, stuck runs and metric points lost.

    .venv/bin/python benchmarks/faults.py [--rows submit-kill-local,...] [--trials 20]
                                          [--outage-s 60] [--dashboard-down-s 120] [--json FILE]

OPL_FAULTS_KEEP=1 keeps each row's stack folder (logs, database) and Slurm run folders, and says where.

Each row runs in a child process (`--child ROW`) against a stack of its own (tests/faults/stack.py):
uvicorn, a Celery worker (prefork) and beat, a redis-server of its own, the embedded SQLite file
(or a throwaway PostgreSQL for the postgres row), real trainers on the local backend, or the live
Slurm 22.05 test cluster (scripts/slurm/cluster-up.sh) for the slurm rows. Nothing shared on
127.0.0.1:5432/6379 is restarted. `pytest -m faults` runs the same rows with fewer trials and
shorter outages (tests/faults/test_fault_rows.py).

Rows:
  submit-kill-local, submit-kill-slurm  the worker's pool process SIGKILLed at a random point of
        submit_run (uniform delay after enqueue); the sync repairs. Duplicates: more than one job
        started for a run; stuck: a run that never gets a job and a final state.
  restd-outage      a slurmrestd of our own (same slurmctld) stopped for --outage-s while runs
        are queued and running; every run must be submitted, synced and end succeeded, with
        one job each. (The dispatcher enqueues a queued run again every few seconds while its
        submit task waits to retry, so after the outage several submits of one run run at once.)
  trainer-kill      the trainer SIGKILLed mid-run: the run fails with a reason; a retry resumes
        from the last checkpoint and succeeds.
  worker-restart    the local backend's worker and beat SIGKILLed while jobs run, started again
        after a pause: the jobs keep running and are finalised.
  dashboard-down    uvicorn SIGKILLed for --dashboard-down-s during training: every point of the
        trainer's spool (metrics.jsonl) is in the database afterwards, checked point by point.
  redis-restart     the stack's redis-server restarted during training: the live SSE stream
        delivers again, the run ends, 0 points lost.
  postgres-restart  a throwaway PostgreSQL restarted during ingestion: ingestion resumes, 0 lost.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faults.stack import EmbeddedStack, free_port, wait_answers, wait_until  # noqa: E402
from tests.slurm_rest import wait_for_slurmrestd  # noqa: E402

ROWS = [
    "submit-kill-local",
    "trainer-kill",
    "worker-restart",
    "dashboard-down",
    "redis-restart",
    "postgres-restart",
    "submit-kill-slurm",
    "restd-outage",
]
SLURM_ENV = Path(os.environ.get("OPL_SLURM_ENV_DIR", "/run/opl-slurm")) / "host.env"
SLURM_SHARED = Path(os.environ.get("OPL_SLURM_SHARED_DIR", "/var/lib/opl-test"))

TINY = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic"},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 8},
    "algorithm": {"objective": "m2po", "updates_per_step": 1},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 4, "seed": 1, "torch_threads": 1},
    "eval": {"every": 0},
    "checkpoint": {"every": 2, "keep": 1},
}


def config(steps: int, ckpt_every: int = 0) -> dict:
    cfg = json.loads(json.dumps(TINY))
    cfg["train"]["steps"] = steps
    cfg["checkpoint"]["every"] = ckpt_every or max(2, steps // 4)
    return cfg


# ================================================================== child side (Django loaded)


def setup_django(stack: EmbeddedStack) -> None:
    os.environ.pop("DATABASE_URL", None)
    os.environ.update(stack.env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
    import django

    django.setup()


def owner():
    from django.contrib.auth.models import User

    return User.objects.get(username="demo")


def new_run(name: str, cfg: dict, *, paused: bool = False):
    from orchestrator.experiments.models import Experiment
    from orchestrator.experiments.services import experiment_create

    experiment = experiment_create(owner=owner(), name=name, config=cfg)
    if paused:
        Experiment.objects.filter(pk=experiment.pk).update(state=Experiment.State.PAUSED)
    return experiment.runs.get()


def fresh(run):
    from django.db import close_old_connections, connection
    from django.db.utils import InterfaceError, OperationalError

    for _ in range(30):
        try:
            run.refresh_from_db()
            return run
        except (OperationalError, InterfaceError):  # the database restarted under us
            connection.close()
            close_old_connections()
            time.sleep(1)
    raise RuntimeError("database unreachable")


def wait_run(run, states, timeout: float, what: str = ""):
    wait_until(lambda: fresh(run).state in states, timeout, what or f"run {run.pk} to reach {states}", every=0.5)
    return run


def job_info(stack: EmbeddedStack, run) -> dict:
    path = Path(stack.env["OPL_VAR_DIR"]) / "local-jobs" / f"opl-{run.pk}-a{run.attempt}" / "job.json"
    return json.loads(path.read_text())


def spool_points(run) -> dict[tuple[str, int], float]:
    """What the trainer recorded (its durable spool): {(key, step): value} of the latest attempt."""
    points = {}
    for line in (Path(run.run_dir) / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        points[(rec["key"], int(rec["step"]))] = rec["value"]
    return points


def stored_points(run) -> dict[tuple[str, int], float | None]:
    from orchestrator.metrics.chunks import live_points

    out = {}
    for (_, key), pts in live_points([run.pk]).items():
        for step, value, _special in pts.rows():
            out[(key, int(step))] = value
    return out


def points_lost(run) -> tuple[int, int]:
    """(spool points missing from the database or stored with another value, spool points)."""
    spool, stored = spool_points(run), stored_points(run)
    lost = 0
    for pair, value in spool.items():
        have = stored.get(pair, "missing")
        if have == "missing":
            lost += 1
        elif isinstance(value, float) and isinstance(have, float):
            lost += not (
                value == have or (math.isnan(value) and math.isnan(have)) or math.isclose(value, have, rel_tol=1e-6)
            )
    return lost, len(spool)


def wait_caught_up(run, timeout: float) -> None:
    """Until the database holds every point the trainer's spool holds (the backfill is done)."""
    wait_until(lambda: fresh(run) and points_lost(run)[0] == 0, timeout, f"run {run.pk}'s points to be stored", every=1)


def stop_run(run) -> None:
    from orchestrator.cluster.services import run_cancel
    from orchestrator.experiments.services import run_request_cancel

    run = fresh(run)
    if run_request_cancel(run=run) and run.is_active:
        run_cancel(run_id=run.pk)


def result(
    row: str,
    trials: int,
    failures: int,
    *,
    duplicates: int = 0,
    stuck: int = 0,
    lost: int | None = None,
    points: int | None = None,
    detail: str = "",
) -> dict:
    return {
        "row": row,
        "trials": trials,
        "failures": failures,
        "duplicates": duplicates,
        "stuck": stuck,
        "points_lost": lost,
        "points": points,
        "detail": detail,
    }


# ------------------------------------------------------------------ rows


def row_submit_kill(stack: EmbeddedStack, backend: str, trials: int) -> dict:
    from orchestrator.cluster.tasks import submit_run
    from orchestrator.experiments.models import Experiment

    runs, landed = [], {}
    # Time two submits without a kill: the kills then land uniformly from just before the run is
    # claimed to just after its job id is recorded, the window where a crash can do harm.
    claims, dones = [], []
    for i in range(2):
        wait_until(lambda: len(stack.pool_children()) == 1, 60, "the worker's pool process")
        run = new_run(f"warmup-{i}", config(200), paused=True)
        t0 = time.monotonic()
        submit_run.delay(run.pk)
        wait_until(lambda run=run: fresh(run).state != "queued", 60, "the claim", every=0.005)
        claims.append(time.monotonic() - t0)
        wait_until(lambda run=run: fresh(run).job_id, 60, "the job id", every=0.005)
        dones.append(time.monotonic() - t0)
        runs.append(run)
    claim, done = min(claims), min(dones)  # min: the first submit also imports modules
    killed: set[int] = set()

    def live_child() -> int | None:
        for pid in stack.pool_children():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):  # gone between the listing and the read
                continue
            if pid not in killed and state != "Z":
                return pid
        return None

    for i in range(trials):
        child = wait_until(live_child, 60, "a new pool process of the worker")
        run = new_run(f"kill-{i}", config(200), paused=True)
        time.sleep(0.3)
        submit_run.delay(run.pk)
        if i % 2:  # at a random point between the claim and the job id being recorded
            wait_until(lambda run=run: fresh(run).state != "queued", 30, "the claim", every=0.002)
            time.sleep(random.uniform(0, done - claim))
        else:  # at a random point from the enqueue on
            time.sleep(random.uniform(0, 1.5 * done))
        os.kill(child, signal.SIGKILL)
        killed.add(child)
        fresh(run)
        where = (
            "before claim" if run.state == "queued" else ("claimed, no job id" if not run.job_id else "job recorded")
        )
        landed[where] = landed.get(where, 0) + 1
        Experiment.objects.filter(pk=run.experiment_id).update(state=Experiment.State.ACTIVE)  # beat may dispatch it
        runs.append(run)
    stuck = 0
    for run in runs:
        try:
            wait_until(
                lambda run=run: fresh(run).job_id and run.state != "submitted", 120, f"run {run.pk} to get its job"
            )
        except AssertionError:
            pass
        stop_run(run)
    for run in runs:
        try:
            wait_run(run, {"cancelled", "succeeded", "failed"}, 120)
        except AssertionError:
            stuck += 1
    duplicates = count_duplicates(stack, backend, runs)
    stack.wait_worker()  # the killed pool process is replaced before the row returns
    wait_answers("a pool process of the stack's Celery worker", stack.pool_children, 60)
    detail = f"submit takes {done * 1000:.0f} ms (claim at {claim * 1000:.0f}); kills landed: " + ", ".join(
        f"{k} {v}" for k, v in sorted(landed.items())
    )
    return result(
        f"submit-kill-{backend}", trials, stuck + duplicates, duplicates=duplicates, stuck=stuck, detail=detail
    )


def count_duplicates(stack: EmbeddedStack, backend: str, runs) -> int:
    """Jobs beyond one per run: extra attempts, or (local) a second supervisor start."""
    dup = 0
    if backend == "local":
        jobs = Path(stack.env["OPL_VAR_DIR"]) / "local-jobs"
        for run in runs:
            dirs = list(jobs.glob(f"opl-{run.pk}-a*"))
            starts = sum(
                (d / "supervisor.log").read_text().count("started job pid")
                for d in dirs
                if (d / "supervisor.log").exists()
            )
            dup += max(0, starts - 1)
        return dup
    from orchestrator.cluster.backends.slurm import client_from_settings

    names = [job.name for job in client_from_settings().jobs()]
    for run in runs:
        dup += max(0, sum(n.startswith(f"opl-{run.pk}-a") for n in names) - 1)
    return dup


def row_trainer_kill(stack: EmbeddedStack) -> dict:
    from orchestrator.experiments.services import run_retry

    run = new_run("trainer-kill", config(60, ckpt_every=10))
    wait_until(lambda: fresh(run).state == "running" and run.step >= 25, 180, "the run to pass step 25")
    os.kill(job_info(stack, run)["child_pid"], signal.SIGKILL)
    wait_run(run, {"failed"}, 60)
    failures, notes = 0, []
    if "killed by signal 9" not in run.state_reason:
        failures += 1
        notes.append(f"reason {run.state_reason!r}")
    assert run_retry(run=run)
    wait_run(run, {"succeeded", "failed", "lost", "cancelled"}, 240)
    log = (Path(run.run_dir) / "logs" / "attempt-2.out").read_text()
    resumed = [line for line in log.splitlines() if "resumed at update" in line]
    if run.state != "succeeded" or not resumed:
        failures += 1
    notes.append(resumed[0].split("] ")[-1].split(";")[0] if resumed else "no resume line")
    lost, points = points_lost(run)
    return result(
        "trainer-kill",
        1,
        failures + (lost > 0),
        stuck=int(run.state != "succeeded"),
        lost=lost,
        points=points,
        detail=f"failed: {run.events.filter(to_state='failed').values_list('detail', flat=True).first()}; "
        f"attempt 2 {', '.join(notes)}",
    )


def row_worker_restart(stack: EmbeddedStack, pause_s: float) -> dict:
    runs = [new_run(f"restart-{i}", config(200)) for i in range(2)]
    for run in runs:
        wait_until(lambda run=run: fresh(run).state == "running" and run.step >= 3, 180, "both runs training")
    killed_at = time.time()
    stack.stop("beat", signal.SIGKILL)
    stack.stop("worker", signal.SIGKILL)
    time.sleep(pause_s)
    alive = sum(kept_running(stack, run, killed_at) for run in runs)
    stack.start_worker()
    stack.start_beat()
    stack.wait_worker()
    wait_answers("the stack's Celery beat", stack.beat_started, 60)
    stuck = 0
    for run in runs:
        try:
            wait_run(run, {"succeeded", "failed", "cancelled", "lost"}, 300)
        except AssertionError:
            stuck += 1
    ok = sum(fresh(run).state == "succeeded" for run in runs)
    lost = sum(points_lost(run)[0] for run in runs)
    points = sum(points_lost(run)[1] for run in runs)
    return result(
        "worker-restart",
        len(runs),
        len(runs) - ok + (alive < len(runs)),
        stuck=stuck,
        lost=lost,
        points=points,
        detail=f"worker and beat down {pause_s:.0f} s; {alive}/{len(runs)} trainers kept running; "
        f"{ok} finalised succeeded",
    )


def kept_running(stack: EmbeddedStack, run, since: float) -> bool:
    """The trainer outlived the worker: still running, or ended well after `since`."""
    info = job_info(stack, run)
    if Path(f"/proc/{info['child_pid']}").exists():
        return True
    ended = Path(stack.env["OPL_VAR_DIR"]) / "local-jobs" / f"opl-{run.pk}-a{run.attempt}" / "exit.json"
    record = json.loads(ended.read_text()) if ended.exists() else {}
    return record.get("exit_code") == 0 and record.get("ended_at", 0) > since


def row_dashboard_down(stack: EmbeddedStack, down_s: float) -> dict:
    run = new_run("dashboard-down", config(100000, ckpt_every=1000))
    wait_until(lambda: fresh(run).state == "running" and run.step >= 5, 180, "the run to train")
    stack.stop("web", signal.SIGKILL)
    down_at_step = run.step
    time.sleep(down_s)
    trained = len({step for _, step in spool_points(run)})
    stack.start_web()
    wait_caught_up(run, 90)  # the trainer backs off at most 30 s between tries
    stop_run(run)
    wait_run(run, {"cancelled", "failed", "succeeded"}, 120)
    lost, points = points_lost(run)
    return result(
        "dashboard-down",
        1,
        int(lost > 0 or run.state != "cancelled"),
        lost=lost,
        points=points,
        stuck=int(run.state not in ("cancelled",)),
        detail=f"down {down_s:.0f} s from step {down_at_step}; {trained} steps in the spool when it came back",
    )


class StreamReader(threading.Thread):
    """An EventSource: reads the run's SSE stream, reconnecting with Last-Event-ID."""

    def __init__(self, stack: EmbeddedStack, run_id: int):
        super().__init__(daemon=True)
        self.url = f"{stack.url}/api/v1/runs/{run_id}/metrics/stream"
        self.token = stack.token
        self.events: list[tuple[float, str]] = []
        self.last_id = ""
        self.stopped = False

    def run(self) -> None:
        while not self.stopped:
            headers = {"Authorization": f"Bearer {self.token}"}
            if self.last_id:
                headers["Last-Event-ID"] = self.last_id
            try:
                with urllib.request.urlopen(urllib.request.Request(self.url, headers=headers), timeout=30) as resp:
                    for raw in resp:
                        line = raw.decode().rstrip("\n")
                        if line.startswith("id:"):
                            self.last_id = line[3:].strip()
                            self.events.append((time.monotonic(), self.last_id))
                        if self.stopped:
                            return
            except OSError:
                time.sleep(1)


def row_redis_restart(stack: EmbeddedStack) -> dict:
    run = new_run("redis-restart", config(100000, ckpt_every=1000))
    wait_until(lambda: fresh(run).state == "running" and run.step >= 3, 180, "the run to train")
    reader = StreamReader(stack, run.pk)
    reader.start()
    wait_until(lambda: reader.events, 60, "the first live event")
    stack.stop("redis", signal.SIGKILL)
    time.sleep(3)
    stack.start_redis()
    back = time.monotonic()
    failures, notes = 0, []
    try:
        wait_until(lambda: any(t > back for t, _ in reader.events), 60, "live events after the restart")
        first = min(t for t, _ in reader.events if t > back) - back
        notes.append(f"stream resumed {first:.1f} s after Redis came back")
    except AssertionError:
        failures += 1
        notes.append("the stream did not resume")
    reader.stopped = True
    stop_run(run)
    try:
        wait_run(run, {"cancelled"}, 120)
    except AssertionError:
        pass
    wait_caught_up(run, 60)
    lost, points = points_lost(run)
    stuck = int(fresh(run).state != "cancelled")
    return result(
        "redis-restart",
        1,
        failures + stuck + (lost > 0),
        stuck=stuck,
        lost=lost,
        points=points,
        detail="; ".join(notes),
    )


def row_postgres_restart(stack: EmbeddedStack, pg: ThrowawayPostgres) -> dict:
    run = new_run("postgres-restart", config(100000, ckpt_every=1000))
    wait_until(lambda: fresh(run).state == "running" and run.step >= 5, 180, "the run to train")
    pg.stop()
    time.sleep(5)
    pg.start()
    wait_answers(f"the throwaway PostgreSQL on port {pg.port}", pg.answers, 60)
    back_step = fresh(run).step
    wait_until(lambda: fresh(run).step > back_step + 5, 120, "ingestion to resume")
    wait_caught_up(run, 90)
    stop_run(run)
    try:
        wait_run(run, {"cancelled"}, 120)
    except AssertionError:
        pass
    lost, points = points_lost(run)
    stuck = int(fresh(run).state != "cancelled")
    return result(
        "postgres-restart",
        1,
        stuck + (lost > 0),
        stuck=stuck,
        lost=lost,
        points=points,
        detail="PostgreSQL down 5 s during ingestion",
    )


def row_restd_outage(stack: EmbeddedStack, restd: OwnSlurmrestd, outage_s: float) -> dict:
    running = [new_run(f"outage-run-{i}", config(200)) for i in range(2)]
    for run in running:
        wait_until(
            lambda run=run: fresh(run).state not in ("queued", "submitted", "pending"), 180, "runs running on Slurm"
        )
        if run.state != "running":
            err = Path(run.run_dir) / "logs" / f"attempt-{run.attempt}.err"
            tail = err.read_text()[-800:] if err.exists() else "(no stderr)"
            raise AssertionError(f"run {run.pk} is {run.state} before the outage: {run.state_reason}: {tail}")
    restd.stop()
    queued = [new_run(f"outage-queued-{i}", config(10)) for i in range(2)]
    time.sleep(outage_s)
    restd.start()
    runs = running + queued
    stuck = 0
    for run in runs:
        try:
            wait_run(run, {"succeeded", "failed", "cancelled", "lost"}, 300)
        except AssertionError:
            stuck += 1
    ok = sum(fresh(run).state == "succeeded" for run in runs)
    dup = count_duplicates(stack, "slurm", runs)
    lost = sum(points_lost(run)[0] for run in runs)
    points = sum(points_lost(run)[1] for run in runs)
    return result(
        "restd-outage",
        len(runs),
        len(runs) - ok + dup,
        duplicates=dup,
        stuck=stuck,
        lost=lost,
        points=points,
        detail=f"slurmrestd down {outage_s:.0f} s with 2 runs running and 2 queued; {ok} succeeded"
        + "".join(f"; {line}" for line in what_went_wrong(runs)),
    )


def what_went_wrong(runs) -> list[str]:
    """A line for each run that did not succeed or got more than one Slurm job: its state and
    reason, attempt, its jobs (id, name, state) and the end of its stderr, so a failure in CI
    says what happened without the stack's folder (which is removed)."""
    from orchestrator.cluster.backends.slurm import client_from_settings

    jobs = client_from_settings().jobs()
    lines = []
    for run in runs:
        fresh(run)
        mine = [f"{j.job_id} {j.name} {j.state}" for j in jobs if j.name.startswith(f"opl-{run.pk}-a")]
        if run.state == "succeeded" and len(mine) <= 1:
            continue
        err = Path(run.run_dir or "/nonexistent") / "logs" / f"attempt-{run.attempt}.err"
        tail = " / ".join(err.read_text(errors="replace").strip().splitlines()[-3:]) if err.exists() else "no stderr"
        lines.append(
            f"run {run.pk} {run.state} ({run.state_reason!r}), attempt {run.attempt}, job {run.job_id}; "
            f"Slurm jobs: {', '.join(mine) or 'none'}; stderr: {tail[-400:]}"
        )
    return lines


# ------------------------------------------------------------------ external pieces of our own


class ThrowawayPostgres:
    """A PostgreSQL cluster of our own (initdb in a temp folder, its own port), never the shared one."""

    def __init__(self, root: Path):
        self.port = free_port()
        self.data = root / "pgdata"
        self.bin = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
        root.mkdir(parents=True, exist_ok=True)
        os.chmod(root.parent, 0o755)  # mkdtemp's 0700 would keep the postgres user out
        shutil.chown(root, "postgres")
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.start()
        self._as_postgres(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "opl_faults")

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/opl_faults"

    def _as_postgres(self, *argv: str) -> None:
        cmd = argv if os.geteuid() != 0 else ("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups", *argv)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/")
        if done.returncode:
            raise RuntimeError(f"{Path(argv[0]).name} failed: {done.stderr.strip()[-500:]}")

    def start(self) -> None:
        self._as_postgres(
            str(self.bin / "pg_ctl"),
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(self.data / "log"),
            "-o",
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1",
            "start",
        )

    def stop(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-m", "fast", "stop")

    def answers(self) -> bool:
        import psycopg

        with psycopg.connect(self.url, connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)

    def close(self) -> None:
        try:
            self.stop()
        except RuntimeError:
            pass


class OwnSlurmrestd:
    """A second slurmrestd in front of the test cluster's slurmctld, on a port of our own: we stop
    it for the outage without touching the one other tests use."""

    def __init__(self, env: dict[str, str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**env, "SLURM_REST_URL": self.url}
        self.proc: subprocess.Popen | None = None
        self.plugins = ""

    def start(self) -> None:
        # as cluster-up.sh does: started as root with -u/-g it drops privileges itself; the
        # slurmdbd plugins are fatal without slurmdbd, so only the others are loaded
        if not self.plugins:
            listed = subprocess.run(
                [
                    "setpriv",
                    "--reuid=slurmrestd",
                    "--regid=slurmrestd",
                    "--clear-groups",
                    "/usr/sbin/slurmrestd",
                    "-s",
                    "list",
                ],
                capture_output=True,
                text=True,
                cwd="/",
            )
            names = [line.split()[-1] for line in (listed.stdout + listed.stderr).splitlines() if "openapi/" in line]
            self.plugins = ",".join(n for n in names if not n.startswith(("openapi/dbv", "openapi/slurmdbd")))
        self.proc = subprocess.Popen(
            [
                "/usr/sbin/slurmrestd",
                "-a",
                "rest_auth/jwt",
                "-s",
                self.plugins,
                "-u",
                "slurmrestd",
                "-g",
                "slurmrestd",
                f"127.0.0.1:{self.port}",
            ],
            env={**os.environ, "SLURM_JWT": "daemon"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            cwd="/",
        )
        wait_for_slurmrestd(self.env, "the fault row's own slurmrestd", timeout=60)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def read_env(path: Path) -> dict[str, str]:
    return {
        k.strip(): v.strip().strip('"')
        for k, _, v in (line.partition("=") for line in path.read_text().splitlines())
        if _
    }


def slurm_env(root: Path, rest_url: str) -> dict[str, str]:
    env = read_env(SLURM_ENV)
    runs = SLURM_SHARED / f"faults-{os.getpid()}-{int(time.time())}"
    runs.mkdir(parents=True)
    os.chmod(runs, 0o1777)
    os.chmod(SLURM_SHARED, 0o1777) if SLURM_SHARED.stat().st_uid == os.geteuid() else None
    return {
        "CLUSTER_BACKEND": "slurm",
        "SLURM_REST_URL": rest_url,
        "SLURM_REST_USER": env["SLURM_REST_USER"],
        "SLURM_JWT_KEY_FILE": env["SLURM_JWT_KEY_FILE"],
        "SLURM_JWT": "",
        "SLURM_RUN_DIR_MODE": "1777",
        "OPL_RUNS_DIR": str(runs),
        "OPL_TRAINER_PYTHON": sys.executable,
    }


def slurm_profile() -> None:
    """The cluster profile an administrator would write for this node: the trainer's code and
    offline models (as the live Slurm tests do)."""
    from orchestrator.cluster.models import ClusterProfile

    ClusterProfile.objects.create(
        name="faults",
        is_default=True,
        partition=read_env(SLURM_ENV).get("SLURM_PARTITION", ""),
        setup_lines=f"export PYTHONPATH={REPO}\nexport HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1",
    )


def offset_run_ids(stack: EmbeddedStack) -> None:
    """Run ids unique across sessions: Slurm remembers finished job names (opl-<run>-a<n>)."""
    from django.db import connection

    start = int(time.time()) % 1_000_000 * 100
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("DELETE FROM sqlite_sequence WHERE name = 'experiments_run'")
            cur.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('experiments_run', %s)", [start])
        else:
            cur.execute("SELECT setval(pg_get_serial_sequence('experiments_run', 'id'), %s)", [start])


def child(row: str, args) -> dict:
    root = Path(tempfile.mkdtemp(prefix=f"opl-faults-{row}-"))
    # a short stale period for quick repairs of killed submits (on Slurm the product keeps it at
    # least as long as a submit call can take: services.submit_stale_after)
    extra = {"OPL_CANCEL_GRACE_SECONDS": "20", "OPL_SUBMIT_STALE_SECONDS": "4", "OPL_LOST_GRACE_SECONDS": "600"}
    pg = restd = None
    database_url = None
    concurrency = 2
    try:
        if row == "postgres-restart":
            pg = ThrowawayPostgres(root / "pg")
            database_url = pg.url
        if row in ("submit-kill-slurm", "restd-outage"):
            host = read_env(SLURM_ENV)
            restd = OwnSlurmrestd(host)
            restd.start()
            extra.update(slurm_env(root, restd.url if row == "restd-outage" else host["SLURM_REST_URL"]))
        if row.startswith("submit-kill"):
            extra["OPL_MAX_ACTIVE_RUNS"] = "1000"
            concurrency = 1
        stack = EmbeddedStack(
            root / "stack", redis_url=None, database_url=database_url, worker_concurrency=concurrency, extra_env=extra
        )
        stack.env.update(extra)  # OPL_MAX_ACTIVE_RUNS too, which the stack leaves to the default
        setup_django(stack)
        try:
            stack.start()
            if restd:
                offset_run_ids(stack)
                slurm_profile()
            if row == "submit-kill-local":
                return row_submit_kill(stack, "local", args.trials)
            if row == "submit-kill-slurm":
                return row_submit_kill(stack, "slurm", args.trials)
            if row == "trainer-kill":
                return row_trainer_kill(stack)
            if row == "worker-restart":
                return row_worker_restart(stack, args.pause_s)
            if row == "dashboard-down":
                return row_dashboard_down(stack, args.dashboard_down_s)
            if row == "redis-restart":
                return row_redis_restart(stack)
            if row == "postgres-restart":
                return row_postgres_restart(stack, pg)
            if row == "restd-outage":
                return row_restd_outage(stack, restd, args.outage_s)
            raise SystemExit(f"unknown row {row!r}; known: {', '.join(ROWS)}")
        finally:
            if restd and row.startswith("submit-kill") or row == "restd-outage":
                cancel_slurm_leftovers()
            stack.close()
    finally:
        if restd:
            restd.stop()
            # the row leaves the cluster as it found it: the slurmrestd the other tests use answers
            wait_for_slurmrestd(read_env(SLURM_ENV), "slurm-22.05 (the live tests' slurmrestd)")
        if pg:
            pg.close()
        if os.environ.get("OPL_FAULTS_KEEP"):  # for a post-mortem: the stack's logs, database and run folders
            print(f"kept {root} {extra.get('OPL_RUNS_DIR', '')}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
            if "OPL_RUNS_DIR" in extra:  # the Slurm rows' run folders on the shared filesystem
                shutil.rmtree(extra["OPL_RUNS_DIR"], ignore_errors=True)


def cancel_slurm_leftovers() -> None:
    from orchestrator.cluster.backends.slurm import client_from_settings
    from orchestrator.experiments.models import Run

    try:
        client = client_from_settings()
        ours = {f"opl-{pk}-a" for pk in Run.objects.values_list("pk", flat=True)}
        for job in client.jobs():
            if job.state in ("PENDING", "RUNNING") and any(job.name.startswith(p) for p in ours):
                client.cancel(job.job_id)
    except Exception as exc:
        print(f"could not cancel leftover Slurm jobs: {exc}", file=sys.stderr)


# ================================================================== parent side (the table)


def run_child(row: str, args) -> dict:
    argv = [
        sys.executable,
        __file__,
        "--child",
        row,
        "--trials",
        str(args.trials),
        "--outage-s",
        str(args.outage_s),
        "--dashboard-down-s",
        str(args.dashboard_down_s),
        "--pause-s",
        str(args.pause_s),
    ]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO)
    for line in done.stderr.splitlines():
        if line.startswith("kept "):  # OPL_FAULTS_KEEP: where the row's folders are
            print(line, file=sys.stderr)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout)[-1500:]
        return {
            **result(
                row, 0, 1, detail=f"row crashed: {tail.strip().splitlines()[-1] if tail.strip() else done.returncode}"
            ),
            "error": tail,
            "seconds": round(time.monotonic() - started),
        }
    return {**json.loads(lines[-1]), "seconds": round(time.monotonic() - started)}


def table(results: list[dict]) -> str:
    head = ["fault", "trials", "failures", "duplicate jobs", "stuck runs", "points lost", "time", "detail"]
    rows = [
        [
            r["row"],
            str(r["trials"]),
            str(r["failures"]),
            str(r["duplicates"]),
            str(r["stuck"]),
            "–" if r["points_lost"] is None else f"{r['points_lost']} of {r['points']}",
            f"{r.get('seconds', 0)} s",
            r["detail"],
        ]
        for r in results
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default=",".join(ROWS))
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--outage-s", type=float, default=60)
    p.add_argument("--dashboard-down-s", type=float, default=120)
    p.add_argument("--pause-s", type=float, default=20, help="how long the worker stays down (worker-restart)")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args)), flush=True)
        return 0
    results = []
    for row in args.rows.split(","):
        results.append(run_child(row, args))
        print(f"{row}: {results[-1]['failures']} failures ({results[-1]['seconds']} s)", file=sys.stderr, flush=True)
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return int(any(r["failures"] for r in results))


if __name__ == "__main__":
    sys.exit(main())
