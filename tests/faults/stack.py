"""The embedded stack as `make demo` runs it, for fault tests and benchmarks/faults.py: SQLite
file, uvicorn, a Celery worker (prefork, 2 processes) and beat as separate processes, the local
backend. Each piece can be stopped, killed and started again; logs stay in the stack's folder.

Redis is either the one in REDIS_URL (the test's own db number) or, with redis_url=None, a
redis-server of the stack's own on a free port, which fault trials may stop and restart. The
database is the stack's SQLite file unless database_url names another (a throwaway PostgreSQL).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
LOCKED = "database is locked"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceDown(AssertionError):
    """A service that a fault stopped gave no answer within its bound once it was started again."""


def wait_answers(service: str, probe, timeout: float = 60, every: float = 0.5) -> None:
    """Return once `probe()` is true (the service answers a real request), or raise ServiceDown
    naming the service and the probe's last error after `timeout` s. Every fault row ends with
    this for what it broke, so the next test never meets a service still coming back."""
    deadline = time.monotonic() + timeout
    why = "no answer"
    while True:
        try:
            if probe():
                return
        except Exception as exc:  # the probe's error is the reason it does not answer yet
            why = f"{type(exc).__name__}: {exc}"
        if time.monotonic() >= deadline:
            raise ServiceDown(f"{service} did not answer within {timeout:.0f} s ({why})")
        time.sleep(every)


def wait_until(predicate, timeout: float, what: str, every: float = 0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


class EmbeddedStack:
    def __init__(
        self,
        root: Path,
        *,
        redis_url: str | None,
        database_url: str | None = None,
        worker_concurrency: int = 2,
        extra_env: dict[str, str] | None = None,
    ):
        self.root = root
        self.var = root / "var"
        self.var.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.redis_port = None if redis_url else free_port()
        redis_url = redis_url or f"redis://127.0.0.1:{self.redis_port}/0"
        self.worker_concurrency = worker_concurrency
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "OPL_MAX_ACTIVE_RUNS")}
        env.update(
            {
                "OPL_VAR_DIR": str(self.var),
                "REDIS_URL": redis_url,
                "OPL_PUBLIC_URL": self.url,
                "CLUSTER_BACKEND": "local",
                "HF_HUB_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1",
                "SECRET_KEY": os.environ.get("SECRET_KEY", "test-secret-key-not-for-production"),
            }
        )
        if database_url:
            env["DATABASE_URL"] = database_url
        env.update(extra_env or {})
        self.env = env
        self.procs: dict[str, subprocess.Popen] = {}
        self.token = ""

    @property
    def db_path(self) -> Path:
        return self.var / "opl.sqlite3"

    # ------------------------------------------------------------------ processes
    def manage(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(
            argv, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def start_web(self) -> None:
        self._start(
            "web",
            [PYTHON, "-m", "uvicorn", "orchestrator.asgi:application", "--host", "127.0.0.1", "--port", str(self.port)],
        )
        wait_answers(f"the stack's web server at {self.url}", self._web_up, 60)

    def start_redis(self) -> None:
        if self.redis_port is None:
            return
        self._start(
            "redis",
            [
                "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(self.redis_port),
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.root),
            ],
        )
        wait_answers(f"the stack's redis-server on port {self.redis_port}", self.redis_answers, 30)

    def redis_answers(self) -> bool:
        import redis

        with redis.Redis.from_url(self.env["REDIS_URL"], socket_timeout=2, socket_connect_timeout=2) as r:
            return r.ping()

    def start_worker(self) -> None:
        self._start(
            "worker",
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "orchestrator",
                "worker",
                "--concurrency",
                str(self.worker_concurrency),
                "--loglevel",
                "INFO",
                "-n",
                self.worker_name,
            ],
        )

    @property
    def worker_name(self) -> str:
        return f"w{self.port}@{socket.gethostname()}"

    def worker_answers(self) -> bool:
        """The worker answers Celery's ping through the broker (so it consumes tasks again)."""
        from celery import Celery

        app = Celery(broker=self.env["REDIS_URL"])
        try:
            return bool(app.control.ping(destination=[self.worker_name], timeout=2))
        finally:
            app.close()

    def wait_worker(self, timeout: float = 90) -> None:
        wait_answers(f"the stack's Celery worker {self.worker_name}", self.worker_answers, timeout)

    def pool_children(self) -> list[int]:
        """Pids of the worker's pool processes (where tasks run)."""
        pid = self.procs["worker"].pid
        try:
            return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except FileNotFoundError:
            return []

    @staticmethod
    def _port_open(port: int) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def beat_started(self) -> bool:
        """Beat is running and has logged its start since start_beat() last launched it."""
        proc = self.procs.get("beat")
        return proc is not None and proc.poll() is None and self._beat_log_starts() > self._beat_starts_before

    def _beat_log_starts(self) -> int:
        log = self.root / "beat.log"
        return log.read_text(errors="replace").count("beat: Starting...") if log.exists() else 0

    def start_beat(self) -> None:
        self._beat_starts_before = self._beat_log_starts()
        self._start(
            "beat",
            [
                PYTHON,
                "-m",
                "celery",
                "-A",
                "orchestrator",
                "beat",
                "--loglevel",
                "INFO",
                "-s",
                str(self.root / "beat-schedule"),
            ],
        )

    def start(self) -> EmbeddedStack:
        self.start_redis()
        subprocess.run(
            [PYTHON, "-m", "celery", "-A", "orchestrator", "purge", "-f"],
            cwd=REPO,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.manage("migrate", "--noinput")
        self.start_web()
        self.start_worker()
        self.start_beat()
        self.token = (
            self.manage(
                "shell",
                "-c",
                (
                    "from django.contrib.auth.models import User\n"
                    "from orchestrator.accounts.services import api_token_create\n"
                    "u = User.objects.create_user('demo', password='demo-pass-123', is_staff=True)\n"
                    "print(api_token_create(user=u, name='faults'))"
                ),
            )
            .strip()
            .splitlines()[-1]
        )
        return self

    def stop(self, name: str, sig: int = signal.SIGTERM, wait: float = 30) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def close(self) -> None:
        for name in ("beat", "worker", "web", "redis"):
            self.stop(name)
        # jobs run in sessions of their own on purpose (they outlive workers): stop them like demo.sh
        for job in (self.var / "local-jobs").glob("*/job.json"):
            if not (job.parent / "exit.json").exists():
                try:
                    os.killpg(json.loads(job.read_text())["pgid"], signal.SIGKILL)
                except (ProcessLookupError, ValueError, KeyError, PermissionError):
                    pass

    def _web_up(self) -> bool:
        try:
            urllib.request.urlopen(f"{self.url}/login/", timeout=2)
            return True
        except OSError:
            return False

    # ------------------------------------------------------------------ API and database
    def api(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def query(self, sql: str, *params) -> list[tuple]:
        """Read the stack's SQLite file directly (read-only; WAL lets it run beside the writers)."""
        with sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True, timeout=30) as conn:
            return conn.execute(sql, params).fetchall()

    def runs(self, experiment_id: int) -> dict[int, dict]:
        cols = [
            "id",
            "state",
            "state_reason",
            "job_id",
            "exit_code",
            "cancel_requested",
            "attempt",
            "step",
            "finished_at",
        ]
        rows = self.query(
            f"SELECT {', '.join(cols)} FROM experiments_run WHERE experiment_id = ? ORDER BY id", experiment_id
        )
        return {row[0]: dict(zip(cols, row)) for row in rows}

    def logs(self) -> dict[str, str]:
        """Every log the stack and its jobs wrote: web, worker, beat, supervisors, trainers."""
        found = {p.name: p.read_text(errors="replace") for p in self.root.glob("*.log")}
        for p in list(self.var.glob("runs/*/logs/*")) + list(self.var.glob("local-jobs/*/supervisor.log")):
            found[str(p.relative_to(self.var))] = p.read_text(errors="replace")
        return found

    def count_in_logs(self, needle: str) -> dict[str, int]:
        return {name: text.count(needle) for name, text in self.logs().items() if needle in text}
