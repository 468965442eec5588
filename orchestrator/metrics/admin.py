from django.contrib import admin

from orchestrator.metrics.models import MetricPoint


@admin.register(MetricPoint)
class MetricPointAdmin(admin.ModelAdmin):
    list_display = ("run", "attempt", "key", "step", "value")
    list_filter = ("key",)
    raw_id_fields = ("run",)
