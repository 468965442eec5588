"""What the compare charts of a set of runs need (the JSON config of metrics_compare.js), and the
rows of their config diff: one plain function for the compare page and an experiment's page."""

import json

from django.urls import reverse

from orchestrator.experiments.models import Experiment, Run
from orchestrator.metrics import selectors
from orchestrator.metrics.compare import comparable, differing_fields, fork_steps
from orchestrator.metrics.corrections import variant_of
from orchestrator.metrics.panels import X_AXES, fraction_label, panel_keys, panels_for
from orchestrator.metrics.study_metric import default_metric
from orchestrator.metrics.summaries import run_summaries

MAX_LIVE_STREAMS = 4  # a browser holds 6 connections per host: the page's own requests need the rest


def compare_data(runs: list[Run], *, experiment: Experiment | None = None) -> tuple[dict, list[dict]]:
    """What the compare charts need for `runs` (the JSON config of metrics_compare.js) and the
    config diff rows. With `experiment`, the charts are embedded in its page: grouped by its first
    swept field, with a link to the full compare page."""
    ids = [r.pk for r in runs]
    keys = selectors.keys_of(ids)
    bundled = [r.uses_bundled_trainer for r in runs]
    panels = panels_for(keys, [r.config for r in runs if r.uses_bundled_trainer], bundled=any(bundled) or not runs)
    differing = differing_fields([r.config for r in runs], bundled)
    flat = {r.pk: comparable(r.config, bundled=r.uses_bundled_trainer) for r in runs}
    diff_rows = [{"field": f, "values": [_show(flat[r.pk].get(f, NOT_IN_CONFIG)) for r in runs]} for f in differing]
    study_metric = default_metric(keys)
    summary_keys = list(dict.fromkeys([*panel_keys(panels), *([study_metric] if study_metric else [])]))
    page = {
        "keys": keys,  # what the runs logged: the charts ask for these only
        "runs": [
            {
                "id": r.pk,
                "name": r.name,
                "state": r.state,
                "seed": r.seed,
                "objective": flat[r.pk].get("algorithm.objective", "m2po") if r.uses_bundled_trainer else None,
                "fraction_label": fraction_label(variant_of(r.config) if r.uses_bundled_trainer else None),
                "config": {f: flat[r.pk].get(f) for f in differing},
            }
            for r in runs
        ],
        "fields": differing,
        "study_metric": study_metric,  # the heatmap's and the summary's key until one is chosen
        "panels": panels,
        "x_axes": X_AXES,
        "summary": _with_tail_means(selectors.summaries(ids, summary_keys), ids, summary_keys),
        "series_url": reverse("metrics-compare-api"),
        # live runs: their streams, resumed from where the page's data starts (points the data
        # already has are skipped by step, so a point landing in between is not lost)
        "live": [
            {"run": r.pk, "stream_url": reverse("metrics-stream", args=[r.pk]), "after": selectors.current_seq(r.pk)}
            for r in [r for r in runs if r.is_active][:MAX_LIVE_STREAMS]
        ],
    }
    page["forks"], page["fork_clip"] = fork_steps(runs)  # the "forks from the parent's step" option
    if experiment is not None:
        swept = [
            f for f in ("staleness.k" if f == "staleness.s" else f for f in experiment.sweep or {}) if f in differing
        ]
        page.update(
            embedded=True,
            default_group=swept[0] if swept else "",
            compare_url=f"{reverse('metrics-compare')}?experiment={experiment.pk}",
        )
    return page, diff_rows


def _with_tail_means(summary: dict, ids: list[int], keys: list[str]) -> dict:
    """Each summary row gains the run summaries' tail mean (mean of the last 10% of updates), the
    heatmap's and the summary table's default: the last value alone is one noisy point."""
    tails = run_summaries(ids, keys)
    for rid, per_key in summary.items():
        for key, row in per_key.items():
            row["tail_mean"] = tails.get(rid, {}).get(key, {}).get("tail_mean")
    return summary


NOT_IN_CONFIG = object()  # a field a run's config does not have: shown as "—", never as a default


def _show(value) -> str:
    if value is NOT_IN_CONFIG:
        return "—"
    if value is None:
        return "–"
    return value if isinstance(value, str) else json.dumps(value)
