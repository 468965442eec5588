from django.conf import settings
from django.db import models


class Project(models.Model):
    """A group of experiments, private to its members (see Membership for their roles); the limits
    cap what the whole project may have submitted at once (null: the site-wide default from settings).

    `personal_for` marks a user's own project, used when an experiment names none: found by that
    link rather than by name, so nobody can squat another user's default project."""

    name = models.CharField(max_length=100, unique=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="opl_projects", blank=True, through="Membership"
    )
    personal_for = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="personal_project"
    )
    description = models.TextField(blank=True, max_length=2000)
    max_active_runs = models.PositiveIntegerField(null=True, blank=True)
    max_gpus = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user's role in a project. Owners manage the members and roles; members run experiments;
    viewers only read. Staff may do everything everywhere."""

    class Role(models.TextChoices):
        OWNER = "owner"
        MEMBER = "member"
        VIEWER = "viewer"

    WRITERS = (Role.OWNER, Role.MEMBER)

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="opl_memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        db_table = "experiments_project_members"  # the table of the former plain many-to-many
        unique_together = [("project", "user")]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} ({self.role})"


class ProjectInvitation(models.Model):
    """An owner's offer of a role in a project. The user joins by accepting it, so nobody is made a
    member, and nothing they log lands in a project, without choosing it; declining deletes it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invitations")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="opl_invitations")
    role = models.CharField(max_length=16, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        unique_together = [("project", "user")]

    def __str__(self) -> str:
        return f"{self.user} invited to {self.project} as {self.role}"


class Tag(models.Model):
    name = models.CharField(max_length=50, unique=True)

    def __str__(self) -> str:
        return self.name


class Experiment(models.Model):
    """A named run config, optionally expanded over a sweep (grid and random search) and seeds
    into runs. Pausing it stops new submissions; its runs keep their own states. It ends when its
    last run ends (a retried run reopens it), unless it was cancelled."""

    class State(models.TextChoices):
        ACTIVE = "active"
        PAUSED = "paused"
        CANCELLED = "cancelled"
        ENDED = "ended"

    name = models.CharField(max_length=200)
    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="experiments")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="experiments")
    base_config = models.JSONField(default=dict)
    sweep = models.JSONField(default=dict, blank=True)  # {dotted.path: [values] | {linear|log: ...}}
    random = models.JSONField(default=dict, blank=True)  # {samples, seed, params: {path: distribution}}
    seeds = models.PositiveIntegerField(default=1)
    priority = models.IntegerField(default=0)
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Run(models.Model):
    """One training job: a full RunConfig, its queue position and its life on a cluster.

    Every state change goes through `experiments.services.run_transition`, which records the
    transition's time here and a RunEvent row.
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        SUBMITTED = "submitted"
        PENDING = "pending"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        LOST = "lost"  # the job vanished from the cluster without a final state

    TERMINAL = (State.SUCCEEDED, State.FAILED, State.CANCELLED, State.LOST)
    ACTIVE = (State.SUBMITTED, State.PENDING, State.RUNNING)
    EXTERNAL_BACKEND = "external"  # runs logged from outside with the `opl` SDK (experiments/external_runs.py)

    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="runs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="runs")
    name = models.CharField(max_length=200)
    config = models.JSONField()
    sweep_values = models.JSONField(default=dict, blank=True)  # the grid point, e.g. {"staleness.k": 64}
    seed = models.IntegerField(default=1)
    # A fork's lineage, set at creation from config init.from_run / init.from_step: the parent run
    # and the update its checkpoint was written at (null: the parent's newest, fixed at submission).
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    parent_step = models.BigIntegerField(null=True, blank=True)

    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    state_reason = models.TextField(blank=True)  # pending reason, failure detail, in plain words
    priority = models.IntegerField(default=0)
    # "Move to top": the newest such run goes first among the owner's runs of equal priority.
    moved_to_top_at = models.DateTimeField(null=True, blank=True)
    gpus = models.PositiveSmallIntegerField(default=0)  # what the run holds while active (quotas)
    cancel_requested = models.BooleanField(default=False)
    tags = models.ManyToManyField(Tag, related_name="runs", blank=True)
    notes = models.TextField(blank=True)

    attempt = models.PositiveIntegerField(default=0)  # 0 until first submitted
    max_attempts = models.PositiveIntegerField(default=3)
    backend = models.CharField(max_length=32, blank=True)
    job_id = models.CharField(max_length=64, blank=True)
    run_dir = models.CharField(max_length=500, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    node_list = models.CharField(max_length=200, blank=True)

    # The ingestion token of the current attempt: only its hash, plus the salt it is derived from
    # (the salt alone cannot produce the token without SECRET_KEY).
    token_hash = models.CharField(max_length=64, blank=True)
    token_salt = models.CharField(max_length=64, blank=True)

    step = models.BigIntegerField(default=0)  # metric steps are 64-bit (tokens seen is a common step)
    total_steps = models.BigIntegerField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    pending_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["state", "-priority", "id"], name="run_queue_idx"),
            models.Index(fields=["experiment", "state"], name="run_experiment_state_idx"),
            models.Index(fields=["owner", "state"], name="run_owner_state_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.name})"

    @property
    def uses_bundled_trainer(self) -> bool:
        """The bundled trainer runs it, so its config is a RunConfig and its pages may assume its
        keys, progress, checkpoints and clone; not a run logged with the SDK or imported, nor a
        launcher's."""
        return self.backend != self.EXTERNAL_BACKEND and "launcher" not in (self.config or {})

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE

    def to_dict(self) -> dict:
        return {
            "id": self.pk,
            "name": self.name,
            "experiment": self.experiment_id,
            "project": self.experiment.project.name,
            "owner": self.owner.get_username() if self.owner_id else None,
            "state": self.state,
            "state_reason": self.state_reason,
            "priority": self.priority,
            "gpus": self.gpus,
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "backend": self.backend,
            "job_id": self.job_id,
            "node_list": self.node_list,
            "exit_code": self.exit_code,
            "run_dir": self.run_dir,
            "step": self.step,
            "total_steps": self.total_steps,
            "last_heartbeat": _iso(self.last_heartbeat),
            "queued_at": _iso(self.queued_at),
            "submitted_at": _iso(self.submitted_at),
            "pending_at": _iso(self.pending_at),
            "started_at": _iso(self.started_at),
            "finished_at": _iso(self.finished_at),
            "config": self.config,
            "sweep_values": self.sweep_values,
            "seed": self.seed,
            "parent": self.parent_id,
            "parent_step": self.parent_step,
            "notes": self.notes,
            "tags": sorted(tag.name for tag in self.tags.all()),  # prefetch_related("tags") in lists
        }


