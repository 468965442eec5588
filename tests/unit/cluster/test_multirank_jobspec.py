"""A run's `resources` become the job: torchrun on one node, srun + a c10d rendezvous across
nodes, GPUs per node in the request and in the queue's quotas, every value its own argument."""

from __future__ import annotations

import sys

import pytest

from orchestrator.cluster.backends.base import BackendError, JobSpec
from orchestrator.cluster.backends.local import LocalBackend
from orchestrator.cluster.jobspec import build_job_spec
from orchestrator.cluster.slurm.jobscript import SlurmProfile, build_request, render_script
from orchestrator.cluster.slurm.wire import wire_for
from orchestrator.experiments.limits import run_gpus
from orchestrator.experiments.services import experiment_create
from trainer.config import ConfigError, RunConfig, parse_config
from trainer.launch import _parser, exit_code, first_host, torchrun_args

NASTY_DIR = "/tmp/runs/a b;$(id)"


def make_run(alice, config: dict):
    return experiment_create(owner=alice, name="multi", config=config).runs.get()


@pytest.mark.django_db
def test_one_gpu_run_keeps_the_single_process_command(alice, settings, tmp_path):
    settings.TRAINER_PYTHON = "/opt/py/bin/python"
    run = make_run(alice, {"train": {"device": "cuda"}})
    spec = build_job_spec(run, "t", tmp_path / "run")
    assert spec.argv[:3] == ["/opt/py/bin/python", "-m", "trainer"] and (spec.nodes, spec.gpus) == (1, 1)


@pytest.mark.django_db
def test_four_gpus_on_one_node_run_torchrun_standalone(alice, settings, tmp_path):
    settings.TRAINER_PYTHON = "/opt/py/bin/python"
    run = make_run(alice, {"train": {"device": "cuda"}, "resources": {"gpus_per_node": 4}})
    assert run.gpus == 4  # the queue's GPU quotas count all of them
    spec = build_job_spec(run, "t", tmp_path / "run")
    assert spec.argv[:10] == [
        "/opt/py/bin/python",
        "-m",
        "trainer.launch",
        "--nproc-per-node",
        "4",
        "--nnodes",
        "1",
        "--rendezvous",
        "standalone",
        "--",
    ]
    assert spec.argv[10:12] == ["run", "--config"]
    assert (spec.nodes, spec.gpus, spec.cpus) == (1, 4, 4)


@pytest.mark.django_db
def test_two_nodes_of_eight_gpus_use_slurm_tasks_and_a_slurm_rendezvous(alice, settings, tmp_path):
    settings.TRAINER_PYTHON = "/opt/py/bin/python"
    run = make_run(
        alice,
        {
            "model": {"name": "Qwen/Qwen2.5-0.5B"},
            "rollout": {"prompts_per_step": 32},
            "resources": {"nodes": 2, "gpus_per_node": 8},
        },
    )
    assert run.gpus == 16
    spec = build_job_spec(run, "t", tmp_path / "run")
    assert spec.argv[3:9] == ["--nproc-per-node", "8", "--nnodes", "2", "--rendezvous", "slurm"]
    req = build_request(spec, SlurmProfile())
    assert (req.nodes, req.tasks_per_node, req.gpus) == (2, 1, 8)  # gres is per node
    assert 'exec srun --ntasks=2 --kill-on-bad-exit=0 -- "${argv[@]}"' in req.script
    new, old = wire_for("v0.0.42").submit_body(req)["job"], wire_for("v0.0.38").submit_body(req)["job"]
    assert (new["tasks"], new["minimum_nodes"], new["maximum_nodes"], new["tasks_per_node"]) == (2, 2, 2, 1)
    assert (old["tasks"], old["nodes"]) == (2, [2, 2])
    with pytest.raises(BackendError, match="resources.nodes") as err:
        LocalBackend(jobs_dir=tmp_path / "jobs").submit(spec)
    assert err.value.permanent


