"""Alert rules (per project or per run, over the defaults in rules.py), fired alerts with the
state of their notifications, a project's notification settings, and what a run's rules need to
remember between batches and beat ticks."""

import math

from django.db import models

from orchestrator.alerts import rules
from orchestrator.experiments.models import Project, Run

# An alert the run's own trainer raised (the SDK's `alert(title, text)`): no rule, may repeat.
TRAINER = "trainer"
RULE_KIND_CHOICES = [(k, k.replace("_", " ")) for k in rules.KINDS]
KIND_CHOICES = [*RULE_KIND_CHOICES, (TRAINER, "raised by the trainer")]


class AlertRule(models.Model):
    """Overrides one rule's default for a whole project or for one run (the run's wins)."""

    class Action(models.TextChoices):
        NOTIFY = "notify"
        STOP = "stop"  # cancel after a checkpoint at the current update: Retry resumes from it
        CANCEL = "cancel"  # cancel without a checkpoint: the weights may be broken (a NaN)

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules")
    run = models.ForeignKey(Run, null=True, blank=True, on_delete=models.CASCADE, related_name="alert_rules")
    kind = models.CharField(max_length=20, choices=RULE_KIND_CHOICES)
    enabled = models.BooleanField(default=True)
    threshold = models.FloatField(default=0.0)
    window_s = models.PositiveIntegerField(default=0)
    action = models.CharField(max_length=10, choices=Action.choices, default=Action.NOTIFY)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(project__isnull=True) ^ models.Q(run__isnull=True), name="alert_rule_project_xor_run"
            ),
            models.UniqueConstraint(fields=["project", "kind"], name="alert_rule_one_per_project_kind"),
            models.UniqueConstraint(fields=["run", "kind"], name="alert_rule_one_per_run_kind"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} for {'run ' + str(self.run_id) if self.run_id else 'project ' + str(self.project_id)}"


class Alert(models.Model):
    """A rule that fired for a run: once per attempt and kind (a retried run is watched anew)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="alerts")
    attempt = models.PositiveIntegerField(default=0)
    kind = models.CharField(max_length=20, choices=KIND_CHOICES)
    message = models.TextField()
    step = models.BigIntegerField(null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    action = models.CharField(max_length=10, default="notify")
    action_result = models.CharField(max_length=200, blank=True)
    fired_at = models.DateTimeField(auto_now_add=True)
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_failures = models.PositiveIntegerField(default=0)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "attempt", "kind"], name="alert_once_per_attempt_kind", condition=~models.Q(kind=TRAINER)
            )
        ]
        ordering = ["-fired_at"]

    def __str__(self) -> str:
        return f"run {self.run_id}: {self.kind}"

    def to_dict(self) -> dict:
        iso = lambda t: t.isoformat() if t else None  # noqa: E731
        value = self.value if self.value is None or math.isfinite(self.value) else str(self.value)  # "nan" in JSON
        return {
            "kind": self.kind,
            "attempt": self.attempt,
            "message": self.message,
            "step": self.step,
            "value": value,
            "action": self.action,
            "action_result": self.action_result,
            "fired_at": iso(self.fired_at),
            "email_sent_at": iso(self.email_sent_at),
            "email_failures": self.email_failures,
            "webhook_sent_at": iso(self.webhook_sent_at),
            "webhook_failures": self.webhook_failures,
            "last_error": self.last_error,
        }


class ProjectNotifications(models.Model):
    """Where a project's alerts go besides the run owner's email."""

    project = models.OneToOneField(Project, on_delete=models.CASCADE, related_name="notifications")
    webhook_url = models.URLField(blank=True, max_length=500, help_text='Slack-compatible: receives {"text": ...}')
    emails = models.CharField(max_length=1000, blank=True, help_text="extra addresses, comma-separated")
    email_owner = models.BooleanField(default=True)

    def __str__(self) -> str:
        return f"notifications of {self.project}"


class RunWatch(models.Model):
    """What the rules remember about a run: the smoothed reward and its best, and when its update
    count last moved (beat)."""

    run = models.OneToOneField(Run, primary_key=True, on_delete=models.CASCADE, related_name="watch")
    reward_ema = models.FloatField(null=True, blank=True)
    reward_best = models.FloatField(null=True, blank=True)
    reward_points = models.PositiveIntegerField(default=0)
    reward_step = models.BigIntegerField(default=-1)  # the last reward step folded in
    last_step = models.BigIntegerField(default=-1)
    step_seen_at = models.DateTimeField(null=True, blank=True)
