from django.db import models

from orchestrator.experiments.models import Run


class Job(models.Model):
    """One attempt of a run on a cluster. One job per (run, attempt): a submit task retried after
    a crash finds this row (or the job by name on the cluster) instead of creating a second one."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="jobs")
    attempt = models.PositiveIntegerField()
    backend = models.CharField(max_length=32)
    name = models.CharField(max_length=100)
    job_id = models.CharField(max_length=64, blank=True)
    native_state = models.CharField(max_length=32, blank=True)
    reason = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    nodes = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    final = models.BooleanField(default=False)  # a terminal state was seen and recorded
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "attempt"], name="one_job_per_attempt")]

    def __str__(self) -> str:
        return f"{self.name} ({self.backend} {self.job_id or '-'})"
