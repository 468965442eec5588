"""The System panel group: CPU, RAM and the time split on every run; GPU panels only where a GPU
reported (one line per GPU)."""

from orchestrator.metrics.panels import panels_for

CPU_RUN = [
    "train/reward_mean",
    "system/cpu_pct",
    "system/ram_gb",
    "system/host_cpu_pct",
    "system/host_ram_pct",
    "perf/gen_s",
    "perf/train_s",
]


def system(panels):
    return {p["id"]: p for p in panels if p.get("group") == "System"}


def test_a_cpu_run_gets_cpu_ram_and_time_panels_and_no_gpu_panel():
    panels = system(panels_for(CPU_RUN, [{}]))
    assert list(panels) == ["system_cpu", "system_ram", "system_time"]
    assert panels["system_cpu"]["keys"] == ["system/cpu_pct", "system/host_cpu_pct"]
    assert panels["system_time"]["keys"] == ["perf/gen_s", "perf/train_s", "perf/wait_s"]


def test_a_gpu_run_gets_one_line_per_gpu():
    keys = CPU_RUN + [f"system/gpu{i}/{m}" for i in (1, 0) for m in ("util_pct", "mem_gb", "mem_pct", "power_w")]
    panels = system(panels_for(keys, [{}]))
    assert panels["system_gpu_util"]["keys"] == ["system/gpu0/util_pct", "system/gpu1/util_pct"]
    assert panels["system_gpu_power"]["keys"] == ["system/gpu0/power_w", "system/gpu1/power_w"]
