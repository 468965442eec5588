"""The new-experiment page's form: flat submitted strings <-> an experiment spec.

An experiment spec is what the API's POST /api/v1/experiments takes and what an experiment YAML
file holds: {name, project, config, sweep, random, seeds, priority, tags, notes}. The page always
renders from flat strings (what the user typed, or `flat_from_spec` of a preset, a cloned run or
an imported file), so a refused submission comes back exactly as typed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from orchestrator.experiments.runconfig import ConfigError, merge_config, validate_run_config
from orchestrator.experiments.schema_form import config_from_post, config_sections, fields_by_path, parse_values
from orchestrator.experiments.schemas import NAME_RE
from orchestrator.experiments.yaml_text import dump_yaml
from orchestrator.lib.bounds import INT32, MAX_NOTES
from orchestrator.studies.warmup import (
    COUNT,  # how many warm-up runs; the rest of a warm-up mapping are config sections
)

SWEEP_MODES = ("list", "linear", "log")
DISTRIBUTIONS = ("uniform", "loguniform", "randint", "choice")
MIN_SWEEP_ROWS, MIN_RANDOM_ROWS = 3, 2


@dataclass
class Draft:
    spec: dict[str, Any]
    errors: list[dict[str, str]] = field(default_factory=list)
    pasted_paths: set[str] = field(default_factory=set)  # config paths set by the pasted YAML

    def place(self, error: dict[str, str]) -> dict[str, str]:
        """Show an error on a value that came from the pasted YAML next to that box."""
        path = error["field"].removeprefix("config.")
        if any(path == p or path.startswith(p + ".") for p in self.pasted_paths):
            return {"field": "config_yaml", "message": f"{path}: {error['message']}"}
        return error


def _int(data, name: str, default: int, errors: list, minimum: int | None = None) -> int:
    raw = (data.get(name) or "").strip()
    if raw == "":
        return default
    try:
        value = int(raw) if raw.isascii() and len(raw) <= 20 else int("x")
    except ValueError:
        errors.append({"field": name, "message": f"not a whole number: {raw[:40]!r}"})
        return default
    if minimum is not None and value < minimum:
        errors.append({"field": name, "message": f"must be at least {minimum}"})
    elif not INT32[0] <= value <= INT32[1]:
        errors.append({"field": name, "message": "out of range (a 32-bit integer)"})
        return default
    return value


def rows(data, prefix: str, keys: tuple[str, ...]) -> list[dict[str, str]]:
    """The submitted rows prefix-<i>-<key>, in order, blank rows dropped."""
    found = []
    i = 0
    while any(f"{prefix}-{i}-{k}" in data for k in keys):
        row = {k: (data.get(f"{prefix}-{i}-{k}") or "").strip() for k in keys}
        row["i"] = i
        if row[keys[0]] or row[keys[-1]]:
            found.append(row)
        i += 1
    return found


def draft_from_post(data) -> Draft:
    """Read the form; every unreadable value is an error naming its field."""
    errors: list[dict[str, str]] = []
    name = (data.get("name") or "").strip()
    if not name:
        errors.append({"field": "name", "message": "a name is required"})
    elif len(name) > 200:
        errors.append({"field": "name", "message": "at most 200 characters"})
    elif not NAME_RE.match(name):
        errors.append(
            {"field": "name", "message": "letters, digits, '.', '_' and '-' only, starting with a letter or digit"}
        )
    config, config_errors = config_from_post(data)
    errors += config_errors
    pasted_paths: set[str] = set()
    if (pasted := data.get("config_yaml") or "").strip():
        pasted_config = _pasted_config(pasted, errors)
        pasted_paths = set(_leaf_paths(pasted_config))
        config = merge_config(config, pasted_config)
    project = (data.get("project") or "").strip()
    if project and (not NAME_RE.match(project) or len(project) > 100):
        errors.append(
            {
                "field": "project",
                "message": "letters, digits, '.', '_' and '-' only (at most 100), or empty for your own project",
            }
        )
    notes = _line_breaks(data.get("notes") or "")
    if len(notes) > MAX_NOTES:
        errors.append({"field": "notes", "message": f"at most {MAX_NOTES} characters"})
    spec: dict[str, Any] = {
        "name": name,
        "project": project or None,
        "config": config,
        "seeds": _int(data, "seeds", 1, errors, minimum=1),
        "priority": _int(data, "priority", 0, errors),
        "tags": [t.strip() for t in (data.get("tags") or "").split(",") if t.strip()],
        "notes": notes,
        "sweep": {},
        "random": {},
        "warmup_run": _warmup_overrides(data.get("warmup_run") or "", errors),
    }
    fields = fields_by_path()
    for row in rows(data, "sweep", ("field", "mode", "values")):
        path, where = row["field"], f"sweep-{row['i']}"
        if path not in fields:
            errors.append(
                {
                    "field": where,
                    "message": f"choose a config field to sweep (got {path!r})" if path else "choose a field",
                }
            )
            continue
        if path in spec["sweep"]:
            errors.append({"field": where, "message": f"{path} is swept twice"})
            continue
        try:
            spec["sweep"][path] = _sweep_values(fields[path], row["mode"] or "list", row["values"])
        except ValueError as exc:
            errors.append({"field": where, "message": f"{path}: {exc}"})
    random_rows = rows(data, "random", ("field", "dist", "args"))
    if random_rows:
        params = {}
        for row in random_rows:
            where = f"random-{row['i']}"
            try:
                params[row["field"]] = _distribution(fields, row)
            except ValueError as exc:
                errors.append({"field": where, "message": str(exc)})
        spec["random"] = {
            "samples": _int(data, "random-samples", 1, errors, minimum=1),
            "seed": _int(data, "random-seed", 0, errors),
            "params": params,
        }
    return Draft(spec=spec, errors=errors, pasted_paths=pasted_paths)


def _line_breaks(text: str) -> str:
    """A textarea's text with a browser's CR LF line breaks as LF (what an API call or a file says)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _pasted_config(text: str, errors: list) -> dict[str, Any]:
    """The run config of a pasted YAML file (plain run config or experiment file)."""
    from orchestrator.experiments.experiment_file import parse_experiment_yaml

    try:
        spec = parse_experiment_yaml(text)
        if spec.get("sweep") or spec.get("random") or spec.get("seeds", 1) != 1:
            errors.append(
                {
                    "field": "config_yaml",
                    "message": "this box takes a run config; load a file with a sweep with Import YAML",
                }
            )
        return spec.get("config") or {}
    except ConfigError as exc:
        errors += [{"field": "config_yaml", "message": f"{e['field']}: {e['message']}"} for e in exc.errors]
        return {}


