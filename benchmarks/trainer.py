"""Trainer throughput: sync (s = 0, no overlap) against async, beside the ideal overlap bound.

    .venv/bin/python benchmarks/trainer.py [--steps 30] [--hidden 128] [--layers 4] [--gpu-only]

Both modes run the real trainer (trainer.loop.Trainer) on the same tiny model and procedural task:
- sync: stale_k with k = 0: generate a batch, then train on it; nothing overlaps;
- async: the generator process produces batches while the trainer trains (max_staleness leaves
  room for two batches ahead), weights published every update.
On a CPU each process gets one thread, so async uses two cores and sync one: the question is how
close the overlap gets to its ideal, not whether two cores beat one. The ideal speedup of
overlapping is (gen + train) / max(gen, train), with gen and train the per-step seconds measured
in sync mode. Throughput is taken between the first and the last step's metric timestamps, so
process start-up and model loading are not counted. Target: async >= 0.9 x the bound.

Where CUDA is available it also times one training step (forward, loss, backward, AdamW) of a
random-init Qwen2 model of Qwen2.5-0.5B's shape (bf16) on a synthetic batch, m2po against grpo,
and prints trained tokens/s and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from trainer.config import parse_config
from trainer.loop import Trainer


def run_mode(mode: str, steps: int, hidden: int, layers: int) -> dict:
    staleness = (
        {"mode": "stale_k", "k": 0} if mode == "sync" else {"mode": "async", "max_staleness": 5, "sync_every": 1}
    )
    cfg = parse_config(
        {
            "model": {"name": "tiny", "tiny_hidden_size": hidden, "tiny_layers": layers},
            "task": {"name": "arithmetic", "min_digits": 1, "max_digits": 3, "eval_sets": []},
            "rollout": {"group_size": 8, "prompts_per_step": 32, "max_new_tokens": 12},
            "algorithm": {"objective": "m2po", "lr": 3e-4, "updates_per_step": 2},
            "staleness": staleness,
            "train": {"steps": steps, "seed": 1, "torch_threads": 1, "device": "cpu"},
            "eval": {"every": 0, "at_start": False},
            "checkpoint": {"every": 0, "keep": 1},
        }
    )
    with tempfile.TemporaryDirectory(prefix=f"opl-bench-{mode}-") as tmp:
        assert Trainer(cfg, Path(tmp) / "run").run() == 0
        rows: dict[int, dict] = {}
        for line in (Path(tmp) / "run" / "metrics.jsonl").read_text().splitlines():
            p = json.loads(line)
            rows.setdefault(p["step"], {})[p["key"]] = (p["value"], p["time"])
    steps_sorted = [rows[s] for s in sorted(rows)]
    first, last = steps_sorted[0], steps_sorted[-1]
    wall = last["train/samples_seen"][1] - first["train/samples_seen"][1]
    samples = last["train/samples_seen"][0] - first["train/samples_seen"][0]
    tokens = last["train/tokens_seen"][0] - first["train/tokens_seen"][0]
    return {
        "samples_per_s": samples / wall,
        "tokens_per_s": tokens / wall,
        "gen_s": statistics.median(r["perf/gen_s"][0] for r in steps_sorted[1:]),
        "train_s": statistics.median(r["perf/train_s"][0] for r in steps_sorted[1:]),
        "staleness_max": max(r["rollout/staleness_max"][0] for r in steps_sorted),
        "wait_s": statistics.median(r["perf/wait_s"][0] for r in steps_sorted[1:]) if "perf/wait_s" in last else 0.0,
    }


def cpu_section(args) -> None:
    load_before = os.getloadavg()[0]  # other work on the machine, before ours starts
    sync = run_mode("sync", args.steps, args.hidden, args.layers)
    asyn = run_mode("async", args.steps, args.hidden, args.layers)
    bound = (sync["gen_s"] + sync["train_s"]) / max(sync["gen_s"], sync["train_s"])
    speedup = asyn["samples_per_s"] / sync["samples_per_s"]
    print(
        f"tiny Qwen2 (hidden {args.hidden}, {args.layers} layers), arithmetic, 32 prompts x 8 samples, "
        f"{args.steps} steps, 1 thread per process"
    )
    print(
        f"{'mode':<8}{'samples/s':>12}{'tokens/s':>12}{'gen s/step':>12}"
        f"{'train s/step':>14}{'wait s/step':>13}{'max stale':>11}"
    )
    for name, r in (("sync", sync), ("async", asyn)):
        print(
            f"{name:<8}{r['samples_per_s']:>12.1f}{r['tokens_per_s']:>12.1f}{r['gen_s']:>12.3f}{r['train_s']:>14.3f}{r['wait_s']:>13.3f}{r['staleness_max']:>11.0f}"
        )
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(
            f"note: load average {load_before:.1f} on {os.cpu_count()} cores before the benchmark: "
            "other work shares the cores, so the overlap may fall short of its bound"
        )
    print(
        f"speedup async/sync: {speedup:.2f}x   ideal overlap bound (gen+train)/max(gen,train): {bound:.2f}x   "
        f"ratio to bound: {speedup / bound:.2f} (target >= 0.90)"
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

    from trainer.objectives import policy_loss
    from trainer.rollout import token_logprobs

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
    p.add_argument("--steps", type=int, default=30)
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
