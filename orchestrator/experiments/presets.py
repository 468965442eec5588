"""Presets for the new-experiment form: experiment YAML files in examples/presets/.

Each file is an experiment file (see experiment_file.py) with a `title` comment line first:
    # title: M2PO, s=256, Qwen3-1.7B-Base, DeepScaleR
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from orchestrator.experiments.experiment_file import parse_experiment_yaml


@dataclass(frozen=True)
class Preset:
    slug: str
    title: str
    path: Path

    def spec(self) -> dict[str, Any]:
        return parse_experiment_yaml(self.path.read_text(), default_name=self.slug)


def presets_dir() -> Path:
    return Path(getattr(settings, "OPL_PRESETS_DIR", settings.BASE_DIR / "examples" / "presets"))


def list_presets() -> list[Preset]:
    out = []
    for path in sorted(presets_dir().glob("*.yaml")):
        first = path.read_text().splitlines()[:1]
        title = first[0].split("title:", 1)[1].strip() if first and "title:" in first[0] else path.stem
        out.append(Preset(slug=path.stem, title=title, path=path))
    return out


def get_preset(slug: str) -> Preset | None:
    return next((p for p in list_presets() if p.slug == slug), None)
