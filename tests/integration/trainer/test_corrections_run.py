"""Each correction of the correction lab in a real tiny CPU run, from YAML through `python -m trainer run` to a
finished run: its own stats, the diagnostics, and recorded samples carrying entropy and the marks
every other correction would have made (docs/SAMPLES.md). One run checks those counterfactual marks
token by token against references written here from the definitions, over the very log-ratios and
advantages the file holds (the loss's own float32 values)."""

import json
import math
from fractions import Fraction

import pytest
import torch

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, write_config
from trainer.algo.counterfactual import counterfactual_variants, run_variant
from trainer.algo.diagnostics import ENGINE_KEYS, UPDATE_KEYS
from trainer.config import parse_config

BASE = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "task": {"name": "arithmetic", "eval_sets": []},
    "rollout": {"group_size": 8, "prompts_per_step": 4, "max_new_tokens": 2},  # "d<eos>" earns partial credit
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 2, "seed": 5, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 0},
    "samples": {"every": 1, "per_step": 32},
}
RUNS = {
    "cispo+tis": ({"objective": "cispo", "tis_cap": 1.0, "eps_low": 0.01, "eps_high": 0.01}, "actor/reweighted_frac"),
    "sapo+seq_mask": ({"objective": "sapo", "seq_mask": True, "seq_mask_high": 1.01}, "actor/seq_mask_frac"),
    "m2po+dual_clip+sq_penalty": (
        {"objective": "m2po", "dual_clip_c": 1.05, "sq_log_ratio_coef": 1e-3},
        "actor/dual_clip_frac",
    ),
    "grpo+token_mask": (
        {
            "objective": "grpo",
            "token_mask": True,
            "token_mask_low": 0.5,
            "token_mask_high": 2.0,
            "tau_m2": 0.04,
            "eps_low": 0.01,
            "eps_high": 0.01,
        },
        "actor/token_mask_frac",
    ),
}


