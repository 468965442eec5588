from django.contrib import admin

from orchestrator.cluster.models import ClusterHealth, ClusterProfile, Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("name", "backend", "job_id", "native_state", "exit_code", "nodes", "final", "stalled_since")
    list_filter = ("backend", "native_state", "final")


@admin.register(ClusterProfile)
class ClusterProfileAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "is_default",
        "partition",
        "account",
        "qos",
        "gpu_type",
        "gpus",
        "time_limit_min",
        "requeue_on_timeout",
    )


@admin.register(ClusterHealth)
class ClusterHealthAdmin(admin.ModelAdmin):
    list_display = ("backend", "last_ok_at", "last_error_at", "last_error")
    readonly_fields = ("backend", "last_ok_at", "last_error", "last_error_at")
