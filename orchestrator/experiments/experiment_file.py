"""Experiment YAML files, for import, export and `manage.py submit_experiment`.

Two shapes are accepted:
  - a plain run config, the same file `python -m trainer run --config` takes (model:, algorithm:, ...);
  - an experiment file: name, project, seeds, priority, tags, notes, sweep, random and the run
    config under `config:`.
Unknown keys are refused, naming the key and the nearest valid one.
"""

from __future__ import annotations

import difflib
from typing import Any

import yaml

from orchestrator.experiments.runconfig import ConfigError
from orchestrator.experiments.yaml_text import dump_yaml
from orchestrator.lib.bounds import MAX_DEPTH, MAX_YAML_BYTES, BoundsError, check_values
from trainer.config import RunConfig

EXPERIMENT_KEYS = ("name", "project", "config", "sweep", "random", "seeds", "priority", "tags", "notes", "warmup_run")
CONFIG_SECTIONS = tuple(k for k in RunConfig.model_fields if k != "reporting")


class _BoundedLoader(yaml.SafeLoader):
    """safe_load without anchors or aliases (a few hundred bytes of nested aliases expand to
    gigabytes) and at most MAX_DEPTH levels of nesting."""

    _depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases (&name, *name) are not allowed", event.start_mark
            )
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested more than {MAX_DEPTH} levels deep", event.start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str) -> Any:
    """YAML text to data with the limits above; ConfigError naming (file) when refused."""
    if len(text.encode("utf-8", errors="replace")) > MAX_YAML_BYTES:
        raise ConfigError([{"field": "(file)", "message": f"larger than {MAX_YAML_BYTES // 1024} KiB"}])
    try:
        return yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        raise ConfigError([{"field": "(file)", "message": f"not valid YAML: {exc}"}]) from None
    except RecursionError:
        raise ConfigError([{"field": "(file)", "message": f"nested more than {MAX_DEPTH} levels deep"}]) from None


def parse_experiment_yaml(text: str, default_name: str = "experiment") -> dict[str, Any]:
    """An experiment spec from YAML text; ConfigError naming the field on any problem."""
    data = load_yaml(text) or {}
    if not isinstance(data, dict):
        raise ConfigError([{"field": "(file)", "message": "the file must be a mapping of keys"}])
    if not any(key in EXPERIMENT_KEYS for key in data):
        try:
            check_values(data, "config")
        except BoundsError as exc:
            raise ConfigError(exc.as_errors()) from None
        return {"name": default_name, "config": data, "sweep": {}, "random": {}}  # a plain run config
    errors = []
    for key in data:
        if key in EXPERIMENT_KEYS:
            continue
        if key in CONFIG_SECTIONS:
            errors.append({"field": str(key), "message": f"'{key}' is a run config section: put it under 'config:'"})
            continue
        close = difflib.get_close_matches(str(key), EXPERIMENT_KEYS, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else f"; valid keys: {', '.join(EXPERIMENT_KEYS)}"
        errors.append({"field": str(key), "message": f"unknown key '{key}'{hint}"})
    if errors:
        raise ConfigError(errors)
    spec = {
        "name": default_name,
        "config": {},
        "sweep": {},
        "random": {},
        **{k: v for k, v in data.items() if v is not None},
    }
    for key, kind in (("config", dict), ("sweep", dict), ("random", dict), ("tags", list), ("warmup_run", dict)):
        if spec.get(key) is not None and not isinstance(spec[key], kind):
            raise ConfigError([{"field": key, "message": f"must be a {'mapping' if kind is dict else 'list'}"}])
    spec["name"] = str(spec["name"])
    try:
        check_values(spec, "")
    except BoundsError as exc:
        raise ConfigError(exc.as_errors()) from None
    return spec


def dump_experiment_yaml(spec: dict[str, Any]) -> str:
    """YAML for a spec that imports back as the same spec: a plain run config (the file the trainer
    takes; its project as the `# project:` comment the import reads, its name the file's) when
    there is nothing else to say, else an experiment file."""
    extra = {k: spec.get(k) for k in ("priority", "tags", "notes", "sweep", "random", "warmup_run") if spec.get(k)}
    if spec.get("seeds", 1) != 1:
        extra["seeds"] = spec["seeds"]
    config = spec.get("config") or {}
    if not extra:
        head = f"# project: {spec['project']}\n" if spec.get("project") else ""
        return head + dump_yaml(config)
    out = {"name": spec.get("name")}
    if spec.get("project"):
        out["project"] = spec["project"]
    out.update(extra)
    out["config"] = config
    return dump_yaml(out)
