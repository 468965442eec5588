"""Rollout generation on a CPU: the vllm engine (vLLM's CPU build) against the hf engine, same run.

    .venv-vllm/bin/python benchmarks/vllm_cpu.py [--hidden 128] [--layers 2] [--prompts 16] [--n 8] [--tokens 32]

Both engines generate the same prompts (n samples each, at most --tokens new tokens) from the same
random-init tiny Qwen2 (float32, one torch thread for the hf engine; vLLM's CPU backend with its
defaults). Printed: response tokens/s of each, their ratio (hf is the baseline), and the weight sync
of each engine (vllm: safetensors file in /dev/shm + in-place reload; hf: load_state_dict).
Needs .venv-vllm (`make vllm-venv`); run from the repository root.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--n", type=int, default=8)
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()

    import torch

    from trainer.config import RunConfig
    from trainer.data.tasks import ArithmeticTask
    from trainer.policy.models import load_policy
    from trainer.rollout.batch import HFEngine
    from trainer.rollout.vllm_engine import VLLMEngine

    torch.set_num_threads(1)
    cfg = RunConfig.model_validate(
        {
            "model": {"name": "tiny", "tiny_hidden_size": args.hidden, "tiny_layers": args.layers},
            "rollout": {"engine": "vllm"},
            "train": {"device": "cpu"},
        }
    )
    task = ArithmeticTask(1, 3)
    policy = load_policy(cfg.model, task.alphabet, seed=1, device=torch.device("cpu"))
    prompts = [task.prompt_text(q) for q in task.sample(random.Random(0), args.prompts)]
    engines = {"hf": HFEngine(policy, torch.device("cpu"))}
    t0 = time.perf_counter()
    engines["vllm"] = VLLMEngine.from_policy(policy, cfg)
    startup = time.perf_counter() - t0

    rows = {}
    for name, engine in engines.items():
        engine.generate(prompts[:2], 2, 4, 1.0, 1.0)  # warm-up
        rates, syncs = [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            gen = engine.generate(prompts, args.n, args.tokens, 1.0, 1.0)
            rates.append(float(gen.response_mask.sum()) / (time.perf_counter() - t0))
            state = {k: v.clone() for k, v in policy.model.state_dict().items()}
            t0 = time.perf_counter()
            engine.load_weights(state)
            syncs.append(time.perf_counter() - t0)
        rows[name] = (statistics.median(rates), statistics.median(syncs))
    engines["vllm"].close()

    params = sum(t.numel() for t in policy.model.parameters())
    print(
        f"tiny Qwen2: hidden {args.hidden}, {args.layers} layers, {params / 1e6:.2f}M parameters; "
        f"{args.prompts} prompts x {args.n} samples, up to {args.tokens} tokens; vLLM start-up {startup:.1f} s"
    )
    print(f"{'engine':<8}{'tokens/s':>12}{'x hf':>8}{'weight sync s':>16}")
    for name, (rate, sync) in rows.items():
        print(f"{name:<8}{rate:>12.0f}{rate / rows['hf'][0]:>8.2f}{sync:>16.4f}")


if __name__ == "__main__":  # vLLM's engine process needs the guard
    main()