def _warmup_overrides(text: str, errors: list) -> dict[str, Any] | None:
    """The warm-up run's config overrides (a YAML mapping of config sections), or None when blank."""
    from orchestrator.experiments.experiment_file import CONFIG_SECTIONS, load_yaml

    if not text.strip():
        return None
    try:
        data = load_yaml(text)
    except ConfigError as exc:
        errors += [{"field": "warmup_run", "message": e["message"]} for e in exc.errors]
        return None

    if not isinstance(data, dict) or not all(isinstance(v, dict) for k, v in data.items() if k != COUNT):
        errors.append({"field": "warmup_run", "message": "a mapping of config sections, e.g. {train: {steps: 200}}"})
        return None
    if unknown := [k for k in data if k not in CONFIG_SECTIONS and k != COUNT]:
        errors.append(
            {
                "field": "warmup_run",
                "message": f"unknown config section {unknown[0]!r}; sections: {', '.join(CONFIG_SECTIONS)}",
            }
        )
        return None
    return data


def _leaf_paths(config: dict[str, Any], prefix: str = ""):
    for key, value in config.items():
        if isinstance(value, dict):
            yield from _leaf_paths(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}"


def _numbers(text: str, count: int, what: str) -> list[float]:
    parts = [p for p in re.split(r"\s*,\s*", text.strip()) if p]
    if len(parts) != count:
        raise ValueError(f"{what}: expected {count} comma-separated numbers, got {len(parts)}")
    try:
        numbers = [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"{what}: not a number in {text[:80]!r}") from None
    if not all(math.isfinite(n) and abs(n) < 2**63 for n in numbers):
        raise ValueError(f"{what}: numbers must be finite and within 64 bits")
    return numbers


