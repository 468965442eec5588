"""The run page's samples view in Chromium: tokens coloured by log ratio, the masked and
clipped tokens marked, step chooser and verdict filter (htmx), every text escaped.

The done-when check is the last test: a real tiny CPU m2po run (small tau, so some tokens are
masked) pushes its samples over HTTP into the uvicorn server, and the page's marks are compared,
token by token, with that run's own RUN_DIR/samples.jsonl (written from the loss's tensors).

A screenshot of the view is written to $OPL_SAMPLES_SCREENSHOT when that is set."""

import json
import os
import time

import httpx
import pytest

from tests.browser.conftest import wait_htmx_idle
from tests.unit.metrics.helpers import make_run
from tests.unit.samples.helpers import sample

pytestmark = pytest.mark.browser

TOKENS_JS = """() => Array.from(document.querySelectorAll('#run-samples [data-sample]')).map((card) => ({
    step: Number(card.dataset.step), index: Number(card.dataset.index),
    tokens: Array.from(card.querySelectorAll('.tok[data-i]')).map((t) => ({
        i: Number(t.dataset.i), flag: t.dataset.flag, lr: t.dataset.logRatio, text: t.textContent,
        masked: t.classList.contains('tok-masked'), clipped: t.classList.contains('tok-clipped'),
        bg: getComputedStyle(t).backgroundColor, title: t.title}))}))"""


SIDES_JS = """() => Array.from(document.querySelectorAll('#run-samples [data-sample]')).map((card) => ({
    index: Number(card.dataset.index),
    sides: Object.fromEntries(Array.from(card.querySelectorAll('[data-side]')).map((side) =>
        [side.dataset.side, Array.from(side.querySelectorAll('.tok[data-i]')).map((t) => ({
            i: Number(t.dataset.i), flag: t.dataset.flag, only: t.classList.contains('tok-only'),
            other: t.dataset.other || ''}))]))}))"""


