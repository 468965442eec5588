"""Evaluation draws on its own random generator: the eval schedule cannot change training. The
same seed with eval every 10 and every 50 updates trains the same run, metric for metric."""

import json

import torch

from trainer.config import parse_config
from trainer.data.evaluation import eval_generator
from trainer.loop import Trainer

TINY = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "task": {"name": "arithmetic", "eval_max_problems": 8},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
    "algorithm": {"objective": "grpo", "updates_per_step": 2},
    "train": {"steps": 10, "seed": 3, "device": "cpu", "torch_threads": 1},
    "checkpoint": {"every": 0, "keep": 1},
    "samples": {"per_step": 0},
}
# wall-clock and machine readings and a checkpoint's size on disk differ between any two runs;
# evaluation is what the schedules change on purpose
UNTIMED = ("perf/", "system/", "time/", "checkpoint/", "eval/")


def _training_metrics(run_dir) -> dict[tuple[int, str], float]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)  # one point a line: step, key, value, time
        if not row["key"].startswith(UNTIMED):
            out[(row["step"], row["key"])] = row["value"]
    return out


def _evals(run_dir) -> int:
    return sum('"eval/avg_acc"' in line for line in (run_dir / "metrics.jsonl").read_text().splitlines())


def test_the_eval_schedule_leaves_training_unchanged(tmp_path):
    runs = {}
    for every in (10, 50):
        cfg = parse_config({**TINY, "eval": {"every": every, "at_start": True}})
        assert Trainer(cfg, tmp_path / f"every{every}").run() == 0
        runs[every] = tmp_path / f"every{every}"
    assert _evals(runs[10]) > _evals(runs[50])  # the schedules really differ: 0, 10, 20 against 0, 20
    often, rarely = _training_metrics(runs[10]), _training_metrics(runs[50])
    assert len(often) > 100 and any(k == "rollout/reward_mean" for _, k in often)
    assert often.keys() == rarely.keys()
    assert {k: v for k, v in often.items() if v != rarely[k]} == {}


def test_the_eval_generator_depends_on_the_seed_and_update_only():
    def draw(g):
        return torch.randint(0, 2**62, (1,), generator=g).item()

    assert draw(eval_generator(3, 10)) == draw(eval_generator(3, 10))
    assert len({draw(eval_generator(3, 10)), draw(eval_generator(3, 20)), draw(eval_generator(4, 10))}) == 3
