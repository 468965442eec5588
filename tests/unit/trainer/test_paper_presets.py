"""The paper's presets evaluate as the paper does (reference/M2PO.md §2.3): the six benchmark sets
in full, mean@4 at temperature 1.0 and top_p 0.7, with the trainer's recomputed behaviour
log-probs and Algorithm 1 over the whole minibatch."""

from pathlib import Path

import pytest
import yaml

from trainer.config import parse_config

PRESETS = Path(__file__).resolve().parents[3] / "examples" / "presets"
PAPER = sorted(p for p in PRESETS.glob("*.yaml") if "paper" in (yaml.safe_load(p.read_text()).get("tags") or []))


def test_there_are_paper_presets():
    assert len(PAPER) >= 3


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_paper_presets_use_the_papers_eval_settings(path):
    cfg = parse_config(yaml.safe_load(path.read_text())["config"])
    assert set(cfg.task.eval_sets) == {"math500", "aime24", "amc23", "minerva_math", "olympiadbench", "gaokao2023en"}
    assert cfg.task.eval_max_problems is None
    assert (cfg.eval.samples_per_problem, cfg.eval.temperature, cfg.eval.top_p) == (4, 1.0, 0.7)
    assert cfg.rollout.behav_logp == "recompute"
    assert cfg.algorithm.m2po_scope == "minibatch"
    assert cfg.rollout.top_p == 1.0 and cfg.rollout.temperature == 1.0
