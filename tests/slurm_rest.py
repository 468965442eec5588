"""Whether a live Slurm test cluster's slurmrestd answers, and a bounded wait until it does.

The live Slurm tests check it before each test and the fault rows after they stop one, so a test
never starts against a slurmrestd that an earlier test left down: it waits, or fails naming the
cluster, instead of failing later with a refused connection that looks like its own bug."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.cluster.slurm.errors import SlurmError

REPO = Path(__file__).resolve().parents[1]
ENV_DIR = Path(os.environ.get("OPL_SLURM_ENV_DIR", "/run/opl-slurm"))
ANSWER_TIMEOUT_S = 60


class SlurmrestdDown(AssertionError):
    """A cluster's slurmrestd gave no answer within the bound."""


def read_env(path: Path) -> dict[str, str]:
    """A cluster's env file as cluster-up.sh writes it (KEY=value lines, values maybe quoted)."""
    env = {}
    for line in path.read_text().splitlines():
        if "=" in line:
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip().strip('"')
    return env


def slurmrestd_down_reason(env: dict[str, str]) -> str:
    """'' when the cluster's slurmrestd answers an authenticated request for its nodes, else why not."""
    try:
        with SlurmClient(
            env["SLURM_REST_URL"],
            SlurmCredentials(env["SLURM_REST_USER"], key_file=env["SLURM_JWT_KEY_FILE"]),
            connect_retries=0,
            timeout_s=5,
        ) as client:
            return "" if client.nodes() else "it lists no nodes"
    except (SlurmError, OSError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}"


def wait_for_slurmrestd(env: dict[str, str], cluster: str, timeout: float = ANSWER_TIMEOUT_S) -> None:
    """Return once the cluster's slurmrestd answers; raise SlurmrestdDown naming it after `timeout` s."""
    deadline = time.monotonic() + timeout
    while why := slurmrestd_down_reason(env):
        if time.monotonic() >= deadline:
            url = env.get("SLURM_REST_URL", "(no SLURM_REST_URL)")
            raise SlurmrestdDown(f"{cluster}: slurmrestd at {url} did not answer within {timeout:.0f} s ({why})")
        time.sleep(0.5)


def bring_up(role: str) -> None:
    """scripts/slurm/cluster-up.sh ROLE (root only): idempotent, it starts whichever of the
    cluster's daemons is not running and waits until slurmrestd answers."""
    subprocess.run(
        [str(REPO / "scripts/slurm/cluster-up.sh"), role], check=True, timeout=900, stdout=subprocess.DEVNULL
    )


def ensure_slurmrestd(env_file: Path, role: str, cluster: str, timeout: float = ANSWER_TIMEOUT_S) -> dict[str, str]:
    """The cluster's env once its slurmrestd answers. One that does not is brought back first where
    we are root: the env file outlives a slurmrestd that was stopped and not restarted, which is
    how a test met a refused connection after a healthy one. Raises SlurmrestdDown naming it."""
    env = read_env(env_file)
    if slurmrestd_down_reason(env) and os.geteuid() == 0:
        bring_up(role)
        env = read_env(env_file)
    wait_for_slurmrestd(env, cluster, timeout)
    return env
