"""What the samples views show: the query a page asks (kind, step, verdict, sort, scale) checked
into a SampleQuery, and the template contexts built from selectors. Plain functions, so the tests
call them and the views stay thin."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import urlencode

from orchestrator.experiments.models import Run
from orchestrator.metrics.access import ParamError
from orchestrator.metrics.corrections import OBJECTIVES, describe, objective_of
from orchestrator.samples import marks as mark_names
from orchestrator.samples import selectors
from orchestrator.samples.contrast import contrast_steps
from orchestrator.samples.marks import MARKS
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
    run_id: int = 0
    marks: str = ""  # the correction whose marks the tokens show: the run's own unless chosen
    beside: str = ""  # a second correction shown beside it ("" for none)
    variants: list[dict] = field(default_factory=list)  # the corrections recorded at the step (selectors.step_variants)

    @classmethod
    def from_params(cls, params, run_id: int) -> SampleQuery:
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
        query = cls(
            kind=kind, step=step, verdict=verdict, sort=sort, scale=scale, steps=steps, counts=counts, run_id=run_id
        )
        if kind == "train" and step is not None:
            query.choose_marks(params, run_id)
        return query

    def choose_marks(self, params, run_id: int) -> None:
        """The corrections chosen (`marks`, `beside`), checked against those recorded at the step;
        the step list's counts become those of the chosen correction."""
        self.variants = selectors.step_variants(run_id, self.step)
        names = [v["name"] for v in self.variants]
        own = names[0] if names else ""
        for name in ("marks", "beside"):
            value = params.get(name) or ""
            if value and value not in names:
                raise ParamError(
                    name, f"step {self.step} recorded no marks of {value[:50]!r}; it has {', '.join(names) or 'none'}"
                )
            setattr(self, name, value)
        self.marks = self.marks or own
        if self.beside == self.marks:
            self.beside = ""
        if self.marks != own:
            per_step = selectors.variant_steps(run_id, self.marks)
            self.steps = [{**st, **dict(zip(MARKS, per_step.get(st["step"], (None, None, None))))} for st in self.steps]

    @property
    def own(self) -> str:
        return self.variants[0]["name"] if self.variants else ""


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
    choices = {"kind": kind or "", "verdict": verdict, "sort": sort, "scale": scale, **chosen_marks(params)}
    return {
        "run": run,
        "newer": selectors.steps_after(run.pk, kind, after),
        "had_any": after is not None,
        "watch": not run.is_terminal,
        "poll_seconds": POLL_SECONDS,
        "poll_query": urlencode({**choices, "after": "" if after is None else after}),
        "show_query": urlencode({k: v for k, v in choices.items() if v != ""}),
    }


def chosen_marks(params) -> dict[str, str]:
    """The corrections a reader chose (`marks`, `beside`), carried along as they are when they
    are variant names; the card checks them against the step it shows."""
    out = {}
    for name in ("marks", "beside"):
        value = params.get(name) or ""
        if value and mark_names.variant_errors(name, value):
            raise ParamError(name, mark_names.variant_errors(name, value)[0]["message"])
        out[name] = value
    return out


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
        return [h if len(h) <= width else h[: width - 1].rstrip() + "…" for h in heads]
    shared = os.path.commonprefix([t[::-1] for t in tails])[::-1] if len(tails) > 1 else ""
    cut = shared.find(" ")  # the shared end is cut from a word's start on ("3?" and "bolts?" keep their "?")
    shared = len(shared) - cut if cut >= 0 and len(shared) - cut >= SHARED_END else 0
    labels = []
    for head, tail in zip(heads, tails):
        if head == tail and len(head) <= width:  # short: the whole prompt
            labels.append(head)
            continue
        end = tail[: len(tail) - shared].rstrip() if len(tail) - shared >= 10 else tail
        labels.append("…" + end[-(width - 1) :].lstrip())
    return labels


def sample_view(
    sample: RolloutSample, scale: float, prompt_label: str = "", *, shown: str = "", beside: str = ""
) -> dict:
    """What a sample card shows (prompt_label: the one-line prompt the closed prompt shows). The
    tokens carry the marks of correction `shown` (default: the run's own); with `beside`, a second
    copy carries that correction's, and the tokens the two mark differently are outlined."""
    view = {
        "s": sample,
        "verdict": verdict_of(sample),
        "tokens_html": "",
        "prompt_label": prompt_label or prompt_labels([sample.prompt], [sample.prompt])[0],
    }
    if not sample.tokens:
        return view
    shown = shown or sample.own_variant
    sides = [shown, beside] if beside else [shown]
    strings = [sample.marks_of(name) for name in sides]
    ratios, entropy = sample.log_ratios(), sample.entropies()
    view["sides"] = []
    for k, (name, marks) in enumerate(zip(sides, strings)):
        other = (sides[1 - k], strings[1 - k]) if beside and strings[1 - k] is not None else None
        side = {"name": name, "own": name == sample.own_variant, "recorded": marks is not None}
        if marks is not None:
            decoded = mark_names.decode(marks)
            side.update(
                decoded,
                html=token_spans(
                    sample.tokens,
                    ratios,
                    decoded["masked"],
                    decoded["clipped"],
                    scale,
                    reweighted=decoded["reweighted"],
                    entropy=entropy,
                    other=other,
                ),
            )
            if other is not None:
                side["only"] = len(mark_names.dropped(marks) - mark_names.dropped(other[1]))
        view["sides"].append(side)
    view["tokens_html"] = view["sides"][0].get("html", "")
    return view


