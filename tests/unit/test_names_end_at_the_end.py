"""Names checked with a pattern end where the value ends: Python's `$` also matches before a final
newline, so "gpu\n" passed a `^...$` check (a review found it in metric keys; these are the other
checks of values a user or a trainer sends)."""

from orchestrator.samples.marks import variant_errors
from trainer.config import is_hub_id


def test_a_variant_name_with_a_trailing_newline_is_refused():
    assert variant_errors("samples[0].variant", "m2po+dual_clip") == []
    assert variant_errors("samples[0].variant", "m2po+dual_clip\n")[0]["field"] == "samples[0].variant"


def test_a_model_name_with_a_trailing_newline_is_no_hub_id():
    assert is_hub_id("HuggingFaceTB/SmolLM2-135M")
    assert not is_hub_id("HuggingFaceTB/SmolLM2-135M\n")
