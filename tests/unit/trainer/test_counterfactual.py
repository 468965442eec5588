"""Which corrections a recorded sample is also marked by (trainer/algo/counterfactual.py; docs/SAMPLES.md)."""

import json

import pytest
import torch

from trainer.algo.advantages import grpo_advantages
from trainer.algo.counterfactual import MAX_VARIANTS, counterfactual_variants, run_variant
from trainer.algo.objectives import m2po_mask
from trainer.config import parse_config
from trainer.loop import Trainer
from trainer.telemetry.samples import recorded_rows


def _alg(**algorithm):
    return parse_config({"algorithm": algorithm}).algorithm


def _names(alg, has_engine=True):
    return [v.name for v in counterfactual_variants(alg, has_engine)]


def test_a_plain_m2po_run_is_marked_by_every_other_objective_and_each_marking_option():
    alg = _alg()
    assert run_variant(alg) == "m2po"
    assert _names(alg) == [
        "m2po_cap",
        "grpo",
        "no_clip",
        "gspo",
        "cispo",
        "sapo",
        "m2po+dual_clip",
        "m2po+token_mask",
        "m2po+seq_mask",
    ]  # the docs' example


def test_the_runs_options_go_with_every_other_objective_where_they_apply():
    alg = _alg(objective="m2po", dual_clip_c=3.0, tis_cap=2.0)
    assert run_variant(alg) == "m2po+dual_clip+tis"
    variants = {v.name: v for v in counterfactual_variants(alg, has_engine=True)}
    assert list(variants) == [
        "m2po_cap+dual_clip+tis",
        "grpo+dual_clip+tis",
        "no_clip+dual_clip+tis",
        "gspo+dual_clip+tis",
        "cispo+tis",
        "sapo+tis",
        "m2po+dual_clip+token_mask+tis",
        "m2po+dual_clip+seq_mask+tis",
    ]
    assert variants["cispo+tis"].overrides == {"dual_clip_c": None}  # its weight is bounded already
    assert variants["grpo+dual_clip+tis"].overrides == {}


def test_a_switched_on_dual_clip_uses_c_3_and_a_cispo_run_gets_none():
    assert next(
        v for v in counterfactual_variants(_alg(objective="grpo"), True) if v.name == "grpo+dual_clip"
    ).overrides == {"dual_clip_c": 3.0}
    assert not any("dual_clip" in n for n in _names(_alg(objective="cispo")))


def test_engine_masks_are_left_out_without_the_engines_log_probs():
    alg = _alg(token_mask_ref="engine", seq_mask_ref="engine")
    assert "m2po+token_mask" in _names(alg, has_engine=True) and "m2po+seq_mask" in _names(alg, has_engine=True)
    assert not any("mask" in n for n in _names(alg, has_engine=False))


@pytest.mark.parametrize("objective", ["m2po", "decoupled_ppo", "cispo", "sapo"])
def test_never_more_than_the_bound_and_names_fit_64_characters(objective):
    extra = {"dual_clip_c": 3.0} if objective in ("m2po", "decoupled_ppo") else {}
    for alg in (
        _alg(objective=objective),
        _alg(objective=objective, token_mask=True, seq_mask=True, tis_cap=2.0, sq_log_ratio_coef=1e-3, **extra),
    ):
        names = _names(alg)
        assert len(names) <= MAX_VARIANTS == 10 and len(set(names)) == len(names)
        assert run_variant(alg) not in names
        if objective != "decoupled_ppo":  # only a decoupled_ppo run has pi_prox (its own option variants use it)
            assert "decoupled_ppo" not in {n.split("+")[0] for n in names}
        assert all(len(n) <= 64 for n in names + [run_variant(alg)])


# ---------------------------------------------------------------------------------------------
# In the loop: a counterfactual entry is what that correction's own run marks on the same batch
# ---------------------------------------------------------------------------------------------


STALE = {
    "tau_m2": 0.002,
    "eps_low": 0.05,
    "eps_high": 0.05,
    "dual_clip_c": None,
    "token_mask_low": 0.9,
    "token_mask_high": 1.1,
    "seq_mask_high": 1.02,
    "updates_per_step": 1,
}


