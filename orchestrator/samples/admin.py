from django.contrib import admin

from orchestrator.samples.models import RolloutSample


@admin.register(RolloutSample)
class RolloutSampleAdmin(admin.ModelAdmin):
    list_display = (
        "run",
        "attempt",
        "kind",
        "step",
        "index",
        "eval_set",
        "reward",
        "correct",
        "n_tokens",
        "n_masked",
        "n_clipped",
        "staleness",
    )
    list_filter = ("kind", "correct", "objective")
    search_fields = ("prompt", "prompt_hash")
    raw_id_fields = ("run",)
    exclude = ("log_ratio", "entropy")  # packed float32; the run page colours the tokens by the log ratio
