"""What the samples views show: the query a page asks (kind, step, verdict, sort, scale) checked
into a SampleQuery, and the template contexts built from selectors. Plain functions, so the tests
call them and the views stay thin."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlencode

from orchestrator.experiments.models import Run
from orchestrator.metrics.access import ParamError
from orchestrator.samples import selectors
from orchestrator.samples.models import RolloutSample
from orchestrator.samples.tokens import DEFAULT_SCALE, SCALES, legend_stops, token_spans


@dataclass
class SampleQuery:
    kind: str = "train"
    step: int | None = None
    verdict: str = "all"
    sort: str = "index"
    scale: float = DEFAULT_SCALE
    steps: list[dict] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_params(cls, params, run_id: int) -> "SampleQuery":
        """Checked parameters; the step defaults to the newest recorded one of the kind (and the
        kind to eval when the run has only eval samples). Raises ParamError naming the field."""
        counts = selectors.kind_counts(run_id)
        kind = params.get("kind") or ("eval" if counts["train"] == 0 and counts["eval"] else "train")
        if kind not in RolloutSample.Kind.values:
            raise ParamError("kind", "must be train or eval")
        verdict, sort, scale = view_choices(params)
        steps = selectors.recorded_steps(run_id, kind)
        step = whole_number(params, "step")
        if step is not None:
            if step not in {s["step"] for s in steps}:
                raise ParamError("step", f"no {kind} samples recorded at step {step}")
        else:
            step = steps[0]["step"] if steps else None
        return cls(kind=kind, step=step, verdict=verdict, sort=sort, scale=scale, steps=steps, counts=counts)


def whole_number(params, name: str) -> int | None:
    """The parameter as a step number, None when absent; ParamError names it when it is not one."""
    raw = params.get(name) or ""
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:  # "²".isdigit() is True, int("²") fails
        raise ParamError(name, f"must be a whole number, got {raw[:20]!r}")
    return int(raw)


def view_choices(params) -> tuple[str, str, float]:
    """(verdict, sort, colour scale) a reader chose, checked; ParamError names a bad one."""
    verdict = params.get("verdict") or "all"
    if verdict not in selectors.VERDICTS:
        raise ParamError("verdict", f"must be one of {', '.join(selectors.VERDICTS)}")
    sort = params.get("sort") or "index"
    if sort not in selectors.SORTS:
        raise ParamError("sort", f"must be one of {', '.join(selectors.SORTS)}")
    try:
        scale = float(params.get("scale") or DEFAULT_SCALE)
    except ValueError:
        raise ParamError("scale", f"must be one of {', '.join(map(str, SCALES))}") from None
    if scale not in SCALES:
        raise ParamError("scale", f"must be one of {', '.join(map(str, SCALES))}")
    return verdict, sort, scale


POLL_SECONDS = 10


def newer_context(run: Run, params) -> dict:
    """The live card's hint: how many steps were recorded after the newest one the card showed
    (`after`, absent when it had none) of `kind` (absent: any kind), and, while the run may still
    record, the URL to ask again. The hint's button reloads the card at the newest step with the
    reader's other choices; nothing reloads by itself."""
    kind = params.get("kind") or None
    if kind is not None and kind not in RolloutSample.Kind.values:
        raise ParamError("kind", "must be train or eval")
    after = whole_number(params, "after")
    verdict, sort, scale = view_choices(params)
    choices = {"kind": kind or "", "verdict": verdict, "sort": sort, "scale": scale}
    return {"run": run, "newer": selectors.steps_after(run.pk, kind, after), "had_any": after is not None,
            "watch": not run.is_terminal, "poll_seconds": POLL_SECONDS,
            "poll_query": urlencode({**choices, "after": "" if after is None else after}),
            "show_query": urlencode({k: v for k, v in choices.items() if v != ""})}


LABEL_CHARS = 90
SHARED_END = 8  # a shared end shorter than this (a "?") stays in the labels
SHARED_HEAD = 24  # prompts whose first this many characters agree (a few-shot prefix) are told apart by their end


def prompt_labels(heads: list[str], tails: list[str], width: int = LABEL_CHARS) -> list[str]:
    """One-line labels that tell prompts apart, from each prompt's start and end. Few-shot prompts
    share a long start and chat templates a common end: when the prompts' starts agree, each label
    is the prompt's end less the end they all share ("…Question: A robe takes 2 bolts…"); when
    they differ early, the start. A lone long prompt shows its end, where the question is."""
    heads, tails = [" ".join(h.split()) for h in heads], [" ".join(t.split()) for t in tails]
    if len(heads) > 1 and len(os.path.commonprefix(heads)) < SHARED_HEAD:
        return [h if len(h) <= width else h[:width - 1].rstrip() + "…" for h in heads]
    shared = os.path.commonprefix([t[::-1] for t in tails])[::-1] if len(tails) > 1 else ""
    cut = shared.find(" ")  # the shared end is cut from a word's start on ("3?" and "bolts?" keep their "?")
    shared = len(shared) - cut if cut >= 0 and len(shared) - cut >= SHARED_END else 0
    labels = []
    for head, tail in zip(heads, tails):
        if head == tail and len(head) <= width:  # short: the whole prompt
            labels.append(head)
            continue
        end = tail[:len(tail) - shared].rstrip() if len(tail) - shared >= 10 else tail
        labels.append("…" + end[-(width - 1):].lstrip())
    return labels


