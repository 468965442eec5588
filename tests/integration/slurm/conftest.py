"""Live Slurm clusters for `pytest -m slurm`: brought up by scripts/slurm/cluster-up.sh
when not already up, and offered to tests as the `cluster` fixture, parametrized so each
test id names the Slurm version it ran against (slurm-22.05, slurm-24.11)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from itertools import count
from pathlib import Path

import pytest

from orchestrator.cluster.backends.slurm import SlurmBackend
from orchestrator.cluster.slurm.auth import SlurmCredentials
from orchestrator.cluster.slurm.client import SlurmClient
from orchestrator.cluster.slurm.jobscript import SlurmProfile
from tests.slurm_rest import ENV_DIR, read_env, slurmrestd_down_reason, wait_for_slurmrestd

REPO = Path(__file__).resolve().parents[3]
SHARED_DIR = Path(os.environ.get("OPL_SLURM_SHARED_DIR", "/var/lib/opl-test"))
# test id -> (which cluster-up.sh brings it up, env file, expected Slurm release prefix)
CLUSTERS = {
    "slurm-22.05": ("host", "host.env", "22.05"),
    "slurm-24.11": ("trixie", "trixie.env", "24.11"),
}
PYTHON = str(Path(sys.prefix) / "bin" / "python")  # the venv's python, as jobs must call it


def pytest_configure(config):
    # pytest.ini registers it too; this keeps `pytest tests/integration/slurm` working alone
    config.addinivalue_line("markers", "slurm: live tests against the real Slurm test clusters")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/integration/slurm" in str(item.fspath):
            item.add_marker(pytest.mark.slurm)


@dataclass
class Cluster:
    id: str
    role: str
    env: dict[str, str]
    run_root: Path
    _runs: count = field(default_factory=lambda: count(1))
    issued: set = field(default_factory=set)

    @property
    def version(self) -> str:
        return self.env["SLURM_VERSION"]

    @property
    def chroot(self) -> str:
        return self.env.get("SLURM_CHROOT", "")

    def client(self, **kw) -> SlurmClient:
        creds = SlurmCredentials(self.env["SLURM_REST_USER"], key_file=self.env["SLURM_JWT_KEY_FILE"])
        return SlurmClient(self.env["SLURM_REST_URL"], creds, **kw)

    def backend(self, profile: SlurmProfile | None = None, **client_kw) -> SlurmBackend:
        profile = profile or SlurmProfile(partition=self.env.get("SLURM_PARTITION", ""))
        return SlurmBackend(client=self.client(**client_kw), profiles=lambda _name: profile, run_dir_mode=0o1777)

    def new_run_id(self) -> int:
        """Unique across sessions too: Slurm remembers finished job names for MinJobAge."""
        run_id = int(time.time()) % 1_000_000 * 100 + next(self._runs)
        self.issued.add(run_id)
        return run_id

    def cancel_leftovers(self) -> None:
        """Cancel every still-active job of this session's runs (a failed test leaves some)."""
        names_prefixes = tuple(f"opl-{r}-a" for r in self.issued)
        backend = self.backend()
        for job in backend.client.jobs():
            if job.name.startswith(names_prefixes) and job.state in ("PENDING", "RUNNING", "SUSPENDED"):
                backend.cancel(job.job_id)

    def run_dir(self, run_id: int) -> Path:
        d = self.run_root / f"run-{run_id}"
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, 0o1777)
        return d

    def command(self, *argv: str) -> str:
        """Run a Slurm command (scontrol...) against this cluster, as root."""
        full = ["chroot", self.chroot, *argv] if self.chroot else list(argv)
        return subprocess.run(full, check=True, capture_output=True, text=True, timeout=60).stdout

    def rest_pid_file(self) -> Path:
        return Path(f"{self.chroot}/run/slurmrestd.pid" if self.chroot else "/run/slurmrestd.pid")

    def up(self) -> None:
        subprocess.run(
            [str(REPO / "scripts/slurm/cluster-up.sh"), self.role], check=True, timeout=900, stdout=subprocess.DEVNULL
        )
        self.env = read_env(ENV_DIR / CLUSTERS[self.id][1])