def post_samples(server, run_id, token, samples):
    answer = httpx.post(
        f"{server}/api/v1/runs/{run_id}/samples",
        json={"attempt": 1, "samples": samples},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def cards(page):
    return page.evaluate(TOKENS_JS)


def choose(page, control, value):
    """Pick an option of the samples toolbar and wait for htmx to swap the card in (no swap comes,
    as no change event fires, when the option is already the chosen one). A swap is over once htmx
    has settled the new card: a change made before that may find the new select without its
    handler, and then no request goes out."""
    wait_htmx_idle(page)
    select = page.locator(f"#run-samples [data-control={control}]")
    if select.input_value() == value:
        return
    page.evaluate("() => { document.querySelector('#run-samples').dataset.old = '1'; }")
    select.select_option(value)
    page.wait_for_function("() => { const c = document.querySelector('#run-samples'); return c && !c.dataset.old; }")


def screenshot(page, name):
    if folder := os.environ.get("OPL_SAMPLES_SCREENSHOT"):
        os.makedirs(folder, exist_ok=True)
        page.locator("#run-samples").screenshot(path=os.path.join(folder, name))


def test_masked_and_clipped_tokens_are_marked_and_coloured(page_as, server, alice, tiny_config):
    run, token = make_run(alice, tiny_config)
    tokens = [" The", " sum", " <b>is</b>", " 12", ".", "\n", ""]
    posted = [
        sample(2, 0, reward=0.0),
        sample(
            6,
            0,
            tokens=tokens,
            log_ratio=[0.0, -0.6, 0.6, 0.05, None, -0.02, 0.3],
            masked=[1, 2],
            clipped=[6],
            prompt="Tom has <i>5</i> apples and buys 7. How many?",
            reward=1.0,
        ),
        sample(6, 1, reward=0.0, masked=[4]),
    ]
    assert post_samples(server, run.pk, token, posted) == {"stored": 3, "duplicates": 0, "dropped": 0}
    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.wait_for_selector("#run-samples [data-sample]")
    shown = cards(page)
    assert [(c["step"], c["index"]) for c in shown] == [(6, 0), (6, 1)]  # the newest step first
    first = shown[0]["tokens"]
    assert [t["i"] for t in first if t["masked"]] == [1, 2] and [t["i"] for t in first if t["clipped"]] == [6]
    assert [t["flag"] for t in first] == ["", "masked", "masked", "", "", "", "clipped"]
    assert first[2]["text"] == " <b>is</b>"  # shown as text, not markup
    assert page.locator("#run-samples b:text-is('is')").count() == 0
    assert (
        first[1]["bg"] == "rgba(29, 78, 216, 0.95)" and first[2]["bg"] == "rgba(185, 28, 28, 0.95)"
    )  # saturated at ±0.5
    assert first[0]["bg"] == "rgba(0, 0, 0, 0)" and first[4]["lr"] == "null"
    assert "log ratio -0.6000" in first[1]["title"] and first[1]["title"].endswith("masked")
    assert page.locator("#run-samples .tok-legend .tok-swatch").count() == 7
    summary = page.inner_text("#run-samples [data-summary]")
    assert "2 samples" in summary and "1 right / 1 wrong" in summary and "3 masked, 1 clipped" in summary
    screenshot(page, "samples-view.png")

    choose(page, "verdict", "wrong")
    assert [(c["step"], c["index"]) for c in cards(page)] == [(6, 1)]
    choose(page, "step", "2")
    assert [(c["step"], c["index"]) for c in cards(page)] == [(2, 0)]
    assert page.eval_on_selector("#run-samples [data-control=verdict]", "el => el.value") == "wrong"  # the filter stays

    # the run is live: a newer step shows a hint (the card polls every 10 s), not a reload of the card
    assert page.locator("#samples-newer [data-show-newest]").count() == 0
    post_samples(server, run.pk, token, [sample(9, 0, reward=0.0), sample(9, 1, reward=1.0)])
    page.wait_for_selector("#samples-newer [data-show-newest]", timeout=15_000)
    assert page.inner_text("#samples-newer") == "1 newer step recorded — show newest"
    assert [(c["step"], c["index"]) for c in cards(page)] == [(2, 0)]  # the reader's place is kept
    page.evaluate("() => { document.querySelector('#run-samples').dataset.old = '1'; }")
    page.click("#samples-newer [data-show-newest]")
    page.wait_for_function("() => { const c = document.querySelector('#run-samples'); return c && !c.dataset.old; }")
    assert [(c["step"], c["index"]) for c in cards(page)] == [(9, 0)]  # the newest step, still wrong answers only
    assert page.locator("#samples-newer [data-show-newest]").count() == 0


def test_compare_shows_each_runs_answers_to_the_same_prompt(page_as, server, alice, tiny_config):
    from orchestrator.experiments.services import experiment_create
    from orchestrator.experiments.tokens import derive_token, token_hash

    experiment = experiment_create(
        owner=alice, name="pair", config=tiny_config, sweep={"algorithm.objective": ["m2po", "grpo"]}
    )
    runs = list(experiment.runs.order_by("id"))
    for n, run in enumerate(runs):
        run.attempt, run.token_salt, run.state = 1, "s", "running"
        run.token_hash = token_hash(derive_token(run.pk, 1, "s"))
        run.save()
        post_samples(
            server,
            run.pk,
            derive_token(run.pk, 1, "s"),
            [
                sample(
                    10 * (n + 1),
                    0,
                    kind="eval",
                    prompt="What is 17 * 3?",
                    reward=float(n == 0),
                    response=["51", "54"][n],
                ),
                sample(10 * (n + 1), 1, kind="eval", prompt="Solve x + 2 = 5.", reward=1.0, response="3"),
                sample(10 * (n + 1), 0, prompt="2+2=", masked=[n], reward=0.0),
            ],
        )
    page = page_as(alice)
    page.goto(f"{server}/compare/?runs={runs[0].pk},{runs[1].pk}")
    page.locator("#compare-samples").scroll_into_view_if_needed()  # the card loads when scrolled to
    page.wait_for_selector("#compare-samples .samples-column")
    options = page.eval_on_selector_all(
        "#compare-samples [data-control=prompt] option", "els => els.map((e) => e.textContent)"
    )
    assert (
        len(options) == 3
        and options[0].startswith("[eval gsm8k · 2 runs]")
        and options[2].startswith("[train · 2 runs]")
    )
    columns = page.locator("#compare-samples .samples-column")
    assert columns.count() == 2
    first_prompt = page.inner_text("#compare-samples .sample-prompt pre")
    page.evaluate("() => { document.querySelector('#compare-samples').dataset.old = '1'; }")
    page.select_option("#compare-samples [data-control=prompt]", index=2)
    page.wait_for_function(
        "() => { const c = document.querySelector('#compare-samples'); return c && !c.dataset.old; }"
    )
    assert page.inner_text("#compare-samples .sample-prompt pre") == "2+2=" != first_prompt
    marked = page.eval_on_selector_all(
        "#compare-samples .samples-column",
        """cols => cols.map((c) =>
        Array.from(c.querySelectorAll('.tok-masked')).map((t) => Number(t.dataset.i)))""",
    )
    assert marked == [[0], [1]]
    if folder := os.environ.get("OPL_SAMPLES_SCREENSHOT"):
        page.locator("#compare-samples").screenshot(path=os.path.join(folder, "compare-samples.png"))


def flagged(tokens, flag):
    return [t["i"] for t in tokens if t["flag"] == flag]


def test_a_real_cpu_run_shows_the_trainers_own_masks(page_as, server, settings, tmp_path, alice, tiny_config):
    from orchestrator.cluster.jobspec import run_dir_for
    from orchestrator.cluster.services import run_submit, sync_active_runs
    from orchestrator.experiments.services import experiment_create

    settings.RUNS_DIR, settings.LOCAL_JOBS_DIR, settings.PUBLIC_URL = tmp_path / "runs", tmp_path / "jobs", server
    tiny_config.update(
        {
            # a tiny M2 budget, so that M2PO masks tokens; a high lr and short answers, so that the random
            # tiny model earns some partial reward (an advantage) and moves away from its behaviour policy
            "algorithm": {"objective": "m2po", "updates_per_step": 2, "tau_m2": 1e-6, "lr": 1e-2},
            "staleness": {"mode": "stale_k", "k": 1},
            "train": {"steps": 4, "seed": 1, "device": "cpu", "torch_threads": 1},
            "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 3},
            "checkpoint": {"every": 0},
            "samples": {"every": 1, "per_step": 8},
            "reporting": {"push_interval_s": 0.5},
        }
    )
    run = experiment_create(owner=alice, name="samples-real", config=tiny_config).runs.get()
    run_submit(run_id=run.pk, backend_name="local")
    deadline = time.monotonic() + 300
    while not run.is_terminal and time.monotonic() < deadline:
        time.sleep(1)
        sync_active_runs("local")
        run.refresh_from_db()
    run_dir = run_dir_for(run)
    logs = "\n".join(p.read_text()[-2000:] for p in (run_dir / "logs").glob("*"))
    assert run.state == "succeeded", f"{run.state}: {run.state_reason}\n{logs}"
    spool = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    train = [s for s in spool if s["kind"] == "train"]
    assert train and sum(len(s["masked"]) for s in train) > 0, "tau_m2 1e-6 should mask some tokens"

    page = page_as(alice)
    page.goto(f"{server}/runs/{run.pk}/")
    page.wait_for_selector("#run-samples [data-sample]")
    checked = 0
    for step in sorted({s["step"] for s in train}):
        choose(page, "step", str(step))
        shown = {c["index"]: c["tokens"] for c in cards(page)}
        for s in (s for s in train if s["step"] == step):
            tokens = shown[s["index"]]
            assert [t["text"] for t in tokens] == [
                t.replace("\n", "↵\n").replace("\t", "⇥\t") or "∅" for t in s["tokens"]
            ]
            assert [t["i"] for t in tokens if t["masked"]] == s["masked"], (step, s["index"])
            assert [t["i"] for t in tokens if t["clipped"]] == s["clipped"], (step, s["index"])
            for t, lr in zip(tokens, s["log_ratio"]):
                assert t["lr"] == "null" if lr is None else float(t["lr"]) == pytest.approx(lr, rel=1e-5, abs=1e-7)
            checked += 1
    assert checked == len(train)
    most = max({s["step"] for s in train}, key=lambda st: sum(len(s["masked"]) for s in train if s["step"] == st))
    choose(page, "step", str(most))
    screenshot(page, "samples-real-run.png")
    check_counterfactual_marks(page, server, run, train)
    check_correction_panels(page, run_dir)


def check_correction_panels(page, run_dir):
    """The run's Corrections panels draw the diagnostics its trainer logged (metrics.jsonl)."""
    logged = {json.loads(line)["key"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()}
    assert {"actor/ratio_neg_max", "actor/top_token_share_max", "actor/masked_frac"} <= logged
    page.wait_for_function("""() => { const el = document.querySelector('.panel-chart[data-panel="neg_tail"]');
        return el && el.data && el.data.some((t) => t.meta && t.meta.role === "line"); }""")
    assert "Corrections and the A<0 tail" in page.eval_on_selector_all(
        "#run-metrics .panel-group", "els => els.map((e) => e.textContent)"
    )
    lines = page.evaluate("""() => document.querySelector('.panel-chart[data-panel="corrections_frac"]').data
        .filter((t) => t.meta && t.meta.role === "line").map((t) => t.name)""")
    assert lines == ["masked: m2po"]  # a plain m2po run: only its mask can act
    if folder := os.environ.get("OPL_SAMPLES_SCREENSHOT"):
        page.locator("#run-metrics").screenshot(path=os.path.join(folder, "run-panels-real.png"))


def check_counterfactual_marks(page, server, run, train):
    """The correction lab, on the same run: the marks the trainer recorded for grpo's clip on these very tokens
    (its samples.jsonl `counterfactual`), shown alone and beside the run's own m2po mask, token by
    token; the tokens the two mark differently are outlined, and the contrast card counts them."""
    assert all(s["variant"] == "m2po" and "grpo" in s["counterfactual"] for s in train)
    clip = lambda s: s["counterfactual"]["grpo"]  # noqa: E731
    assert sum(len(clip(s)["clipped"]) for s in train) > 0, "grpo should clip some of the tokens m2po saw"
    steps = sorted({s["step"] for s in train})
    choose(page, "marks", "grpo")
    for step in steps:
        choose(page, "step", str(step))
        shown = {c["index"]: c["tokens"] for c in cards(page)}
        for s in (s for s in train if s["step"] == step):
            tokens = shown[s["index"]]
            for flag in ("masked", "clipped", "reweighted"):
                assert flagged(tokens, flag) == clip(s)[flag], (step, s["index"], flag)
    choose(page, "marks", "m2po")
    choose(page, "beside", "grpo")
    only_a = only_b = 0
    for step in steps:
        choose(page, "step", str(step))
        sides = {c["index"]: c["sides"] for c in page.evaluate(SIDES_JS)}
        for s in (s for s in train if s["step"] == step):
            own, theirs = sides[s["index"]]["m2po"], sides[s["index"]]["grpo"]
            assert flagged(own, "masked") == s["masked"] and flagged(theirs, "clipped") == clip(s)["clipped"]
            mine = dict.fromkeys(s["masked"], "masked")
            other = {i: flag for flag in ("masked", "clipped", "reweighted") for i in clip(s)[flag]}
            differ = [i for i in range(len(s["tokens"])) if mine.get(i, "") != other.get(i, "")]
            assert [t["i"] for t in own if t["only"]] == differ == [t["i"] for t in theirs if t["only"]], (
                step,
                s["index"],
            )
            assert all(t["other"] == other.get(t["i"], "") for t in own if t["only"])
            dropped_a, dropped_b = set(s["masked"]), set(clip(s)["masked"] + clip(s)["clipped"])
            only_a, only_b = only_a + len(dropped_a - dropped_b), only_b + len(dropped_b - dropped_a)
    page.wait_for_selector("#run-corrections [data-total]")
    total = page.eval_on_selector_all(
        "#run-corrections [data-total] [data-only]", "els => els.map((e) => Number(e.textContent))"
    )
    assert total == [only_a, only_b]
    screenshot(page, "samples-real-run-beside.png")
    if folder := os.environ.get("OPL_SAMPLES_SCREENSHOT"):
        page.locator("#run-corrections").screenshot(path=os.path.join(folder, "run-corrections-real.png"))


FEW_SHOT = (
    "".join(
        f"Question: Natalia sold clips to {n} of her friends in April, and then she sold half as many clips in May. "
        f"How many clips did Natalia sell altogether in April and May?\nAnswer: {n} + {n // 2} = {n + n // 2}. "
        f"The answer is {n + n // 2}.\n\n"
        for n in range(40, 60, 2)
    )
    + "Question: A robe takes 2 bolts of blue fiber and half that much white fiber. "
    "How many bolts in total does it take?\nAnswer:"
)
LONG_TOKENS = (
    [
        " Let",
        "'s",
        " think",
        " step",
        " by",
        " step",
        ".",
        "\n",
        " The",
        " robe",
        " needs",
        " 2",
        " bolts",
        " of",
        " blue",
    ]
    + [" and", " 2", "/", "2", " =", " 1", " bolt", " of", " white", ".", "\n"] * 12
    + [" https://example.org/" + "a" * 120, " \\frac{" + "1" * 90 + "}{2}", " So", " 3", " bolts", "."]
)


# the longest variant names the contract allows, as a decoupled_ppo run with every option records them
LONGEST = "decoupled_ppo+dual_clip+token_mask+seq_mask+tis+sq_penalty"
LONG_COUNTERFACTUAL_NAMES = [
    f"{o}+dual_clip+token_mask+seq_mask+tis+sq_penalty" for o in ("m2po", "m2po_cap", "grpo", "no_clip", "gspo")
] + ["cispo+token_mask+seq_mask+tis+sq_penalty", "sapo+token_mask+seq_mask+tis+sq_penalty"]
LONG_COUNTERFACTUAL = {
    name: {
        "masked": list(range(k, len(LONG_TOKENS), 9)),
        "clipped": list(range(k + 4, len(LONG_TOKENS), 9)),
        "reweighted": [k + 2],
    }
    for k, name in enumerate(LONG_COUNTERFACTUAL_NAMES)
}


def overflow(page, selector):
    """How far the selector's content pokes out of it sideways (0 when it fits), and what does."""
    return page.evaluate(
        """(sel) => { const card = document.querySelector(sel); const box = card.getBoundingClientRect();
        const wide = [...card.querySelectorAll('*')].filter((el) => el.getBoundingClientRect().right > box.right + 1
            && !el.closest('.tokens, pre, .samples-columns'));
        return [card.scrollWidth - card.clientWidth,
            wide.slice(0, 3).map((el) => el.tagName + '.' + el.className)]; }""",
        selector,
    )


@pytest.mark.parametrize("width", (1440, 1024))
def test_long_prompts_and_answers_fit_the_card(page_as, server, alice, tiny_config, width):
    """A few-shot prompt, a long answer with a URL and a long number, four compared runs with long
    names: nothing makes the run page or the compare page scroll sideways, the toolbar's step chooser
    stays inside the card, the legend stays readable. Screenshots at both widths."""
    from orchestrator.experiments.services import experiment_create
    from orchestrator.experiments.tokens import derive_token, token_hash

    experiment = experiment_create(
        owner=alice,
        name="a-rather-long-experiment-name-for-staleness",
        config=tiny_config,
        sweep={"algorithm.objective": ["m2po", "grpo"], "staleness.k": [0, 8]},
    )
    runs = list(experiment.runs.order_by("id"))
    n = len(LONG_TOKENS)
    for r, run in enumerate(runs):
        run.attempt, run.token_salt, run.state = 1, "s", "running"
        run.token_hash = token_hash(derive_token(run.pk, 1, "s"))
        run.save()
        post_samples(
            server,
            run.pk,
            derive_token(run.pk, 1, "s"),
            [
                sample(
                    step,
                    i,
                    prompt=FEW_SHOT,
                    tokens=LONG_TOKENS,
                    reward=float(i % 2),
                    masked=list(range(8 + i, n, 7 + r)),
                    log_ratio=[((j * 37) % 17 - 8) / 10 for j in range(n)],
                    eval_set=None,
                    variant=LONGEST,
                    entropy=[(j % 13) / 4 for j in range(n)],
                    advantage=-0.5 + i / 4,
                    counterfactual=LONG_COUNTERFACTUAL,
                )
                for step in (10, 20, 1000000)
                for i in range(4)
            ]
            + [
                sample(
                    1000000,
                    0,
                    kind="eval",
                    prompt=FEW_SHOT,
                    response=" The robe takes 3 bolts.",
                    eval_set="gsm8k_platinum_test",
                    reward=float(r % 2),
                )
            ],
        )
    page = page_as(alice)
    page.set_viewport_size({"width": width, "height": 1000})
    page.goto(f"{server}/runs/{runs[0].pk}/")
    page.wait_for_selector("#run-samples [data-sample]")
    page.click("#run-samples [data-sample] .sample-prompt summary")  # a reader opens the long prompt
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert overflow(page, "#run-samples") == [0, []]
    choose(page, "beside", LONG_COUNTERFACTUAL_NAMES[0])  # two corrections side by side, the longest names
    page.wait_for_selector("#run-samples [data-side]")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert overflow(page, "#run-samples") == [0, []]
    page.wait_for_selector("#run-corrections [data-total]")
    assert overflow(page, "#run-corrections") == [0, []]
    step = page.locator("#run-samples [data-control=step]").bounding_box()
    card = page.locator("#run-samples").bounding_box()
    assert step["x"] + step["width"] <= card["x"] + card["width"]
    if folder := os.environ.get("OPL_SAMPLES_SCREENSHOT"):
        os.makedirs(folder, exist_ok=True)
        page.locator("#run-samples").screenshot(path=os.path.join(folder, f"run-samples-{width}.png"))
        page.locator("#run-samples [data-sample]").first.screenshot(
            path=os.path.join(folder, f"run-sample-{width}.png")
        )
        page.locator("#run-corrections").screenshot(path=os.path.join(folder, f"run-corrections-{width}.png"))

    page.goto(f"{server}/compare/?runs={','.join(str(r.pk) for r in runs)}")
    page.locator("#compare-samples").scroll_into_view_if_needed()  # the cards load when scrolled to
    page.wait_for_selector("#compare-samples .samples-column")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
    assert overflow(page, "#compare-samples") == [0, []]
    page.locator("#compare-corrections").scroll_into_view_if_needed()
    page.wait_for_selector("#compare-corrections [data-contrast-runs]")
    assert overflow(page, "#compare-corrections") == [0, []]
    if folder := os.environ.get("OPL_SAMPLES_SCREENSHOT"):
        page.locator("#compare-samples").screenshot(path=os.path.join(folder, f"compare-samples-{width}.png"))
        page.locator("#compare-corrections").screenshot(path=os.path.join(folder, f"compare-corrections-{width}.png"))
