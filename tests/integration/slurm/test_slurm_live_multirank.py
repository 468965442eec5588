"""A run on several Slurm tasks, against the live Slurm test clusters (24.11 and 22.05): the job script's srun
starts one `trainer.launch` per task, they meet in a torchrun c10d rendezvous read from the
allocation, train on 2 gloo ranks, and checkpoint collectively.

The test cluster has one node, so the job has 2 tasks on it where a real run has 1 task on each of
2 nodes; the job spec is the one build_job_spec makes for `resources: {nodes: 2}` except for that.
It runs on 24.11 only: on 22.05, test_slurm_live_two_nodes.py trains a `nodes: 2` run across two
real nodes (network namespaces), which covers this and more."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from orchestrator.cluster.backends.base import JobSpec, JobState
from orchestrator.cluster.jobspec import trainer_argv
from tests.conftest import TINY_CONFIG
from tests.integration.slurm.conftest import PYTHON, REPO
from tests.integration.slurm.livehelpers import metric_steps, terminal, wait_status
from trainer.ckpt import checkpoint as ckpt

pytestmark = pytest.mark.slurm


def two_task_spec(cluster, run_id: int) -> JobSpec:
    run_dir = cluster.run_dir(run_id)
    cfg = json.loads(json.dumps(TINY_CONFIG))
    cfg["train"].update(steps=3, device="cpu", torch_threads=1)
    cfg["rollout"]["prompts_per_step"] = 8
    cfg["resources"] = {"nodes": 2}
    path = run_dir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o666)
    argv = trainer_argv(PYTHON, ["run", "--config", str(path), "--run-dir", str(run_dir)], nodes=2, per_node=1)
    assert argv[2:9] == ["trainer.launch", "--nproc-per-node", "1", "--nnodes", "2", "--rendezvous", "slurm"]
    env = {
        "PYTHONPATH": str(REPO),
        "OPL_RUN_ID": str(run_id),
        "OPL_ATTEMPT": "1",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    spec = JobSpec(
        run_id=run_id, attempt=1, run_dir=run_dir, argv=argv, env=env, cpus=1, mem_gb=4.0, time_limit_min=15, nodes=2
    )
    return dataclasses.replace(spec, nodes=1, tasks_per_node=2)  # the one test node stands in for two


@pytest.mark.parametrize("cluster", ["slurm-24.11"], indirect=True)
def test_two_slurm_tasks_train_on_two_ranks_and_checkpoint_together(cluster):
    backend = cluster.backend()
    spec = two_task_spec(cluster, cluster.new_run_id())
    job = backend.submit(spec)
    final = wait_status(backend, job, terminal, timeout=400)
    logs = backend.log_tail(spec.run_dir, 1)
    assert (final.state, final.exit_code) == (JobState.SUCCEEDED, 0), logs["stdout"][-3000:] + logs["stderr"][-5000:]
    latest = ckpt.latest_checkpoint(spec.run_dir)
    assert latest.name == "step-00000006"
    assert {p.name for p in latest.glob("queue-rank*.pt")} == {"queue-rank0.pt", "queue-rank1.pt"}
    assert metric_steps(spec.run_dir, "actor/pg_loss") == [2, 4, 6]  # rank 0 alone writes, once per update
