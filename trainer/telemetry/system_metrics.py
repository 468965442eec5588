"""System metrics: CPU and RAM of the trainer's process tree and of the machine, and per GPU
utilisation, memory and power through NVML, sampled every `reporting.system_s` seconds.

A background thread samples; whenever the run's update count has moved on since its last write,
it appends the mean of the samples taken since then to the spool at the current update (one
point per key and step, so ingestion's (key, step) identity holds). The first point goes out at
the first step the trainer logs after its start (a fresh run's first update, a resume's first
step after its checkpoint), with the mean since the start, model loading included.
The points travel with every other metric (spool, pusher, ingestion). The time split between
generation, training and waiting is perf/gen_s, perf/train_s and perf/wait_s, logged per step by
the loop.

NVML (`pynvml`, from the pinned `nvidia-ml-py` in requirements-gpu.txt) is imported lazily: no
module, no driver or no GPU means no GPU keys. On a machine without an NVIDIA GPU that is expected
and says nothing; a warning says why only where a GPU is present but its metrics cannot be read. psutil comes with
requirements-trainer.txt. Nothing here raises into training.
"""

from __future__ import annotations

import glob
import logging
import os
import threading
from collections.abc import Callable

log = logging.getLogger("trainer.telemetry.system_metrics")

GIB = 1024**3


class ProcessTree:
    """CPU percent (100 = one core) and resident memory of this process and its children
    (reward workers, the async generator, vLLM's engine)."""

    def __init__(self):
        import psutil

        self._psutil = psutil
        self._root = psutil.Process(os.getpid())
        self._known: dict[int, object] = {}
        psutil.cpu_percent(None)  # the machine-wide counter starts now
        self.sample()  # each process's cpu_percent counts from its first call

    def sample(self) -> dict[str, float]:
        psutil = self._psutil
        try:
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            procs = [self._root]
        cpu = rss = 0.0
        alive = {}
        for proc in procs:
            proc = self._known.get(proc.pid, proc)  # keep the object: its CPU counter lives in it
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue  # it exited between listing and reading
            alive[proc.pid] = proc
        self._known = alive
        memory = psutil.virtual_memory()
        return {
            "system/cpu_pct": cpu,
            "system/ram_gb": rss / GIB,
            "system/host_cpu_pct": psutil.cpu_percent(None),
            "system/host_ram_pct": memory.percent,
        }


def _visible_devices() -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as the job sees it (indices or UUIDs); None when it is unset."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        return None
    return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]


def nvidia_gpu_present() -> bool:
    """Whether the job can see an NVIDIA GPU: the driver's device nodes exist and
    CUDA_VISIBLE_DEVICES does not hide every device."""
    if _visible_devices() == []:
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*")) or bool(glob.glob("/proc/driver/nvidia/gpus/*"))


class GpuMeter:
    """Per visible GPU: utilisation %, memory used (GiB and %), power (W). `nvml` is the pynvml
    module (a fake in tests where no GPU exists); None = import it, and stay empty without one.
    `gpu_present` tells "no GPU here" (silent) from "a GPU whose metrics fail" (a warning);
    None = look at the machine (`nvidia_gpu_present`)."""

    def __init__(self, nvml=None, gpu_present: bool | None = None):
        self.handles: list = []
        self.nvml = nvml
        try:
            if self.nvml is None:
                import pynvml  # nvidia-ml-py

                self.nvml = pynvml
            self.nvml.nvmlInit()
            self.handles = [self._handle(i) for i in self._visible()]
        except Exception as exc:  # ImportError, NVMLError (no driver, no device)
            if nvidia_gpu_present() if gpu_present is None else gpu_present:
                log.warning("a GPU is present but its metrics cannot be read (no system/gpu* keys): %s", exc)
            else:
                log.debug("no GPU, no GPU metrics: %s", exc)
            self.handles = []

    def _visible(self) -> list[str]:
        """CUDA_VISIBLE_DEVICES as the job sees it (indices or UUIDs), else every device."""
        visible = _visible_devices()
        if visible is None:
            return [str(i) for i in range(self.nvml.nvmlDeviceGetCount())]
        return visible

    def _handle(self, device: str):
        if device.isdigit():
            return self.nvml.nvmlDeviceGetHandleByIndex(int(device))
        return self.nvml.nvmlDeviceGetHandleByUUID(device)

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for i, handle in enumerate(self.handles):  # i: the job's own device number (cuda:i)
            try:
                util = self.nvml.nvmlDeviceGetUtilizationRates(handle)
                mem = self.nvml.nvmlDeviceGetMemoryInfo(handle)
                out[f"system/gpu{i}/util_pct"] = float(util.gpu)
                out[f"system/gpu{i}/mem_gb"] = mem.used / GIB
                out[f"system/gpu{i}/mem_pct"] = 100.0 * mem.used / mem.total if mem.total else 0.0
                out[f"system/gpu{i}/power_w"] = self.nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # mW
            except Exception as exc:  # a GPU fallen off the bus must not stop the others' points
                log.warning("GPU %d metrics failed: %s", i, exc)
        return out


def mean_samples(samples: list[dict[str, float]]) -> dict[str, float]:
    keys = {k for s in samples for k in s}
    return {k: sum(s[k] for s in samples if k in s) / sum(1 for s in samples if k in s) for k in sorted(keys)}


class SystemSampler:
    """The thread: samples every `interval_s`, writes through `write(step, values)` when the step
    from `current_step()` has moved on. Inert when interval_s is 0."""

    def __init__(
        self,
        interval_s: float,
        write: Callable[[int, dict[str, float]], None],
        current_step: Callable[[], int],
        gpu: GpuMeter | None = None,
        after_step: int | None = None,
    ):
        """`after_step`: the step the run starts from; the first point goes out at a later one
        (None: at once). The spool never holds a (key, step) twice."""
        self.interval_s = interval_s
        self.write = write
        self.current_step = current_step
        self.gpu = gpu
        self._samples: list[dict[str, float]] = []
        self._last_step: int | None = after_step
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tree: ProcessTree | None = None

    def start(self) -> None:
        if self.interval_s <= 0:
            return
        try:
            self.tree = ProcessTree()
        except Exception as exc:  # psutil missing or refused: the run goes on without them
            log.warning("no CPU/RAM metrics: %s", exc)
        if self.gpu is None:
            self.gpu = GpuMeter()
        self.tick()  # the first sample, before the model loads
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:
                log.exception("system metrics sample failed")

    def tick(self) -> None:
        """One sample; written (as the mean since the last write) when the step moved on."""
        sample = {**(self.tree.sample() if self.tree else {}), **(self.gpu.sample() if self.gpu else {})}
        if sample:
            self._samples.append(sample)
        step = int(self.current_step())
        if self._samples and (self._last_step is None or step > self._last_step):
            self.write(step, mean_samples(self._samples))
            self._samples, self._last_step = [], step

    def close(self) -> None:
        """Stop the thread, then write what was sampled since the last point (if the step moved)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
            try:
                self.tick()
            except Exception:
                log.exception("last system metrics sample failed")
