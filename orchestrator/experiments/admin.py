from django.contrib import admin

from orchestrator.experiments.models import (
    Experiment,
    ExternalRun,
    LoggingToken,
    Membership,
    Project,
    Run,
    RunEvent,
    Tag,
)


class MembershipInline(admin.TabularInline):
    """Members and their roles: the same three roles the API and the projects page set."""

    model = Membership
    extra = 1
    autocomplete_fields = ("user",)


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "personal_for", "max_active_runs", "max_gpus", "created_at")
    search_fields = ("name",)
    raw_id_fields = ("personal_for",)
    inlines = [MembershipInline]


@admin.register(Tag)
class TagAdmin(admin.ModelAdmin):
    search_fields = ("name",)


@admin.register(Experiment)
class ExperimentAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "owner", "state", "priority", "created_at")
    list_filter = ("state", "project")


class RunEventInline(admin.TabularInline):
    model = RunEvent
    extra = 0
    readonly_fields = ("at", "from_state", "to_state", "attempt", "detail")


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ("id", "name", "state", "backend", "job_id", "attempt", "priority", "gpus", "step")
    list_filter = ("state", "backend", "tags")
    filter_horizontal = ("tags",)
    search_fields = ("name", "job_id")
    readonly_fields = ("token_hash", "token_salt")
    raw_id_fields = ("parent",)  # a fork's parent: an id box, not a select over every run
    inlines = [RunEventInline]


@admin.register(LoggingToken)
class LoggingTokenAdmin(admin.ModelAdmin):
    """Logging tokens of the `opl` SDK: deleting one revokes it (its runs keep their own tokens)."""

    list_display = ("user", "name", "created_at", "expires_at", "last_used_at")
    search_fields = ("user__username", "name")
    readonly_fields = ("token_hash", "created_at", "last_used_at")


@admin.register(ExternalRun)
class ExternalRunAdmin(admin.ModelAdmin):
    list_display = ("run", "client_id", "logging_token", "heartbeat_timeout_s", "created_at")
    search_fields = ("client_id",)
    raw_id_fields = ("run", "logging_token")
