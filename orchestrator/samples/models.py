"""Rollout samples a run's trainer recorded: what the policy answered, its reward and
verdict, and per response token the log ratio the loss saw and whether the objective clipped or
masked it. The wire format is in schemas.py (docs/SAMPLES.md, docs/GUIDE.md "Rollout samples").

Storage per run is bounded (services.samples_ingest thins older steps), and each row is kept
small: the per-token log ratios are packed float32 (4 bytes a token, NaN for a null) rather than
JSON numbers, and the counts the views sort and filter by are columns of their own.
"""

from __future__ import annotations

import math
import struct

from django.db import models

from orchestrator.experiments.models import Run
from orchestrator.samples import marks

LOG_RATIO = "<f4"  # little-endian float32, one per token


def pack_log_ratios(values: list[float | None]) -> bytes:
    return struct.pack(f"<{len(values)}f", *(math.nan if v is None else v for v in values))


def unpack_log_ratios(raw: bytes | memoryview | None) -> list[float | None]:
    if not raw:
        return []
    raw = bytes(raw)
    return [None if math.isnan(v) else v for v in struct.unpack(f"<{len(raw) // 4}f", raw)]


class RolloutSample(models.Model):
    class Kind(models.TextChoices):
        TRAIN = "train"
        EVAL = "eval"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="samples")
    attempt = models.PositiveIntegerField(default=1)
    kind = models.CharField(max_length=5, choices=Kind.choices)
    step = models.BigIntegerField(help_text="the metric step (optimizer updates), as on the charts")
    index = models.PositiveIntegerField(help_text="0..n-1 within (kind, step)")
    eval_set = models.CharField(max_length=200, blank=True, default="")
    prompt = models.TextField()
    prompt_hash = models.CharField(max_length=32, help_text="sha256 of the prompt: the same prompt across runs")
    response = models.TextField()
    reference = models.TextField(null=True, blank=True)
    reward = models.FloatField(null=True, help_text="null: the trainer had no finite reward")
    correct = models.BooleanField(null=True)
    policy_version = models.BigIntegerField(null=True)
    staleness = models.BigIntegerField(null=True)
    objective = models.CharField(max_length=40, blank=True, default="")
    tokens = models.JSONField(default=list, help_text="response tokens, decoded one by one")
    log_ratio = models.BinaryField(default=b"", help_text="packed float32 per token (NaN: null)")
    clipped = models.JSONField(default=list, help_text="token indices the objective clipped")
    masked = models.JSONField(default=list, help_text="token indices the objective masked")
    truncated = models.BooleanField(default=False)
    time = models.FloatField()
    # what the views sort and filter by, computed on ingestion
    n_tokens = models.PositiveIntegerField(default=0)
    n_clipped = models.PositiveIntegerField(default=0)
    n_masked = models.PositiveIntegerField(default=0)
    max_abs_log_ratio = models.FloatField(null=True)
    # the correction lab (marks.py): the run's own correction by name, what it reweighted,
    # each token's entropy, and what every other correction would have done to the same tokens
    variant = models.CharField(
        max_length=64, blank=True, default="", help_text="objective and its options, e.g. m2po+dual_clip"
    )
    advantage = models.FloatField(null=True, help_text="the sample's advantage as the loss saw it")
    reweighted = models.JSONField(default=list, help_text="token indices the objective reweighted")
    n_reweighted = models.PositiveIntegerField(default=0)
    entropy = models.BinaryField(default=b"", help_text="packed float32 per token, nats (NaN: null)")
    counterfactual = models.JSONField(default=dict, help_text="{variant: marks string, one character per token}")
    counterfactual_counts = models.JSONField(default=dict, help_text="{variant: [masked, clipped, reweighted]}")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "kind", "step", "index"], name="sample_once_per_index")]
        indexes = [models.Index(fields=["prompt_hash", "run"], name="sample_prompt_run")]
        # (run, kind, step, index), the constraint's index, serves the step list and a step's samples

    def __str__(self) -> str:
        return f"run {self.run_id} {self.kind} step {self.step} #{self.index}"

    def log_ratios(self) -> list[float | None]:
        return unpack_log_ratios(self.log_ratio)

    def entropies(self) -> list[float | None]:
        return unpack_log_ratios(self.entropy)

    @property
    def own_variant(self) -> str:
        """The run's own correction (a sample from before the correction lab: its objective)."""
        return self.variant or self.objective or ""

    def marks_of(self, variant: str) -> str | None:
        """The marks string (marks.py) of `variant` on this sample's tokens: the run's own, or a
        counterfactual one; None when the trainer did not record that variant for it."""
        if variant == self.own_variant:
            return marks.encode(len(self.tokens), self.masked, self.clipped, self.reweighted)
        return self.counterfactual.get(variant)


class ThinnedStep(models.Model):
    """A (kind, step) of a run that the bound thinned away: a re-post of it (a pusher retry, a
    backfill) is counted as dropped again instead of coming back and moving the thinning."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="thinned_sample_steps")
    kind = models.CharField(max_length=5, choices=RolloutSample.Kind.choices)
    step = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "kind", "step"], name="thinned_step_once")]