def sample_views(samples: list[RolloutSample], scale: float, *, shown: str = "", beside: str = "") -> list[dict]:
    labels = prompt_labels([s.prompt for s in samples], [s.prompt for s in samples])
    return [sample_view(s, scale, label, shown=shown, beside=beside) for s, label in zip(samples, labels)]


def marks_table(query: SampleQuery) -> dict | None:
    """The step's corrections at a glance: per correction its masked, clipped and reweighted
    tokens (the shown and the beside one marked), and with a correction beside the shown one, the
    tokens each drops that the other keeps, with their mean entropy."""
    if len(query.variants) < 2:  # a sample from before the correction lab: nothing to choose from
        return None
    rows = [
        {
            **v,
            "shown": v["name"] == query.marks,
            "beside": v["name"] == query.beside,
            "does": "; ".join(how for _, _, how in describe(v["name"])),
        }
        for v in query.variants
    ]
    table = {"rows": rows, "contrast": None, "recorded": True}
    if query.beside:
        _, total = contrast_steps(selectors.contrast_rows(query.run_id, query.marks, query.beside, query.step))
        table["contrast"] = total
    return table


def mark_legend(query: SampleQuery) -> list[dict]:
    """What the shown correction (and the one beside it) does to a token, part by part."""
    return [
        {"name": name, "parts": [{"part": p, "mark": m, "how": how} for p, m, how in describe(name)]}
        for name in (query.marks, query.beside)
        if name
    ]


def verdict_of(sample: RolloutSample) -> str:
    if sample.correct is not None:
        return "right" if sample.correct else "wrong"
    return "right" if sample.reward is not None and sample.reward >= 1 else "wrong"


def run_samples_context(run: Run, query: SampleQuery) -> dict:
    samples = (
        selectors.step_samples(run.pk, query.kind, query.step, verdict=query.verdict, sort=query.sort)
        if query.step is not None
        else []
    )
    samples_cfg = (run.config or {}).get("samples") or {}
    return {
        "run": run,
        "q": query,
        "sorts": [(k, label) for k, (label, _) in selectors.SORTS.items()],
        "verdicts": selectors.VERDICTS,
        "scales": SCALES,
        "legend": legend_stops(query.scale),
        "summary": selectors.step_summary(run.pk, query.kind, query.step) if query.step is not None else None,
        "samples": sample_views(samples, query.scale, shown=query.marks, beside=query.beside),
        "marks_table": marks_table(query),
        "marks_legend": mark_legend(query),
        "total": sum(query.counts.values()),
        "per_step": samples_cfg.get("per_step"),
        "every": samples_cfg.get("every"),
        # a live run: the card asks every POLL_SECONDS whether newer steps were recorded
        "watch": not run.is_terminal,
        "poll_seconds": POLL_SECONDS,
        "poll_query": urlencode(
            {
                "kind": query.kind if query.counts.get(query.kind) else "",
                "verdict": query.verdict,
                "sort": query.sort,
                "scale": query.scale,
                "marks": query.marks if query.marks != query.own else "",
                "beside": query.beside,
                "after": query.steps[0]["step"] if query.steps else "",
            }
        ),
    }


def compare_context(run_ids: list[int], params) -> dict:
    runs = {r.pk: r for r in Run.objects.filter(pk__in=run_ids)}
    prompts = selectors.shared_prompts(run_ids)
    for prompt, label in zip(prompts, prompt_labels([p["head"] for p in prompts], [p["tail"] for p in prompts])):
        prompt["label"] = label
    chosen = params.get("prompt") or (prompts[0]["prompt_hash"] if prompts else "")
    by_run = selectors.prompt_samples(run_ids, chosen) if chosen else {}
    columns = [
        {"run": runs[rid], "samples": [sample_view(s, DEFAULT_SCALE) for s in by_run.get(rid, [])]}
        for rid in run_ids
        if rid in runs
    ]
    first = next((s for col in columns for s in col["samples"]), None)
    return {
        "prompts": prompts,
        "chosen": chosen,
        "columns": columns,
        "runs_param": ",".join(map(str, run_ids)),
        "prompt_text": first["s"].prompt if first else "",
        "reference": first["s"].reference if first else None,
        "legend": legend_stops(DEFAULT_SCALE),
        "scale": DEFAULT_SCALE,
    }


