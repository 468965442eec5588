"""One recorded step's rollout samples as terminal text (`opl samples`): plain functions over the
API's answer, so they are tested without a server.

Masked and clipped tokens are shown with ANSI styles when colour is on (masked: struck through,
magenta; clipped: underlined, yellow) and, with marks=True, also as text that survives a pipe or
a colourless terminal: [[masked]] and __clipped__ (a token both masked and clipped: [[__both__]]),
and {{reweighted}} (kept its gradient with a changed weight: CISPO, TIS, SAPO).
Consecutive tokens with the same mark share one pair of markers.

`variant` (opl samples --as grpo) shows the marks another correction would have made on the same
tokens, which the trainer records with each sample (docs/SAMPLES.md `counterfactual`)."""

from __future__ import annotations

import math

MASK_OPEN, MASK_CLOSE = "[[", "]]"
CLIP_OPEN, CLIP_CLOSE = "__", "__"
REWEIGHT_OPEN, REWEIGHT_CLOSE = "{{", "}}"
RESET = "\x1b[0m"
STYLE = {
    "masked": "\x1b[9;35m",
    "clipped": "\x1b[4;33m",
    "both": "\x1b[9;4;35m",
    "reweighted": "\x1b[4;36m",
    "right": "\x1b[32m",
    "wrong": "\x1b[31m",
    "dim": "\x1b[2m",
    "bold": "\x1b[1m",
}
PROMPT_HEAD, PROMPT_TAIL = 160, 320  # a long prompt (few-shot) shows its start and its end, where the question is
INDENT = "    "


def _paint(text: str, style: str | None, colour: bool) -> str:
    return f"{STYLE[style]}{text}{RESET}" if colour and style and text else text


def verdict(sample: dict) -> str:
    """right | wrong, as the dashboard judges it: the verifier's verdict, else reward >= 1."""
    if sample.get("correct") is not None:
        return "right" if sample["correct"] else "wrong"
    reward = sample.get("reward")
    return "right" if reward is not None and reward >= 1 else "wrong"


def marked_tokens(
    tokens: list[str],
    masked: list[int],
    clipped: list[int],
    *,
    marks: bool = True,
    colour: bool = False,
    reweighted: list[int] = (),
) -> str:
    """The response rebuilt from its tokens, masked, clipped and reweighted runs marked. Whitespace
    that starts a marked run stays outside its markers (" [[is 12]]", not "[[ is 12]]")."""
    masked_set, clipped_set, reweighted_set = set(masked or ()), set(clipped or ()), set(reweighted or ())

    def flag_at(i):
        return i in masked_set, i in clipped_set, i in reweighted_set and i not in masked_set and i not in clipped_set

    out: list[str] = []
    i = 0
    while i < len(tokens):
        flag = flag_at(i)
        j = i
        while j < len(tokens) and flag_at(j) == flag:
            j += 1
        text = "".join(tokens[i:j])
        if flag == (False, False, False):
            out.append(text)
        else:
            lead = text[: len(text) - len(text.lstrip())] if text.strip() else ""
            body = text[len(lead) :]
            if marks:
                if flag[2]:
                    body = f"{REWEIGHT_OPEN}{body}{REWEIGHT_CLOSE}"
                if flag[1]:
                    body = f"{CLIP_OPEN}{body}{CLIP_CLOSE}"
                if flag[0]:
                    body = f"{MASK_OPEN}{body}{MASK_CLOSE}"
            style = "both" if flag[0] and flag[1] else ("masked" if flag[0] else "clipped" if flag[1] else "reweighted")
            out.append(lead + _paint(body, style, colour))
        i = j
    return "".join(out)


def own_variant(sample: dict) -> str | None:
    return sample.get("variant") or sample.get("objective")


