"""Rewards: the dense arithmetic credit, and math-verify 1/0 in a process pool, reached the way a
run reaches them (YAML -> RunConfig defaults -> the trainer's own task construction)."""

import textwrap

import pytest

from trainer.config import load_config
from trainer.data.tasks import build_task
from trainer.rollout.rewards import MathVerifier, arithmetic_reward, math_verify_outcome


def test_arithmetic_reward_is_one_only_for_the_exact_answer_then_eos():
    assert arithmetic_reward("42", True, "42") == 1.0
    assert arithmetic_reward("42", False, "42") == 0.0  # never stopped
    assert arithmetic_reward("042", True, "42") < 1.0  # not the canonical answer
    assert arithmetic_reward("4+2", True, "6") == 0.0  # not a number
    assert arithmetic_reward("", True, "7") == 0.0


def test_closer_numbers_score_higher():
    scores = [arithmetic_reward(x, True, "12") for x in ("12", "11", "9", "3", "40")]
    assert scores == sorted(scores, reverse=True)
    assert scores[1] == 0.9 * (1 - 1 / 6) and scores[-1] == 0.0


@pytest.fixture
def math_task_from_yaml(tmp_path):
    """A `task: math` run config as a user writes it: reward_timeout_s left at its default."""
    train = tmp_path / "train.jsonl"
    train.write_text('{"problem": "What is 1/2?", "answer": "0.5"}\n')
    config = tmp_path / "run.yaml"
    config.write_text(
        textwrap.dedent(f"""
        task: {{name: math, train_file: {train}, eval_sets: []}}
    """)
    )
    cfg = load_config(config)
    assert isinstance(cfg.task.reward_timeout_s, float)  # the value math-verify used to choke on
    task = build_task(cfg.task)
    yield task
    task.close()


def test_math_rewards_from_a_yaml_config_score_right_and_wrong_answers(math_task_from_yaml):
    cases = [
        (r"so $\boxed{\frac12}$", "0.5", 1.0),
        (r"so $\boxed{\frac{1}{2}}$", "0.5", 1.0),
        (r"\boxed{x^2+2x+1}", "(x+1)^2", 1.0),
        (r"\boxed{(x+1)^2}", "x^2+2x+1", 1.0),
        (r"\boxed{0.5} wait \boxed{3}", "0.5", 0.0),  # the last boxed answer counts
        (r"\boxed{x^2+1}", "(x+1)^2", 0.0),
        ("no box at all", "7", 0.0),
    ]
    responses = [c[0] for c in cases]
    problems = [type("P", (), {"answer": c[1]})() for c in cases]
    result = math_task_from_yaml.train_rewards(problems, responses, [True] * len(cases))
    assert result.scores == [c[2] for c in cases]
    assert (result.errors, result.timeouts) == (0, 0)


def test_a_float_timeout_still_scores():
    assert math_verify_outcome(r"so \boxed{42}", "42", 5.0) == (1.0, "ok", None)
    assert math_verify_outcome(r"so \boxed{42}", "42", 0.3) == (1.0, "ok", None)  # rounded up to 1 s


def test_a_reward_that_fails_is_counted_not_silently_zero():
    verifier = MathVerifier(workers=1, timeout_s=5.0)
    try:
        result = verifier.score([r"\boxed{3}", r"\boxed{3}", "no box"], ["3", "", ""])
    finally:
        verifier.close()
    assert result.scores == [1.0, 0.0, 0.0]
    assert result.statuses == ["ok", "error", "error"]
    assert result.errors == 2 and not result.all_failed
    assert "does not parse" in result.first_failure
