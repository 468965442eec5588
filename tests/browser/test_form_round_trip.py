"""In Chromium, a preset queued as loaded, and "Fork from here" queued as opened, run the config
they show (the prompt template's line break was lost in a one-line box, so every run
queued from a preset or a fork trained on another prompt)."""

import re

import pytest
from playwright.sync_api import expect

from orchestrator.experiments.models import Experiment, Run
from orchestrator.experiments.presets import get_preset
from orchestrator.experiments.services import experiment_plan
from orchestrator.metrics.compare import differing_fields
from trainer.benchmarks import MATH_PROMPT_TEMPLATE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_preset_and_its_fork_queue_the_prompt_they_show(browser_page, alice):
    page = browser_page
    page.goto("/experiments/new/?preset=cpu-demo-grpo-on-policy")
    expect(page.locator("textarea#f-task__prompt_template")).to_have_value(MATH_PROMPT_TEMPLATE)
    expect(page.locator("#run-count")).to_have_text("1 run")
    page.click("#queue-button")
    expect(page).to_have_url(re.compile(r"/experiments/\d+/$"))

    spec = get_preset("cpu-demo-grpo-on-policy").spec()
    (planned,) = experiment_plan(name=spec["name"], config=spec["config"])
    parent = Experiment.objects.get().runs.get()
    assert parent.config == planned.config

    page.goto(f"/experiments/new/?fork={parent.pk}")
    expect(page.locator("textarea#f-task__prompt_template")).to_have_value(MATH_PROMPT_TEMPLATE)
    page.click("#queue-button")
    expect(page).to_have_url(re.compile(r"/experiments/\d+/$"))
    child = Run.objects.get(parent=parent)
    assert differing_fields([parent.config, child.config]) == ["init.from_run"]
    assert page.console_errors == [] and page.http_errors == []
