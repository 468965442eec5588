"""Rollout samples: a few rollouts per recording step, written to RUN_DIR/samples.jsonl.

One job: choose the rows, build the spool records, keep them bounded, append them. The pusher
(trainer/reporting.py) posts the file to the dashboard; a resume cuts it like metrics.jsonl
(reporting.truncate_spool). The line format is fixed by docs/SAMPLES.md:

    {"kind": "train"|"eval", "step", "index", "eval_set", "prompt", "response", "reference",
     "reward", "correct", "policy_version", "staleness", "objective", "tokens", "log_ratio",
     "clipped", "masked", "truncated", "time",
     "variant", "advantage", "reweighted", "entropy", "counterfactual"}   # the correction lab

Which training steps record: the first training step of a run and every step whose updates cross a
multiple of `samples.every`. Which rows: `samples.per_step` rows of the step's *last* optimizer
update's minibatch, taken round-robin over its prompt groups (the first rollout of each group, then
the second of each, ...: `recorded_rows`), so a step's samples show several prompts, not one
group's answers to a single prompt. The groups are in the seeded shuffle's order, so two runs with
one seed record the same rollouts. That update is the one whose version is the step's metric step,
so `step` is both "the metric step" and "the version after the update that trained on it", and
`log_ratio`, `clipped`, `masked` and `reweighted` are that update's own tensors: the loop hands
`take` the `objectives.LossMarks` of every micro-batch's loss call, nothing is recomputed. m2po's
mask is the one the loss used (computed over the whole minibatch when m2po_scope is minibatch);
clip-type objectives report the tokens where the clip term won PPO's min; no_clip marks none.
`entropy` is the loss pass's own per-token entropy of pi_theta (the forward that computed log pi,
at the sampling temperature), `advantage` the row's advantage. `counterfactual` holds, per other
correction (trainer/algo/counterfactual.py), the marks its loss made on the same tensors in the same
update (`take_counterfactual`). With epochs > 1 a row is trained on once per epoch; the record is of
the last epoch's update.

Under torchrun only rank 0 records (its own rows); the trainer holds a recorder on rank 0 only.

Bounds: at most 64 rows per step and 64 eval answers per set (config), `max_tokens` tokens per
sample (the rest cut, `truncated: true`), prompt/response/reference cut to MAX_TEXT_CHARS (the
dashboard's own cut); at most counterfactual.MAX_VARIANTS counterfactual entries, each with
disjoint index lists (at most one index per token); entropy rounded to ENTROPY_DECIMALS. Overhead
outside recording steps is one integer comparison per step.
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
ENTROPY_DECIMALS = 4


def train_due(cfg, version: int, updates: int, train_step: int) -> bool:
    """Whether the training step about to run `updates` updates from `version` records samples
    (`cfg` a trainer.config.SamplesConfig). Every rank asks: the counterfactual m2po masks are collective."""
    if cfg.per_step == 0:
        return False
    return train_step == 0 or version // cfg.every < (version + updates) // cfg.every


def recorded_rows(n: int, group_size: int, per_step: int) -> list[int]:
    """The minibatch rows (of n, in groups of group_size) a recording step writes, in order:
    round-robin over the groups, at most per_step of them."""
    groups = max(1, n // group_size)
    order = [g * group_size + j for j in range(group_size) for g in range(groups)]
    return [r for r in order if r < n][:per_step]


def _text(value: str | None) -> str | None:
    return None if value is None else value[:MAX_TEXT_CHARS]


def _num(value: float) -> float | None:
    """A number as the spool writes it; NaN/inf as null."""
    value = float(value)
    return value if math.isfinite(value) else None


def _hits(marked: torch.Tensor, n: int) -> list[int]:
    return torch.nonzero(marked[:n]).squeeze(1).tolist()


def _entropies(values: torch.Tensor) -> list[float | None]:
    return [round(v, ENTROPY_DECIMALS) if math.isfinite(v) else None for v in values.double().tolist()]


def _float32s(values: torch.Tensor) -> list[float | None]:
    """float32 values, each written with the fewest digits that read back as the same float32
    (numpy's shortest repr), so the file holds the loss's own values, not a rounding of them."""
    return [float(str(v)) if math.isfinite(v) else None for v in values.float().numpy()]


class SampleRecorder:
    """Rank 0's recorder. `train_due` before a training step; `arm` before its last update; `take`
    (and `take_counterfactual`) from every loss call of that update; `write_train` after it;
    `write_eval` from evaluate()."""

    def __init__(self, cfg, run_dir: Path, tokenizer, eos_ids, objective: str, variant: str | None = None):
        self.cfg = cfg  # a trainer.config.SamplesConfig
        self.path = Path(run_dir) / SAMPLES_SPOOL_NAME
        self.tokenizer = tokenizer
        self.eos_ids = {int(i) for i in eos_ids}
        self.objective = objective
        self.variant = variant or objective
        self._token_text: dict[int, str] = {}
        self._armed = None  # (minibatch, the step's start version, minibatch rows to record)
        self._taken: dict[
            int, tuple
        ] = {}  # minibatch row -> (marks (3, T) bool, log_ratio (T,), entropy (T,), advantage)
        self._counterfactual: dict[int, dict[str, torch.Tensor]] = {}  # row -> variant -> marks (3, T) bool
        self._eval_step, self._eval_next = None, 0
        self._fh = None  # opened at the first record

    # ---- training ---------------------------------------------------------------------------

    def train_due(self, version: int, updates: int, train_step: int) -> bool:
        """Whether the training step about to run `updates` updates from `version` records."""
        return train_due(self.cfg, version, updates, train_step)

    def arm(self, mb, version: int) -> None:
        """The next update (on minibatch `mb`) is the one to record; `version` is the one its
        training step started from, which the samples' staleness counts from (docs/SAMPLES.md)."""
        self._armed = (mb, version, recorded_rows(len(mb), mb.group_size, self.cfg.per_step))
        self._taken, self._counterfactual = {}, {}

    @property
    def armed(self) -> bool:
        return self._armed is not None

    def positions(self, rows: slice) -> list[tuple[int, int]]:
        """(sample index, position within the micro-batch) of each recorded row in the micro-batch
        holding minibatch rows `rows` (none when not armed)."""
        if self._armed is None:
            return []
        return [(i, r - rows.start) for i, r in enumerate(self._armed[2]) if rows.start <= r < rows.stop]

    def take(
        self, rows: slice, marks, entropy: torch.Tensor | None = None, advantages: torch.Tensor | None = None
    ) -> None:
        """One loss call's marks; `rows` are the minibatch rows of that micro-batch; `entropy`
        (b, T) the loss pass's per-token entropy, `advantages` (b,) the rows' advantages."""
        where = self.positions(rows)
        if not where:
            return
        at = [p for _, p in where]
        kinds = _stack(marks, at)  # one copy each to the CPU
        log_ratio = marks.log_ratio[at].float().cpu()
        ent = entropy[at].float().cpu() if entropy is not None else None
        adv = advantages[at].double().tolist() if advantages is not None else [None] * len(at)
        for j, (i, _) in enumerate(where):
            self._taken[i] = (kinds[j], log_ratio[j], None if ent is None else ent[j], adv[j])

    def take_counterfactual(self, rows: slice, variant: str, marks, at: list[int]) -> None:
        """Another correction's marks on the same rows: `at[j]` is the row of `marks` that holds the
        micro-batch's j-th recorded row (in `positions` order)."""
        where = self.positions(rows)
        kinds = _stack(marks, at)
        for j, (i, _) in enumerate(where):
            self._counterfactual.setdefault(i, {})[variant] = kinds[j]

    def write_train(self, step: int) -> None:
        """Append the armed update's rows, `step` being the version after that update."""
        mb, version, picked = self._armed
        self._armed = None
        missing = [i for i in range(len(picked)) if i not in self._taken]
        if missing:  # no loss call saw the row (cannot happen in the loop)
            raise RuntimeError(f"rollout sample rows {missing} were never seen by the loss")
        taken, self._taken = [self._taken[i] for i in range(len(picked))], {}
        counterfactual, self._counterfactual = self._counterfactual, {}
        self._append(self._train_records(mb, version, picked, taken, counterfactual, step))

    def _train_records(self, mb, version: int, picked: list[int], taken, counterfactual, step: int) -> list[dict]:
        index = torch.tensor(picked, dtype=torch.long)  # whole-tensor conversions once, not per row
        columns = (
            mb.input_ids[index, mb.prompt_len :].tolist(),
            mb.response_mask[index].sum(dim=1).long().tolist(),
            mb.rewards[index].tolist(),
            mb.versions[index].tolist(),
        )
        now = time.time()
        return [
            self._train_record(mb, i, picked[i], t, counterfactual.get(i, {}), columns, version, step, now)
            for i, t in enumerate(taken)
        ]

    def _train_record(self, mb, i: int, row: int, taken, counterfactual, columns, version, step, now) -> dict:
        """Sample i, minibatch row `row`: its text, the loss's marks and the counterfactual marks."""
        kinds, log_ratio, entropy, advantage = taken
        response_ids, n_valid, reward, policy_version = (c[i] for c in columns)
        n = min(n_valid, self.cfg.max_tokens)
        masked, clipped, reweighted = (_hits(kinds[c], n) for c in range(3))
        text_ids = [t for t in response_ids[:n_valid] if t not in self.eos_ids]
        return {
            "kind": "train",
            "step": int(step),
            "index": i,
            "eval_set": None,
            "prompt": _text(mb.prompts[row] if mb.prompts is not None else self._prompt_of(mb, row)),
            "response": _text(self.tokenizer.decode(text_ids, skip_special_tokens=True)),
            "reference": _text(mb.references[row] if mb.references is not None else None),
            "reward": _num(reward),
            "correct": reward >= 1.0,
            "policy_version": policy_version,
            "staleness": int(version) - policy_version,
            "objective": self.objective,
            "tokens": [self._token(t) for t in response_ids[:n]],
            "log_ratio": _float32s(log_ratio[:n]),
            "clipped": clipped,
            "masked": masked,
            "truncated": n_valid > n,
            "time": now,
            "variant": self.variant,
            "advantage": None if advantage is None else _num(advantage),
            "reweighted": reweighted,
            "entropy": [] if entropy is None else _entropies(entropy[:n]),
            "counterfactual": {
                name: {kind: _hits(marks[c], n) for c, kind in enumerate(("masked", "clipped", "reweighted"))}
                for name, marks in counterfactual.items()
            },
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
        if self._fh is None:
            self._fh = open(self.path, "a", encoding="utf-8")
        self._fh.write(text)  # one write of whole lines: the pusher never reads half a record
        self._fh.flush()

    def sync(self) -> None:
        """Durable on disk; the trainer calls it before each checkpoint, as for metrics.jsonl: after
        a crash, samples past the checkpoint are cut and recorded again (reporting.truncate_spool)."""
        if self._fh is not None:
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _stack(marks, at: list[int]) -> torch.Tensor:
    """(len(at), 3, T) bool on the CPU: masked, clipped, reweighted of the rows `at` of LossMarks."""
    return torch.stack([marks.masked[at], marks.clipped[at], marks.reweighted[at]], dim=1).cpu()