def test_one_task_scripts_do_not_change_and_values_stay_out_of_the_script(tmp_path):
    assert "srun" not in render_script(SlurmProfile(), 1, 1)
    spec = JobSpec(
        run_id=1,
        attempt=1,
        run_dir=tmp_path,
        nodes=2,
        argv=[sys.executable, "-m", "trainer.launch", "--", "run", "--config", NASTY_DIR],
    )
    req = build_request(spec, SlurmProfile())
    assert NASTY_DIR not in req.script and req.environment["OPL_ARGV_6"] == NASTY_DIR


def test_async_under_several_processes_is_accepted_with_its_other_checks_kept():
    cfg = parse_config({"staleness": {"mode": "async"}, "resources": {"workers_per_node": 2}})
    assert cfg.staleness.mode == "async" and cfg.staleness.sync_timeout_s > 0
    with pytest.raises(ConfigError) as err:  # the bound one step needs, as with one process
        parse_config(
            {
                "staleness": {"mode": "async", "max_staleness": 0},
                "algorithm": {"updates_per_step": 2},
                "resources": {"workers_per_node": 2},
            }
        )
    assert [field for field, _ in err.value.problems] == ["staleness.max_staleness"]
    with pytest.raises(ConfigError) as err:  # rank 0 hands each rank an equal share of whole groups
        parse_config(
            {"staleness": {"mode": "async"}, "rollout": {"prompts_per_step": 8}, "resources": {"workers_per_node": 3}}
        )
    assert [field for field, _ in err.value.problems] == ["rollout.prompts_per_step"]


def test_the_form_shows_resources_from_the_schema():
    from orchestrator.experiments.schema_form import config_sections

    props = RunConfig.model_json_schema()["$defs"]["ResourcesConfig"]["properties"]
    assert set(props) == {"nodes", "gpus_per_node", "workers_per_node"} and all(
        p.get("description") for p in props.values()
    )
    section = next(s for s in config_sections() if s.name == "resources")
    assert [f.path for f in section.fields] == [
        "resources.nodes",
        "resources.gpus_per_node",
        "resources.workers_per_node",
    ]


def test_run_gpus_multiplies_per_node_by_nodes():
    assert run_gpus({"train": {"device": "cpu"}, "resources": {"nodes": 2, "gpus_per_node": 8}}) == 0
    assert run_gpus({"train": {"device": "cuda"}, "resources": {"nodes": 2, "gpus_per_node": 8}}) == 16
    assert run_gpus({"train": {"device": "cuda"}, "resources": {"nodes": 3}}, profile_gpus=2) == 6


def test_slurm_rendezvous_comes_from_the_allocation():
    args = _parser().parse_args(["--nproc-per-node", "2", "--rendezvous", "slurm", "--", "run", "--config", "c.yaml"])
    env = {"SLURM_JOB_ID": "123", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_JOB_NODELIST": "localhost"}
    assert torchrun_args(args, env) == [
        "--nnodes=2",
        "--node-rank=1",
        "--master-addr=localhost",
        "--master-port=29623",
        "--nproc-per-node=2",
        "--max-restarts=0",
        "-m",
        "trainer",
        "run",
        "--config",
        "c.yaml",
    ]


@pytest.mark.parametrize("nodelist,host", [("gpu[03-05,07],cpu1", "gpu03"), ("node7", "node7"), ("a1,a2", "a1")])
def test_first_host_of_a_node_list(nodelist, host, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")  # no scontrol: the fallback parser
    assert first_host(nodelist) == host


class _Failure:
    def __init__(self, code):
        self.exitcode = code


def test_the_workers_own_exit_code_comes_back():
    assert exit_code({0: _Failure(75), 1: _Failure(75)}) == 75
    assert exit_code({0: _Failure(75), 1: _Failure(-15)}) == 75  # a rank torchrun stopped after the others
    assert exit_code({0: _Failure(130)}) == 130
    assert exit_code({0: _Failure(75), 1: _Failure(2)}) == 1
