"""System metrics: a real CPU run logs CPU and RAM of its processes and of the machine; the
NVML path is exercised against a fake pynvml module.

The fake is used ONLY because this machine has no GPU and no NVIDIA driver: the real NVML cannot
be called here. On a GPU machine `GpuMeter()` imports the real pynvml (requirements-gpu.txt).
"""

import json
import logging
from types import SimpleNamespace

import pytest

from trainer.config import parse_config
from trainer.loop import Trainer
from trainer.metric_keys import is_known
from trainer.telemetry.system_metrics import GIB, GpuMeter, SystemSampler, nvidia_gpu_present


def test_a_real_cpu_run_logs_cpu_and_ram_of_its_process_tree_and_the_machine(tmp_path):
    data = {
        "model": {"name": "tiny", "tiny_hidden_size": 32},
        "task": {"name": "arithmetic", "eval_max_problems": 4},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "algorithm": {"updates_per_step": 2},
        "staleness": {"mode": "stale_k", "k": 1},
        "train": {"steps": 4, "seed": 1, "torch_threads": 1},
        "eval": {"every": 0},
        "checkpoint": {"every": 0},
        "reporting": {"system_s": 0.05},
    }
    assert Trainer(parse_config(data), tmp_path / "run").run() == 0
    points = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    system = [p for p in points if p["key"].startswith("system/")]
    keys = {p["key"] for p in system}
    assert {"system/cpu_pct", "system/ram_gb", "system/host_cpu_pct", "system/host_ram_pct"} <= keys
    assert all(is_known(k) for k in keys)
    assert not any("gpu" in k for k in keys)  # no GPU here: skipped, the run went on
    ram = [p["value"] for p in system if p["key"] == "system/ram_gb"]
    assert all(0.05 < v < 64 for v in ram), ram  # torch alone is far over 50 MiB resident
    assert all(0 <= p["value"] <= 100 for p in system if p["key"].startswith("system/host_"))
    steps = [p["step"] for p in system if p["key"] == "system/cpu_pct"]
    assert steps == sorted(set(steps)), "one point per step: ingestion keys points on (key, step)"
    trained = sorted({p["step"] for p in points if p["key"] == "train/reward_mean"})
    assert set(steps) <= set(trained), "only at steps the trainer logs"
    assert steps[-1] == trained[-1], "the samples since the last point are written at the end"


def test_system_metrics_can_be_turned_off(tmp_path):
    written = []
    SystemSampler(0, lambda step, values: written.append(values), lambda: 0).start()
    assert written == []


class FakeNVML:
    """A stand-in for pynvml with two GPUs (no GPU exists on this test machine)."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail_init=False):
        self.fail_init = fail_init

    def nvmlInit(self):
        if self.fail_init:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return {"GPU-b": "h1"}[uuid]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(gpu={"h0": 97, "h1": 5}[handle], memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(used=40 * GIB, total=80 * GIB, free=40 * GIB)

    def nvmlDeviceGetPowerUsage(self, handle):
        return {"h0": 650_000, "h1": 90_000}[handle]  # milliwatts


def test_nvml_reports_each_visible_gpu_with_the_jobs_own_numbering(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    values = GpuMeter(nvml=FakeNVML()).sample()
    assert values == {
        "system/gpu0/util_pct": 97.0,
        "system/gpu0/mem_gb": 40.0,
        "system/gpu0/mem_pct": 50.0,
        "system/gpu0/power_w": 650.0,
        "system/gpu1/util_pct": 5.0,
        "system/gpu1/mem_gb": 40.0,
        "system/gpu1/mem_pct": 50.0,
        "system/gpu1/power_w": 90.0,
    }
    assert all(is_known(k) for k in values)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")  # Slurm gave the job the second GPU, by UUID
    assert GpuMeter(nvml=FakeNVML()).sample()["system/gpu0/power_w"] == 90.0


def test_no_gpu_says_nothing_but_a_gpu_whose_metrics_fail_warns(caplog):
    """A CPU run's stderr carried "no GPU metrics: No module named 'pynvml'" on every run:
    without a GPU, missing NVML is expected; with one, it is worth a warning that says so."""
    caplog.set_level(logging.DEBUG, logger="trainer.telemetry.system_metrics")
    GpuMeter(nvml=FakeNVML(fail_init=True), gpu_present=False)
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    GpuMeter(nvml=FakeNVML(fail_init=True), gpu_present=True)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "a GPU is present but its metrics cannot be read" in warnings[0]


def test_this_gpu_less_machine_logs_nothing_about_gpu_metrics(caplog, monkeypatch):
    caplog.set_level(logging.DEBUG, logger="trainer.telemetry.system_metrics")
    if nvidia_gpu_present():
        pytest.skip("this machine has an NVIDIA GPU: the silent path is for machines without one")
    assert GpuMeter().sample() == {}  # the real import: no pynvml, or no driver
    assert [r for r in caplog.records if r.levelno >= logging.INFO] == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # a GPU machine's job that was given none
    assert not nvidia_gpu_present()


def test_no_driver_means_no_gpu_keys_and_no_error():
    assert GpuMeter(nvml=FakeNVML(fail_init=True)).sample() == {}
    assert GpuMeter().sample() == {}  # the real import on this GPU-less machine: absent or no driver


def test_a_sampler_writes_the_mean_since_its_last_point_once_the_step_moves_on():
    written, step = [], [0]
    nvml = FakeNVML()
    sampler = SystemSampler(1.0, lambda s, v: written.append((s, v)), lambda: step[0], gpu=GpuMeter(nvml=nvml))
    sampler.tick()
    sampler.tick()  # same step: kept for the mean
    step[0] = 3
    nvml.nvmlDeviceGetPowerUsage = lambda h: 100_000 if h == "h0" else 0
    sampler.tick()
    assert [s for s, _ in written] == [0, 3]
    assert written[1][1]["system/gpu0/power_w"] == (650 + 100) / 2


def test_a_resumed_run_samples_from_its_checkpoint_step_not_from_zero(tmp_path):
    """Ingestion supersedes an older attempt's points from the first step a new attempt posts: a
    system point at step 0 on resume would wipe the run's history; one at the checkpoint step
    would repeat a (key, step) the kept spool already holds."""
    data = {
        "model": {"name": "tiny", "tiny_hidden_size": 32},
        "task": {"name": "arithmetic"},
        "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
        "algorithm": {"updates_per_step": 1},
        "staleness": {"mode": "stale_k", "k": 0},
        "train": {"steps": 2, "seed": 1, "torch_threads": 1},
        "eval": {"every": 0},
        "checkpoint": {"every": 1},
        "reporting": {"system_s": 0.05},
    }
    run_dir = tmp_path / "run"
    assert Trainer(parse_config(data), run_dir).run() == 0
    first = len((run_dir / "metrics.jsonl").read_text().splitlines())
    data["train"]["steps"] = 4
    assert Trainer(parse_config(data), run_dir, resume=True).run() == 0
    after = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()[first:]]
    assert any(p["key"] == "system/cpu_pct" for p in after)
    assert min(p["step"] for p in after) > 2, sorted({(p["key"], p["step"]) for p in after if p["step"] <= 2})
    everything = [(p["key"], p["step"]) for p in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())]
    assert len(everything) == len(set(everything)), "the spool holds each (key, step) once"
