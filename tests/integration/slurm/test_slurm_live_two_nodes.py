"""Runs on two real Slurm nodes (the two-node test cluster, Slurm 22.05: each slurmd in its own
network namespace with its own hostname and address, scripts/slurm/two-node-cluster.sh).

A job on `nodes: 2` gets one task on each node; torchrun's static rendezvous meets on the first
node's address across the bridge, and the two ranks train together (gloo on CPU stands in for
NCCL on GPUs: this machine has none). Cancel and preemption are Slurm's own, delivered by each
node's slurmd; a node crash is a node going silent (link down) and losing every process."""

from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pytest_django.live_server_helper import LiveServer

from orchestrator.cluster.backends import BackendError
from orchestrator.cluster.backends.base import JobSpec, JobState
from orchestrator.cluster.models import ClusterProfile, Job
from orchestrator.cluster.services import run_submit, sync_active_runs
from orchestrator.cluster.slurm.jobscript import SlurmProfile
from orchestrator.experiments.models import Run
from orchestrator.experiments.services import experiment_create
from orchestrator.metrics.chunks import live_rows
from tests.integration.slurm.conftest import PYTHON, REPO
from tests.integration.slurm.livehelpers import TINY, terminal, wait_status, wait_until
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.slurm
UPDATE_KEY = "actor/pg_loss"

# Each task notes its start, and Slurm's SIGTERM when it comes, in a file named after its host. The
# host is read once, before the trap: Slurm signals every process of the step, and a `hostname`
# started inside the trap could be killed by a second SIGTERM, naming the file "sigterm-".
SIGNAL_PROBE = (
    'host=$(hostname); echo "$SLURM_PROCID" > "$OPL_RUN_DIR/started-$host"; '
    'trap \'echo "$SLURM_PROCID" > "$OPL_RUN_DIR/sigterm-$host"; exit 0\' TERM; '
    "sleep 300 & wait"
)


@pytest.fixture(autouse=True)
def _cancel_leftovers(two_node_cluster):
    yield
    two_node_cluster.cancel_leftovers()


CONNECT = """
import errno, socket, sys
s = socket.socket()
s.settimeout(5)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected")
except OSError as exc:
    print(errno.errorcode.get(exc.errno, exc))
"""


def connect_from(node: str, host: str, port: int) -> str:
    """Try a TCP connection from inside the node's network namespace; "connected" or the errno's name."""
    argv = ["nsenter", f"--net=/run/netns/{node}", sys.executable, "-c", CONNECT, host, str(port)]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout.strip()


