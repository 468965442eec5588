"""Trainer throughput: sync (s = 0, no overlap) against async, at 1 and 2 ranks, beside the ideal overlap.

    .venv/bin/python benchmarks/trainer.py [--steps 8] [--ranks 1 2] [--hidden 128] [--layers 4] [--gpu-only]

Every mode runs the real trainer as a job does (`python -m trainer run`, under torchrun for 2 ranks:
FSDP2 over gloo) on the same tiny model and procedural task:
- sync: stale_k with k = 0: each rank generates its share of a batch, then all train on it; nothing
  overlaps;
- async: rank 0's generator process produces whole batches while the ranks train (max_staleness
  leaves room for two batches ahead), weights published every update.
On a CPU each process gets one thread, so async uses one core more than sync: the question is how
close the overlap gets to its ideal, not whether more cores beat fewer. The ideal speedup of
overlapping is (gen + train) / max(gen x ranks, train), with gen and train the per-step seconds
measured in sync mode at the same rank count (one generator produces what the ranks generated in
parallel, so its batch takes gen x ranks). Throughput is taken between the first and the last step's
metric timestamps, so process start-up and model loading are not counted. Target: async >= 0.9 x
the bound. On a machine with fewer cores than processes (2 ranks + a generator need 3) the bound is
out of reach, and the note below the table says so.

Where CUDA is available it also times one training step (forward, loss, backward, AdamW) of a
random-init Qwen2 model of Qwen2.5-0.5B's shape (bf16) on a synthetic batch, m2po against grpo,
and prints trained tokens/s and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the GPU section imports the trainer's objectives


def run_config(mode: str, ranks: int, steps: int, hidden: int, layers: int) -> dict:
    staleness = (
        {"mode": "stale_k", "k": 0} if mode == "sync" else {"mode": "async", "max_staleness": 5, "sync_every": 1}
    )
    return {
        "model": {"name": "tiny", "tiny_hidden_size": hidden, "tiny_layers": layers},
        "task": {"name": "arithmetic", "min_digits": 1, "max_digits": 3, "eval_sets": []},
        "rollout": {"group_size": 8, "prompts_per_step": 32, "max_new_tokens": 12},
        "algorithm": {"objective": "m2po", "lr": 3e-4, "updates_per_step": 2},
        "staleness": staleness,
        "train": {"steps": steps, "seed": 1, "torch_threads": 1, "device": "cpu"},
        "eval": {"every": 0, "at_start": False},
        "checkpoint": {"every": 0, "keep": 1},
        "resources": {"workers_per_node": ranks},
    }


def run_mode(mode: str, ranks: int, steps: int, hidden: int, layers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"opl-bench-{mode}-{ranks}-") as tmp:
        config, run_dir = Path(tmp) / "run.yaml", Path(tmp) / "run"
        config.write_text(yaml.safe_dump(run_config(mode, ranks, steps, hidden, layers)))
        launch = [sys.executable] + (
            ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks)] if ranks > 1 else []
        )
        cmd = launch + ["-m", "trainer", "run", "--config", str(config), "--run-dir", str(run_dir)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{mode} at {ranks} ranks failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
        rows: dict[int, dict] = {}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines():
            p = json.loads(line)
            rows.setdefault(p["step"], {})[p["key"]] = (p["value"], p["time"])
    return summarize([rows[s] for s in sorted(rows)])


def summarize(steps_sorted: list[dict]) -> dict:
    first, last, later = steps_sorted[0], steps_sorted[-1], steps_sorted[1:]
    wall = last["train/samples_seen"][1] - first["train/samples_seen"][1]
    samples = last["train/samples_seen"][0] - first["train/samples_seen"][0]
    tokens = last["train/tokens_seen"][0] - first["train/tokens_seen"][0]
    return {
        "samples_per_s": samples / wall,
        "tokens_per_s": tokens / wall,
        "gen_s": statistics.median(r["perf/gen_s"][0] for r in later),
        "train_s": statistics.median(r["perf/train_s"][0] for r in later),
        "staleness_max": max(r["rollout/staleness_max"][0] for r in steps_sorted),
        "wait_s": statistics.median(r["perf/wait_s"][0] for r in later) if "perf/wait_s" in last else 0.0,
    }


def cpu_section(args) -> None:
    load_before = os.getloadavg()[0]  # other work on the machine, before ours starts
    t0 = time.perf_counter()
    results = {
        (m, n): run_mode(m, n, args.steps, args.hidden, args.layers) for n in args.ranks for m in ("sync", "async")
    }
    print(
        f"tiny Qwen2 (hidden {args.hidden}, {args.layers} layers), arithmetic, 32 prompts x 8 samples, "
        f"{args.steps} steps, 1 thread per process, {time.perf_counter() - t0:.0f} s in all"
    )
    print(
        f"{'mode':<7}{'ranks':>6}{'samples/s':>11}{'tokens/s':>10}{'gen s/step':>12}"
        f"{'train s/step':>14}{'wait s/step':>13}{'max stale':>11}"
    )
    for (name, n), r in results.items():
        print(
            f"{name:<7}{n:>6}{r['samples_per_s']:>11.1f}{r['tokens_per_s']:>10.1f}{r['gen_s']:>12.3f}"
            f"{r['train_s']:>14.3f}{r['wait_s']:>13.3f}{r['staleness_max']:>11.0f}"
        )
    for n in args.ranks:
        sync, asyn = results[("sync", n)], results[("async", n)]
        bound = (sync["gen_s"] + sync["train_s"]) / max(n * sync["gen_s"], sync["train_s"])
        speedup = asyn["samples_per_s"] / sync["samples_per_s"]
        print(
            f"{n} rank(s): async/sync {speedup:.2f}x   ideal overlap (gen+train)/max(gen x {n},train): {bound:.2f}x   "
            f"ratio to ideal: {speedup / bound:.2f} (target >= 0.90)"
        )
    cores, processes = os.cpu_count() or 1, max(args.ranks) + 1
    if load_before > 0.5 * cores or processes > cores:
        print(
            f"note: load average {load_before:.1f} on {cores} cores before the benchmark, and async at "
            f"{max(args.ranks)} ranks runs {processes} processes: when cores are short or shared, the overlap "
            "falls short of its ideal"
        )


QWEN_05B = {
    "vocab_size": 151936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
}  # Qwen2.5-0.5B's shape, 494M parameters


def time_objectives(
    shape: dict, device: torch.device, dtype, batch: int, prompt: int, response: int, repeats: int
) -> dict:
    """Trained tokens/s of one full step (forward, loss, backward, AdamW) per objective."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.algo.objectives import policy_loss
    from trainer.rollout.batch import token_logprobs

    torch.manual_seed(0)
    cfg = Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=4096)
    model = Qwen2ForCausalLM(cfg).to(device, dtype)
    model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt + response), device=device)
    am = torch.ones_like(ids)
    mask = torch.ones((batch, response), device=device)
    adv = torch.randn(batch, device=device)[:, None].expand(batch, response).contiguous()
    with torch.no_grad():
        behav, _ = token_logprobs(model, ids, am, prompt, 1.0)
        behav = behav + 0.1 * torch.randn_like(behav)  # a stale behaviour policy
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    results = {}
    for name in ("grpo", "m2po"):
        times = []
        for i in range(repeats + 1):
            sync()
            t0 = time.perf_counter()
            logp, _ = token_logprobs(model, ids, am, prompt, 1.0)
            loss, _ = policy_loss(name, logp, behav, adv, mask)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            if i:  # the first is warm-up
                times.append(time.perf_counter() - t0)
        results[name] = batch * response / statistics.median(times)
    return results


def gpu_section(args) -> None:
    B, P, R = args.gpu_batch, 256, 1024
    results = time_objectives(QWEN_05B, torch.device("cuda"), torch.bfloat16, B, P, R, args.gpu_repeats)
    print(f"GPU {torch.cuda.get_device_name()}: random-init Qwen2 0.5B (bf16), batch {B} x {R} response tokens")
    for name, tps in results.items():
        print(f"  {name:<6} trained tokens/s {tps:>10.0f}")
    print(f"  m2po / grpo: {results['m2po'] / results['grpo']:.3f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--gpu-only", action="store_true")
    p.add_argument("--gpu-batch", type=int, default=8)
    p.add_argument("--gpu-repeats", type=int, default=3)
    args = p.parse_args()
    if not args.gpu_only:
        cpu_section(args)
    if torch.cuda.is_available():
        gpu_section(args)
    else:
        print("GPU section skipped: torch sees no CUDA device")


if __name__ == "__main__":
    main()
