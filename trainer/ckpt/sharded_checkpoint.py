"""Sharded checkpoints with torch.distributed.checkpoint (DCP): every rank writes its own shards.

The gathered format (trainer/ckpt/checkpoint.py) sends the whole model and optimizer through rank 0's
memory and makes every other rank wait while one file is written: about 380 GB for a 32B model
with Adam. Here each rank writes only what it holds, into DIR/ckpt/step-N/dcp/ (DCP's `.metadata`
plus one file per rank), and a checkpoint written by N ranks loads on M: DCP keeps each tensor's
global shape and every shard's offset, and reads on each rank just the slices that rank now holds.

    stage = prepare_stage(run_dir, step)
    pending = save_sharded(stage, model, optimizer, background=True)   # every rank
    ... train on ...
    pending.wait()                                                     # before the stage is renamed
    load_sharded(step_dir, model, optimizer)                           # every rank, any world size
    export_hf(step_dir, model, out_dir)                                # one process, for vLLM or eval

The optimizer's state is saved under parameter names (DCP's `get_state_dict`), not the optimizer's
positional ids, so it survives a change in how parameters are sharded or grouped.
"""

from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys  # its one-process reader

from trainer.ckpt.checkpoint_files import SHARDED_DIR


@contextmanager
def _quiet_one_process():
    """Without a process group DCP saves and loads in this one process, as meant, and warns
    "torch.distributed is disabled" on stderr at every checkpoint (even when told no_dist), where a
    run's page showed it for every run as if something were wrong. That warning only is dropped."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled", category=UserWarning)
        yield


def is_sharded(step_dir: Path) -> bool:
    """True when the checkpoint folder holds DCP shards rather than a gathered weights.pt."""
    return (Path(step_dir) / SHARDED_DIR / ".metadata").is_file()


def _state(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> dict:
    if optimizer is None:
        model_sd, _ = get_state_dict(model, [], options=StateDictOptions(ignore_frozen_params=False))
        return {"model": model_sd}
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optimizer": optim_sd}


@dataclass
class PendingSave:
    """A save under way: `wait()` before the folder is committed. `seconds_blocked` is how long
    training waited for it (the staging copy of a background save, or the whole synchronous one)."""

    future: object | None
    seconds_blocked: float
    bytes_written: int = 0
    folder: Path | None = None
    started: float = 0.0  # perf_counter() when the save began
    seconds_total: float = 0.0  # from the start until the last shard was written (set by wait)

    def wait(self) -> PendingSave:
        if self.future is not None:
            started = time.perf_counter()
            self.future.result()  # raises what the background write raised
            self.seconds_blocked += time.perf_counter() - started
            self.future = None
        if not self.seconds_total:
            self.seconds_total = getattr(self, "_written_at", time.perf_counter()) - self.started
        if self.folder is not None:
            self.bytes_written = sum(f.stat().st_size for f in self.folder.rglob("*") if f.is_file())
        return self


def save_sharded(
    stage: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    *,
    background: bool = False,
    process_group=None,
) -> PendingSave:
    """Every rank writes its shards into stage/dcp. With background=True (and a process group),
    DCP copies the state to host memory and writes it from a thread while training goes on.
    `process_group`: the group the background thread's collectives use; give it a group of its own
    (dist.new_group), or they interleave with training's collectives on the default group."""
    started = time.perf_counter()
    folder = Path(stage) / SHARDED_DIR
    folder.mkdir(parents=True, exist_ok=True)
    state = _state(model, optimizer)
    if background and dist.is_initialized():
        future = dcp.async_save(state, checkpoint_id=str(folder), process_group=process_group)
        pending = PendingSave(future, time.perf_counter() - started, folder=folder, started=started)
        future.add_done_callback(lambda _: setattr(pending, "_written_at", time.perf_counter()))
        return pending
    with _quiet_one_process():
        dcp.save(state, checkpoint_id=str(folder), process_group=process_group)
    return PendingSave(None, time.perf_counter() - started, folder=folder, started=started).wait()


def load_sharded(step_dir: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None) -> None:
    """Every rank reads the slices of the saved tensors that it holds now, whatever the world size
    the checkpoint was written with; without an optimizer only the weights are read."""
    state = _state(model, optimizer)
    with _quiet_one_process():
        dcp.load(state, checkpoint_id=str(Path(step_dir) / SHARDED_DIR))
    if optimizer is None:
        set_state_dict(model, [], model_state_dict=state["model"], optim_state_dict={})
        return
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])


def read_sharded(step_dir: Path, keys: set[str] | None = None) -> dict:
    """The whole saved state (or its `keys`, e.g. {"model"}) in this one process, without a model
    to load into: {"model": {name: tensor}, "optimizer": {"state": {name: ...}, "param_groups": ...}}.
    The optimizer's state is keyed by parameter name, not by the optimizer's positional ids."""
    return _load_state_dict_from_keys(keys=keys, checkpoint_id=str(Path(step_dir) / SHARDED_DIR))


def export_hf(step_dir: Path, model: torch.nn.Module, out_dir: Path) -> Path:
    """The weights of a sharded checkpoint as a Hugging Face folder (config + safetensors), read in
    one process into `model` (unsharded, the run's architecture): what vLLM, evaluation and forks
    load. The optimizer's shards are not read."""
    if dist.is_initialized() and dist.get_world_size() > 1:
        raise RuntimeError("export_hf runs in one process: it reads every shard into one model")
    load_sharded(step_dir, model, None)
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir
