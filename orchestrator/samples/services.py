"""Storing rollout samples: idempotent on (run, kind, step, index), bounded per run.

A re-post (a pusher retry, a backfill after a restart) changes nothing; a later attempt that
records the same (kind, step, index) again replaces the older attempt's sample. Over the bound
(settings.OPL_SAMPLES_MAX_PER_RUN train samples, OPL_SAMPLES_MAX_EVAL_PER_RUN eval samples) the
older steps are thinned: every other recorded step goes, always keeping the first and the newest,
so that a long run keeps evenly spaced samples from its whole history (thinned_steps). A thinned step is remembered
(ThinnedStep): posting it again counts it as dropped instead of bringing it back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import psycopg
from django.conf import settings
from django.db import OperationalError, connection, transaction
from django.db.models import Count

from orchestrator.experiments.models import Run
from orchestrator.metrics.pipeline import Busy, lock_timeout_sql
from orchestrator.samples import marks
from orchestrator.samples.models import RolloutSample, ThinnedStep, pack_log_ratios
from orchestrator.samples.schemas import (
    MAX_TOKEN_CHARS,
    MAX_TOKENS,
    SampleIn,
    clean_text,
    finite_log_ratio,
    prompt_hash,
)

DEFAULT_MAX_TRAIN = 2_000
DEFAULT_MAX_EVAL = 1_000
_LOCK_CLASS = 17  # pg_advisory_xact_lock(17, run id): one samples batch of a run at a time


@dataclass(frozen=True)
class IngestResult:
    stored: int  # samples written (new, or replacing an older attempt's)
    duplicates: int  # samples already stored by this attempt (or a later one): nothing changed
    dropped: int  # samples the bound thinned in this call (posted or stored before)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def sample_bounds() -> dict[str, int]:
    return {
        "train": int(getattr(settings, "OPL_SAMPLES_MAX_PER_RUN", DEFAULT_MAX_TRAIN)),
        "eval": int(getattr(settings, "OPL_SAMPLES_MAX_EVAL_PER_RUN", DEFAULT_MAX_EVAL)),
    }


def sample_row(run: Run, attempt: int, s: SampleIn) -> RolloutSample:
    """The row of a checked sample: text cut to the bounds, tokens to MAX_TOKENS (truncated)."""
    cut = len(s.tokens) > MAX_TOKENS
    tokens = [clean_text(t, MAX_TOKEN_CHARS) for t in s.tokens[:MAX_TOKENS]]
    ratios = [finite_log_ratio(v) for v in s.log_ratio[:MAX_TOKENS]]
    clipped = sorted({i for i in s.clipped if i < MAX_TOKENS})
    masked = sorted({i for i in s.masked if i < MAX_TOKENS})
    finite = [abs(v) for v in ratios if v is not None and math.isfinite(v)]
    return RolloutSample(
        run=run,
        attempt=attempt,
        kind=s.kind,
        step=s.step,
        index=s.index,
        eval_set=clean_text(s.eval_set or "", 200),
        prompt=clean_text(s.prompt),
        prompt_hash=prompt_hash(s.prompt),
        response=clean_text(s.response),
        reference=None if s.reference is None else clean_text(s.reference),
        reward=s.reward,
        correct=s.correct,
        policy_version=s.policy_version,
        staleness=s.staleness,
        objective=clean_text(s.objective or "", 40),
        tokens=tokens,
        log_ratio=pack_log_ratios(ratios),
        clipped=clipped,
        masked=masked,
        truncated=s.truncated or cut,
        time=s.time,
        n_tokens=len(tokens),
        n_clipped=len(clipped),
        n_masked=len(masked),
        max_abs_log_ratio=max(finite) if finite else None,
        **correction_fields(s, len(tokens)),
    )


def correction_fields(s: SampleIn, n_tokens: int) -> dict:
    """The correction lab's columns of a checked sample whose tokens were cut to `n_tokens`."""
    reweighted = sorted({i for i in s.reweighted if i < n_tokens})
    entropy = [v if v is not None and math.isfinite(v) else None for v in s.entropy[:n_tokens]]
    counterfactual = {
        name: marks.encode(n_tokens, e.masked, e.clipped, e.reweighted) for name, e in s.counterfactual.items()
    }
    return {
        "variant": s.variant or "",
        "advantage": s.advantage,
        "reweighted": reweighted,
        "n_reweighted": len(reweighted),
        "entropy": pack_log_ratios(entropy),
        "counterfactual": counterfactual,
        "counterfactual_counts": {name: marks.counts(m) for name, m in counterfactual.items()},
    }


