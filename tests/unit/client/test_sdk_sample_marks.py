"""An SDK run's samples with per-token log-probabilities are marked in numpy as the bundled
trainer's loss marks the same tensors: the run's own correction and every counterfactual one, token
by token, as they land in the run's samples spool (what the dashboard then stores and draws)."""

import json

import pytest
import torch

import opl_client.sdk as sdk
from trainer.algo.objectives import policy_loss_marked


@pytest.fixture
def run(tmp_path, monkeypatch):
    monkeypatch.setenv("OPL_TOKEN", "opl_secret-personal-token")
    r = sdk.init(project="lab", name="marks", dir=tmp_path / "spool", mode="offline")
    yield r
    r.finish()


def batch(rows: int = 5, seed: int = 0) -> dict:
    gen = torch.Generator().manual_seed(seed)
    lengths = [6, 9, 4, 9, 7][:rows]
    behav = [(-torch.rand(n, generator=gen, dtype=torch.float64) * 2) for n in lengths]
    logp = [b + (0.5 * torch.randn(n, generator=gen, dtype=torch.float64)) ** 3 for b, n in zip(behav, lengths)]
    adv = [1.0, -1.0, 0.5, -0.5, 1.5][:rows]
    return {"lengths": lengths, "behav": behav, "logp": logp, "adv": adv}


def padded(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in rows])


def spooled(run) -> list[dict]:
    return [json.loads(line) for line in (run.dir / "samples.jsonl").read_text().splitlines()]


def test_an_sdk_runs_sample_marks_equal_the_trainers_loss_marks(run):
    b = batch()
    samples = [
        {
            "prompt": f"q{i}",
            "response": "r",
            "reward": b["adv"][i],
            "tokens": [f"t{j}" for j in range(n)],
            "advantage": b["adv"][i],
            "logp": b["logp"][i].tolist(),
            "behav_logp": b["behav"][i].tolist(),
        }
        for i, n in enumerate(b["lengths"])
    ]
    run.log_samples(samples, step=3, corrections={"objective": "grpo", "eps_high": 0.28})
    stored = spooled(run)
    assert len(stored) == 5 and all("logp" not in s and "behav_logp" not in s for s in stored)

    width = max(b["lengths"])
    logp, behav = padded(b["logp"], width), padded(b["behav"], width)
    mask = padded([torch.ones(n, dtype=torch.bool) for n in b["lengths"]], width)
    adv = torch.tensor(b["adv"], dtype=torch.float64)[:, None].expand(-1, width).contiguous()
    variants = {"grpo": ("grpo", {"eps_high": 0.28}), "m2po": ("m2po", {}), "cispo": ("cispo", {})}
    variants["grpo+dual_clip"] = ("grpo", {"eps_high": 0.28, "dual_clip_c": 3.0})
    marked_somewhere = 0
    for name, (objective, params) in variants.items():
        _, _, marks = policy_loss_marked(objective, logp, behav, adv, mask, **params)
        for i, sample in enumerate(stored):
            got = sample if name == sample["variant"] else sample["counterfactual"][name]
            for kind in ("masked", "clipped", "reweighted"):
                expected = torch.nonzero(getattr(marks, kind)[i]).squeeze(1).tolist()
                assert got[kind] == expected, (name, i, kind)
                marked_somewhere += len(expected)
    assert marked_somewhere > 0
    assert stored[0]["variant"] == "grpo" and stored[0]["objective"] == "grpo"


def test_samples_with_log_probs_but_no_loss_named_are_counted_not_raised(run, caplog):
    run.log_samples([{"prompt": "q", "response": "r", "reward": 1.0, "logp": [-1.0], "behav_logp": [-1.1]}])
    assert not (run.dir / "samples.jsonl").read_text().strip()
    assert 'corrections={"objective": ...}' in caplog.text