def sample_view(sample: RolloutSample, scale: float, prompt_label: str = "") -> dict:
    """What a sample card shows (prompt_label: the one-line prompt the closed prompt shows)."""
    return {"s": sample, "tokens_html": token_spans(sample.tokens, sample.log_ratios(), sample.masked, sample.clipped, scale)
            if sample.tokens else "", "verdict": verdict_of(sample),
            "prompt_label": prompt_label or prompt_labels([sample.prompt], [sample.prompt])[0]}


def sample_views(samples: list[RolloutSample], scale: float) -> list[dict]:
    labels = prompt_labels([s.prompt for s in samples], [s.prompt for s in samples])
    return [sample_view(s, scale, label) for s, label in zip(samples, labels)]


def verdict_of(sample: RolloutSample) -> str:
    if sample.correct is not None:
        return "right" if sample.correct else "wrong"
    return "right" if sample.reward is not None and sample.reward >= 1 else "wrong"


def run_samples_context(run: Run, query: SampleQuery) -> dict:
    samples = selectors.step_samples(run.pk, query.kind, query.step, verdict=query.verdict, sort=query.sort) \
        if query.step is not None else []
    samples_cfg = (run.config or {}).get("samples") or {}
    return {
        "run": run, "q": query, "sorts": [(k, label) for k, (label, _) in selectors.SORTS.items()],
        "verdicts": selectors.VERDICTS, "scales": SCALES, "legend": legend_stops(query.scale),
        "summary": selectors.step_summary(run.pk, query.kind, query.step) if query.step is not None else None,
        "samples": sample_views(samples, query.scale),
        "total": sum(query.counts.values()),
        "per_step": samples_cfg.get("per_step"), "every": samples_cfg.get("every"),
        # a live run: the card asks every POLL_SECONDS whether newer steps were recorded
        "watch": not run.is_terminal, "poll_seconds": POLL_SECONDS,
        "poll_query": urlencode({"kind": query.kind if query.counts.get(query.kind) else "", "verdict": query.verdict,
                                 "sort": query.sort, "scale": query.scale,
                                 "after": query.steps[0]["step"] if query.steps else ""}),
    }


def compare_context(run_ids: list[int], params) -> dict:
    runs = {r.pk: r for r in Run.objects.filter(pk__in=run_ids)}
    prompts = selectors.shared_prompts(run_ids)
    for prompt, label in zip(prompts, prompt_labels([p["head"] for p in prompts], [p["tail"] for p in prompts])):
        prompt["label"] = label
    chosen = params.get("prompt") or (prompts[0]["prompt_hash"] if prompts else "")
    by_run = selectors.prompt_samples(run_ids, chosen) if chosen else {}
    columns = [{"run": runs[rid], "samples": [sample_view(s, DEFAULT_SCALE) for s in by_run.get(rid, [])]}
               for rid in run_ids if rid in runs]
    first = next((s for col in columns for s in col["samples"]), None)
    return {"prompts": prompts, "chosen": chosen, "columns": columns, "runs_param": ",".join(map(str, run_ids)),
            "prompt_text": first["s"].prompt if first else "", "reference": first["s"].reference if first else None,
            "legend": legend_stops(DEFAULT_SCALE), "scale": DEFAULT_SCALE}


def sample_dict(s: RolloutSample) -> dict:
    """The JSON API's sample: the spool's fields (log ratios unpacked) and the stored counts."""
    return {"kind": s.kind, "step": s.step, "index": s.index, "attempt": s.attempt, "eval_set": s.eval_set or None,
            "prompt": s.prompt, "prompt_hash": s.prompt_hash, "response": s.response, "reference": s.reference,
            "reward": s.reward, "correct": s.correct, "policy_version": s.policy_version, "staleness": s.staleness,
            "objective": s.objective or None, "tokens": s.tokens, "log_ratio": s.log_ratios(), "clipped": s.clipped,
            "masked": s.masked, "truncated": s.truncated, "time": s.time, "n_masked": s.n_masked,
            "n_clipped": s.n_clipped, "max_abs_log_ratio": s.max_abs_log_ratio}
