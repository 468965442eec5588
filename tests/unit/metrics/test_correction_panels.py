"""The Corrections panel group: the A<0 tail and what each correction does, read from
the keys the trainer logs (docs/SAMPLES.md) and named by the run's correction; none of it for a
run from before the correction lab."""

from orchestrator.metrics.corrections import variant_of
from orchestrator.metrics.panels import CORRECTIONS, fraction_label, panels_for

NEW = {
    "objective": "m2po",
    "dual_clip_c": None,
    "token_mask": False,
    "seq_mask": False,
    "sq_log_ratio_coef": 0.0,
    "tis_cap": None,
}
TAIL_KEYS = ["actor/ratio_neg_max", "actor/ratio_neg_p99", "actor/ratio_neg_p50", "actor/top_token_share_max"]


def group(panels):
    return {p["id"]: p for p in panels if p.get("group") == CORRECTIONS}


def config(**algorithm):
    return {"algorithm": {**NEW, **algorithm}, "rollout": {"behav_logp": "recompute"}}


def test_a_run_from_before_the_correction_lab_gets_no_corrections_panels():
    assert group(panels_for(["actor/m2", "actor/clip_frac"], [{"algorithm": {"objective": "m2po"}}])) == {}


def test_the_tail_panels_come_first_and_the_dual_clip_draws_its_bound():
    panels = group(panels_for([], [config(dual_clip_c=3.0)]))
    assert list(panels) == ["neg_tail", "top_share", "pos_ratio", "corrections_frac", "divergence", "ess", "engine"]
    tail = panels["neg_tail"]
    assert tail["log_y"] and tail["keys"][0] == "actor/ratio_neg_max"
    assert tail["lines"] == [{"y": 3.0, "label": "dual clip c = 3"}]
    assert "runaway tail" in tail["description"] and "88–99.7%" in panels["top_share"]["description"]
    assert group(panels_for([], [config()]))["neg_tail"]["lines"] == []  # no dual clip: no bound to draw


def test_the_fraction_panel_names_what_each_part_of_the_correction_does():
    frac = group(panels_for([], [config(dual_clip_c=3.0, token_mask=True)]))["corrections_frac"]
    assert frac["title"] == "Tokens each correction acts on (m2po+dual_clip+token_mask)"
    assert frac["keys"] == ["actor/masked_frac", "actor/clipped_frac", "actor/dual_clip_frac", "actor/token_mask_frac"]
    assert frac["labels"] == {
        "actor/masked_frac": "masked: m2po, token_mask",
        "actor/clipped_frac": "clipped: dual_clip",
        "actor/dual_clip_frac": "dual_clip (clipped)",
        "actor/token_mask_frac": "token_mask (masked)",
    }
    cispo = group(panels_for([], [config(objective="cispo", dual_clip_c=3.0)]))["corrections_frac"]
    assert cispo["keys"] == ["actor/reweighted_frac"] and cispo["labels"] == {
        "actor/reweighted_frac": "reweighted: cispo"
    }
    assert "corrections_frac" not in group(panels_for([], [config(objective="no_clip")]))  # no_clip marks nothing
    both = group(panels_for([], [config(), config(objective="grpo")]))["corrections_frac"]
    assert both["keys"] == ["actor/masked_frac", "actor/clipped_frac"] and both["labels"] == {}


def test_the_token_fraction_names_the_variant():
    assert fraction_label("m2po+dual_clip") == "masked or clipped (m2po+dual_clip)"
    assert (
        fraction_label("cispo") == "none (cispo)" and fraction_label("cispo+token_mask") == "masked (cispo+token_mask)"
    )
    assert fraction_label("m2po_cap") == "clipped (m2po_cap)"  # its solved tau clips, as the trainer marks it
    clip = {p["id"]: p for p in panels_for([], [config(dual_clip_c=3.0)])}["clip_frac"]
    assert clip["title"] == "Token fraction masked or clipped (m2po+dual_clip)"
    assert clip["labels"] == {"actor/clip_frac": "masked or clipped fraction"}


def test_optional_panels_follow_the_config_or_the_logged_keys():
    engine_off = config()
    engine_off["rollout"]["behav_logp"] = "engine"
    assert "engine" not in group(panels_for([], [engine_off]))
    assert "engine" in group(panels_for(["rollout/engine_kl_k3"], [engine_off]))  # logged: shown
    assert "sq_penalty" not in group(panels_for(["actor/sq_log_ratio_penalty"], [config()]))  # logged as 0 when off
    assert "sq_penalty" in group(panels_for([], [config(sq_log_ratio_coef=1e-3)]))
    # a run whose config predates the fields but that logs the keys (an older dashboard row) still gets them
    assert "neg_tail" in group(panels_for(TAIL_KEYS, [{"algorithm": {"objective": "m2po"}}]))


def test_variant_names_follow_the_contract_order():
    assert variant_of(config()) == "m2po"
    assert (
        variant_of(config(objective="grpo", tis_cap=2.0, token_mask=True, dual_clip_c=3.0, sq_log_ratio_coef=1e-3))
        == "grpo+dual_clip+token_mask+tis+sq_penalty"
    )
    assert (
        variant_of(config(objective="sapo", dual_clip_c=3.0, seq_mask=True)) == "sapo+seq_mask"
    )  # no dual clip for sapo
    assert variant_of({"algorithm": {"objective": "grpo"}}) == "grpo"  # an older config: every option off
