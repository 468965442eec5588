from django.contrib import admin

from orchestrator.alerts.models import Alert, AlertRule, ProjectNotifications


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ("kind", "project", "run", "enabled", "threshold", "window_s", "action")
    list_filter = ("kind", "action", "enabled")
    raw_id_fields = ("run",)


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ("run", "kind", "message", "action", "fired_at", "email_failures", "webhook_failures")
    list_filter = ("kind",)
    raw_id_fields = ("run",)
    readonly_fields = ("fired_at",)


@admin.register(ProjectNotifications)
class ProjectNotificationsAdmin(admin.ModelAdmin):
    list_display = ("project", "webhook_url", "emails", "email_owner")
