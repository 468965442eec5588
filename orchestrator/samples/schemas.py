"""The wire format of rollout samples (the trainer's RUN_DIR/samples.jsonl lines, posted in
batches to /api/v1/runs/<id>/samples) and the server's bounds on them.

A batch is checked whole by pydantic (types, ranges, unknown fields) and then sample by sample for
what one field cannot say alone (a log ratio per token, indices inside the response); any error
refuses the whole batch with the field named, e.g. `samples.3.log_ratio`. Over-long text is cut,
not refused: a sample is evidence to look at, and a pusher must never be stuck on a batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from orchestrator.lib.api import pydantic_errors
from orchestrator.metrics.schemas import MAX_STEP
from orchestrator.samples import marks

MAX_TEXT = 8_000  # characters of prompt, response and reference each
MAX_TOKENS = 4_096  # response tokens kept per sample (the rest cut, truncated: true)
MAX_TOKEN_CHARS = 1_000  # one decoded token
MAX_LIST = 65_536  # tokens, log ratios or indices sent for one sample (cut to MAX_TOKENS)
MAX_INDEX = 1_000_000
LOG_RATIO_CLAMP = 1e30  # stored as float32


class MarksIn(BaseModel):
    """What one counterfactual correction would have done to the sample's tokens."""

    model_config = ConfigDict(extra="forbid")

    masked: list[int] = Field(default_factory=list, max_length=MAX_LIST)
    clipped: list[int] = Field(default_factory=list, max_length=MAX_LIST)
    reweighted: list[int] = Field(default_factory=list, max_length=MAX_LIST)


class SampleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["train", "eval"]
    step: int = Field(ge=0, le=MAX_STEP)
    index: int = Field(ge=0, le=MAX_INDEX)
    eval_set: str | None = Field(default=None, max_length=200)
    prompt: str
    response: str
    reference: str | None = None
    reward: float | None = Field(allow_inf_nan=False)  # the trainer writes a non-finite reward as null
    correct: bool | None = None
    policy_version: int | None = Field(default=None, ge=-MAX_STEP, le=MAX_STEP)
    staleness: int | None = Field(default=None, ge=-MAX_STEP, le=MAX_STEP)
    objective: str | None = Field(default=None, max_length=40)
    tokens: list[str] = Field(default_factory=list, max_length=MAX_LIST)
    log_ratio: list[float | None] = Field(default_factory=list, max_length=MAX_LIST)
    clipped: list[int] = Field(default_factory=list, max_length=MAX_LIST)
    masked: list[int] = Field(default_factory=list, max_length=MAX_LIST)
    truncated: bool = False
    time: float = Field(allow_inf_nan=False)
    # the correction lab (docs/SAMPLES.md); absent from older trainers' samples
    variant: str | None = Field(default=None, max_length=marks.MAX_VARIANT_CHARS)
    advantage: float | None = Field(default=None, allow_inf_nan=False)
    reweighted: list[int] = Field(default_factory=list, max_length=MAX_LIST)
    entropy: list[float | None] = Field(default_factory=list, max_length=MAX_LIST)
    counterfactual: dict[str, MarksIn] = Field(default_factory=dict, max_length=marks.MAX_VARIANTS)


class SampleBatchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attempt: int | None = None
    samples: list[SampleIn]  # at most settings.OPL_SAMPLES_MAX_PER_BATCH, checked before the model


class BatchError(ValueError):
    """A batch refused whole; `errors` is [{field, message}], the shape of every 400."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors[:3]))
        self.errors = errors


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON; send null for a non-finite log ratio")


def parse_batch(raw: bytes) -> SampleBatchIn:
    """The checked batch of a request body; raises BatchError naming the bad fields."""
    try:
        data = json.loads(raw or b"null", parse_constant=_no_constant)
    except RecursionError:
        raise BatchError([{"field": "(body)", "message": "nested too deeply"}]) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BatchError([{"field": "(body)", "message": f"not valid JSON: {exc}"}]) from None
    most = int(settings.OPL_SAMPLES_MAX_PER_BATCH)
    if isinstance(data, dict) and isinstance(data.get("samples"), list) and len(data["samples"]) > most:
        raise BatchError(
            [
                {
                    "field": "samples",
                    "message": f"at most {most} samples per batch (OPL_SAMPLES_MAX_PER_BATCH), "
                    f"got {len(data['samples'])}",
                }
            ]
        )
    try:
        batch = SampleBatchIn.model_validate(data)
    except ValidationError as exc:
        raise BatchError(pydantic_errors(exc)[:50]) from None
    errors = [error for i, sample in enumerate(batch.samples) for error in _cross_field_errors(i, sample)]
    if errors:
        raise BatchError(errors[:50])
    return batch


def _cross_field_errors(i: int, s: SampleIn) -> list[dict[str, str]]:
    at = f"samples.{i}"
    errors = []
    if len(s.log_ratio) != len(s.tokens):
        errors.append(
            {
                "field": f"{at}.log_ratio",
                "message": f"has {len(s.log_ratio)} values for {len(s.tokens)} tokens: "
                "one per token (null where not finite)",
            }
        )
    for name in ("clipped", "masked"):
        bad = [t for t in getattr(s, name) if not 0 <= t < len(s.tokens)]
        if bad:
            errors.append({"field": f"{at}.{name}", "message": f"index {bad[0]} is outside the {len(s.tokens)} tokens"})
    return errors + correction_errors(at, s)


def correction_errors(at: str, s: SampleIn) -> list[dict[str, str]]:
    """The correction lab's fields: entropy one value per token, never negative; reweighted and every
    counterfactual entry's indices inside the tokens, one mark per token; variant names."""
    errors = []
    if s.entropy and len(s.entropy) != len(s.tokens):
        errors.append(
            {
                "field": f"{at}.entropy",
                "message": f"has {len(s.entropy)} values for {len(s.tokens)} tokens: "
                "one per token (null where not finite), or none",
            }
        )
    negative = next((v for v in s.entropy if v is not None and v < 0), None)
    if negative is not None:
        errors.append({"field": f"{at}.entropy", "message": f"{negative} is negative: an entropy is at least 0"})
    bad = [t for t in s.reweighted if not 0 <= t < len(s.tokens)]
    if bad:
        errors.append({"field": f"{at}.reweighted", "message": f"index {bad[0]} is outside the {len(s.tokens)} tokens"})
    if s.variant is not None:
        errors += marks.variant_errors(f"{at}.variant", s.variant)
    for name, entry in s.counterfactual.items():
        errors += marks.variant_errors(f"{at}.counterfactual", name) or marks.entry_errors(
            f"{at}.counterfactual.{name}", entry.model_dump(), len(s.tokens)
        )
    return errors


def clean_text(text: str, limit: int = MAX_TEXT) -> str:
    """`text` cut to `limit` characters, storable in PostgreSQL: a NUL character or a lone
    surrogate (both valid in JSON strings, refused by PostgreSQL text and jsonb) becomes U+FFFD."""
    text = text[:limit]
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def prompt_hash(prompt: str) -> str:
    """Groups the same prompt across runs (hash of the whole prompt, before any cut)."""
    return hashlib.sha256(prompt.encode("utf-8", "replace")).hexdigest()[:32]


PROMPT_HASH = re.compile(r"[0-9a-f]{32}")  # what prompt_hash makes; check with fullmatch


def finite_log_ratio(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return max(-LOG_RATIO_CLAMP, min(LOG_RATIO_CLAMP, value))