def samples_ingest(*, run: Run, attempt: int, samples: list[SampleIn]) -> IngestResult:
    """Store a checked batch (schemas.parse_batch); see the module's docstring. Raises Busy when
    another batch of the run holds its lock past the lock timeout (the view answers 429)."""
    latest: dict[tuple[str, int, int], SampleIn] = {}
    for s in samples:  # one (kind, step, index) twice in a batch: the last one counts
        latest[(s.kind, s.step, s.index)] = s
    duplicates = len(samples) - len(latest)
    try:
        with transaction.atomic():
            _lock(run.pk)
            stored, dups, dropped = _store(run, attempt, latest)
            dropped += sum(
                _thin(run.pk, kind, bound)
                for kind, bound in sample_bounds().items()
                if any(k[0] == kind for k in latest)
            )
    except OperationalError as exc:
        if isinstance(exc.__cause__, psycopg.errors.LockNotAvailable):
            raise Busy(str(exc)) from exc
        raise
    return IngestResult(stored=stored, duplicates=duplicates + dups, dropped=dropped)


def _lock(run_id: int) -> None:
    if connection.vendor == "postgresql":  # SQLite: a write transaction already runs alone
        with connection.cursor() as cur:
            cur.execute(lock_timeout_sql())
            cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_CLASS, run_id % 2**31])


def _store(run: Run, attempt: int, latest: dict) -> tuple[int, int, int]:
    kinds = {k[0] for k in latest}
    steps = {k[1] for k in latest}
    existing = {
        (kind, step, index): (pk, att)
        for pk, kind, step, index, att in RolloutSample.objects.filter(
            run=run, kind__in=kinds, step__in=steps
        ).values_list("pk", "kind", "step", "index", "attempt")
    }
    thinned = set(ThinnedStep.objects.filter(run=run, kind__in=kinds, step__in=steps).values_list("kind", "step"))
    rows, replaced, duplicates, dropped = [], [], 0, 0
    for key, sample in latest.items():
        if key[:2] in thinned:
            dropped += 1
        elif key in existing and existing[key][1] >= attempt:
            duplicates += 1
        else:
            if key in existing:
                replaced.append(existing[key][0])
            rows.append(sample_row(run, attempt, sample))
    if replaced:
        RolloutSample.objects.filter(pk__in=replaced).delete()
    RolloutSample.objects.bulk_create(rows)
    return len(rows), duplicates, dropped


def thinned_steps(stored: list[tuple[int, int]], thinned: set[int], bound: int) -> list[int]:
    """The stored steps to drop so that at most `bound` samples remain, from [(step, samples)...]
    of the stored steps (sorted) and the steps thinned before.

    Each recorded step has a rank among all the steps ever recorded (stored or thinned). Level L
    keeps the ranks that are multiples of 2**L, the first step and the newest: every pass keeps
    every other recorded step. The smallest level that fits is used. Ranks do not move when newer
    steps arrive, so a long run keeps evenly spaced samples over its whole history (not halving
    its oldest part again at every new step). Never fewer than the first and the newest step."""
    total = sum(n for _, n in stored)
    if total <= bound or len(stored) <= 2:
        return []
    rank = {step: r for r, step in enumerate(sorted(thinned | {step for step, _ in stored}))}
    newest = stored[-1][0]
    level = 0
    while True:
        level += 1
        stride = 2**level
        kept = [(step, n) for step, n in stored if rank[step] % stride == 0 or step == newest]
        if sum(n for _, n in kept) <= bound or len(kept) <= 2 or stride > len(rank):
            break
    keep = {step for step, _ in kept} | {stored[0][0]}
    return [step for step, _ in stored if step not in keep]


def _thin(run_id: int, kind: str, bound: int) -> int:
    per_step = list(
        RolloutSample.objects.filter(run_id=run_id, kind=kind)
        .values("step")
        .annotate(n=Count("id"))
        .order_by("step")
        .values_list("step", "n")
    )
    if sum(n for _, n in per_step) <= bound:
        return 0
    before = set(ThinnedStep.objects.filter(run_id=run_id, kind=kind).values_list("step", flat=True))
    gone = thinned_steps(per_step, before, bound)
    if not gone:
        return 0
    ThinnedStep.objects.bulk_create(
        [ThinnedStep(run_id=run_id, kind=kind, step=s) for s in gone], ignore_conflicts=True
    )
    deleted, _ = RolloutSample.objects.filter(run_id=run_id, kind=kind, step__in=gone).delete()
    return deleted