def _run(tmp_path, algorithm, **sections):
    data = {k: dict(v) for k, v in BASE.items()}
    # two passes over each batch: the recorded update (the second pass, the whole batch) trains on
    # data one update stale, at a high lr, so that ratios leave 1
    data["algorithm"] = {"updates_per_step": 1, "epochs": 2, "lr": 5e-2, **algorithm}
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    result = run_trainer(write_config(tmp_path / "run.yaml", data), tmp_path / "run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    samples = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    return parse_config(data), by_step(read_points(tmp_path / "run")), [s for s in samples if s["kind"] == "train"]


@pytest.mark.parametrize("label", RUNS)
def test_a_correction_runs_from_yaml_with_its_stats_diagnostics_and_counterfactual_marks(tmp_path, label):
    algorithm, own_stat = RUNS[label]
    micro = {"micro_batch_size": 8} if label == "grpo+token_mask" else {}
    cfg, metrics, rows = _run(tmp_path, algorithm, train=micro)
    trained = [m for m in metrics.values() if "train/reward_mean" in m]
    assert len(trained) == 2
    for m in trained:
        assert set(UPDATE_KEYS) | set(ENGINE_KEYS) | {
            own_stat,
            "actor/masked_frac",
            "actor/clipped_frac",
            "actor/reweighted_frac",
        } <= set(m)
        assert all(math.isfinite(m[k]) for k in UPDATE_KEYS + ENGINE_KEYS)
        assert m["actor/ratio_pos_p50"] <= m["actor/ratio_pos_p99"] <= m["actor/ratio_pos_max"]
        assert 0 < m["actor/ess_frac"] <= 1 and m["actor/kl_k3"] >= 0 and m["actor/chi2"] >= 0
    assert max(m[own_stat] for m in trained) > 0, f"{label}: the option should act in this run"

    variants = [v.name for v in counterfactual_variants(cfg.algorithm, has_engine=True)]
    assert len(rows) == 2 * 32  # the whole batch of each step's last update
    for r in rows:
        assert r["variant"] == run_variant(cfg.algorithm) and list(r["counterfactual"]) == variants
        assert len(r["entropy"]) == len(r["tokens"]) and all(e is not None and e >= 0 for e in r["entropy"])
        marks = [r["masked"], r["clipped"], r["reweighted"]] + [
            i for v in r["counterfactual"].values() for i in v.values()
        ]
        assert all(0 <= t < len(r["tokens"]) for kind in marks for t in kind)
        for v in [
            {"masked": r["masked"], "clipped": r["clipped"], "reweighted": r["reweighted"]},
            *r["counterfactual"].values(),
        ]:
            assert not (set(v["masked"]) & set(v["clipped"])) and not (
                set(v["reweighted"]) & (set(v["masked"]) | set(v["clipped"]))
            )
    if label == "cispo+tis":
        assert sum(len(r["reweighted"]) for r in rows) > 0 and all(r["masked"] == r["clipped"] == [] for r in rows)
    if label == "grpo+token_mask":
        _check_counterfactual_marks(rows, cfg.algorithm)


def _check_counterfactual_marks(rows, alg):
    """grpo + token mask [0.5, 2], eps 0.01, tau_m2 0.04, four micro-batches of 8 rows: each
    correction's marks from its definition on the file's own float32 log-ratios and advantages. (The
    dual clip's c = 3 is rarely reached by a tiny run's ratios: its equality here may hold with no
    token; tests/unit/trainer/test_corrections.py and the m2po+dual_clip run cover it.)"""
    by_step = {}
    for r in rows:
        by_step.setdefault(r["step"], []).append(r)
    seen = {"own": 0, "m2po": 0}
    for step, step_rows in by_step.items():
        ratios = [torch.exp(torch.tensor(r["log_ratio"], dtype=torch.float32)).tolist() for r in step_rows]
        token_masked = {(i, t) for i, rr in enumerate(ratios) for t, x in enumerate(rr) if x < 0.5 or x > 2.0}
        ppo = {
            (i, t)
            for i, (rr, r) in enumerate(zip(ratios, step_rows))
            for t, x in enumerate(rr)
            if (r["advantage"] > 0 and x > 1.01) or (r["advantage"] < 0 and x < 0.99)
        }
        dual = {
            (i, t)
            for i, (rr, r) in enumerate(zip(ratios, step_rows))
            for t, x in enumerate(rr)
            if r["advantage"] < 0 and x > 3.0
        }
        m2po = _algorithm1(step_rows, alg.tau_m2)  # over the whole minibatch: the run's m2po_scope
        got = {
            name: {
                k: {(i, t) for i, r in enumerate(step_rows) for t in (r["counterfactual"][name][k] if name else r[k])}
                for k in ("masked", "clipped", "reweighted")
            }
            for name in ("", "m2po+token_mask", "no_clip+token_mask", "grpo+dual_clip+token_mask")
        }
        assert got[""] == {"masked": token_masked, "clipped": ppo - token_masked, "reweighted": set()}, step
        assert got["m2po+token_mask"] == {"masked": m2po | token_masked, "clipped": set(), "reweighted": set()}, step
        assert got["no_clip+token_mask"] == {"masked": token_masked, "clipped": set(), "reweighted": set()}, step
        assert got["grpo+dual_clip+token_mask"] == {
            "masked": token_masked,
            "clipped": (ppo | dual) - token_masked,
            "reweighted": set(),
        }, step
        seen["own"] += len(ppo - token_masked)
        seen["m2po"] += len(m2po - token_masked)
    assert all(seen.values()), f"the run should exercise every mark checked here: {seen}"


def _algorithm1(rows, tau):
    """Algorithm 1 over the rows' trust-region tokens (float32 M2, the mean decided exactly)."""
    m2 = {}
    for i, r in enumerate(rows):
        for t, lr in enumerate(r["log_ratio"]):
            if (r["advantage"] > 0 and lr > 0) or (r["advantage"] < 0 and lr < 0):
                x = torch.tensor(lr, dtype=torch.float32)
                m2[(i, t)] = float(x * x)
    region = sorted(m2, key=lambda k: (-m2[k], k))
    removed, total = set(), sum(Fraction(v) for v in m2.values())
    while region and total > Fraction(tau) * len(region):
        k = region.pop(0)
        removed.add(k)
        total -= Fraction(m2[k])
    return removed
