from django.contrib import admin

from orchestrator.metrics.models import MetricChunk


@admin.register(MetricChunk)
class MetricChunkAdmin(admin.ModelAdmin):
    list_display = ("run", "attempt", "key", "seq", "first_step", "last_step", "n", "superseded")
    list_filter = ("superseded",)
    search_fields = ("key",)
    raw_id_fields = ("run",)
    exclude = ("steps", "values", "specials", "times")  # packed arrays; the charts show them
