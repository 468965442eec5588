"""Which corrections a recorded sample is also marked by (trainer/counterfactual.py; docs/SAMPLES.md)."""

import pytest

from trainer.config import parse_config
from trainer.counterfactual import MAX_VARIANTS, counterfactual_variants, run_variant


def _alg(**algorithm):
    return parse_config({"algorithm": algorithm}).algorithm


def _names(alg, has_engine=True):
    return [v.name for v in counterfactual_variants(alg, has_engine)]


def test_a_plain_m2po_run_is_marked_by_every_other_objective_and_each_marking_option():
    alg = _alg()
    assert run_variant(alg) == "m2po"
    assert _names(alg) == ["m2po_cap", "grpo", "no_clip", "gspo", "cispo", "sapo",
                           "m2po+dual_clip", "m2po+token_mask", "m2po+seq_mask"]  # the docs' example


def test_the_runs_options_go_with_every_other_objective_where_they_apply():
    alg = _alg(objective="m2po", dual_clip_c=3.0, tis_cap=2.0)
    assert run_variant(alg) == "m2po+dual_clip+tis"
    variants = {v.name: v for v in counterfactual_variants(alg, has_engine=True)}
    assert list(variants) == ["m2po_cap+dual_clip+tis", "grpo+dual_clip+tis", "no_clip+dual_clip+tis", "gspo+dual_clip+tis",
                              "cispo+tis", "sapo+tis", "m2po+dual_clip+token_mask+tis", "m2po+dual_clip+seq_mask+tis"]
    assert variants["cispo+tis"].overrides == {"dual_clip_c": None}  # its weight is bounded already
    assert variants["grpo+dual_clip+tis"].overrides == {}


def test_a_switched_on_dual_clip_uses_c_3_and_a_cispo_run_gets_none():
    assert next(v for v in counterfactual_variants(_alg(objective="grpo"), True) if v.name == "grpo+dual_clip").overrides == {"dual_clip_c": 3.0}
    assert not any("dual_clip" in n for n in _names(_alg(objective="cispo")))


def test_engine_masks_are_left_out_without_the_engines_log_probs():
    alg = _alg(token_mask_ref="engine", seq_mask_ref="engine")
    assert "m2po+token_mask" in _names(alg, has_engine=True) and "m2po+seq_mask" in _names(alg, has_engine=True)
    assert not any("mask" in n for n in _names(alg, has_engine=False))


@pytest.mark.parametrize("objective", ["m2po", "decoupled_ppo", "cispo", "sapo"])
def test_never_more_than_the_bound_and_names_fit_64_characters(objective):
    extra = {"dual_clip_c": 3.0} if objective in ("m2po", "decoupled_ppo") else {}
    for alg in (_alg(objective=objective), _alg(objective=objective, token_mask=True, seq_mask=True, tis_cap=2.0, sq_log_ratio_coef=1e-3, **extra)):
        names = _names(alg)
        assert len(names) <= MAX_VARIANTS == 10 and len(set(names)) == len(names)
        assert run_variant(alg) not in names
        if objective != "decoupled_ppo":  # only a decoupled_ppo run has pi_prox (its own option variants use it)
            assert "decoupled_ppo" not in {n.split("+")[0] for n in names}
        assert all(len(n) <= 64 for n in names + [run_variant(alg)])
