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
    native_state = models.CharField(max_length=64, blank=True)
    reason = models.TextField(blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    nodes = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    final = models.BooleanField(default=False)  # a terminal state was seen and recorded
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # set while the job runs but the trainer's heartbeats have stopped
    stalled_since = models.DateTimeField(null=True, blank=True)
    # when the backend accepted our cancel; null while a requested cancel has not reached it
    cancel_sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "attempt"], name="one_job_per_attempt")]

    def __str__(self) -> str:
        return f"{self.name} ({self.backend} {self.job_id or '-'})"


class ClusterProfile(models.Model):
    """Where and how runs are placed on a Slurm cluster; edited by an administrator.

    Names and paths are checked against strict patterns (never put into shell text); the
    set-up lines are the one place where an admin writes shell (module loads, conda).
    """

    name = models.SlugField(max_length=64, unique=True)
    is_default = models.BooleanField(default=False, help_text="used by runs that name no profile")
    partition = models.CharField(max_length=64, blank=True)
    account = models.CharField(max_length=64, blank=True)
    qos = models.CharField(max_length=64, blank=True)
    gpu_type = models.CharField(max_length=64, blank=True, help_text="e.g. a100; empty: any GPU type")
    gpus = models.PositiveSmallIntegerField(null=True, blank=True, help_text="overrides the run's GPU count")
    cpus = models.PositiveSmallIntegerField(null=True, blank=True, help_text="CPUs per job")
    mem_gb = models.FloatField(null=True, blank=True, help_text="memory per job, GB")
    time_limit_min = models.PositiveIntegerField(null=True, blank=True)
    setup_lines = models.TextField(
        blank=True, help_text="shell lines run before the trainer, one per line (e.g. module load cuda/12.4)"
    )
    container = models.CharField(max_length=300, blank=True, help_text="OCI bundle path for Slurm's --container")
    requeue_on_timeout = models.BooleanField(default=False, help_text="requeue runs that hit the time limit")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def to_slurm_profile(self):
        from orchestrator.cluster.slurm.jobscript import SlurmProfile

        return SlurmProfile(
            name=self.name,
            partition=self.partition,
            account=self.account,
            qos=self.qos,
            gpu_type=self.gpu_type,
            gpus=self.gpus,
            cpus=self.cpus,
            mem_gb=self.mem_gb,
            time_limit_min=self.time_limit_min,
            container=self.container,
            setup_lines=[line for line in self.setup_lines.splitlines() if line.strip()],
            requeue_on_timeout=self.requeue_on_timeout,
        )

    def clean(self) -> None:
        from django.core.exceptions import ValidationError
        from pydantic import ValidationError as PydanticError

        try:
            self.to_slurm_profile()
        except PydanticError as exc:
            errors: dict[str, list[str]] = {}
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else "__all__"
                errors.setdefault(field, []).append(err["msg"].removeprefix("Value error, "))
            raise ValidationError(errors) from None


class ClusterHealth(models.Model):
    """The last outcome of talking to each backend, for the health view and the run pages."""

    backend = models.CharField(max_length=32, unique=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.backend}: {self.last_error or 'ok'}"