def variant_marks(sample: dict, variant: str | None) -> dict | None:
    """{"masked", "clipped", "reweighted"} of `variant` on the sample's tokens (None or the run's
    own: its own marks); None when the trainer did not record that variant for it."""
    if variant is None or variant == own_variant(sample):
        return {
            "masked": sample.get("masked") or [],
            "clipped": sample.get("clipped") or [],
            "reweighted": sample.get("reweighted") or [],
        }
    return (sample.get("counterfactual") or {}).get(variant)


def recorded_variants(answer: dict) -> list[str]:
    """The corrections whose marks the step's samples carry, the run's own first."""
    names: list[str] = []
    for sample in answer.get("samples") or []:
        for name in [own_variant(sample), *(sample.get("counterfactual") or {})]:
            if name and name not in names:
                names.append(name)
    return names


def _number(value, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}g}"


def short_prompt(prompt: str) -> str:
    """A long prompt's start and end with the number of characters left out between them."""
    if len(prompt) <= PROMPT_HEAD + PROMPT_TAIL + 40:
        return prompt
    left_out = len(prompt) - PROMPT_HEAD - PROMPT_TAIL
    return f"{prompt[:PROMPT_HEAD]} [… {left_out:,} characters; --full shows them …] {prompt[-PROMPT_TAIL:]}"


def _block(label: str, text: str) -> list[str]:
    lines = text.split("\n") if text else [""]
    return [f"  {label}"] + [f"{INDENT}{line}" if line.strip() else "" for line in lines]


def sample_lines(
    sample: dict,
    *,
    marks: bool = False,
    colour: bool = False,
    full: bool = False,
    same_prompt_as: int | None = None,
    variant: str | None = None,
) -> list[str]:
    """One sample: a header (index, verdict, reward, policy version, staleness, masked and
    clipped counts), its prompt, its response with the marked tokens, its reference."""
    v = verdict(sample)
    head = [
        _paint(f"#{sample['index']}", "bold", colour),
        _paint(v, v, colour),
        f"reward {_number(sample.get('reward'))}",
    ]
    if sample.get("eval_set"):
        head.append(f"eval set {sample['eval_set']}")
    if sample["kind"] == "train":
        head += [
            f"policy v{_number(sample.get('policy_version'))}",
            f"staleness {_number(sample.get('staleness'))}",
            f"{sample.get('n_masked', len(sample.get('masked') or []))} masked",
            f"{sample.get('n_clipped', len(sample.get('clipped') or []))} clipped",
            f"of {len(sample.get('tokens') or [])} tokens",
        ]
        if sample.get("max_abs_log_ratio") is not None:
            head.append(f"max |log r| {sample['max_abs_log_ratio']:.3f}")
        if own_variant(sample):
            head.append(own_variant(sample))
    if sample.get("truncated"):
        head.append("truncated")
    lines = ["── " + "  ".join(head)]
    if same_prompt_as is not None:
        lines.append(f"  prompt {_paint(f'(same as #{same_prompt_as})', 'dim', colour)}")
    else:
        prompt = sample.get("prompt") or ""
        lines += _block("prompt", prompt if full else short_prompt(prompt))
    tokens = sample.get("tokens") or []
    shown = variant_marks(sample, variant) if tokens else None
    if variant is not None and variant != own_variant(sample) and tokens:
        lines.append(
            f"  marks of {variant}, what it would have done: "
            + (
                "not recorded for this sample"
                if shown is None
                else (
                    f"{len(shown['masked'])} masked, {len(shown['clipped'])} clipped, "
                    f"{len(shown['reweighted'])} reweighted"
                )
            )
        )
    if tokens:
        shown = shown or {"masked": [], "clipped": [], "reweighted": []}
        response = marked_tokens(
            tokens, shown["masked"], shown["clipped"], marks=marks, colour=colour, reweighted=shown["reweighted"]
        )
        if sample.get("truncated"):
            response += _paint(f" [… cut at {len(tokens)} tokens (samples.max_tokens)]", "dim", colour)
    else:
        response = sample.get("response") or ""
    lines += _block("response", response)
    if sample.get("reference") is not None:
        lines.append(f"  reference {sample['reference']}")
    return lines


