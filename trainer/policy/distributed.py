"""One process or many: the same training code runs alone on a CPU or under torchrun with FSDP.

Under torchrun (WORLD_SIZE > 1) every rank holds a shard of the model (FSDP2 `fully_shard` per
decoder layer, then the root), generates and scores its own slice of each step's prompts (whole
groups), and computes its loss on that slice; FSDP averages the gradients. Scalars are averaged
across ranks before logging, and only rank 0 writes metrics. Alone, none of this is active and
the helpers are plain calls.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def enabled(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(pref: str, local_rank: int = 0) -> torch.device:
    if pref == "cuda" or (pref == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise RuntimeError("train.device: cuda asked for, but torch sees no CUDA device")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def init_distributed(device_pref: str, timeout_s: float | None = None) -> DistInfo:
    """`timeout_s`: how long a collective may wait for the other ranks (torch's default if None)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_pref, local_rank)
    if world > 1 and not dist.is_initialized():
        if device.type == "cuda":
            torch.cuda.set_device(device)
        # The stop signals must reach the main thread only (cli.py's handlers set a flag there). A
        # signal the kernel hands to one of the process group's own threads interrupts its socket
        # call, and gloo then aborts the rank ("terminate called without an active exception"):
        # threads created while the signals are blocked keep them blocked.
        stop_signals = {signal.SIGUSR1, signal.SIGTERM, signal.SIGINT}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
        try:
            timeout = timedelta(seconds=timeout_s) if timeout_s is not None else None
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=timeout)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return DistInfo(rank, world, local_rank, device)


def wrap_fsdp(model: torch.nn.Module, info: DistInfo, mp_policy=None) -> torch.nn.Module:
    """FSDP2 per decoder layer, then the root. mp_policy: a MixedPrecisionPolicy (bf16 compute over
    the float32 sharded master weights; trainer.policy.precision) or None for float32."""
    if not info.enabled:
        return model
    from torch.distributed.fsdp import fully_shard

    kwargs = {"mp_policy": mp_policy} if mp_policy is not None else {}
    layers = getattr(getattr(model, "model", None), "layers", None)
    for layer in layers or []:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def mean_across(values: dict[str, float], info: DistInfo) -> dict[str, float]:
    """Average each scalar over ranks (min/max keys take the min/max)."""
    if not info.enabled or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=info.device)
    lo, hi = t.clone(), t.clone()
    dist.all_reduce(t)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    out = {}
    for i, k in enumerate(keys):
        if k.endswith("_min"):
            out[k] = lo[i].item()
        elif k.endswith("_max"):
            out[k] = hi[i].item()
        else:
            out[k] = t[i].item() / info.world
    return out


def sum_across(value: float, info: DistInfo) -> float:
    if not info.enabled:
        return value
    t = torch.tensor([float(value)], dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return t.item()


def max_across(value: int, info: DistInfo) -> int:
    """The largest of every rank's value (every rank must call it)."""
    if not info.enabled:
        return value
    t = torch.tensor([int(value)], dtype=torch.int64, device=info.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()


def full_state(model, optimizer, info: DistInfo) -> tuple[dict, dict]:
    """Unsharded model and optimizer state on CPU (every rank takes part; rank 0 saves)."""
    if not info.enabled:
        return model.state_dict(), optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_state(model, optimizer, model_sd: dict, optim_sd: dict | None, info: DistInfo) -> None:
    """Full (unsharded) state into the model and, unless optim_sd is None, the optimizer."""
    if not info.enabled:
        model.load_state_dict(model_sd)
        if optim_sd is not None:
            optimizer.load_state_dict(optim_sd)
        return
    if optim_sd is None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(model, model_sd, options=StateDictOptions(full_state_dict=True))
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    # model_sd/optim_sd are views of the memory-mapped checkpoint file (checkpoint.load_weights):
    # pages are read as tensors are sharded, shared by the ranks of a node through the page cache,
    # and each rank keeps only its shard; no rank copies the whole optimizer into its memory.
    set_state_dict(
        model,
        optimizer,
        model_state_dict=model_sd,
        optim_state_dict=optim_sd,
        options=StateDictOptions(full_state_dict=True),
    )


def model_state_for_engine(model, info: DistInfo) -> dict:
    """Full weights on every rank, for each rank's own rollout engine (all-gathered, not offloaded)."""
    if not info.enabled:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))


def model_state_on_main(model, info: DistInfo) -> dict:
    """Full weights on rank 0's CPU for the async generator (every rank takes part; the others get
    an empty dict)."""
    if not info.enabled:
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def scatter_from_main(items: list | None, info: DistInfo):
    """Rank 0's `items[r]` to each rank r (picklable objects); alone, items[0]."""
    if not info.enabled:
        return items[0]
    out = [None]
    dist.scatter_object_list(out, items if info.is_main else None, src=0)
    return out[0]


def shutdown(info: DistInfo, clean: bool = True) -> None:
    """`clean`: all ranks got here together. After a failure a peer may be waiting in some other
    collective: no barrier then; the process group goes with the process."""
    if info.enabled and dist.is_initialized() and clean:
        # Tear down together: a rank that destroys its gloo group while a peer is still using
        # it (rank 0 flushes metrics last) dies with "terminate called without an active exception".
        dist.barrier()
        dist.destroy_process_group()
