"""Time loss + backward of every policy objective on 1M, 4M and 16M tokens (float32, CPU).

    .venv/bin/python benchmarks/objectives.py [--sizes 1 4 16] [--repeats 7] [--threads 1] [--scale 0.14]

Each size is a batch of (N / 1024, 1024) tokens with ragged response lengths (about 10% padding),
GRPO-style advantages (one value per sequence) and heavy-tailed log-ratios (0.14 * Student-t(3))
so that M2 over the trust region (about 0.07) sits above tau = 0.04 and M2PO masks about 0.4%,
the regime of a stale run. Objectives run in turn within each round, so they share the machine's
load; the table gives each objective's median wall time, and the m2po / grpo ratio taken within
each round and then the median, in wall time and in process CPU time (the CPU time is steadier on
a shared machine). One thread by default: the dev box has two cores shared by several users.
Target: m2po within 1.3x of grpo at every size. --scale changes the regime (0.05: M2 below tau,
nothing masked; 0.3: about 14% masked; 1.0: about 37%, where sorting the candidates dominates).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.objectives import OBJECTIVES, policy_loss  # noqa: E402

TOKENS_PER_ROW = 1024


def make_inputs(n_tokens: int, scale: float = 0.14, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    rows = n_tokens // TOKENS_PER_ROW
    behav = -torch.rand(rows, TOKENS_PER_ROW, generator=g) * 3.0  # (B, T) log-probs in [-3, 0]
    student_t = torch.distributions.StudentT(3.0)
    torch.manual_seed(seed)
    log_r = scale * student_t.sample((rows, TOKENS_PER_ROW))  # (B, T) heavy-tailed
    logp = behav + log_r
    lengths = torch.randint(TOKENS_PER_ROW * 4 // 5, TOKENS_PER_ROW + 1, (rows, 1), generator=g)
    mask = torch.arange(TOKENS_PER_ROW)[None, :] < lengths  # (B, T)
    seq_adv = torch.randn(rows, 1, generator=g)
    advantages = seq_adv.expand(rows, TOKENS_PER_ROW).contiguous()  # (B, T)
    prox = behav + 0.5 * log_r  # (B, T) a policy between behav and current
    return {"logp": logp, "behav_logp": behav, "advantages": advantages, "mask": mask, "prox_logp": prox}


def time_once(name: str, inputs: dict[str, torch.Tensor]) -> tuple[float, float, dict]:
    """Wall-clock and process CPU seconds of one loss + backward."""
    extra = {"prox_logp": inputs["prox_logp"]} if name == "decoupled_ppo" else {}
    logp = inputs["logp"].clone().requires_grad_(True)
    wall, cpu = time.perf_counter(), time.process_time()
    loss, stats = policy_loss(name, logp, inputs["behav_logp"], inputs["advantages"], inputs["mask"], **extra)
    loss.backward()
    return time.perf_counter() - wall, time.process_time() - cpu, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16], help="Millions of tokens (2^20).")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the dev box has 2 shared cores).")
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES))
    parser.add_argument("--scale", type=float, default=0.14, help="log r = scale * Student-t(3).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), float32 CPU. Loss + backward, wall "
        f"seconds, median of {args.repeats} rounds; each round runs every objective once, in turn. The ratios are "
        "taken within each round (same machine load), then the median, for wall and for process CPU time."
    )
    header = f"{'tokens':>8} " + " ".join(f"{n:>13}" for n in args.objectives)
    print(header + "  m2po/grpo wall  m2po/grpo cpu  m2po masked  grpo clipped")
    for size in args.sizes:
        inputs = make_inputs(size * (1 << 20), args.scale)
        wall = {name: [] for name in args.objectives}
        cpu = {name: [] for name in args.objectives}
        stats = {}
        for round_ in range(args.repeats + 1):  # round 0 warms up the allocator and is dropped
            for name in args.objectives:
                seconds, cpu_seconds, stats[name] = time_once(name, inputs)
                if round_:
                    wall[name].append(seconds)
                    cpu[name].append(cpu_seconds)
        row = f"{size:>7}M " + " ".join(f"{statistics.median(wall[n]):>13.4f}" for n in args.objectives)
        if "m2po" in wall and "grpo" in wall:
            wall_ratio = statistics.median(m / g for m, g in zip(wall["m2po"], wall["grpo"]))
            cpu_ratio = statistics.median(m / g for m, g in zip(cpu["m2po"], cpu["grpo"]))
            row += f"  {wall_ratio:>14.2f}  {cpu_ratio:>13.2f}"
            row += f"  {stats['m2po']['actor/clip_frac']:>11.3%}  {stats['grpo']['actor/clip_frac']:>12.3%}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
