"""Checkpoint save and resume at 2 ranks: rank-0 gather (the gathered format) against DCP shards.

    .venv/bin/python benchmarks/checkpoint.py [--hidden 768] [--layers 6] [--repeat 3]

Starts itself under torchrun (2 processes, gloo, CPU), builds a Qwen2-shaped model sharded with
FSDP2 as the trainer does (trainer.policy.distributed.wrap_fsdp), takes one AdamW step so the optimizer
holds its moments, then times, in one run and on the same state:
- gathered: every rank takes part in the full state dict (cpu_offload), rank 0 writes weights.pt
  (trainer.ckpt.checkpoint.write_weights); resume: every rank memory-maps it and keeps its shard;
- dcp sync: each rank writes its own shards (trainer.ckpt.sharded_checkpoint.save_sharded); resume:
  load_sharded, each rank reading only its slices;
- dcp background: the same, written from a thread (DCP async_save on a process group of its own);
  training is blocked only while the state is staged to host memory.
"blocked" is how long the training loop waits (the slowest rank), "total" until the checkpoint is
on disk, "load" a resume's weight and optimizer load. Each is the median of --repeat saves; ratios
are against the gathered baseline measured here. A benchmark prints; nothing asserts on times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from trainer.ckpt import checkpoint as ckpt  # noqa: E402
from trainer.ckpt.sharded_checkpoint import load_sharded, save_sharded  # noqa: E402
from trainer.policy import distributed  # noqa: E402
from trainer.policy.models import tiny_model  # noqa: E402

VOCAB = 8192


def _slowest(seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _model(args, info):
    model = distributed.wrap_fsdp(tiny_model(VOCAB, args.hidden, args.layers, seed=1), info)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, VOCAB, (2, 32), generator=torch.Generator().manual_seed(info.rank))
    model(input_ids=tokens, labels=tokens).loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def _save(mode: str, stage: Path, model, optimizer, info, group) -> tuple[float, float]:
    """(blocked, total) seconds of one save, the slowest rank's."""
    dist.barrier()
    started = time.perf_counter()
    if mode == "gathered":
        model_sd, optim_sd = distributed.full_state(model, optimizer, info)
        if info.is_main:
            ckpt.write_weights(stage, model_sd, optim_sd)
        blocked = time.perf_counter() - started
    else:
        pending = save_sharded(stage, model, optimizer, background=mode == "dcp background", process_group=group)
        blocked = pending.seconds_blocked
        pending.wait()
    total = time.perf_counter() - started
    dist.barrier()
    return _slowest(blocked), _slowest(total)


def _load(mode: str, stage: Path, model, optimizer, info) -> float:
    dist.barrier()
    started = time.perf_counter()
    if mode == "gathered":
        weights = ckpt.load_weights(stage)
        distributed.load_full_state(model, optimizer, weights["model"], weights["optimizer"], info)
        del weights
    else:
        load_sharded(stage, model, optimizer)
    return _slowest(time.perf_counter() - started)


def worker(args) -> None:
    info = distributed.init_distributed("cpu")
    torch.set_num_threads(1)
    model, optimizer = _model(args, info)
    group = dist.new_group(backend="gloo")  # the background writer's own collectives
    root = Path(args.dir)
    rows = {}
    for mode in ("gathered", "dcp sync", "dcp background"):
        times = []
        for i in range(args.repeat):
            stage = root / f"{mode.replace(' ', '-')}-{i}"
            if info.is_main:
                stage.mkdir(parents=True)
            dist.barrier()
            blocked, total = _save(mode, stage, model, optimizer, info, group)
            load = _load(mode, stage, model, optimizer, info)
            size = ckpt.folder_bytes(stage) if info.is_main else 0
            times.append((blocked, total, load, size))
            dist.barrier()
            if info.is_main and i < args.repeat - 1:
                shutil.rmtree(stage)
        rows[mode] = [statistics.median(col) for col in zip(*times)]
    if info.is_main:
        _print_table(rows, args)
    distributed.shutdown(info)


def _print_table(rows: dict, args) -> None:
    params = sum(p.numel() for p in tiny_model(VOCAB, args.hidden, args.layers, seed=1).parameters())
    base = rows["gathered"]
    print(f"\ncheckpoint at 2 ranks (gloo, CPU): {params / 1e6:.1f}M parameters + AdamW, median of {args.repeat}")
    head = ("MB", 8), ("blocked s", 11), ("total s", 9), ("load s", 8), ("blocked x", 11), ("total x", 9), ("load x", 8)
    print(f"{'format':<16}" + "".join(f"{name:>{width}}" for name, width in head))
    for mode, (blocked, total, load, size) in rows.items():
        ratios = f"{blocked / base[0]:>11.2f}{total / base[1]:>9.2f}{load / base[2]:>8.2f}"
        print(f"{mode:<16}{size / 2**20:>8.0f}{blocked:>11.3f}{total:>9.3f}{load:>8.3f}{ratios}")
    print("x: this format's time / gathered's (below 1 = faster than the rank-0 gather)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory(prefix="opl-bench-ckpt-") as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__]
        flags = ["--hidden", str(args.hidden), "--layers", str(args.layers), "--repeat", str(args.repeat)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        subprocess.run([*cmd, *flags, "--worker", "--dir", tmp], check=True, env=env, cwd=REPO)


if __name__ == "__main__":
    main()