class TwoNodeCluster(Cluster):
    """The two-node cluster (scripts/slurm/two-node-cluster.sh): each node's slurmd in its own
    network namespace, named after the node, with its own hostname and address."""

    @property
    def nodes(self) -> list[str]:
        return self.env["SLURM_NODES"].split()

    def node_addr(self, node: str) -> str:
        return dict(zip(self.nodes, self.env["SLURM_NODE_ADDRS"].split()))[node]

    def command(self, *argv: str) -> str:
        """A Slurm command against this cluster (its own slurm.conf), as root."""
        env = {**os.environ, "SLURM_CONF": self.env["SLURM_CONF"]}
        return subprocess.run(list(argv), check=True, capture_output=True, text=True, timeout=60, env=env).stdout

    def up(self) -> None:
        """Idempotent; brings a crashed node back (its link up, its slurmd started)."""
        subprocess.run(
            [str(REPO / "scripts/slurm/cluster-up.sh"), "2node"], check=True, timeout=900, stdout=subprocess.DEVNULL
        )
        self.env = read_env(ENV_DIR / "2node.env")

    def crash_node(self, node: str) -> None:
        """The node dies at once: its link goes silent, then every process on it is killed."""
        subprocess.run(
            [self.env["SLURM_CLUSTER_SCRIPT"], "crash-node", node.rsplit("-", 1)[1]],
            check=True,
            timeout=60,
            stdout=subprocess.DEVNULL,
        )

    def pids_on(self, node: str) -> list[int]:
        """Processes running on the node: those in its network namespace."""
        netns = os.stat(f"/run/netns/{node}").st_ino
        pids = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.stat(entry / "ns" / "net").st_ino == netns:
                        pids.append(int(entry.name))
                except OSError:
                    pass
        return pids


@pytest.fixture(scope="session", params=["slurm-22.05-2node"])
def two_node_cluster(request, slurm_run_root) -> TwoNodeCluster:
    """Slurm 22.05 on two nodes, each a network namespace of this machine (the test id says so).
    Brought up (or repaired: a node a failed test left crashed) once per session."""
    env_file = ENV_DIR / "2node.env"
    if os.geteuid() == 0:
        subprocess.run(
            [str(REPO / "scripts/slurm/cluster-up.sh"), "2node"], check=True, timeout=900, stdout=subprocess.DEVNULL
        )
    elif not (env_file.exists() and not slurmrestd_down_reason(read_env(env_file))):
        pytest.skip(
            "the two-node Slurm cluster is not up and bringing it up needs root (scripts/slurm/cluster-up.sh 2node)"
        )
    env = read_env(env_file)
    assert env["SLURM_VERSION"].startswith("22.05"), f"the two-node cluster runs Slurm {env['SLURM_VERSION']}"
    root = slurm_run_root / request.param
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(slurm_run_root, 0o1777)
    os.chmod(root, 0o1777)
    return TwoNodeCluster(request.param, "2node", env, root)


@pytest.fixture(scope="session")
def slurm_run_root():
    root = SHARED_DIR / f"pytest-{uuid.uuid4().hex[:8]}"
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session", params=list(CLUSTERS))
def cluster(request, slurm_run_root) -> Cluster:
    cluster_id = request.param
    role, env_name, release = CLUSTERS[cluster_id]
    env_file = ENV_DIR / env_name
    if not (env_file.exists() and not slurmrestd_down_reason(read_env(env_file))):
        if os.geteuid() != 0:
            pytest.skip(f"{cluster_id} is not up and bringing it up needs root (scripts/slurm/cluster-up.sh)")
        subprocess.run([str(REPO / "scripts/slurm/cluster-up.sh"), role], check=True, timeout=900)
    env = read_env(env_file)
    assert env["SLURM_VERSION"].startswith(release), f"{cluster_id} runs Slurm {env['SLURM_VERSION']}"
    root = slurm_run_root / cluster_id
    root.mkdir(parents=True, exist_ok=True)
    os.chmod(slurm_run_root, 0o1777)
    os.chmod(root, 0o1777)
    return Cluster(cluster_id, role, env, root)


@pytest.fixture(autouse=True)
def _slurmrestd_answers(request):
    """Each live test starts against a slurmrestd that answers: an earlier test (an outage, a
    crashed node) may have stopped it, and a test must not fail for what the one before it did."""
    for name in ("cluster", "two_node_cluster"):
        if name in request.fixturenames:
            live = request.getfixturevalue(name)
            if slurmrestd_down_reason(live.env) and os.geteuid() == 0:
                live.up()  # idempotent: starts what is not running
            wait_for_slurmrestd(live.env, live.id)


@pytest.fixture(autouse=True)
def _cancel_leftover_jobs(request):
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").cancel_leftovers()
