"""The preset's title and the preview agree on how many runs will be queued ("28 runs"
against "27 runs will be queued"): a warm-up run counts, and it is the preview's first row."""

import re

import pytest

from orchestrator.experiments.presets import list_presets
from orchestrator.web.experiment_form import flat_from_spec

pytestmark = pytest.mark.django_db
COUNTED = [p for p in list_presets() if re.search(r"\((\d+) runs", p.title)]


def test_some_presets_have_a_warm_up_and_a_count():
    assert any("warmup_run" in p.spec() for p in COUNTED)


@pytest.mark.parametrize("preset", COUNTED, ids=[p.slug for p in COUNTED])
def test_the_preview_counts_what_the_preset_says(client, alice, preset):
    client.force_login(alice)
    said = int(re.search(r"\((\d+) runs", preset.title).group(1))
    html = client.post("/experiments/preview", flat_from_spec(preset.spec())).content.decode()
    assert f'<span id="preview-count">{said}</span> runs will be queued' in html, html[:600]
    rows = re.findall(r'<td class="preview-name">([^<]+)', html)
    if "warmup_run" in preset.spec():
        assert 'id="preview-warmup-row"' in html and rows[0].strip().startswith(preset.spec()["name"] + "-warmup")
    else:
        assert 'id="preview-warmup-row"' not in html