def test_the_nodes_reach_each_other_and_the_controller_and_nothing_else(two_node_cluster):
    env = two_node_cluster.env
    subnet = ipaddress.ip_network(f"{env['SLURM_HOST_ADDR']}/24", strict=False)
    for node in two_node_cluster.nodes:
        routes = subprocess.run(
            ["ip", "-n", node, "-4", "route", "show"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
        assert [r.split()[:3] for r in routes] == [[str(subnet), "dev", "eth0"]]  # no default route, nothing else
        # no route, so the kernel refuses before a packet is sent (TEST-NET-3 stands for the world)
        assert connect_from(node, "203.0.113.1", 9) == "ENETUNREACH"
    config = dict(
        line.split(" = ", 1)
        for line in two_node_cluster.command("scontrol", "show", "config").splitlines()
        if " = " in line
    )
    ports = {key.strip(): int(value) for key, value in config.items() if key.strip() in ("SlurmctldPort", "SlurmdPort")}
    assert connect_from("opl2n-2", env["SLURM_HOST_ADDR"], ports["SlurmctldPort"]) == "connected"
    assert connect_from("opl2n-2", two_node_cluster.node_addr("opl2n-1"), ports["SlurmdPort"]) == "connected"


def probe_spec(cluster, run_id: int) -> JobSpec:
    return JobSpec(
        run_id=run_id,
        attempt=1,
        run_dir=cluster.run_dir(run_id),
        argv=["/bin/bash", "-c", SIGNAL_PROBE],
        nodes=2,
        mem_gb=0.25,
    )


def files_by_host(run_dir: Path, prefix: str) -> dict[str, str]:
    return {p.name[len(prefix) :]: p.read_text().strip() for p in run_dir.glob(f"{prefix}*")}


def start_probe(cluster, backend) -> tuple[str, JobSpec]:
    spec = probe_spec(cluster, cluster.new_run_id())
    job = backend.submit(spec)
    wait_until(lambda: len(files_by_host(spec.run_dir, "started-")) == 2, timeout=60, what="a task on each node")
    # one task per node, each under its node's hostname: task 0 on the first node
    assert files_by_host(spec.run_dir, "started-") == {"opl2n-1": "0", "opl2n-2": "1"}
    assert backend.statuses([job])[job].nodes == "opl2n-[1-2]"
    return job, spec


def test_cancel_reaches_the_tasks_on_both_nodes(two_node_cluster):
    backend = two_node_cluster.backend()
    job, spec = start_probe(two_node_cluster, backend)
    backend.cancel(job)
    final = wait_status(backend, job, terminal, timeout=60)
    assert final.state is JobState.CANCELLED
    assert files_by_host(spec.run_dir, "sigterm-") == {"opl2n-1": "0", "opl2n-2": "1"}


def test_preemption_reaches_the_tasks_on_both_nodes(two_node_cluster):
    """A job of the higher-priority partition needs every CPU of both nodes: Slurm preempts the
    running job (PreemptMode=CANCEL), SIGTERM on each node, and the job ends PREEMPTED, which the
    orchestrator counts as the cluster's fault (a run would be requeued)."""
    env = two_node_cluster.env
    backend = two_node_cluster.backend()
    job, spec = start_probe(two_node_cluster, backend)
    urgent = two_node_cluster.backend(SlurmProfile(partition=env["SLURM_PREEMPT_PARTITION"]))
    urgent_id = two_node_cluster.new_run_id()
    urgent_job = urgent.submit(
        JobSpec(
            run_id=urgent_id,
            attempt=1,
            run_dir=two_node_cluster.run_dir(urgent_id),
            argv=["/bin/true"],
            nodes=2,
            cpus=int(env["SLURM_NODE_CPUS"]),
            mem_gb=0.25,
        )
    )
    final = wait_status(backend, job, terminal, timeout=60)
    assert (final.state, final.native_state) == (JobState.INFRA_FAILED, "PREEMPTED"), final
    assert files_by_host(spec.run_dir, "sigterm-") == {"opl2n-1": "0", "opl2n-2": "1"}
    assert wait_status(urgent, urgent_job, terminal, timeout=60).state is JobState.SUCCEEDED


# ---------------------------------------------------------------- a run through the orchestrator


@pytest.fixture
def bridge_live_server(two_node_cluster, settings):
    """The dashboard where the jobs can reach it: on the host's bridge address (127.0.0.1 inside
    a node's namespace is the node's own loopback)."""
    host = two_node_cluster.env["SLURM_HOST_ADDR"]
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, host]
    server = LiveServer(f"{host}:0")
    yield server
    server.stop()


@pytest.fixture
def two_node_settings(settings, two_node_cluster, bridge_live_server):
    env = two_node_cluster.env
    settings.CLUSTER_BACKEND = "slurm"
    settings.SLURM_REST_URL = env["SLURM_REST_URL"]
    settings.SLURM_REST_USER = env["SLURM_REST_USER"]
    settings.SLURM_JWT = ""
    settings.SLURM_JWT_KEY_FILE = env["SLURM_JWT_KEY_FILE"]
    settings.SLURM_RUN_DIR_MODE = "1777"
    settings.RUNS_DIR = two_node_cluster.run_root / f"django-{os.getpid()}-{time.time_ns() % 10**9}"
    settings.TRAINER_PYTHON = PYTHON
    settings.PUBLIC_URL = bridge_live_server.url
    settings.RUNS_DIR.mkdir(parents=True)
    os.chmod(settings.RUNS_DIR, 0o1777)
    ClusterProfile.objects.create(
        name="test",
        is_default=True,
        partition=env["SLURM_PARTITION"],
        setup_lines=f"export PYTHONPATH={REPO}\nexport HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1",
    )
    return settings


def two_node_run(owner, steps: int) -> Run:
    config = {
        **TINY,
        "rollout": {**TINY["rollout"], "prompts_per_step": 8},  # whole groups for each rank
        "train": {"steps": steps, "seed": 1, "device": "cpu", "torch_threads": 1},
        "checkpoint": {"every": 2, "keep": 2, "format": "sharded"},  # each node's rank writes its shards
        "resources": {"nodes": 2},
    }
    return experiment_create(owner=owner, name=f"two-nodes-{time.time_ns()}", config=config).runs.get()


def drive(run: Run, until, timeout: float) -> Run:
    """What Celery beat does: dispatch the queued run, sync the active one, until `until(run)`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if until(run):
            return run
        if run.state == Run.State.QUEUED:
            try:
                run_submit(run_id=run.pk)
            except BackendError:
                pass  # the task would retry
        sync_active_runs()
        time.sleep(0.4)
    run.refresh_from_db()
    raise AssertionError(f"run {run.pk} stuck in {run.state}: {run.state_reason}\n{log_tails(run)}")


def log_tails(run: Run, chars: int = 2500) -> str:
    """The end of each of the run's job logs: what a stuck attempt was doing."""
    logs = sorted(Path(run.run_dir).glob("logs/*")) if run.run_dir else []
    return "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}" for log in logs if log.is_file())


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode(errors="replace").split("=", 1) for item in raw.split(b"\0") if b"=" in item)


