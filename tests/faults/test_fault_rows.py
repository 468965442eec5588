"""The rows of benchmarks/faults.py, each against a stack of its own, with fewer trials and
shorter outages than the benchmark: a row fails on any duplicate job, stuck run or lost point."""

import json
import subprocess
import sys

import pytest

from tests.faults.stack import REPO
from tests.slurm_rest import ENV_DIR, ensure_slurmrestd

pytestmark = [pytest.mark.integration]
SLURM_ENV = ENV_DIR / "host.env"

ROWS = [
    pytest.param("submit-kill-local", id="submit-kill-local"),
    pytest.param("trainer-kill", id="trainer-kill"),
    pytest.param("worker-restart", id="worker-restart"),
    pytest.param("dashboard-down", id="dashboard-down"),
    pytest.param("redis-restart", id="redis-restart"),
    pytest.param("postgres-restart", id="postgres-restart"),
    pytest.param("submit-kill-slurm", id="submit-kill-slurm", marks=pytest.mark.slurm),
    pytest.param("restd-outage", id="restd-outage", marks=pytest.mark.slurm),
]


@pytest.mark.parametrize("row", ROWS)
def test_fault_row_loses_nothing(row, tmp_path):
    if "slurm" in row or row == "restd-outage":
        if not SLURM_ENV.exists():
            pytest.skip("the Slurm test cluster is not up (scripts/slurm/cluster-up.sh)")
        ensure_slurmrestd(SLURM_ENV, "host", "slurm-22.05")  # the row's stack submits through it
    out = tmp_path / "row.json"
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/faults.py",
            "--rows",
            row,
            "--trials",
            "3",
            "--outage-s",
            "10",
            "--dashboard-down-s",
            "8",
            "--pause-s",
            "5",
            "--json",
            str(out),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), done.stderr[-3000:]
    (result,) = json.loads(out.read_text())
    assert result.get("error") is None, result["error"]
    assert result["trials"] >= 1
    assert (result["failures"], result["duplicates"], result["stuck"]) == (0, 0, 0), result
    assert result["points_lost"] in (None, 0), result
    if row in ("dashboard-down", "redis-restart", "postgres-restart", "worker-restart"):
        assert result["points"] > 0, result  # the comparison really covered points
