from django.contrib import admin

from orchestrator.experiments.models import Experiment, Project, Run, RunEvent


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    filter_horizontal = ("members",)


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
    list_display = ("id", "name", "state", "backend", "job_id", "attempt", "priority", "step")
    list_filter = ("state", "backend")
    search_fields = ("name", "job_id")
    readonly_fields = ("token_hash", "token_salt")
    inlines = [RunEventInline]