def training_ranks(cluster, run: Run, attempt: int | None = None) -> dict[str, list[tuple[int, dict[str, str]]]]:
    """node -> the run's training processes (torchrun's workers) running there, with their env."""
    found = {}
    for node in cluster.nodes:
        found[node] = []
        for pid in cluster.pids_on(node):
            try:
                env = environ(pid)
            except OSError:
                continue
            if (
                env.get("OPL_RUN_ID") == str(run.pk)
                and "LOCAL_RANK" in env
                and (attempt is None or env.get("OPL_ATTEMPT") == str(attempt))
            ):
                found[node].append((pid, env))
    return found


def tcp_peers(pid: int) -> set[tuple[str, str]]:
    """(local, remote) addresses of the process's own established IPv4 TCP connections (its
    sockets, found by inode in its namespace's table: not slurmstepd's, not srun's)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])

    def addr(hex_addr_port: str) -> str:
        return str(ipaddress.IPv4Address(socket.ntohl(int(hex_addr_port.split(":")[0], 16))))

    peers = set()
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED, and this process's
            peers.add((addr(fields[1]), addr(fields[2])))
    return peers


def hostname_of(pid: int) -> str:
    return subprocess.run(
        ["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True, text=True, check=True, timeout=10
    ).stdout.strip()


def assert_spans_both_nodes(cluster, run: Run) -> None:
    ranks = training_ranks(cluster, run)
    assert {node: [env["RANK"] for _, env in procs] for node, procs in ranks.items()} == {
        "opl2n-1": ["0"],
        "opl2n-2": ["1"],
    }
    ((pid0, env0),) = ranks["opl2n-1"]
    ((pid1, env1),) = ranks["opl2n-2"]
    assert (hostname_of(pid0), hostname_of(pid1)) == ("opl2n-1", "opl2n-2")
    assert env0["WORLD_SIZE"] == env1["WORLD_SIZE"] == "2"
    # the rendezvous is the first node's, and rank 1 talks to it over the bridge (not 127.0.0.1)
    assert env1["MASTER_ADDR"] == "opl2n-1"
    assert (cluster.node_addr("opl2n-2"), cluster.node_addr("opl2n-1")) in tcp_peers(pid1)


def slurm_job_records(cluster, state: str) -> str:
    """Slurm's own record of the jobs that ended in `state` (jobcomp/filetxt: one line per end,
    a requeue included)."""
    lines = Path(cluster.env["SLURM_JOBCOMP_LOG"]).read_text().splitlines()
    return "\n".join(line for line in lines if f" JobState={state} " in line)


def resumed_updates(log: str) -> list[int]:
    """The update each rank's trainer resumed at, one per rank, in log order."""
    return [int(part.split(";")[0]) for part in log.split("resumed at update ")[1:]]


