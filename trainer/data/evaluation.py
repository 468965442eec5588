"""Evaluation: accuracy on each eval set, every problem evaluated once across the ranks.

Evaluation samples from its own random stream: each evaluation seeds a torch.Generator from the
run's seed and the update it evaluates at, and draws the sampling seed from it inside
torch.random.fork_rng, so the global stream training samples from is exactly where it was. Without
this the eval schedule changed training: the same seed with eval every 10 and every 50 updates
trained two different runs."""

from __future__ import annotations

import logging

import numpy as np
import torch

from trainer.policy.distributed import DistInfo, sum_across
from trainer.rollout.rewards import RewardFailure

log = logging.getLogger("trainer")


def eval_share(items: list, dist: DistInfo) -> list:
    """Every rank-th eval problem, starting at this rank: every problem is evaluated once,
    whatever the world size (AIME24's 30 problems on 8 ranks are 30, not 24)."""
    return items[dist.rank :: dist.world]


EVAL_STREAM = 0x5EED_E7A1  # keeps the eval stream apart from any stream seeded with the run's seed alone


def eval_generator(seed: int, version: int, rank: int = 0) -> torch.Generator:
    """Evaluation's own generator at `version`: the same for the same run seed, update and rank,
    however often the run evaluated before (so a resumed run evaluates as an uninterrupted one)."""
    return torch.Generator().manual_seed((seed * 1_000_003 + version * 8_191 + rank + EVAL_STREAM) % 2**63)


class Evaluator:
    def __init__(self, cfg, eval_sets: list, engine, dist: DistInfo, samples):
        self.cfg, self.eval_sets, self.engine, self.dist = cfg, eval_sets, engine, dist
        self.samples = samples  # rank 0's SampleRecorder, else None

    def evaluate(self, version: int) -> dict[str, float]:
        """eval/<set>/acc and eval/<set>/reward_failures per set, and eval/avg_acc; the global random
        state (CPU and this rank's GPU) is left as it was."""
        generator = eval_generator(self.cfg.train.seed, version, self.dist.rank)
        device = getattr(self.engine, "device", None)
        gpus = [device] if isinstance(device, torch.device) and device.type == "cuda" else []
        with torch.random.fork_rng(devices=gpus):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
            return self._evaluate(version)

    @torch.no_grad()
    def _evaluate(self, version: int) -> dict[str, float]:
        out = {}
        for es in self.eval_sets:
            counts = self._score_my_share(es, version)
            right, failed, total = (sum_across(v, self.dist) for v in counts)
            if total and failed == total:
                raise RewardFailure(
                    f"every reward of eval set {es.name} failed ({int(failed)} items); see the log for the first error"
                )
            out[f"eval/{es.name}/acc"] = right / max(total, 1.0)
            out[f"eval/{es.name}/reward_failures"] = failed
        if out:
            out["eval/avg_acc"] = float(np.mean([v for k, v in out.items() if k.endswith("/acc")]))
        return out

    def _score_my_share(self, es, version: int) -> tuple[float, float, float]:
        """(right, failed, total) over this rank's share of one eval set; its samples recorded."""
        ev = self.cfg.eval
        problems = eval_share(es.problems, self.dist)
        if not problems:
            return 0.0, 0.0, 0.0
        prompts = [es.prompt_text(p) for p in problems]
        max_new = ev.max_new_tokens or self.cfg.rollout.max_new_tokens
        per = ev.samples_per_problem
        gen = self.engine.generate(prompts, per, max_new, ev.temperature, ev.top_p, record_logp=False)
        expanded = [p for p in problems for _ in range(per)]
        result = es.score(expanded, gen.texts, gen.finished)
        if self.samples is not None:
            self.samples.write_eval(version, es.name, problems, prompts, gen.texts, result, per)
        if result.failed:
            n = len(result.scores)
            log.warning("eval %s: %d of %d rewards failed; first: %s", es.name, result.failed, n, result.first_failure)
        return float(sum(result.scores)), float(result.failed), float(len(result.scores))
