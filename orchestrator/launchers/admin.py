from django.contrib import admin

from orchestrator.launchers.models import Launcher


@admin.register(Launcher)
class LauncherAdmin(admin.ModelAdmin):
    """Staff only (the admin site's own check), and only staff with the model's permissions:
    a launcher is code that the cluster's service account runs. Model.clean() names each bad field."""

    list_display = ("name", "enabled", "command_shown", "created_by", "updated_at")
    list_filter = ("enabled",)
    search_fields = ("name", "description")
    readonly_fields = ("created_by", "created_at", "updated_at")

    @admin.display(description="command")
    def command_shown(self, obj: Launcher) -> str:
        return " ".join(str(a) for a in obj.command)[:120] if isinstance(obj.command, list) else ""

    def save_model(self, request, obj: Launcher, form, change) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)
