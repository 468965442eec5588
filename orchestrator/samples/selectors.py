"""Reading rollout samples for the run page, the compare page and the JSON API."""

from __future__ import annotations

from django.db.models import Avg, Count, F, Max, Min, Q, Sum
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.functions import Length, Right, Substr

from orchestrator.samples import marks
from orchestrator.samples.contrast import Row
from orchestrator.samples.models import RolloutSample, unpack_log_ratios

VERDICTS = ("all", "right", "wrong")
SORTS = {  # name: (label, ordering)
    "index": ("recorded order", ("index",)),
    "ratio": ("max |log ratio|", (F("max_abs_log_ratio").desc(nulls_last=True), "index")),
    "masked": ("most masked", ("-n_masked", "-n_clipped", "index")),
    "clipped": ("most clipped", ("-n_clipped", "-n_masked", "index")),
    "reward": ("lowest reward", ("reward", "index")),
}
# right: the verdict says so (a train sample without one: reward >= 1, as the trainer judges it)
RIGHT = Q(correct=True) | Q(correct__isnull=True, reward__gte=1)
WRONG = Q(correct=False) | Q(correct__isnull=True, reward__lt=1)


def kind_counts(run_id: int) -> dict[str, int]:
    """{"train": n, "eval": n} of the samples the run has."""
    counts = dict(
        RolloutSample.objects.filter(run_id=run_id).values("kind").annotate(n=Count("id")).values_list("kind", "n")
    )
    return {kind: counts.get(kind, 0) for kind in RolloutSample.Kind.values}


def recorded_steps(run_id: int, kind: str) -> list[dict]:
    """[{step, n, masked, clipped}] of the run's recorded steps of `kind`, newest first (the
    counts of marked tokens let the step chooser point at the steps where the objective acted)."""
    return list(
        RolloutSample.objects.filter(run_id=run_id, kind=kind)
        .values("step")
        .annotate(n=Count("id"), masked=Sum("n_masked"), clipped=Sum("n_clipped"), reweighted=Sum("n_reweighted"))
        .order_by("-step")
    )


def steps_after(run_id: int, kind: str | None, after: int | None) -> int:
    """How many steps of `kind` (any kind when None) were recorded after step `after` (all when
    None): the live card's "newer steps" hint, one indexed count."""
    samples = RolloutSample.objects.filter(run_id=run_id)
    if kind:
        samples = samples.filter(kind=kind)
    if after is not None:
        samples = samples.filter(step__gt=after)
    return samples.values("step").distinct().count()


def step_samples(
    run_id: int, kind: str, step: int, *, verdict: str = "all", sort: str = "index"
) -> list[RolloutSample]:
    samples = RolloutSample.objects.filter(run_id=run_id, kind=kind, step=step)
    if verdict == "right":
        samples = samples.filter(RIGHT)
    elif verdict == "wrong":
        samples = samples.filter(WRONG)
    return list(samples.order_by(*SORTS.get(sort, SORTS["index"])[1]))


def step_summary(run_id: int, kind: str, step: int) -> dict:
    """The chosen step at a glance: rewards, verdicts, masked and clipped tokens, staleness."""
    return RolloutSample.objects.filter(run_id=run_id, kind=kind, step=step).aggregate(
        n=Count("id"),
        reward_mean=Avg("reward"),
        reward_min=Min("reward"),
        reward_max=Max("reward"),
        right=Count("id", filter=RIGHT),
        wrong=Count("id", filter=WRONG),
        tokens=Sum("n_tokens"),
        masked=Sum("n_masked"),
        clipped=Sum("n_clipped"),
        reweighted=Sum("n_reweighted"),
        staleness_min=Min("staleness"),
        staleness_max=Max("staleness"),
        version_min=Min("policy_version"),
        version_max=Max("policy_version"),
        truncated=Count("id", filter=Q(truncated=True)),
    )


PROMPT_PREVIEW = 400  # characters of each end of a prompt, for labels that tell prompts apart
MAX_SHARED_PROMPTS = 300


def shared_prompts(run_ids: list[int]) -> list[dict]:
    """Prompts recorded in at least two of the runs: [{prompt_hash, kind, eval_set, head, tail, length,
    runs}] (head and tail: the prompt's first and last PROMPT_PREVIEW characters), eval prompts first
    (they match across runs by design), most runs first."""
    return list(
        RolloutSample.objects.filter(run_id__in=run_ids)
        .values("prompt_hash")
        .annotate(
            runs=Count("run", distinct=True),
            kind=Min("kind"),
            eval_set=Max("eval_set"),
            head=Min(Substr("prompt", 1, PROMPT_PREVIEW)),
            tail=Min(Right("prompt", PROMPT_PREVIEW)),
            length=Max(Length("prompt")),
        )
        .filter(runs__gte=2)
        .order_by("kind", "-runs", "eval_set", "tail")[:MAX_SHARED_PROMPTS]
    )


