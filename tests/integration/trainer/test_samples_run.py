"""Rollout samples from real tiny CPU runs through the CLI (YAML -> `python -m trainer run`).

The masked/clipped indices are checked against references written here from the objectives'
definitions (Algorithm 1's literal loop, PPO's clip condition) over the very log-ratios the file
holds, and against the step's own actor/clip_frac metric, which the loss computes from its own
tensors: a recording that took another update's mask, other rows or other tokens fails here.
"""

import json
import math
import signal
import time
from collections import defaultdict
from fractions import Fraction

import pytest
import torch

from tests.integration.trainer.cli_helpers import by_step, read_points, run_trainer, start_trainer, write_config
from tests.unit.trainer.fake_dashboard import Dashboard
from trainer.ckpt import checkpoint as ckpt
from trainer.telemetry.samples import recorded_rows

BASE = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic", "eval_sets": ["arithmetic"], "eval_max_problems": 6},
    # 2 new tokens: "d<eos>" earns partial credit often enough for a random-init model to see
    # non-zero advantages in most steps.
    "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 2},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 10, "seed": 3, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 4, "at_start": True},
    "checkpoint": {"every": 0},
}


def _config(tmp_path, **sections):
    data = {k: dict(v) for k, v in BASE.items()}
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    return write_config(tmp_path / "run.yaml", data)


def _samples(run_dir):
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def _train_by_step(samples):
    out = defaultdict(list)
    for s in samples:
        if s["kind"] == "train":
            out[s["step"]].append(s)
    return dict(out)


