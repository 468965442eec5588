"""Prompts are told apart by the part that differs: few-shot prompts share a long start (and chat
templates a common end), so the compare page's prompt chooser and the run page's closed prompts
show the question at the end instead of the same first example every time."""

import pytest

from orchestrator.samples.presenting import prompt_labels

from .helpers import sample
from .test_views import ingest

SHOTS = "Question: Natalia sold clips to 48 of her friends in April.\nAnswer: 72. The answer is 72.\n\n" * 12
CHAT = "\n<|im_end|>\n<|im_start|>assistant\n"


def test_few_shot_prompts_are_labelled_by_their_own_question():
    prompts = [
        SHOTS + "Question: A robe takes 2 bolts of blue fiber?\nAnswer:" + CHAT,
        SHOTS + "Question: What is 17 * 3?\nAnswer:" + CHAT,
    ]
    robe, product = prompt_labels(prompts, [p[-400:] for p in prompts])
    assert robe.startswith("…") and robe.endswith("The answer is 72. Question: A robe takes 2 bolts of blue fiber?")
    assert product.startswith("…") and product.endswith("The answer is 72. Question: What is 17 * 3?")
    assert len(robe) == len(product) == 90


def test_prompts_that_differ_early_keep_their_start():
    assert prompt_labels(["What is 1+1?", "Solve x + 2 = 5.\n" + "x" * 200], ["What is 1+1?", "x" * 200]) == [
        "What is 1+1?",
        "Solve x + 2 = 5. " + "x" * 72 + "…",
    ]
    assert prompt_labels(["2+2="], ["2+2="]) == ["2+2="]
    assert prompt_labels([SHOTS], [SHOTS[-400:]])[0].endswith("The answer is 72.")  # alone and long: its end


@pytest.mark.django_db
def test_the_pages_show_the_question_of_a_few_shot_prompt(client, alice, tiny_config):
    from orchestrator.experiments.services import experiment_create

    experiment = experiment_create(
        owner=alice, name="pair", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}
    )
    runs = list(experiment.runs.order_by("id"))
    for run in runs:
        ingest(run, [sample(4, i, kind="eval", prompt=SHOTS + q) for i, q in enumerate(["Q: robe?", "Q: 17 * 3?"])])
    ingest(runs[0], [sample(5, i, prompt=SHOTS + q) for i, q in enumerate(["Q: apples?", "Q: pears?"])])
    client.force_login(alice)
    chooser = client.get("/compare/samples/", {"runs": f"{runs[0].pk},{runs[1].pk}"}).content.decode()
    assert "72. Q: 17 * 3?</option>" in chooser and "72. Q: robe?</option>" in chooser
    card = client.get(f"/runs/{runs[0].pk}/samples/").content.decode()
    assert "The answer is 72. Q: apples?</span>" in card and "The answer is 72. Q: pears?</span>" in card
