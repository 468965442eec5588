from django.db import models

from orchestrator.experiments.models import Run


class MetricPoint(models.Model):
    """One scalar of one run at one optimizer step. NaN and ±inf are kept (PostgreSQL floats
    hold them); they are shown as gaps or markers, never dropped."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="metric_points")
    attempt = models.PositiveIntegerField(default=1)
    key = models.CharField(max_length=200)
    step = models.BigIntegerField()
    value = models.FloatField(null=True)
    time = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "attempt", "key", "step"], name="metric_point_unique"),
        ]
        indexes = [models.Index(fields=["run", "key", "step"], name="metric_run_key_step")]