def _sweep_values(spec, mode: str, text: str) -> Any:
    if mode == "list":
        return parse_values(spec, text)
    if mode not in SWEEP_MODES:
        raise ValueError(f"unknown sweep mode {mode!r}; use list, linear or log")
    start, stop, count = _numbers(text, 3, f"{mode} range (start, stop, count)")
    if not float(count).is_integer() or count < 1:
        raise ValueError(f"{mode} range: the count must be a whole number >= 1")
    return {mode: [start, stop, int(count)]}


def _distribution(fields, row: dict) -> dict[str, Any]:
    path, dist, args = row["field"], row["dist"] or "uniform", row["args"]
    if path not in fields:
        raise ValueError(f"choose a config field for the random search (got {path!r})")
    if dist == "choice":
        return {"choice": parse_values(fields[path], args)}
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"{path}: unknown distribution {dist!r}; use {', '.join(DISTRIBUTIONS)}")
    low, high = _numbers(args, 2, f"{path}: {dist} (low, high)")
    return {dist: [int(low), int(high)] if dist == "randint" else [low, high]}


def flat_from_spec(spec: dict[str, Any]) -> dict[str, str]:
    """The form's strings for an experiment spec (config filled in with defaults where valid)."""
    try:
        config = validate_run_config(spec.get("config") or {})
    except ConfigError:
        config = spec.get("config") or {}
    flat = {
        "name": str(spec.get("name", "")),
        "project": str(spec.get("project") or ""),
        "seeds": str(spec.get("seeds", 1)),
        "priority": str(spec.get("priority", 0)),
        "tags": ", ".join(spec.get("tags") or []),
        "notes": spec.get("notes") or "",
        "warmup_run": dump_yaml(spec["warmup_run"], default_flow_style=None) if spec.get("warmup_run") else "",
    }
    for path, fspec in fields_by_path().items():
        section, name = path.split(".", 1)
        value = (
            config.get(section, {}).get(name, fspec.default)
            if isinstance(config.get(section, {}), dict)
            else fspec.default
        )
        flat[path] = fspec.to_text(value)
    for i, (path, values) in enumerate((spec.get("sweep") or {}).items()):
        fspec = fields_by_path().get(path)
        flat[f"sweep-{i}-field"] = path
        if isinstance(values, dict) and values:
            mode, args = next(iter(values.items()))
            flat[f"sweep-{i}-mode"], flat[f"sweep-{i}-values"] = str(mode), _join(args)
        else:
            flat[f"sweep-{i}-mode"] = "list"
            flat[f"sweep-{i}-values"] = (
                ", ".join(fspec.to_text(v) if fspec else str(v) for v in values)
                if isinstance(values, list)
                else str(values)
            )
    random = spec.get("random") or {}
    if random:
        flat["random-samples"], flat["random-seed"] = str(random.get("samples", 1)), str(random.get("seed", 0))
        for i, (path, dist) in enumerate((random.get("params") or {}).items()):
            kind, args = next(iter(dist.items())) if isinstance(dist, dict) and dist else ("uniform", dist)
            flat[f"random-{i}-field"], flat[f"random-{i}-dist"] = path, str(kind)
            flat[f"random-{i}-args"] = _join(args)
    return flat


