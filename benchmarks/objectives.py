"""Time loss + backward of every policy objective and correction against GRPO (float32, CPU), the
per-update diagnostics, and the rollout-sample recording overhead of a recording update.

    .venv/bin/python benchmarks/objectives.py [--sizes 1] [--repeats 7] [--threads 1] [--scale 0.14]
                                              [--variants NAME ...] [--record-rounds 7]

Part 1, corrections. Each size is a batch of (N / 1024, 1024) tokens (N = size x 2^20) with ragged
response lengths (about 10% padding), GRPO-style advantages (one value per sequence) and
heavy-tailed log-ratios (0.14 * Student-t(3)) so that M2 over the trust region (about 0.07) sits
above tau = 0.04 and M2PO masks about 0.4%, the regime of a stale run; engine log-probs differ from
the behaviour ones by 0.02 * N(0, 1) (TIS, the engine masks). Every variant (an objective with
options, named as in docs/SAMPLES.md) runs in turn within each round, so they share the machine's
load; the table gives each one's median wall time and its ratio to grpo taken within each round,
then the median, in wall time and in process CPU time (steadier on a shared machine). The
"diagnostics" row times trainer.algo.diagnostics.update_diagnostics over the same tokens (computed once
per update, for every objective). Target: every variant within 1.3x of grpo.

Part 2, recording. A tiny-model trainer on one generated batch (64 rows, 128 new tokens, the
perturbed behaviour log-probs of a stale batch), m2po, micro-batches of 16 rows: the time of an
update (forward, loss, backward, diagnostics) when the update is recorded (samples.per_step rows
with their marks, entropy and every counterfactual correction's marks, written to samples.jsonl)
against the same update unrecorded, rounds alternating; the median ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.algo.diagnostics import update_diagnostics
from trainer.algo.objectives import OBJECTIVES, policy_loss

TOKENS_PER_ROW = 1024
OPTION_PARAMS = {
    "dual_clip": {"dual_clip_c": 3.0},
    "token_mask": {"token_mask": True},
    "token_mask(engine)": {"token_mask": True, "token_mask_ref": "engine"},
    "seq_mask": {"seq_mask": True, "seq_mask_high": 1.05},
    "tis": {"tis_cap": 2.0},
    "sq_penalty": {"sq_log_ratio_coef": 1e-3},
}
DEFAULT_VARIANTS = list(OBJECTIVES) + [
    "m2po+dual_clip",
    "m2po_cap+dual_clip",
    "grpo+dual_clip",
    "no_clip+dual_clip",
    "grpo+token_mask",
    "grpo+token_mask(engine)",
    "grpo+seq_mask",
    "grpo+tis",
    "m2po+sq_penalty",
    "m2po+dual_clip+token_mask+seq_mask+tis+sq_penalty",
]


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
    rollout = behav + 0.02 * torch.randn(rows, TOKENS_PER_ROW, generator=g)  # (B, T) the engine's
    return {
        "logp": logp,
        "behav_logp": behav,
        "advantages": advantages,
        "mask": mask,
        "prox_logp": prox,
        "rollout_logp": rollout,
    }


def variant_params(variant: str) -> tuple[str, dict]:
    name, *options = variant.split("+")
    if name not in OBJECTIVES:
        raise SystemExit(f"--variants: unknown objective {name!r} in {variant!r}; known: {', '.join(OBJECTIVES)}")
    params = {}
    for option in options:
        if option not in OPTION_PARAMS:
            raise SystemExit(f"--variants: unknown option {option!r} in {variant!r}; known: {', '.join(OPTION_PARAMS)}")
        params.update(OPTION_PARAMS[option])
    return name, params


def time_once(variant: str, inputs: dict[str, torch.Tensor]) -> tuple[float, float, dict]:
    """Wall-clock and process CPU seconds of one loss + backward."""
    name, params = variant_params(variant)
    if name == "decoupled_ppo":
        params["prox_logp"] = inputs["prox_logp"]
    if params.get("tis_cap") or "engine" in (params.get("token_mask_ref"), params.get("seq_mask_ref")):
        params["rollout_logp"] = inputs["rollout_logp"]
    logp = inputs["logp"].clone().requires_grad_(True)
    wall, cpu = time.perf_counter(), time.process_time()
    loss, stats = policy_loss(name, logp, inputs["behav_logp"], inputs["advantages"], inputs["mask"], **params)
    loss.backward()
    return time.perf_counter() - wall, time.process_time() - cpu, stats


def time_diagnostics(inputs: dict[str, torch.Tensor]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    update_diagnostics(
        (inputs["logp"] - inputs["behav_logp"]).masked_fill(~inputs["mask"], 0.0), inputs["advantages"], inputs["mask"]
    )
    return time.perf_counter() - wall, time.process_time() - cpu


def corrections(args) -> None:
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), float32 CPU. Loss + backward, wall "
        f"seconds, median of {args.repeats} rounds; each round runs every variant once, in turn. The ratios to "
        "grpo are taken within each round (same machine load), then the median, for wall and for process CPU time."
    )
    names = ["grpo"] + [v for v in args.variants if v != "grpo"]
    for size in args.sizes:
        inputs = make_inputs(size * (1 << 20), args.scale)
        wall = {name: [] for name in names + ["diagnostics"]}
        cpu = {name: [] for name in names + ["diagnostics"]}
        stats = {}
        for round_ in range(args.repeats + 1):  # round 0 warms up the allocator and is dropped
            for name in names:
                seconds, cpu_seconds, stats[name] = time_once(name, inputs)
                if round_:
                    wall[name].append(seconds)
                    cpu[name].append(cpu_seconds)
            seconds, cpu_seconds = time_diagnostics(inputs)
            if round_:
                wall["diagnostics"].append(seconds)
                cpu["diagnostics"].append(cpu_seconds)
        print(f"\n{size}M tokens ({size * (1 << 20):,}), scale {args.scale}")
        print(
            f"{'variant':<52} {'wall s':>8} {'x grpo wall':>11} {'x grpo cpu':>10}  "
            f"{'masked':>7} {'clipped':>7} {'reweighted':>10}"
        )
        for name in names + ["diagnostics"]:
            w = statistics.median(a / b for a, b in zip(wall[name], wall["grpo"]))
            c = statistics.median(a / b for a, b in zip(cpu[name], cpu["grpo"]))
            row = f"{name:<52} {statistics.median(wall[name]):>8.4f} {w:>11.2f} {c:>10.2f}"
            if name in stats:
                s = stats[name]
                row += (
                    f"  {s['actor/masked_frac']:>7.3%} {s['actor/clipped_frac']:>7.3%} "
                    f"{s['actor/reweighted_frac']:>10.3%}"
                )
            else:
                row += "  (once per update, over the whole minibatch)"
            print(row, flush=True)


def recording(args) -> None:
    from trainer.algo.advantages import grpo_advantages
    from trainer.config import parse_config
    from trainer.loop import Trainer

    cfg = parse_config(
        {
            "model": {"name": "tiny"},
            "task": {"eval_sets": []},
            "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 128},
            "algorithm": {"objective": "m2po", "updates_per_step": 1},
            "train": {"steps": 1, "device": "cpu", "seed": 1, "micro_batch_size": 16, "torch_threads": args.threads},
            "eval": {"every": 0, "at_start": False},
            "samples": {"per_step": 8},
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(cfg, Path(tmp) / "run")
        trainer.setup()
        try:
            torch.manual_seed(2)
            batch = trainer.rollouts.generate(0, 0)
            batch.behav_logp = (batch.behav_logp + 0.2 * torch.randn_like(batch.behav_logp)) * batch.response_mask
            adv = grpo_advantages(batch.rewards, batch.group_size, True, 1e-6) + torch.linspace(-0.5, 0.5, len(batch))
            trainer.model.train()

            def update(record: bool) -> float:
                t0 = time.perf_counter()
                trainer.optimizer.zero_grad(set_to_none=True)
                trainer.updater.recording = record
                if record:
                    trainer.samples.arm(batch, trainer.version)
                trainer.updater.accumulate_gradients(batch, adv, None)
                if record:
                    trainer.samples.write_train(1)
                trainer.updater.recording = False
                return time.perf_counter() - t0

            update(False), update(True)  # warm-up
            plain, recorded = [], []
            for _ in range(args.record_rounds):
                plain.append(update(False))
                recorded.append(update(True))
            tokens = int(batch.response_mask.sum())
            size = (
                (Path(tmp) / "run" / "samples.jsonl").stat().st_size / (args.record_rounds + 1) / cfg.samples.per_step
            )
        finally:
            trainer.close()
    ratio = statistics.median(r / p for r, p in zip(recorded, plain))
    print(
        f"\nRecording: tiny model, {len(batch)} rows, {tokens:,} response tokens, micro-batches of 16, "
        f"m2po, {cfg.samples.per_step} rows recorded with 9 counterfactual corrections, "
        f"median of {args.record_rounds} rounds"
    )
    print(f"{'update':<12} {'wall s':>8}")
    print(f"{'unrecorded':<12} {statistics.median(plain):>8.4f}")
    print(
        f"{'recorded':<12} {statistics.median(recorded):>8.4f}   x{ratio:.2f} of an unrecorded update; "
        f"{size:,.0f} bytes per sample"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1], help="Millions of tokens (2^20).")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the dev box has 2 shared cores).")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=DEFAULT_VARIANTS,
        help=f"objective[+option...]; options: {', '.join(OPTION_PARAMS)}",
    )
    parser.add_argument("--scale", type=float, default=0.14, help="log r = scale * Student-t(3).")
    parser.add_argument("--record-rounds", type=int, default=7, help="Rounds of part 2 (0 skips it).")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for v in args.variants:
        variant_params(v)  # unknown names fail before any timing
    corrections(args)
    if args.record_rounds:
        recording(args)


if __name__ == "__main__":
    main()