def prompt_samples(run_ids: list[int], digest: str, *, per_run: int = 16) -> dict[int, list[RolloutSample]]:
    """{run id: its samples of the prompt at the newest step that recorded it} (eval answers before
    train ones at the same step)."""
    newest = dict(
        RolloutSample.objects.filter(run_id__in=run_ids, prompt_hash=digest)
        .values("run_id")
        .annotate(step=Max("step"))
        .values_list("run_id", "step")
    )
    if not newest:
        return {}
    rows = (
        RolloutSample.objects.filter(prompt_hash=digest)
        .filter(Q(*[Q(run_id=rid, step=step) for rid, step in newest.items()], _connector=Q.OR))
        .order_by("run_id", "kind", "index")
    )
    out: dict[int, list[RolloutSample]] = {rid: [] for rid in run_ids if rid in newest}
    for row in rows:
        if len(out[row.run_id]) < per_run:
            out[row.run_id].append(row)
    return out


# ---- the correction lab: the marks of the run's own correction and the counterfactual ones


def step_variants(run_id: int, step: int) -> list[dict]:
    """The corrections recorded at a train step, the run's own first: [{name, own, masked, clipped,
    reweighted, tokens, samples}], the counts summed over the step's samples that carry it."""
    totals: dict[str, dict] = {}
    own = None
    rows = RolloutSample.objects.filter(run_id=run_id, kind="train", step=step).values_list(
        "variant", "objective", "n_masked", "n_clipped", "n_reweighted", "n_tokens", "counterfactual_counts"
    )
    for variant, objective, n_masked, n_clipped, n_reweighted, n_tokens, cf_counts in rows:
        own = own or variant or objective or ""
        for name, counts in [(variant or objective or "", (n_masked, n_clipped, n_reweighted)), *cf_counts.items()]:
            t = totals.setdefault(
                name, {"name": name, "masked": 0, "clipped": 0, "reweighted": 0, "tokens": 0, "samples": 0}
            )
            t["masked"], t["clipped"], t["reweighted"] = (t[k] + v for k, v in zip(marks.MARKS, counts))
            t["tokens"] += n_tokens
            t["samples"] += 1
    return [{**totals[name], "own": name == own} for name in marks.sort_variants(totals, own)]


def variant_steps(run_id: int, variant: str) -> dict[int, list[int]]:
    """{step: [masked, clipped, reweighted]} of a counterfactual `variant` over the run's train
    steps (the steps list of the run's own correction is recorded_steps)."""
    out: dict[int, list[int]] = {}
    for step, counts in RolloutSample.objects.filter(run_id=run_id, kind="train").values_list(
        "step", KeyTransform(variant, "counterfactual_counts")
    ):
        if counts:
            out[step] = [a + b for a, b in zip(out.get(step, [0, 0, 0]), counts)]
    return out


def newest_variants(run_id: int) -> tuple[str, list[str]] | None:
    """(the run's own variant, the variants its newest recorded train step carries); None
    without train samples."""
    row = (
        RolloutSample.objects.filter(run_id=run_id, kind="train")
        .order_by("-step", "index")
        .values_list("variant", "objective", "counterfactual_counts")
        .first()
    )
    if row is None:
        return None
    own = row[0] or row[1] or ""
    return own, marks.sort_variants([own, *row[2]], own)


def contrast_rows(run_id: int, a: str, b: str, step: int | None = None) -> list[Row]:
    """The run's train samples (of one step, when given) as contrast.Row of corrections `a` and
    `b` (one query; only the two corrections' marks are read)."""
    samples = RolloutSample.objects.filter(run_id=run_id, kind="train")
    if step is not None:
        samples = samples.filter(step=step)
    rows = samples.order_by("step", "index").values_list(
        "step",
        "variant",
        "objective",
        "n_tokens",
        "masked",
        "clipped",
        "reweighted",
        "advantage",
        "entropy",
        KeyTextTransform(a, "counterfactual"),
        KeyTextTransform(b, "counterfactual"),
    )
    out = []
    for step, variant, objective, n, masked, clipped, reweighted, advantage, entropy, a_marks, b_marks in rows:
        own = variant or objective or ""
        own_marks = marks.encode(n, masked, clipped, reweighted) if own in (a, b) else None
        out.append(
            Row(
                step=step,
                a=own_marks if a == own else a_marks,
                b=own_marks if b == own else b_marks,
                entropy=unpack_log_ratios(entropy),
                advantage=advantage,
                n_tokens=n,
            )
        )
    return out