def fold_pasted(draft: Draft) -> tuple[dict[str, str], bool] | None:
    """The config fields' texts once the pasted YAML is applied to them, and whether every pasted
    value now has its field (then the box can be emptied): after a preview the fields show what
    is queued, not the values the YAML overrides. None when nothing readable was pasted."""
    if not draft.pasted_paths or any(e["field"] == "config_yaml" for e in draft.errors):
        return None
    fields = fields_by_path()
    flat = flat_from_spec({"config": draft.spec["config"]})
    texts = {path: flat[path] for path in fields}
    all_placed = all(".".join(p.split(".")[:2]) in fields for p in draft.pasted_paths)
    return texts, all_placed


def _join(args: Any) -> str:
    if not isinstance(args, (list, tuple)):
        return str(args)
    return ", ".join(repr(a) if isinstance(a, float) else str(a) for a in args)  # every digit


def form_context(flat: dict[str, str], errors: list[dict[str, str]]) -> dict[str, Any]:
    """What the template needs: sections of (field, text), sweep and random rows, errors by slot."""
    slots = errors_by_slot(errors, flat)
    sections = [
        {
            "section": s,
            "fields": [
                {
                    "spec": f,
                    "text": text,
                    "errors": slots.get(f.slug, []),
                    "textarea": f.is_textarea(text),
                    "changed": text != f.to_text(f.default),
                }
                for f in s.fields
                for text in [flat.get(f.path, f.to_text(f.default))]
            ],
        }
        for s in config_sections()
    ]
    sweep_rows = _rows_from_flat(flat, "sweep", ("field", "mode", "values"), MIN_SWEEP_ROWS)
    random_rows = _rows_from_flat(flat, "random", ("field", "dist", "args"), MIN_RANDOM_ROWS)
    for row in sweep_rows:
        row["errors"] = slots.get(f"sweep-{row['i']}", [])
    for row in random_rows:
        row["errors"] = slots.get(f"random-{row['i']}", [])
    return {
        "flat": flat,
        "sections": sections,
        "sweep_rows": sweep_rows,
        "random_rows": random_rows,
        "field_paths": list(fields_by_path()),
        "sweep_modes": SWEEP_MODES,
        "distributions": DISTRIBUTIONS,
        "errors": slots,
    }


def _rows_from_flat(flat: dict[str, str], prefix: str, keys: tuple[str, ...], minimum: int) -> list[dict]:
    out, i = [], 0
    while any(f"{prefix}-{i}-{k}" in flat for k in keys):
        out.append({"i": i, **{k: flat.get(f"{prefix}-{i}-{k}", "") for k in keys}})
        i += 1
    while len(out) < max(minimum, len([r for r in out if r[keys[0]]]) + 1):
        out.append({"i": len(out), **dict.fromkeys(keys, "")})
    return out


def errors_by_slot(errors: list[dict[str, str]], flat: dict[str, str]) -> dict[str, list[str]]:
    """Map each error to the element that shows it: a config field, a sweep row, or the form."""
    swept_rows = {flat.get(f"sweep-{i}-field"): f"sweep-{i}" for i in range(100) if f"sweep-{i}-field" in flat}
    slots: dict[str, list[str]] = {}
    for error in errors:
        where = error["field"]
        if where.startswith("config."):
            where = where[len("config.") :]
        if where.startswith("sweep."):
            path = where[len("sweep.") :]
            slot = swept_rows.get(path, "sweep")
        elif where.startswith(("sweep-", "random-")):
            slot = where.split(".")[0]
        elif where.startswith("random"):
            slot = "random"
        elif where.startswith("warmup_run"):
            slot = "warmup_run"
        elif where in fields_by_path() or where in (
            "name",
            "project",
            "seeds",
            "priority",
            "tags",
            "notes",
            "config_yaml",
        ):
            slot = where
        elif ".".join(where.split(".")[:2]) in fields_by_path():  # task.eval_sets.1
            slot = ".".join(where.split(".")[:2])
        else:
            slot = "form"
        message = (
            error["message"] if slot not in ("form", "sweep", "random") else f"{error['field']}: {error['message']}"
        )
        slots.setdefault(slot.replace(".", "__"), []).append(message)
    return slots