def checkpoint_holds_every_rank(path: Path, world: int) -> bool:
    """Every rank wrote its part of the checkpoint. The one place that knows the layout: the sharded
    (DCP) one, dcp/.metadata plus one shard file per rank (DCP names rank r's `__<r>_0.distcp`), and
    one stale-queue file per rank; no rank-0 weights.pt."""
    shards = {p.name for p in (path / ckpt.SHARDED_DIR).glob("*.distcp")}
    queues = {p.name for p in path.glob("queue-rank*.pt")}
    return (
        (path / ckpt.SHARDED_DIR / ".metadata").is_file()
        and shards == {f"__{r}_0.distcp" for r in range(world)}
        and queues == {f"queue-rank{r}.pt" for r in range(world)}
        and not (path / ckpt.WEIGHTS).exists()
    )


@pytest.mark.django_db(transaction=True)
def test_two_node_run_survives_a_node_crash_and_resumes_on_both_nodes(two_node_settings, two_node_cluster, alice):
    """The run's job spans both nodes and trains on one rank each; node 2 then crashes (its link
    goes silent, its slurmd and job steps die). Slurm sets the node DOWN and fails the job
    (NODE_FAIL), the orchestrator requeues the run, node 2 comes back, and attempt 2 resumes from
    the checkpoint on both nodes and finishes: one metric line, every update once."""
    steps = 12  # long enough that attempt 1 is still training when the node crashes, on a quiet machine too
    run = drive(two_node_run(alice, steps), lambda r: r.state == "running", timeout=90)
    run_dir = Path(run.run_dir)
    wait_until(
        lambda: len(live_rows(run.pk, UPDATE_KEY)) >= 2 and ckpt.latest_checkpoint(run_dir) is not None,
        timeout=120,
        what="a checkpoint and metrics from attempt 1",
    )
    assert_spans_both_nodes(two_node_cluster, run)

    two_node_cluster.crash_node("opl2n-2")
    try:
        run = drive(run, lambda r: r.attempt == 1 and r.state == "queued", timeout=90)
    finally:
        two_node_cluster.up()  # node 2 reboots
    assert "requeued as attempt 2 of 3" in run.state_reason
    first = Job.objects.get(run=run, attempt=1)
    assert "RESTARTED" in first.native_state  # 22.05 requeues by itself and never shows NODE_FAIL ...
    assert f"JobId={first.job_id} " in slurm_job_records(two_node_cluster, "NODE_FAIL")  # ... but records it

    run = drive(run, lambda r: r.is_terminal, timeout=180)
    assert (run.state, run.attempt) == ("succeeded", 2), run.state_reason
    assert Job.objects.get(run=run, attempt=2).nodes == "opl2n-[1-2]"
    out = (run_dir / "logs" / "attempt-2.out").read_text()
    resumed = resumed_updates(out)
    assert len(resumed) == 2 and resumed[0] == resumed[1] >= 2, out[-3000:]  # both ranks, the same checkpoint
    latest = ckpt.latest_checkpoint(run_dir)
    assert ckpt.checkpoint_step(latest) == 2 * steps and checkpoint_holds_every_rank(latest, world=2)
    # Slurm ended attempt 1's rank on the surviving node too (a rank left behind would hang in gloo)
    assert not any(training_ranks(two_node_cluster, run, attempt=1).values())
    steps_seen = [step for step, _, _ in live_rows(run.pk, UPDATE_KEY)]
    assert steps_seen == list(range(2, 2 * steps + 1, 2)), steps_seen  # one continuous history