def step_summary(answer: dict) -> str:
    samples = answer["samples"]
    rewards = [s["reward"] for s in samples if s.get("reward") is not None]
    right = sum(verdict(s) == "right" for s in samples)
    parts = [
        f"run {answer['run']}",
        f"{answer['kind']} step {answer['step']}",
        f"{len(samples)} sample{'s' * (len(samples) != 1)}",
    ]
    if rewards:
        parts.append(
            f"reward mean {sum(rewards) / len(rewards):.3f} (min {_number(min(rewards))}, max {_number(max(rewards))})"
        )
    parts.append(f"{right} right / {len(samples) - right} wrong")
    if answer["kind"] == "train":
        tokens = sum(len(s.get("tokens") or []) for s in samples)
        masked = sum(s.get("n_masked", len(s.get("masked") or [])) for s in samples)
        clipped = sum(s.get("n_clipped", len(s.get("clipped") or [])) for s in samples)
        parts.append(f"{masked} masked, {clipped} clipped of {tokens} tokens")
        staleness = sorted({s["staleness"] for s in samples if s.get("staleness") is not None})
        if staleness:
            parts.append(f"staleness {staleness[0]}" + (f"–{staleness[-1]}" if len(staleness) > 1 else ""))
    return " · ".join(parts)


def steps_line(answer: dict, shown: int = 12) -> str:
    steps = answer["steps"]
    listed = ", ".join(str(s["step"]) for s in steps[:shown])
    more = f" and {len(steps) - shown} more (opl samples RUN --steps)" if len(steps) > shown else ""
    return f"{answer['kind']} steps recorded, newest first: {listed}{more}"


def legend(*, marks: bool, colour: bool) -> str | None:
    if not marks and not colour:
        return None
    masked = _paint(f"{MASK_OPEN}masked{MASK_CLOSE}" if marks else "masked", "masked", colour)
    clipped = _paint(f"{CLIP_OPEN}clipped{CLIP_CLOSE}" if marks else "clipped", "clipped", colour)
    reweighted = _paint(f"{REWEIGHT_OPEN}reweighted{REWEIGHT_CLOSE}" if marks else "reweighted", "reweighted", colour)
    return (
        f"tokens: {masked} = a mask took it out of the loss (M2PO, token or sequence mask), "
        f"{clipped} = a clip took its gradient away (PPO clip, dual clip), "
        f"{reweighted} = kept its gradient with a changed weight (CISPO, TIS, SAPO)"
    )


def render_step(
    answer: dict,
    *,
    marks: bool = False,
    colour: bool = False,
    full: bool = False,
    indices: list[int] | None = None,
    variant: str | None = None,
) -> str:
    """The whole `opl samples` text of one step (or of the samples whose index is in `indices`),
    its tokens marked by `variant` (default: the run's own correction)."""
    if answer.get("step") is None:
        return (
            f"run {answer['run']} has no {answer['kind']} samples recorded yet "
            "(the trainer records samples.per_step rollouts every samples.every updates).\n"
        )
    lines = [step_summary(answer), steps_line(answer)]
    if answer["kind"] == "train" and len(recorded_variants(answer)) > 1:
        lines.append(f"corrections recorded (--as NAME shows one's marks): {', '.join(recorded_variants(answer))}")
    if answer["kind"] == "train" and (note := legend(marks=marks, colour=colour)):
        lines.append(note)
    samples = [s for s in answer["samples"] if indices is None or s["index"] in indices]
    if not samples:
        lines.append("no sample matches" + (f" index {', '.join(map(str, indices))}" if indices else " this filter"))
    first_with: dict[str, int] = {}
    previous = None
    for sample in samples:
        prompt = sample.get("prompt") or ""
        same = first_with.get(prompt) if previous == prompt else None
        first_with.setdefault(prompt, sample["index"])
        lines.append("")
        lines += sample_lines(sample, marks=marks, colour=colour, full=full, same_prompt_as=same, variant=variant)
        previous = prompt
    return "\n".join(lines) + "\n"
