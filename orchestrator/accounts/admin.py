from django.contrib import admin

from orchestrator.accounts.models import ApiToken


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("user", "name", "created_at", "last_used_at")
    readonly_fields = ("token_hash",)
