"""Rollout samples (issue 17): a few rollouts per recording step, written to RUN_DIR/samples.jsonl.

One job: choose the rows, build the spool records, keep them bounded, append them. The pusher
(trainer/reporting.py) posts the file to the dashboard; a resume cuts it like metrics.jsonl
(reporting.truncate_spool). The line format is fixed by notes/SAMPLES-SPEC.md:

    {"kind": "train"|"eval", "step", "index", "eval_set", "prompt", "response", "reference",
     "reward", "correct", "policy_version", "staleness", "objective", "tokens", "log_ratio",
     "clipped", "masked", "truncated", "time"}

Which training steps record: the first training step of a run and every step whose updates cross a
multiple of `samples.every`. Which rows: the first `samples.per_step` rows of the step's *last*
optimizer update's minibatch (its groups are in the seeded shuffle's order, so two runs with one
seed record the same rollouts). That update is the one whose version is the step's metric step,
so `step` is both "the metric step" and "the version after the update that trained on it", and
`log_ratio`, `clipped` and `masked` are that update's own tensors: the loop hands `take` the
`objectives.LossMarks` of every micro-batch's loss call, nothing is recomputed. m2po's mask is the
one the loss used (computed over the whole minibatch when m2po_scope is minibatch); clip-type
objectives report the tokens where the clip term won PPO's min; no_clip marks none. With epochs > 1
a row is trained on once per epoch; the record is of the last epoch's update.

Under torchrun only rank 0 records (its own rows); the trainer holds a recorder on rank 0 only.

Bounds: at most 64 rows per step and 64 eval answers per set (config), `max_tokens` tokens per
sample (the rest cut, `truncated: true`), prompt/response/reference cut to MAX_TEXT_CHARS (the
dashboard's own cut). Overhead outside recording steps is one integer comparison per step.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import torch

from trainer.reporting import SAMPLES_SPOOL_NAME

MAX_TEXT_CHARS = 8000


def _text(value: str | None) -> str | None:
    return None if value is None else value[:MAX_TEXT_CHARS]


def _num(value: float) -> float | None:
    """A number as the spool writes it; NaN/inf as null."""
    value = float(value)
    return value if math.isfinite(value) else None


def _float32s(values: torch.Tensor) -> list[float | None]:
    """float32 values, each written with the fewest digits that read back as the same float32
    (numpy's shortest repr), so the file holds the loss's own values, not a rounding of them."""
    return [float(str(v)) if math.isfinite(v) else None for v in values.float().numpy()]


class SampleRecorder:
    """Rank 0's recorder. `train_due` before a training step; `arm` before its last update; `take`
    from every loss call of that update; `write_train` after it; `write_eval` from evaluate()."""

    def __init__(self, cfg, run_dir: Path, tokenizer, eos_ids, objective: str):
        self.cfg = cfg  # a trainer.config.SamplesConfig
        self.path = Path(run_dir) / SAMPLES_SPOOL_NAME
        self.tokenizer = tokenizer
        self.eos_ids = set(int(i) for i in eos_ids)
        self.objective = objective
        self._token_text: dict[int, str] = {}
        self._armed = None  # (minibatch, version before the update, rows to record)
        self._taken: dict[int, tuple] = {}  # minibatch row -> (kind, marked (T,), log_ratio (T,))
        self._eval_step, self._eval_next = None, 0

    # ---- training ---------------------------------------------------------------------------

    def train_due(self, version: int, updates: int, train_step: int) -> bool:
        """Whether the training step about to run `updates` updates from `version` records."""
        if self.cfg.per_step == 0:
            return False
        every = self.cfg.every
        return train_step == 0 or version // every < (version + updates) // every

    def arm(self, mb, version: int) -> None:
        """The next update (on minibatch `mb`, from `version`) is the one to record."""
        self._armed = (mb, version, min(self.cfg.per_step, len(mb)))
        self._taken = {}

    @property
    def armed(self) -> bool:
        return self._armed is not None

    def take(self, rows: slice, marks) -> None:
        """One loss call's marks; `rows` are the minibatch rows of that micro-batch."""
        wanted = self._armed[2]
        for i in range(rows.start, min(rows.stop, wanted)):
            j = i - rows.start
            self._taken[i] = (marks.kind, marks.tokens[j].cpu(), marks.log_ratio[j].float().cpu())

    def write_train(self, step: int) -> None:
        """Append the armed update's rows, `step` being the version after that update."""
        mb, version, wanted = self._armed
        self._armed = None
        now = time.time()
        records = []
        for i in range(wanted):
            if i not in self._taken:  # no loss call saw the row (cannot happen in the loop)
                raise RuntimeError(f"rollout sample row {i} was never seen by the loss")
            kind, marked, log_ratio = self._taken[i]
            records.append(self._train_record(mb, i, step, version, kind, marked, log_ratio, now))
        self._taken = {}
        self._append(records)

    def _train_record(self, mb, i, step, version, kind, marked, log_ratio, now) -> dict:
        response_ids = mb.input_ids[i, mb.prompt_len :].tolist()
        n_valid = int(mb.response_mask[i].sum())
        n = min(n_valid, self.cfg.max_tokens)
        ids = response_ids[:n]
        hits = torch.nonzero(marked[:n]).squeeze(1).tolist()
        reward = float(mb.rewards[i])
        policy_version = int(mb.versions[i])
        text_ids = [t for t in response_ids[:n_valid] if t not in self.eos_ids]
        return {
            "kind": "train",
            "step": int(step),
            "index": i,
            "eval_set": None,
            "prompt": _text(mb.prompts[i] if mb.prompts is not None else self._prompt_of(mb, i)),
            "response": _text(self.tokenizer.decode(text_ids, skip_special_tokens=True)),
            "reference": _text(mb.references[i] if mb.references is not None else None),
            "reward": _num(reward),
            "correct": reward >= 1.0,
            "policy_version": policy_version,
            "staleness": int(version) - policy_version,
            "objective": self.objective,
            "tokens": [self._token(t) for t in ids],
            "log_ratio": _float32s(log_ratio[:n]),
            "clipped": hits if kind == "clipped" else [],
            "masked": hits if kind == "masked" else [],
            "truncated": n_valid > n,
            "time": now,
        }

    def _prompt_of(self, mb, i: int) -> str:
        """A batch from a checkpoint written before prompts were kept: decode its prompt ids."""
        ids = mb.input_ids[i, : mb.prompt_len][mb.attention_mask[i, : mb.prompt_len].bool()].tolist()
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _token(self, token_id: int) -> str:
        """One response token as text, decoded alone (so a leading space shows); cached per id."""
        text = self._token_text.get(token_id)
        if text is None:
            text = self._token_text[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    # ---- evaluation -------------------------------------------------------------------------

    def write_eval(self, step: int, eval_set: str, problems, prompts, responses, result, per_problem: int) -> None:
        """The first `eval_per_set` problems' first answers of one eval set. `problems` and
        `prompts` are per problem; `responses` and `result` (a RewardBatch) per answer, grouped by
        problem. Indices continue across the eval sets of one step."""
        if step != self._eval_step:
            self._eval_step, self._eval_next = step, 0
        now = time.time()
        records = []
        for p in range(min(self.cfg.eval_per_set, len(problems))):
            a = p * per_problem
            score = float(result.scores[a])
            failed = bool(result.statuses) and result.statuses[a] != "ok"
            records.append(
                {
                    "kind": "eval",
                    "step": int(step),
                    "index": self._eval_next,
                    "eval_set": eval_set,
                    "prompt": _text(prompts[p]),
                    "response": _text(responses[a]),
                    "reference": _text(problems[p].answer),
                    "reward": _num(score),
                    "correct": None if failed else score >= 1.0,
                    "policy_version": int(step),
                    "staleness": None,
                    "objective": None,
                    "tokens": [],
                    "log_ratio": [],
                    "clipped": [],
                    "masked": [],
                    "truncated": False,
                    "time": now,
                }
            )
            self._eval_next += 1
        self._append(records)

    # ---- the spool --------------------------------------------------------------------------

    def _append(self, records: list[dict]) -> None:
        if not records:
            return
        text = "".join(json.dumps(r, ensure_ascii=False, allow_nan=False) + "\n" for r in records)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())  # rare (recording steps only), and a sample is never lost to a crash
