from django.contrib import admin

from orchestrator.workspace.models import SavedView


@admin.register(SavedView)
class SavedViewAdmin(admin.ModelAdmin):
    list_display = ("name", "project", "owner", "page", "is_default", "updated_at")
    list_filter = ("is_default",)
    search_fields = ("name", "project__name")
    raw_id_fields = ("project", "owner")
