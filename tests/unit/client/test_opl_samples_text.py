"""How `opl samples` writes a step's samples for a terminal, without a server: marks that survive
a pipe, one pair of markers per run of marked tokens, long prompts shortened, verdicts."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "client"))

from opl_client.samples_text import marked_tokens, render_step, short_prompt, verdict  # noqa: E402


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