class RunEvent(models.Model):
    """An append-only history of a run's transitions."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    from_state = models.CharField(max_length=16)
    to_state = models.CharField(max_length=16)
    attempt = models.PositiveIntegerField(default=0)
    detail = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]


class LoggingToken(models.Model):
    """A token for the `opl` logging SDK: it creates runs, and writes only the runs it created
    (through each run's own token, handed back at creation). Only its hash is stored.

    `made_with` is the personal token that made it (none when made in a logged-in browser): the
    logging token is deleted with it, so revoking a personal token ends what was made with it."""

    PREFIX = "opllog_"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="logging_tokens")
    made_with = models.ForeignKey(
        "accounts.ApiToken", null=True, blank=True, on_delete=models.CASCADE, related_name="logging_tokens"
    )
    name = models.CharField(max_length=100, default="default")
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.name}"


class ExternalRun(models.Model):
    """A run logged by a trainer other than the bundled one (the `opl` SDK, `opl import`): no job
    of ours runs it, its heartbeats say whether it is alive."""

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="external")
    # the run's owner, for the constraint below (a constraint cannot reach through run)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_runs")
    # chosen by the client: opening a run again with it (a resumed script, `opl sync`, a re-run
    # import) finds the same run. Each user's ids are their own: another user's id opens a run
    # of the caller's, so an id tells nobody whether someone else uses it, and none can be taken
    client_id = models.CharField(max_length=64)
    logging_token = models.ForeignKey(LoggingToken, null=True, blank=True, on_delete=models.SET_NULL)
    heartbeat_timeout_s = models.PositiveIntegerField(default=600)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["owner", "client_id"], name="external_run_client_id_per_user")]

    def __str__(self) -> str:
        return f"external run {self.run_id}"


def _iso(value):
    return value.isoformat() if value else None