class _OneUpdate:
    """A tiny model and a stale batch, and recorded updates of it under any algorithm section: the
    weights never move (no optimizer step), so every recording sees the same tensors."""

    def __init__(self, tmp_path, name, micro, **algorithm):
        cfg = parse_config(
            {
                "task": {"eval_sets": []},
                "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 8},
                "algorithm": {**STALE, **algorithm},
                "train": {"steps": 1, "device": "cpu", "seed": 3, "micro_batch_size": micro, "torch_threads": 1},
                "eval": {"every": 0, "at_start": False},
                "samples": {"per_step": 16},
            }
        )
        self.trainer = Trainer(cfg, tmp_path / name)
        self.trainer.setup()
        torch.manual_seed(11)
        self.batch = self.trainer.rollouts.generate(0, 0)
        self.batch.behav_logp = (
            self.batch.behav_logp + 0.1 * torch.randn_like(self.batch.behav_logp)
        ) * self.batch.response_mask
        self.adv = grpo_advantages(self.batch.rewards, self.batch.group_size, True, 1e-6) + torch.linspace(
            -0.5, 0.5, len(self.batch)
        )
        self.lines = 0
        self.base = self.trainer.cfg.algorithm

    def record(self, **algorithm):
        """The rows one recorded update writes, under the run's algorithm section changed by `algorithm`."""
        t = self.trainer
        t.cfg = t.updater.cfg = t.cfg.model_copy(update={"algorithm": self.base.model_copy(update=algorithm)})
        t.samples.objective, t.samples.variant = t.cfg.algorithm.objective, run_variant(t.cfg.algorithm)
        t.model.train()
        t.updater.recording = True
        t.samples.arm(self.batch, t.version)
        t.updater.accumulate_gradients(self.batch, self.adv, None)
        t.samples.write_train(1)
        lines = (t.run_dir / "samples.jsonl").read_text().splitlines()
        rows, self.lines = [json.loads(line) for line in lines[self.lines :]], len(lines)
        return rows

    def close(self):
        self.trainer.close()


def _own(rows):
    return [{k: r[k] for k in ("masked", "clipped", "reweighted")} for r in rows]


def test_each_counterfactual_entry_is_that_corrections_own_marks_on_the_same_batch(tmp_path):
    one = _OneUpdate(tmp_path, "run", micro=4, objective="m2po")
    try:
        rows = one.record()
        variants = counterfactual_variants(one.trainer.cfg.algorithm, has_engine=True)
        assert [r["variant"] for r in rows] == ["m2po"] * 16 and all(
            list(r["counterfactual"]) == [v.name for v in variants] for r in rows
        )
        marked = 0
        for v in variants:
            theirs = one.record(objective=v.objective, **v.overrides)
            assert [r["variant"] for r in theirs] == [v.name] * 16
            assert [r["log_ratio"] for r in theirs] == [r["log_ratio"] for r in rows]  # the very same tensors
            assert [r["counterfactual"][v.name] for r in rows] == _own(theirs), v.name
            marked += sum(len(m) for r in _own(theirs) for m in r.values())
        assert marked > 0
    finally:
        one.close()


def test_a_counterfactual_m2po_mask_takes_the_runs_scope(tmp_path):
    """In a grpo run with 4 micro-batches of 4 rows: m2po_scope minibatch gives Algorithm 1 over all
    16 rows (as with one micro-batch), microbatch gives it over each micro-batch alone."""
    masks = {}
    for micro in (4, 0):
        one = _OneUpdate(tmp_path, f"micro-{micro}", micro=micro, objective="grpo")
        try:
            for scope in ("minibatch", "microbatch"):
                masks[micro, scope] = [r["counterfactual"]["m2po"]["masked"] for r in one.record(m2po_scope=scope)]
            batch, adv = one.batch, one.adv
        finally:
            one.close()
    mask = batch.response_mask.bool()
    adv_tok = adv[:, None].expand(mask.shape).contiguous()
    log_r = torch.zeros(mask.shape)  # the log-ratios the loss saw, as the recorded file holds them
    rows = recorded_rows(16, 4, 16)  # sample i is minibatch row rows[i]: round-robin over the 4 groups
    assert sorted(rows) == list(range(16)) and rows[:4] == [0, 4, 8, 12]
    for i, r in enumerate(
        json.loads(line) for line in (tmp_path / "micro-0" / "samples.jsonl").read_text().splitlines()[:16]
    ):
        log_r[rows[i], : len(r["log_ratio"])] = torch.tensor(r["log_ratio"])

    def listed(keep):
        return [torch.nonzero(~keep[row] & mask[row]).squeeze(1).tolist() for row in rows]

    whole = listed(m2po_mask(log_r, adv_tok, mask, STALE["tau_m2"]))
    per = listed(
        torch.cat(
            [m2po_mask(log_r[s : s + 4], adv_tok[s : s + 4], mask[s : s + 4], STALE["tau_m2"]) for s in range(0, 16, 4)]
        )
    )
    assert (
        masks[4, "minibatch"] == masks[0, "minibatch"] == masks[0, "microbatch"] == whole
    )  # one micro-batch: the minibatch
    assert masks[4, "microbatch"] == per
    assert whole != per, "the batch should be noisy enough for the scope to matter"