def sample_dict(s: RolloutSample) -> dict:
    """The JSON API's sample: the spool's fields (log ratios unpacked) and the stored counts."""
    return {
        "kind": s.kind,
        "step": s.step,
        "index": s.index,
        "attempt": s.attempt,
        "eval_set": s.eval_set or None,
        "prompt": s.prompt,
        "prompt_hash": s.prompt_hash,
        "response": s.response,
        "reference": s.reference,
        "reward": s.reward,
        "correct": s.correct,
        "policy_version": s.policy_version,
        "staleness": s.staleness,
        "objective": s.objective or None,
        "tokens": s.tokens,
        "log_ratio": s.log_ratios(),
        "clipped": s.clipped,
        "masked": s.masked,
        "truncated": s.truncated,
        "time": s.time,
        "n_masked": s.n_masked,
        "n_clipped": s.n_clipped,
        "max_abs_log_ratio": s.max_abs_log_ratio,
        # the run's own correction by name, its reweighted tokens, entropy, and what every other
        # correction would have done to the same tokens (the spool's lists)
        "variant": s.own_variant or None,
        "advantage": s.advantage,
        "reweighted": s.reweighted,
        "n_reweighted": s.n_reweighted,
        "entropy": s.entropies(),
        "counterfactual": {name: mark_names.decode(m) for name, m in s.counterfactual.items()},
    }


# ---- the correction lab's contrast: which tokens one correction drops that another keeps


def corrections_context(run: Run, params) -> dict:
    """The run page's contrast card: corrections `a` and `b` (default: the run's own, and clip
    beside M2PO or M2PO beside anything else) over every recorded train step. ParamError names
    a correction the run did not record."""
    recorded = selectors.newest_variants(run.pk)
    context = {
        "run": run,
        "recorded": recorded is not None and len(recorded[1]) > 1,
        "has_samples": recorded is not None,
    }
    if not context["recorded"]:
        return context
    own, names = recorded
    a = _chosen(params, "a", names) or own
    b = _chosen(params, "b", names) or mark_names.contrast_default(a, names) or own
    steps, total = contrast_steps(selectors.contrast_rows(run.pk, a, b))
    return {
        **context,
        "own": own,
        "names": names,
        "a": a,
        "b": b,
        "steps": steps,
        "total": total,
        "finding": finding(a, b, total),
    }


def compare_corrections_context(run_ids: list[int], params) -> dict:
    """The compare page's contrast card: objectives `a` and `b` (default m2po and grpo), each run
    read at its own options (marks.variant_for), one row per run over its recorded train steps."""
    runs = {r.pk: r for r in Run.objects.filter(pk__in=run_ids)}
    recorded = {rid: selectors.newest_variants(rid) for rid in run_ids if rid in runs}
    recorded = {rid: v for rid, v in recorded.items() if v is not None and len(v[1]) > 1}
    objectives = [o for o in OBJECTIVES if any(objective_of(n) == o for _, names in recorded.values() for n in names)]
    a = _chosen(params, "a", objectives) or ("m2po" if "m2po" in objectives else objectives[0] if objectives else "")
    b = _chosen(params, "b", objectives) or next(
        (o for o in ("grpo", "m2po", *objectives) if o != a and o in objectives), a
    )
    rows = []
    for rid, (own, names) in recorded.items():
        va, vb = mark_names.variant_for(a, own, names), mark_names.variant_for(b, own, names)
        row = {"run": runs[rid], "own": own, "a": va, "b": vb, "total": None}
        if va and vb:
            steps, row["total"] = contrast_steps(selectors.contrast_rows(rid, va, vb))
            row["steps"] = len(steps)
        rows.append(row)
    return {
        "objectives": objectives,
        "a": a,
        "b": b,
        "rows": rows,
        "runs_param": ",".join(map(str, run_ids)),
        "without": [runs[rid] for rid in run_ids if rid in runs and rid not in recorded],
    }


def _chosen(params, name: str, allowed: list[str]) -> str:
    value = params.get(name) or ""
    if value and value not in allowed:
        raise ParamError(name, f"{value[:50]!r} was not recorded; choose one of {', '.join(allowed) or 'none'}")
    return value


MIN_FINDING_TOKENS = 5  # fewer tokens dropped by one side alone say nothing about their entropy


def finding(a: str, b: str, total) -> str:
    """One sentence on the entropy of the tokens one correction alone drops, or "" when either
    side dropped too few tokens alone to say."""
    if (
        a == b
        or min(total.a_only.n, total.b_only.n) < MIN_FINDING_TOKENS
        or total.a_only.entropy is None
        or total.b_only.entropy is None
    ):
        return ""
    high, low = (b, a) if total.b_only.entropy > total.a_only.entropy else (a, b)
    h = max(total.a_only.entropy, total.b_only.entropy)
    lo = min(total.a_only.entropy, total.b_only.entropy)
    return (
        f"The tokens only {high} drops have the higher mean entropy ({h:.3f} against {lo:.3f} for those only "
        f"{low} drops): {low} keeps more of the uncertain, informative tokens."
    )
