"""Start one node's training processes with torchrun, the way a cluster job must:

    python -m trainer.launch --nproc-per-node G [--nnodes N --rendezvous slurm] -- run --config F --run-dir D

What plain torchrun gets wrong inside a job, and this launcher fixes:
- Signals. Slurm and the local supervisor signal the launcher (SIGUSR1 before a time limit or on
  preemption, SIGTERM, SIGINT for a person's cancel). torchrun's agent dies of SIGUSR1 and turns
  SIGTERM/SIGINT into killing its workers after a grace period; here every such signal is passed to
  the training processes, which agree on it, checkpoint together and exit (75 or 130).
- Exit code. torchrun exits 1 whenever a worker failed; here the workers' own code comes back
  (75 "requeue me" must reach the orchestrator as 75).
- Rendezvous. `standalone` for one node. `slurm`: one launcher per Slurm task (srun starts one per
  node), a static rendezvous on the allocation's first host (node rank = SLURM_PROCID), a port from the job id,
  and as many rendezvous members as the job has tasks.
Every value arrives as its own argument (the job script never builds shell text from them).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

FORWARDED = (signal.SIGUSR1, signal.SIGTERM, signal.SIGINT)
RDZV_PORT_BASE = 29500
# How the launchers of one run find each other: within one node, or across the nodes of a Slurm
# allocation (the dashboard's job specs name these).
ONE_NODE_RENDEZVOUS = "standalone"
ALLOCATION_RENDEZVOUS = "slurm"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trainer.launch", description=__doc__.splitlines()[0])
    p.add_argument("--nproc-per-node", type=int, required=True, help="training processes on this node")
    p.add_argument("--nnodes", type=int, default=1, help="nodes (Slurm: read from the job's task count)")
    p.add_argument("--rendezvous", choices=(ONE_NODE_RENDEZVOUS, ALLOCATION_RENDEZVOUS), default=ONE_NODE_RENDEZVOUS)
    p.add_argument("trainer_args", nargs=argparse.REMAINDER, help="after '--': the arguments of `python -m trainer`")
    return p


def children(pid: int) -> list[int]:
    """Direct children of `pid` (the training processes of this launcher's torchrun agent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def _forward(signum, _frame) -> None:
    for pid in children(os.getpid()):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def first_host(nodelist: str) -> str:
    """The first host of a Slurm node list ("gpu[03-05,07],cpu1" -> "gpu03")."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30, check=True
        )
        hosts = out.stdout.split()
        if hosts:
            return hosts[0]
    except (OSError, subprocess.SubprocessError):
        pass
    head = nodelist.split(",")[0]
    if "[" in head:
        prefix, rest = head.split("[", 1)
        head = prefix + rest.split(",")[0].split("-")[0].rstrip("]")
    return head


def slurm_rendezvous(env: dict[str, str]) -> list[str]:
    job_id = int(env["SLURM_JOB_ID"])
    tasks = int(env.get("SLURM_NTASKS") or env.get("SLURM_NNODES") or "1")
    host = first_host(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "localhost")
    port = RDZV_PORT_BASE + job_id % 20000  # jobs sharing a head node do not share a port
    # Static rendezvous: Slurm already fixed every task's place (SLURM_PROCID). The dynamic c10d
    # backend's agents keep polling the store for waiting nodes, and the one whose store host
    # (task 0) exited first failed with RendezvousConnectionError after training had finished.
    node_rank = int(env.get("SLURM_PROCID") or env.get("SLURM_NODEID") or "0")
    return [f"--nnodes={tasks}", f"--node-rank={node_rank}", f"--master-addr={host}", f"--master-port={port}"]


def torchrun_args(args: argparse.Namespace, env: dict[str, str]) -> list[str]:
    rest = list(args.trainer_args)
    if rest and rest[0] == "--":
        rest = rest[1:]
    if not rest:
        raise SystemExit("trainer.launch: give the trainer's arguments after '--'")
    if args.rendezvous == ALLOCATION_RENDEZVOUS:
        rdzv = slurm_rendezvous(env)
    else:
        if args.nnodes != 1:
            raise SystemExit("trainer.launch: a standalone rendezvous is one node; use --rendezvous slurm")
        rdzv = ["--standalone", "--nnodes=1"]
    return [*rdzv, f"--nproc-per-node={args.nproc_per_node}", "--max-restarts=0", "-m", "trainer", *rest]


def exit_code(failures: dict) -> int:
    """The workers' own exit code when they agree on one (75, 130...); else 1."""
    codes = {f.exitcode for f in failures.values()}
    positive = {c for c in codes if c > 0}
    return positive.pop() if len(positive) == 1 else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    # torchrun would otherwise kill its workers on SIGTERM/SIGINT (and die of SIGUSR1); the
    # workers handle all three themselves. torch >= 2.12 sets TORCHELASTIC_SIGNALS_TO_HANDLE from
    # its --signals-to-handle option (default SIGTERM,SIGINT,...), whose default is read from
    # PET_SIGNALS_TO_HANDLE; older versions read TORCHELASTIC_SIGNALS_TO_HANDLE itself.
    os.environ["PET_SIGNALS_TO_HANDLE"] = os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = "SIGHUP,SIGQUIT"
    for sig in FORWARDED:
        signal.signal(sig, _forward)
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(torchrun_args(args, dict(os.environ))))
    except ChildFailedError as exc:
        return exit_code(exc.failures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