def _advantage_signs(rows, group_size):
    """sign(A) per sample from the recorded rewards: GRPO's advantage is the reward minus its group's
    mean (over the std); the recorded rows are the whole minibatch, sample i its row order[i]
    (round-robin over the groups), so row // group_size is the sample's group."""
    order = recorded_rows(len(rows), group_size, len(rows))
    groups = defaultdict(list)
    for i, row in enumerate(order):
        groups[row // group_size].append(rows[i]["reward"])
    assert all(len(g) == group_size for g in groups.values()), "the recorded rows should be whole groups"
    means = {g: sum(v) / group_size for g, v in groups.items()}
    return [
        (rows[i]["reward"] > means[row // group_size]) - (rows[i]["reward"] < means[row // group_size])
        for i, row in enumerate(order)
    ]


def _algorithm1(rows, signs, tau):
    """The tokens Algorithm 1 removes, as (row, token) pairs: while the mean M2 of the remaining
    trust-region tokens exceeds tau (decided exactly), remove the largest M2. M2 is (log r)^2 in
    float32, as the loss squares it."""
    m2 = {}
    for i, (row, sign) in enumerate(zip(rows, signs)):
        for t, lr in enumerate(row["log_ratio"]):
            if (sign > 0 and lr > 0) or (sign < 0 and lr < 0):
                x = torch.tensor(lr, dtype=torch.float32)
                m2[(i, t)] = float(x * x)
    order = recorded_rows(len(rows), 8, len(rows))  # sample i is minibatch row order[i]
    region = sorted(m2, key=lambda k: (-m2[k], order[k[0]], k[1]))  # largest first, lowest flat index among equals
    removed, total = set(), sum(Fraction(v) for v in m2.values())
    while region and total > Fraction(tau) * len(region):
        k = region.pop(0)
        removed.add(k)
        total -= Fraction(m2[k])
    return removed


@pytest.mark.parametrize("micro", [0, 16])
def test_m2po_samples_hold_the_losss_own_mask_and_eval_answers_with_verdicts(tmp_path, micro):
    """One update per step, the whole minibatch recorded: the masked tokens are Algorithm 1's over
    the recorded log-ratios, and their count over the step's tokens is the step's actor/clip_frac.
    micro 16: four loss calls per update, with the mask computed beforehand over the minibatch."""
    tau = 1e-3
    cfg = _config(
        tmp_path,
        algorithm={"objective": "m2po", "tau_m2": tau, "updates_per_step": 1, "lr": 1e-2},
        train={"micro_batch_size": micro},
        samples={"every": 1, "per_step": 64, "max_tokens": 8, "eval_per_set": 3},
    )
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    metrics = by_step(read_points(tmp_path / "run"))
    samples = _samples(tmp_path / "run")
    train = _train_by_step(samples)
    trained_steps = sorted(s for s, m in metrics.items() if "train/reward_mean" in m)
    assert sorted(train) == trained_steps == list(range(1, 11))

    total_masked = 0
    for step, rows in train.items():
        assert [r["index"] for r in rows] == list(range(64))  # the whole minibatch: 8 groups of 8
        assert all(r["objective"] == "m2po" and r["clipped"] == [] and not r["truncated"] for r in rows)
        signs = _advantage_signs(rows, 8)
        expected = _algorithm1(rows, signs, tau)
        got = {(i, t) for i, r in enumerate(rows) for t in r["masked"]}
        assert got == expected, step
        tokens = sum(len(r["tokens"]) for r in rows)
        assert metrics[step]["actor/clip_frac"] == pytest.approx(len(got) / tokens, abs=1e-6), step
        total_masked += len(got)
        for r in rows:
            assert len(r["tokens"]) == len(r["log_ratio"]) and all(math.isfinite(x) for x in r["log_ratio"])
            assert r["staleness"] == step - 1 - r["policy_version"]  # trained at update step-1
            assert metrics[step]["rollout/staleness_min"] <= r["staleness"] <= metrics[step]["rollout/staleness_max"]
            question = r["prompt"].removesuffix("=")
            assert r["prompt"].endswith("=") and int(r["reference"]) == sum(map(int, question.split("+")))
            assert r["response"] == "".join(t for t in r["tokens"] if not (t.startswith("<") and t.endswith(">")))
            assert r["correct"] == (r["reward"] >= 1.0) and r["eval_set"] is None
    assert total_masked > 0, "tau should be small enough that Algorithm 1 masks some tokens"

    evals = [s for s in samples if s["kind"] == "eval"]
    eval_steps = sorted(s for s, m in metrics.items() if "eval/arithmetic/acc" in m)
    assert sorted({s["step"] for s in evals}) == eval_steps == [0, 4, 8, 10]
    for step in eval_steps:
        answers = [s for s in evals if s["step"] == step]
        assert [a["index"] for a in answers] == [0, 1, 2] and {a["eval_set"] for a in answers} == {"arithmetic"}
        for a in answers:  # the arithmetic eval's verdict: exact match, then EOS (an unfinished "8" is wrong)
            assert a["reward"] == float(a["correct"]) and (a["response"] == a["reference"] or not a["correct"])
            assert a["policy_version"] == step and a["tokens"] == [] and a["staleness"] is None


def test_grpo_samples_hold_the_clipped_tokens_bounded_and_only_at_recording_steps(tmp_path):
    eps = 0.02
    cfg = _config(
        tmp_path,
        rollout={"max_new_tokens": 4},
        algorithm={"objective": "grpo", "eps_low": eps, "eps_high": eps, "updates_per_step": 2, "lr": 1e-2},
        train={"steps": 9},
        samples={"every": 4, "per_step": 16, "max_tokens": 3, "eval_per_set": 0},
    )
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    samples = _samples(tmp_path / "run")
    assert all(s["kind"] == "train" for s in samples)  # eval_per_set 0
    train = _train_by_step(samples)
    # 2 updates a step: the first step (update 2), then the steps that cross a multiple of 4.
    assert sorted(train) == [2, 4, 8, 12, 16]
    clipped = 0
    for step, rows in train.items():
        assert [r["index"] for r in rows] == list(range(16))  # per_step of the 32-row minibatch
        # round-robin over the minibatch's 4 prompt groups: samples i and i + 4 share a prompt
        assert all(rows[i]["prompt"] == rows[i + 4]["prompt"] for i in range(12))
        assert all(rows[i]["reference"] == rows[i + 4]["reference"] for i in range(12))
        signs = [(r["advantage"] > 0) - (r["advantage"] < 0) for r in rows]  # the loss's own A
        for r, sign in zip(rows, signs):
            assert len(r["tokens"]) <= 3 and len(r["log_ratio"]) == len(r["tokens"]) and r["masked"] == []
            if not r["truncated"]:  # the whole response is there
                assert r["response"] == "".join(t for t in r["tokens"] if not (t.startswith("<") and t.endswith(">")))
            ratio = torch.exp(torch.tensor(r["log_ratio"], dtype=torch.float32))
            expected = [
                t for t, x in enumerate(ratio.tolist()) if (sign > 0 and x > 1 + eps) or (sign < 0 and x < 1 - eps)
            ]
            assert r["clipped"] == expected, (step, r)
            clipped += len(expected)
            assert r["staleness"] >= 0 and r["policy_version"] <= step - 1
    assert clipped > 0
    truncated = [r for rows in train.values() for r in rows if r["truncated"]]
    assert truncated and all(len(r["tokens"]) == 3 for r in truncated)


@pytest.mark.parametrize("objective", ["m2po", "m2po_cap", "grpo", "no_clip", "gspo", "decoupled_ppo"])
def test_every_objective_reports_its_own_kind_of_mark(tmp_path, objective):
    cfg = _config(
        tmp_path,
        algorithm={
            "objective": objective,
            "tau_m2": 1e-4,
            "eps_low": 1e-3,
            "eps_high": 1e-3,
            "updates_per_step": 2,
            "lr": 1e-2,
        },
        train={"steps": 5},
        eval={"at_start": False, "every": 0},
        task={"eval_sets": []},
        samples={"every": 2, "per_step": 32},
    )
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [s for s in _samples(tmp_path / "run") if s["kind"] == "train"]
    assert len(rows) == 5 * 32 and {r["objective"] for r in rows} == {objective}
    masked = sum(len(r["masked"]) for r in rows)
    clipped = sum(len(r["clipped"]) for r in rows)
    if objective == "no_clip":
        assert masked == clipped == 0
    elif objective == "m2po":
        assert masked > 0 and clipped == 0
    else:
        assert clipped > 0 and masked == 0


def _ident(sample):
    return (sample["kind"], sample["step"], sample["index"])


def _content(sample):
    return {k: v for k, v in sample.items() if k not in ("time", "log_ratio")}


def test_samples_survive_a_kill_9_resume_and_a_failing_dashboard(tmp_path):
    """The cut run's file equals the uninterrupted run's (records past the checkpoint dropped and
    recorded again, none twice); the dashboard, which refused the first sample posts, ends up
    with exactly the file (a later attempt's sample replacing the earlier one)."""
    data = {
        "algorithm": {"objective": "m2po", "tau_m2": 1e-3, "updates_per_step": 2, "lr": 1e-2},
        "train": {"steps": 40, "seed": 5},
        "checkpoint": {"every": 4, "keep": 2},
        "samples": {"every": 2, "per_step": 8, "eval_per_set": 2},
        "reporting": {"push_interval_s": 0.1, "heartbeat_s": 0.5},
    }
    cfg = _config(tmp_path, **data)
    whole = run_trainer(cfg, tmp_path / "whole")
    assert whole.returncode == 0, whole.stdout + whole.stderr
    expected = _samples(tmp_path / "whole")

    run_dir = tmp_path / "cut"
    env = {"OPL_RUN_ID": "17", "OPL_RUN_TOKEN": "tok-17"}
    with Dashboard(path_statuses={"/samples": [503, 500]}) as dash:
        proc = start_trainer(cfg, run_dir, OPL_DASHBOARD_URL=dash.url, OPL_ATTEMPT="1", **env)
        deadline = time.monotonic() + 120
        while True:  # stop it once a sample past the newest checkpoint is on disk
            assert proc.poll() is None and time.monotonic() < deadline, "the run ended before the cut"
            latest = ckpt.latest_checkpoint(run_dir)
            if latest is not None and (run_dir / "samples.jsonl").exists():
                spooled = [
                    json.loads(line)
                    for line in (run_dir / "samples.jsonl").read_text().splitlines()
                    if line.endswith("}")
                ]
                if ckpt.checkpoint_step(latest) >= 8 and max(s["step"] for s in spooled) > ckpt.checkpoint_step(latest):
                    break
            time.sleep(0.005)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        cut_at = ckpt.checkpoint_step(ckpt.latest_checkpoint(run_dir))
        before = (run_dir / "samples.jsonl").read_text().splitlines()
        assert max(json.loads(line)["step"] for line in before if line.endswith("}")) > cut_at, "nothing to drop"

        resumed = run_trainer(cfg, run_dir, resume=True, OPL_DASHBOARD_URL=dash.url, OPL_ATTEMPT="2", **env)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert f"resumed at update {cut_at}" in resumed.stdout

    got = _samples(run_dir)
    assert len({_ident(s) for s in got}) == len(got), "a sample recorded twice"
    assert [_ident(s) for s in got] == [_ident(s) for s in expected]
    for g, e in zip(got, expected):
        assert _content(g) == _content(e), _ident(g)
        assert g["log_ratio"] == pytest.approx(e["log_ratio"], abs=1e-4)

    posts = [r for r in dash.requests if r["path"] == "/api/v1/runs/17/samples"]
    assert [r["status"] for r in posts][:2] == [503, 500]
    stored = {}
    for r in posts:
        if r["status"] < 300:
            for s in r["body"]["samples"]:
                stored[_ident(s)] = s  # the dashboard's rule: a later post of a key replaces it
    assert sorted(stored) == sorted(_ident(s) for s in got)
    assert all(stored[_ident(s)] == s for s in got)
    # the 503 and the 500 were retried and every sample stored: no sample was lost, so none is counted
    assert not [p for p in read_points(run_dir) if p["key"] == "samples/push_failures"]


def test_async_samples_carry_prompts_and_references_from_the_generator_process(tmp_path):
    cfg = _config(
        tmp_path,
        staleness={"mode": "async", "max_staleness": 4},
        algorithm={"objective": "m2po", "updates_per_step": 2, "lr": 1e-2},
        train={"steps": 4},
        eval={"at_start": False, "every": 0},
        task={"eval_sets": []},
        samples={"every": 4, "per_step": 5},
    )
    result = run_trainer(cfg, tmp_path / "run")
    assert result.returncode == 0, result.stdout + result.stderr
    train = _train_by_step(_samples(tmp_path / "run"))
    assert sorted(train) == [2, 4, 8]
    for step, rows in train.items():
        assert [r["index"] for r in rows] == list(range(5))
        for r in rows:
            question = r["prompt"].removesuffix("=")
            assert r["reference"] is not None and int(r["reference"]) == sum(map(int, question.split("+")))
            # counted from the step's start, 2 updates before its metric step (one definition, docs/GUIDE.md)
            assert 0 <= r["staleness"] <= 4 and r["staleness"] == step - 2 - r["policy_version"]


def test_two_ranks_record_rank_0s_rows_and_count_the_samples_the_dashboard_refused(tmp_path):
    """Only rank 0 records and pushes; its samples/push_failures point (the dashboard refuses the
    first sample batch for good) must not upset the ranks' collective mean of the step's metrics
    (it once did: the run died in all_reduce)."""
    import subprocess
    import sys

    from tests.integration.trainer.cli_helpers import REPO, trainer_env

    cfg = _config(
        tmp_path,
        rollout={"group_size": 4, "prompts_per_step": 8, "max_new_tokens": 3},
        algorithm={"objective": "grpo", "eps_low": 0.01, "eps_high": 0.01, "updates_per_step": 2, "lr": 1e-2},
        train={"steps": 12},
        eval={"at_start": False, "every": 0},
        task={"eval_sets": []},
        samples={"every": 2, "per_step": 64},
        reporting={"push_interval_s": 0.1, "flush_timeout_s": 1},
    )
    cmd = [
        sys.executable,
        "-m",
        "trainer.launch",
        "--nproc-per-node",
        "2",
        "--",
        "run",
        "--config",
        str(cfg),
        "--run-dir",
        str(tmp_path / "run"),
    ]
    with Dashboard(path_statuses={"/samples": [400]}) as dash:
        env = trainer_env(OPL_DASHBOARD_URL=dash.url, OPL_RUN_ID="17", OPL_RUN_TOKEN="tok-17")
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    train = _train_by_step(_samples(tmp_path / "run"))
    assert sorted(train) == list(range(2, 25, 2))
    # rank 0's minibatch: its 4 of the 8 prompts, x 4 samples, split in 2 updates = 8 rows
    assert all([r["index"] for r in rows] == list(range(8)) for rows in train.values())
    failures = [p["value"] for p in read_points(tmp_path / "run") if p["key"] == "samples/push_failures"]
    assert failures and failures == sorted(failures) and failures[0] >= 1
