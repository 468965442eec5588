"""The forks task (restate pairs of letters, decide each pair's order), reached as a run reaches it:
YAML -> RunConfig defaults -> the trainer's own task and eval-set construction -> rewards; and the
demonstrations a warm-up from random init learns the format from."""

import random
import textwrap

import pytest
import torch

from trainer.config import ConfigError, load_config, parse_config
from trainer.data.tasks import build_eval_sets, build_task, tokenizer_alphabet
from trainer.policy.models import load_policy
from trainer.rollout.batch import HFEngine
from trainer.rollout.demonstrations import inject
from trainer.rollout.rewards import forks_positions_right, forks_reward


@pytest.fixture
def forks_from_yaml(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        textwrap.dedent("""
        task: {name: forks, eval_sets: [forks], eval_max_problems: 8}
        rollout: {max_new_tokens: 13}
    """)
    )
    cfg = load_config(config)
    return cfg, build_task(cfg.task)


def test_problems_restate_each_pair_and_decide_its_order(forks_from_yaml):
    cfg, task = forks_from_yaml
    assert (cfg.task.fork_pairs, cfg.task.fork_letters, cfg.task.fork_reward_power) == (4, 8, 8.0)  # the defaults
    assert cfg.task.demonstrations == 0
    for p in task.sample(random.Random(3), 50):
        assert len(p.question) == 12 and len(p.answer) == 12
        for i in range(4):
            a, b, slot = p.question[3 * i : 3 * i + 3]
            assert a != b and {a, b} <= set("abcdefgh") and slot == "?"
            assert p.answer[3 * i : 3 * i + 3] == a + b + ("<" if a < b else ">")
        assert task.prompt_text(p) == p.question + "="
    assert task.decision_positions() == [2, 5, 8, 11]
    assert task.sample(random.Random(3), 5) == task.sample(random.Random(3), 5)  # seeded, offline


def test_the_reward_needs_every_position_right_at_once(forks_from_yaml):
    _, task = forks_from_yaml
    answer = "ca>bd<hg>ef<"
    problems = [type("P", (), {"answer": answer})()] * 7
    responses = [answer, "ca<bd<hg>ef<", "ca<bd>hg<ef>", answer + "a", answer[:-1], answer, "cccccccccccc"]
    finished = [True, True, True, True, True, False, True]
    scores = task.train_rewards(problems, responses, finished).scores
    assert scores[0] == 1.0
    assert scores[1] == pytest.approx((12 / 13) ** 8)  # one wrong decision costs 47%
    assert scores[2] == pytest.approx((9 / 13) ** 8)  # four wrong: 5% left
    assert scores[3] == pytest.approx((12 / 13) ** 8)  # runs on past the answer: its end is wrong
    assert scores[4] == pytest.approx((11 / 13) ** 8)  # stops one early: the last decision and the end
    assert scores[5] == pytest.approx((12 / 13) ** 8)  # never stopped
    assert scores[6] == pytest.approx((2 / 13) ** 8)  # one 'c' in place, and the end
    assert forks_positions_right("", True, answer) == (0, 13)
    assert forks_reward("ca>", True, "ca>", power=1.0) == 1.0 and forks_reward("xa>", True, "ca>", power=1.0) == 0.75


def test_eval_set_and_tokenizer_cover_every_character(forks_from_yaml):
    cfg, task = forks_from_yaml
    (forks,) = build_eval_sets(cfg.task, task, verifier_factory=None)
    assert forks.name == "forks" and len(forks.problems) == 8
    alphabet = set(tokenizer_alphabet(task, [forks]))
    assert all(set(task.prompt_text(p) + p.answer) <= alphabet for p in forks.problems)
    result = forks.score(forks.problems[:2], [forks.problems[0].answer, "ab<"], [True, True])
    assert result.scores == [1.0, 0.0]  # exact match, the eval rule
    # an arithmetic run may evaluate on forks too: the tokenizer then covers both
    arith_cfg = parse_config({"task": {"eval_sets": ["arithmetic", "forks"]}, "rollout": {"max_new_tokens": 13}})
    arith = build_task(arith_cfg.task)
    sets = build_eval_sets(arith_cfg.task, arith, verifier_factory=None)
    assert set("0123456789+=abcdefgh?<>") <= set(tokenizer_alphabet(arith, sets))


def test_a_response_too_short_for_the_answer_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as err:
        parse_config({"task": {"name": "forks", "fork_pairs": 6}, "rollout": {"max_new_tokens": 13}})
    assert err.value.problems == [
        ("rollout.max_new_tokens", "13 is too short for a forks answer of 6 pairs: 18 characters and EOS need 19")
    ]
    with pytest.raises(ConfigError, match="task.fork_letters"):
        parse_config({"task": {"name": "forks", "fork_letters": 1}, "rollout": {"max_new_tokens": 13}})


def test_demonstrations_replace_the_last_rows_of_each_group_with_the_answer(forks_from_yaml):
    cfg, task = forks_from_yaml
    policy = load_policy(cfg.model.model_copy(update={"tiny_hidden_size": 32}), task.alphabet, 1, torch.device("cpu"))
    problems = task.sample(random.Random(0), 2)
    gen = HFEngine(policy, torch.device("cpu")).generate([task.prompt_text(p) for p in problems], 3, 13, 1.0, 1.0)
    out = inject(
        gen, [p.answer for p in problems], policy.tokenizer, policy.eos_token_ids[0], group_size=3, per_group=1
    )
    assert out.texts[:2] == gen.texts[:2] and out.texts[3:5] == gen.texts[3:5]  # sampled rows untouched
    assert (
        (out.texts[2], out.texts[5]) == (problems[0].answer, problems[1].answer) and out.finished[2] and out.finished[5]
    )
    P = out.prompt_len
    assert out.response_mask[2].tolist() == [1.0] * 13 and out.input_ids[2, P + 12] == policy.eos_token_ids[0]
    assert policy.tokenizer.decode(out.input_ids[5, P : P + 12].tolist()) == problems[1].answer
    assert torch.equal(out.response_mask[:2], gen.response_mask[:2]) and out.logp[2].abs().sum() == 0
    rewards = task.train_rewards([p for p in problems for _ in range(3)], out.texts, out.finished).scores
    assert rewards[2] == rewards[5] == 1.0


def test_demonstrations_are_refused_where_they_cannot_be_the_whole_response():
    with pytest.raises(ConfigError) as err:
        parse_config(
            {
                "task": {"name": "arithmetic", "answer_format": "boxed", "demonstrations": 4},
                "rollout": {"group_size": 4},
            }
        )
    assert [f for f, _ in err.value.problems] == ["task.demonstrations", "task.demonstrations"]  # no sampled row; boxed
    assert (
        parse_config(
            {"task": {"name": "forks", "demonstrations": 1}, "rollout": {"max_new_tokens": 13}}
        ).task.demonstrations
        == 1
    )
