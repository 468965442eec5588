"""The dashboard's view of the trainer's one run schema (trainer.config.RunConfig).

The form, the API and the trainer validate with the same pydantic model, so a value the trainer
would reject is refused here, before any job is submitted.
"""
import copy
import functools
import os
from pathlib import Path
from typing import Any

from trainer.config import ConfigError as TrainerConfigError
from trainer.config import RunConfig, parse_config

REPO_ROOT = Path(__file__).resolve().parents[2]


class ConfigError(ValueError):
    """A run config failed validation; `errors` is [{field, message}] with dotted field paths."""

    def __init__(self, errors: list[dict[str, str]]):
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))
        self.errors = errors


def data_roots() -> list[Path]:
    """Folders a run config may name data and model files under: OPL_DATA_ROOTS (separated by
    os.pathsep), else the repository's examples/ and the shared data folder beside it."""
    raw = os.environ.get("OPL_DATA_ROOTS", "")
    if raw.strip():
        return [Path(p).resolve() for p in raw.split(os.pathsep) if p.strip()]
    return [(REPO_ROOT / "examples").resolve(), (REPO_ROOT.parent / "shared" / "data").resolve()]


def _looks_like_path(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~", "\\")) or text in (".", "..")


def path_problems(data: Any) -> list[dict[str, str]]:
    """Data and model paths outside the allowed roots, refused before the trainer's validation
    would look at the file: so the answer never tells whether a path exists on the server."""
    problems = []
    if not isinstance(data, dict):
        return problems
    for section, key, always in (("task", "train_file", True), ("model", "name", False)):
        value = data.get(section, {}).get(key) if isinstance(data.get(section), dict) else None
        if not isinstance(value, str) or not value or (not always and not _looks_like_path(value)):
            continue
        if "\x00" in value:
            problems.append({"field": f"{section}.{key}", "message": "not a valid path"})
            continue
        path = Path(os.path.expanduser(value)) if value.startswith("~") else Path(value)
        resolved = (path if path.is_absolute() else REPO_ROOT / path).resolve()
        if not any(resolved.is_relative_to(root) for root in data_roots()):
            problems.append({"field": f"{section}.{key}",
                             "message": "must be a file under the data folders (OPL_DATA_ROOTS)"})
    return problems


@functools.cache
def nullable_text_fields() -> frozenset[tuple[str, str]]:
    """(section, field) of the string fields that may be null (task.train_file, ...)."""
    schema = RunConfig.model_json_schema()
    out = set()
    for section, ref in schema["properties"].items():
        body = schema["$defs"][ref["$ref"].rsplit("/", 1)[-1]] if "$ref" in ref else ref
        for name, prop in body.get("properties", {}).items():
            kinds = {option.get("type") for option in prop.get("anyOf", [])}
            if kinds == {"string", "null"}:
                out.add((section, name))
    return frozenset(out)


def _empty_as_null(data: Any) -> Any:
    """An empty string where the field may be null is null: a form's empty box says null, so the
    two must mean one value (keep_best_metric: "" and null both keep the newest only)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for section, name in nullable_text_fields():
        values = out.get(section)
        if isinstance(values, dict) and values.get(name) == "":
            out[section] = {**values, name: None}
    return out


def validate_run_config(data: dict[str, Any]) -> dict[str, Any]:
    """Validate a (partial) config and return the full config with every default filled in."""
    data = _empty_as_null(data)
    if problems := path_problems(data):
        raise ConfigError(problems)
    try:
        config = parse_config(data)
    except TrainerConfigError as exc:
        raise ConfigError([{"field": field, "message": message} for field, message in exc.problems]) from None
    return config.model_dump(mode="json", exclude={"reporting"})


EXPERIMENT_FIELDS = ("sweep", "random", "seeds", "tags", "(", "config.", "notes", "priority", "project", "warmup_run")


def experiment_fields(errors: list[dict[str, str]]) -> list[dict[str, str]]:
    """Errors as fields of an experiment: config paths get a `config.` prefix (the API's body
    and the form both name `config.algorithm.lr`); sweep, random and seeds errors stay as they are."""
    return [e if e["field"].startswith(EXPERIMENT_FIELDS) else {**e, "field": f"config.{e['field']}"} for e in errors]


def merge_config(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A copy of base with override applied section by section: nested mappings merge, the rest
    replaces (a pasted YAML over the form's fields, a warm-up run's overrides over its sweep)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_config(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def set_dotted(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of config with `a.b.c` set to value (creating sections as needed)."""
    out = copy.deepcopy(config)
    node = out
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError([{"field": path, "message": f"'{part}' is not a section"}])
    node[leaf] = value
    return out
