"""Django's {# #} comment is one line only: one that spans lines is shown on the page as text (the
compare page showed its note about the sample cards to every user). Every template's comments
that span lines use {% comment %}, and the compare page shows none."""

import re
from pathlib import Path

import pytest

from orchestrator.experiments.services import experiment_create

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def test_no_template_has_a_one_line_comment_spanning_lines():
    spanning = [
        f"{path.relative_to(TEMPLATES)}:{text[: m.start()].count(chr(10)) + 1}"
        for path in sorted(TEMPLATES.rglob("*.html"))
        for text in [path.read_text()]
        for m in re.finditer(r"\{#(?:(?!#\}).)*\n", text, re.DOTALL)
    ]
    assert spanning == []


@pytest.mark.django_db
def test_the_compare_page_shows_no_template_comment(client, alice, tiny_config):
    experiment = experiment_create(owner=alice, name="e", config=tiny_config, sweep={"staleness.k": [0, 2]})
    client.force_login(alice)
    page = client.get(f"/compare/?experiment={experiment.pk}").content.decode()
    assert "{#" not in page and "#}" not in page
