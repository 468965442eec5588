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
from trainer.data.benchmarks import MATH_PROMPT_TEMPLATE

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


PASTED = """algorithm:
  objective: m2po
  token_mask: true
  dual_clip_c: 3.0
train:
  steps: 40
task:
  prompt_template: |
    Solve: {question}
    Answer:
"""


def test_preview_of_pasted_yaml_puts_it_in_the_fields_so_the_form_shows_what_is_queued(browser_page, alice):
    page = browser_page
    page.goto("/experiments/new/?preset=cpu-demo-grpo-on-policy")
    expect(page.locator("#run-count")).to_have_text("1 run")
    page.click("text=Paste YAML")
    page.fill("#f-config_yaml", PASTED)
    page.click("text=Preview runs")
    expect(page.locator("#preview-count")).to_have_text("1")

    # the fields below say what the pasted YAML says, and the box it came from is empty
    expect(page.locator("#f-train__steps")).to_have_value("40")
    expect(page.locator("#f-algorithm__token_mask")).to_have_value("true")
    expect(page.locator("#f-algorithm__dual_clip_c")).to_have_value("3.0")
    expect(page.locator("#f-algorithm__objective")).to_have_value("m2po")
    expect(page.locator("textarea#f-task__prompt_template")).to_have_value("Solve: {question}\nAnswer:\n")
    expect(page.locator("#f-config_yaml")).to_have_value("")
    expect(page.locator("#preview-folded")).to_be_visible()

    page.click("#queue-button")
    expect(page).to_have_url(re.compile(r"/experiments/\d+/$"))
    config = Run.objects.get().config
    assert config["train"]["steps"] == 40 and config["algorithm"]["objective"] == "m2po"
    assert config["algorithm"]["token_mask"] is True and config["algorithm"]["dual_clip_c"] == 3.0
    assert config["task"]["prompt_template"] == "Solve: {question}\nAnswer:\n"
    assert page.console_errors == [] and page.http_errors == []
