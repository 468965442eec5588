"""MLflow as the baseline of benchmarks/metrics.py: its tracking server on the same PostgreSQL, driven
over its REST API with the same work as ours.

MLflow is not a dependency of the project: `benchmarks/metrics.py --mlflow` installs it with pip
into its own environment (VENV, once; never into the project's .venv or requirements), or uses
the executable OPL_BENCH_MLFLOW names. The other measures use it when it is there; without it (or
with --no-mlflow) the MLflow column says why it is empty.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

DB = "opl_bench_mlflow"
VERSION = "3.17.2"
VENV = Path(os.environ.get("OPL_BENCH_MLFLOW_VENV", Path.home() / ".cache" / "opl-bench" / f"mlflow-{VERSION}"))


def executable() -> str | None:
    exe = os.environ.get("OPL_BENCH_MLFLOW") or (
        str(VENV / "bin" / "mlflow") if (VENV / "bin" / "mlflow").exists() else shutil.which("mlflow")
    )
    return exe if exe and Path(exe).exists() else None


def ensure_installed() -> str:
    """The mlflow executable, installing MLflow (and its PostgreSQL driver) into VENV first if needed."""
    import sys

    if exe := executable():
        return exe
    print(f"installing mlflow=={VERSION} into {VENV} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
    subprocess.run(
        [str(VENV / "bin" / "pip"), "install", "--quiet", f"mlflow=={VERSION}", "psycopg2-binary==2.9.13"], check=True
    )
    return str(VENV / "bin" / "mlflow")


class MLflow:
    """A running `mlflow server` (2 workers, like our uvicorn) on database opl_bench_mlflow."""

    def __init__(self, exe: str, admin, port: int, workers: int = 2):
        import httpx

        admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        admin(f"CREATE DATABASE {DB}")
        self.db_url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{DB}"
        self.base = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [
                exe,
                "server",
                "--backend-store-uri",
                self.db_url,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(workers),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/tmp",
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.proc.returncode}")
            time.sleep(1)
        else:
            raise RuntimeError("mlflow server did not start in 180 s")
        self.http = httpx.Client(base_url=self.base, timeout=120)
        self.experiment = self.post("experiments/create", {"name": "bench"})["experiment_id"]
        self.admin, self._runs = admin, 0

    def post(self, path: str, body: dict) -> dict:
        response = self.http.post(f"/api/2.0/mlflow/{path}", json=body)
        response.raise_for_status()
        return response.json()

    def new_run(self) -> str:
        self._runs += 1
        return self.post("runs/create", {"experiment_id": self.experiment, "run_name": f"r{self._runs}"})["run"][
            "info"
        ]["run_id"]

    @staticmethod
    def batch_body(run_id: str, rows: list[dict]) -> bytes:
        """A log-batch request of our wire points (MLflow takes at most 1,000 metrics a request)."""
        import json

        metrics = [
            {"key": p["key"], "value": p["value"], "timestamp": int(p["time"] * 1000), "step": p["step"]} for p in rows
        ]
        return json.dumps({"run_id": run_id, "metrics": metrics}).encode()

    def log_url(self) -> str:
        return f"{self.base}/api/2.0/mlflow/runs/log-batch"

    def load_points(self, run_id: str, key: str, steps, values) -> None:
        """Store a long series straight into MLflow's tables (as log-batch would, minus the time)."""
        import psycopg

        with psycopg.connect(f"postgres://postgres@127.0.0.1:5432/{DB}") as conn, conn.cursor() as cur:
            with cur.copy("COPY metrics (key, value, timestamp, run_uuid, step, is_nan) FROM STDIN") as copy:
                for step, value in zip(steps.tolist(), values.tolist(), strict=True):
                    copy.write_row((key, value, 1_700_000_000_000 + step, run_id, step, False))
            cur.execute(
                "INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) "
                "VALUES (%s, %s, %s, %s, false, %s) ON CONFLICT DO NOTHING",
                [key, float(values[-1]), 1_700_000_000_000 + int(steps[-1]), int(steps[-1]), run_id],
            )
            cur.execute("ANALYZE metrics")

    def read_back(self, run_id: str) -> dict[str, dict[int, float]]:
        """Every stored point of a run, {key: {step: value}}, read from MLflow's table."""
        import psycopg

        out: dict[str, dict[int, float]] = {}
        with psycopg.connect(f"postgres://postgres@127.0.0.1:5432/{DB}") as conn:
            for key, step, value in conn.execute("SELECT key, step, value FROM metrics WHERE run_uuid = %s", [run_id]):
                out.setdefault(key, {})[step] = value
        return out

    def chart(self, run_id: str, key: str, max_results: int) -> int:
        """MLflow's chart query: the UI's sampled history (get-history-bulk-interval); points read."""
        response = self.http.get(
            "/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
            params={"run_ids": run_id, "metric_key": key, "max_results": max_results},
        )
        response.raise_for_status()
        return len(response.json().get("metrics", []))

    def full_history(self, run_id: str, key: str) -> int:
        """Every point of a key (get-history, paged): what a client reads to draw it itself."""
        n, token = 0, None
        while True:
            params = {
                "run_id": run_id,
                "metric_key": key,
                "max_results": 25_000,
                **({"page_token": token} if token else {}),
            }
            response = self.http.get("/api/2.0/mlflow/metrics/get-history", params=params)
            response.raise_for_status()
            body = response.json()
            n += len(body.get("metrics", []))
            token = body.get("next_page_token")
            if not token:
                return n

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.admin(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
