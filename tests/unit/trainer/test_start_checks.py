"""Every constraint is checked before any generation: at parse time from the run's resources, and
at start-up against the world size torchrun really gave. Nothing is silently dropped."""

import pytest
import torch

from trainer.config import ConfigError, check_world_size, parse_config
from trainer.data.benchmarks import DataError, load_benchmark
from trainer.data.evaluation import eval_share
from trainer.policy.distributed import DistInfo


def _problems(exc) -> dict:
    return dict(exc.value.problems)


def test_eps_low_of_one_or_more_is_refused_at_parse_time():
    with pytest.raises(ConfigError) as exc:
        parse_config({"algorithm": {"objective": "grpo", "eps_low": 1.0}})
    assert "algorithm.eps_low" in _problems(exc)


def test_prompts_that_ranks_cannot_share_are_refused_at_parse_time():
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {"rollout": {"prompts_per_step": 8}, "resources": {"workers_per_node": 3}, "train": {"device": "cpu"}}
        )
    assert "cannot be shared equally by 3" in _problems(exc)["rollout.prompts_per_step"]


def test_a_rank_with_fewer_groups_than_updates_is_refused_at_parse_time():
    # 2 ranks x 2 prompts each; 4 minibatches of whole groups cannot split 2 prompts
    with pytest.raises(ConfigError) as exc:
        parse_config(
            {
                "rollout": {"prompts_per_step": 4},
                "algorithm": {"updates_per_step": 4},
                "resources": {"workers_per_node": 2},
                "train": {"device": "cpu"},
            }
        )
    assert "algorithm.updates_per_step" in _problems(exc)


def test_the_real_world_size_is_checked_at_start_up():
    cfg = parse_config({"rollout": {"prompts_per_step": 8}, "algorithm": {"updates_per_step": 2}})
    check_world_size(cfg, 4)  # 2 prompts per rank, 1 per minibatch
    with pytest.raises(ConfigError) as exc:
        check_world_size(cfg, 8)
    assert "algorithm.updates_per_step" in _problems(exc)


@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_no_eval_problem_is_dropped_by_rank_slicing(world):
    problems = list(range(30))  # AIME24's 30 problems
    shares = [eval_share(problems, DistInfo(r, world, r, torch.device("cpu"))) for r in range(world)]
    assert sorted(p for share in shares for p in share) == problems


def test_an_eval_set_that_is_nowhere_names_both_places(tmp_path, monkeypatch):
    monkeypatch.setenv("OPL_BENCHMARKS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataError) as exc:
        load_benchmark("aime24")
    message = str(exc.value)
    assert "HuggingFaceH4/aime_2024" in message and str(tmp_path / "aime24" / "test.jsonl") in message
    assert "HF_HUB_OFFLINE" in message


def test_an_eval_set_loads_from_the_offline_folder_when_the_hub_cannot_be_reached(tmp_path, monkeypatch):
    (tmp_path / "amc23").mkdir()
    (tmp_path / "amc23" / "test.jsonl").write_text('{"problem": "1+1?", "answer": 2.0}\n')
    monkeypatch.setenv("OPL_BENCHMARKS_DIR", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    [problem] = load_benchmark("amc23")
    assert (problem.question, problem.answer) == ("1+1?", "2")


def test_prompt_template_needs_its_question_slot():
    with pytest.raises(ConfigError) as exc:
        parse_config({"task": {"prompt_template": "Solve it. \\boxed{}"}})
    assert "task.prompt_template" in _problems(exc)
