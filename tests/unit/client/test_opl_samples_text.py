"""How `opl samples` writes a step's samples for a terminal, without a server: marks that survive
a pipe, one pair of markers per run of marked tokens, long prompts shortened, verdicts."""

from opl_client.samples_text import marked_tokens, render_step, short_prompt, verdict


def test_masked_and_clipped_runs_are_marked_in_text_and_in_colour():
    tokens = [" The", " sum", " is", " 12", ".", "\n", "x"]
    assert marked_tokens(tokens, [1, 2], [3]) == " The [[sum is]] __12__.\nx"
    assert marked_tokens(tokens, [3], [3, 6]) == " The sum is [[__12__]].\n__x__"
    assert marked_tokens(tokens, [], [], marks=True) == "".join(tokens)
    assert marked_tokens(tokens, [1], [], marks=False) == "".join(tokens)  # nothing but the text
    assert marked_tokens(tokens, [1], [], marks=False, colour=True) == " The \x1b[9;35msum\x1b[0m is 12.\nx"
    assert marked_tokens(["a", "\n"], [1], []) == "a[[\n]]"  # a marked newline stays visible


def test_a_long_prompt_keeps_its_start_and_its_question():
    prompt = "Q: 1+1? A: 2.\n" * 80 + "Q: What is 17 * 3?"
    short = short_prompt(prompt)
    assert short.startswith("Q: 1+1?") and short.endswith("Q: What is 17 * 3?") and len(short) < 600
    assert f"{len(prompt) - 480:,} characters" in short
    assert short_prompt("short") == "short"


def test_the_verdict_is_the_verifiers_else_the_reward():
    assert verdict({"correct": False, "reward": 1.0}) == "wrong"
    assert verdict({"correct": None, "reward": 1.0}) == "right"
    assert verdict({"correct": None, "reward": None}) == "wrong"


def test_a_run_without_samples_says_so():
    text = render_step({"run": 4, "kind": "train", "steps": [], "step": None, "samples": []})
    assert text.startswith("run 4 has no train samples recorded yet")


def test_as_shows_another_corrections_marks_on_the_same_tokens():
    sample = {
        "kind": "train",
        "index": 0,
        "prompt": "7+5=",
        "reward": 0.0,
        "correct": False,
        "tokens": [" 1", "2", "."],
        "masked": [1],
        "clipped": [],
        "reweighted": [],
        "variant": "m2po",
        "objective": "m2po",
        "counterfactual": {
            "grpo": {"masked": [], "clipped": [0, 1], "reweighted": []},
            "cispo": {"masked": [], "clipped": [], "reweighted": [2]},
        },
    }
    answer = {"run": 3, "kind": "train", "step": 6, "steps": [{"step": 6, "n": 1}], "samples": [sample]}
    own = render_step(answer, marks=True)
    assert "corrections recorded (--as NAME shows one's marks): m2po, grpo, cispo" in own and " 1[[2]]." in own
    clip = render_step(answer, marks=True, variant="grpo")
    assert " __12__." in clip and "marks of grpo, what it would have done: 0 masked, 2 clipped, 0 reweighted" in clip
    assert " 12{{.}}" in render_step(answer, marks=True, variant="cispo")
    assert "not recorded for this sample" in render_step(answer, variant="sapo")
    assert marked_tokens(["a", "b"], [], [], reweighted=[1], marks=False, colour=True) == "a\x1b[4;36mb\x1b[0m"
