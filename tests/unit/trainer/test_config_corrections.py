"""The correction lab's algorithm fields: defaults, the form's schema, and bad values named."""

import typing

import pytest

from trainer.config import ConfigError, RunConfig, parse_config


def test_defaults_leave_m2po_the_papers():
    alg = parse_config({}).algorithm
    assert alg.objective == "m2po" and alg.dual_clip_c is None and not alg.token_mask and not alg.seq_mask
    assert alg.sq_log_ratio_coef == 0.0 and (alg.token_mask_low, alg.token_mask_high) == (0.5, 5.0)
    assert (alg.sapo_tau_pos, alg.sapo_tau_neg) == (1.0, 1.05)


def test_every_field_reaches_the_form_with_its_help_text():
    props = RunConfig.model_json_schema()["$defs"]["AlgorithmConfig"]["properties"]
    for field in (
        "dual_clip_c",
        "token_mask",
        "token_mask_ref",
        "token_mask_low",
        "token_mask_high",
        "seq_mask",
        "seq_mask_ref",
        "seq_mask_low",
        "seq_mask_high",
        "sq_log_ratio_coef",
        "sapo_tau_pos",
        "sapo_tau_neg",
    ):
        assert props[field]["description"], field
    assert props["token_mask_ref"]["enum"] == ["behaviour", "engine"]


@pytest.mark.parametrize(
    "algorithm, rollout, field",
    [
        ({"dual_clip_c": 1.0}, {}, "algorithm.dual_clip_c"),
        ({"objective": "cispo", "dual_clip_c": 3.0}, {}, "algorithm.dual_clip_c"),
        ({"objective": "sapo", "dual_clip_c": 3.0}, {}, "algorithm.dual_clip_c"),
        ({"token_mask": True, "token_mask_ref": "engine"}, {"behav_logp": "engine"}, "algorithm.token_mask_ref"),
        ({"seq_mask": True, "seq_mask_ref": "engine"}, {"behav_logp": "engine"}, "algorithm.seq_mask_ref"),
        ({"token_mask_low": 2.0, "token_mask_high": 1.5}, {}, "algorithm.token_mask_low"),
        ({"seq_mask_low": 1.2, "seq_mask_high": 1.1}, {}, "algorithm.seq_mask_low"),
        ({"seq_mask_high": 0.9}, {}, "algorithm.seq_mask_high"),
        ({"sq_log_ratio_coef": -0.1}, {}, "algorithm.sq_log_ratio_coef"),
        ({"token_mask_ref": "sampler"}, {}, "algorithm.token_mask_ref"),
    ],
)
def test_bad_values_name_the_field(algorithm, rollout, field):
    with pytest.raises(ConfigError) as err:
        parse_config({"algorithm": algorithm, "rollout": rollout})
    assert field in [p for p, _ in err.value.problems], err.value.problems


def test_the_configs_names_are_the_objectives_own():
    # config.py stays torch-free, so it keeps its own copies of these tuples
    from trainer import config
    from trainer.algo import objectives

    assert typing.get_args(config.Objective) == objectives.OBJECTIVES
    assert config.DUAL_CLIP_OBJECTIVES == objectives.DUAL_CLIP_OBJECTIVES
