from django.contrib import admin

from orchestrator.cluster.models import Job


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ("name", "backend", "job_id", "native_state", "exit_code", "nodes", "final")
    list_filter = ("backend", "native_state", "final")
