"""The dashboard's view of the trainer's one run schema (trainer.config.RunConfig).

The form, the API and the trainer validate with the same pydantic model, so a value the trainer
would reject is refused here, before any job is submitted.
"""

import copy
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from trainer.config import ConfigError as TrainerConfigError
from trainer.config import RunConfig, file_values, parse_config

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


RUN_FOLDER = re.compile(r"^run-(\d+)\Z")
OUTSIDE = "must lie under the data folders (OPL_DATA_ROOTS) or in the folder of a run you may read"
MayReadRun = Callable[[int], bool]


def runs_root() -> Path:
    return Path(settings.RUNS_DIR).resolve()


def new_run_folder() -> Path:
    """Stands for the folder of a run not created yet (RUNS_DIR/run-<id>): the job's working
    directory, which relative paths are opened from."""
    return runs_root() / "run-new"


def _stays_in_new_folder(value: str) -> bool:
    """A relative path that does not climb out of the (new, empty) run folder it is opened from."""
    base = new_run_folder()
    return not Path(value).is_absolute() and Path(os.path.normpath(base / value)).is_relative_to(base)


def resolve_path(section: str, key: str, value: str) -> Path:
    """Where the trainer will open `value`: an absolute real path (symlinks and '..' followed).
    The job runs in its run folder, so a relative path is opened from there, and one that climbs
    out of it (`../run-1`) names a sibling run. A relative train_file that stays inside is the
    repository's: the trainer looks there when its (new, empty) folder does not hold the file."""
    if (section, key) == ("task", "train_file") and _stays_in_new_folder(value):
        return Path(os.path.realpath(REPO_ROOT / value))
    return Path(os.path.realpath(new_run_folder() / value))  # an absolute value replaces the base


def run_folder_of(path: Path) -> tuple[bool, int | None]:
    """(inside the runs folder, the id of the run whose folder holds the path, if any)."""
    runs = runs_root()
    if not path.is_relative_to(runs):
        return False, None
    parts = path.relative_to(runs).parts
    match = RUN_FOLDER.match(parts[0]) if parts else None
    return True, int(match.group(1)) if match else None


def submitted_path_problems(
    data: Any, may_read_run: MayReadRun | None = None
) -> tuple[list[dict[str, str]], dict[tuple[str, str], str]]:
    """(problems, resolved paths) of a config's file paths, worked out before the trainer's
    validation would look at any file, so no answer tells whether a path exists on the server.
    A path must lie under the data roots, or (model.name, train_file, hf_dataset) in the folder of
    a run the caller may read (`may_read_run`; none without one). A fork names its parent by
    init.from_run, never by its folder."""
    problems, resolved = [], {}
    if not isinstance(data, dict):
        return problems, resolved
    for section, key, value in file_values(data):
        field = f"{section}.{key}"
        if "\x00" in value or not value:
            problems.append({"field": field, "message": "not a valid path"})
            continue
        if (section, key) != ("task", "train_file") and _stays_in_new_folder(value):
            problems.append(
                {
                    "field": field,
                    "message": "a relative path is opened from the run's own folder, which is "
                    "empty when the run starts: give an absolute path",
                }
            )
            continue
        path = resolve_path(section, key, value)
        in_runs, run_id = run_folder_of(path)
        if in_runs and (section, key) == ("init", "from_path"):
            message = (
                "a run of this dashboard is named by init.from_run "
                "(its access is checked and its checkpoint kept), not by its folder"
            )
        elif (not in_runs and any(path.is_relative_to(root) for root in data_roots())) or (
            run_id is not None and may_read_run is not None and may_read_run(run_id)
        ):
            message = None
        else:  # outside, in no run's folder, in a run the caller cannot read or that does not exist: one answer
            message = OUTSIDE
        if message:
            problems.append({"field": field, "message": message})
        else:
            resolved[(section, key)] = str(path)
    return problems, resolved


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


def validate_run_config(data: dict[str, Any], *, may_read_run: MayReadRun | None = None) -> dict[str, Any]:
    """Validate a (partial) config and return the full config with every default filled in and
    every file path resolved to where the trainer will open it (submitted_path_problems)."""
    data = _empty_as_null(data)
    problems, resolved = submitted_path_problems(data, may_read_run)
    if problems:
        raise ConfigError(problems)
    for (section, key), path in resolved.items():
        data = {**data, section: {**data[section], key: path}}
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
