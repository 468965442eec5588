"""Rewards: the dense arithmetic credit, and math-verify 1/0 in a process pool."""

from trainer.rewards import MathVerifier, arithmetic_reward


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


def test_math_verify_scores_the_last_boxed_answer():
    verifier = MathVerifier(workers=1, timeout_s=5)
    try:
        scores = verifier.score(
            [r"so $\boxed{\frac{1}{2}}$", r"\boxed{0.5} wait \boxed{3}", "no box at all", r"\boxed{x^2+2x+1}"],
            ["0.5", "0.5", "7", "(x+1)^2"],
        )
    finally:
        verifier.close()
    assert scores == [1.0, 0.0, 0.0, 1.0]
