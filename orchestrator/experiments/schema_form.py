"""The new-experiment form, generated from RunConfig's JSON schema.

`config_sections()` walks `RunConfig.model_json_schema()` into sections of typed fields (default,
help text from the description, choices for enums, bounds). `config_from_post()` turns the
submitted strings back into a config dict, naming the field of every value it cannot read; the
trainer's own validation then runs on the result, so the form and the trainer share one schema.

A config sent back unchanged is the config that went in (tests/unit/experiments/
test_config_round_trip*.py): numbers are written with all their digits (repr, never %g), strings
are taken as typed (never stripped), and a string that holds or may hold a line break (its value
or its default does) is a textarea, because a one-line box drops line breaks. Browsers send line
breaks as CR LF; they come back as LF. An empty box is null where the field may be null.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from trainer.config import RunConfig

HIDDEN_SECTIONS = {"reporting"}  # environment-derived, never part of a saved run config


@dataclass(frozen=True)
class FieldSpec:
    path: str  # "algorithm.lr"
    label: str
    kind: str  # int, float, bool, enum, str, list
    default: Any
    description: str = ""
    choices: tuple = ()
    nullable: bool = False
    minimum: float | None = None
    maximum: float | None = None
    multiline: bool = False  # a string whose default spans lines (task.prompt_template)

    @property
    def slug(self) -> str:
        """The path as an HTML id part (dots are selectors in CSS)."""
        return self.path.replace(".", "__")

    def to_text(self, value: Any) -> str:
        if value is None:
            return ""
        if self.kind == "list" and isinstance(value, list):
            return ", ".join(self._item_text(v) for v in value)
        if self.kind == "bool":
            return "true" if value else "false"
        return self._item_text(value)

    @staticmethod
    def _item_text(value: Any) -> str:
        if isinstance(value, float):
            return repr(value)  # every digit: 0.123456789 stays 0.123456789
        return str(value)

    def is_textarea(self, text: str) -> bool:
        """Whether this value needs a textarea: a one-line input cannot hold a line break."""
        return self.multiline or "\n" in text or "\r" in text

    def parse(self, text: str) -> Any:
        """The typed value of the submitted text; ValueError with a reason a person can act on."""
        if self.kind == "str":
            text = text.replace("\r\n", "\n").replace("\r", "\n")  # a browser's line breaks
            return None if text == "" and self.nullable else text  # as typed: spaces are part of it
        text = text.strip()
        if text == "" and self.nullable:
            return None
        if text == "" and self.kind not in ("str", "list"):
            raise ValueError("a value is required")
        if self.kind == "int":
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"not a whole number: {text!r}") from None
        if self.kind == "float":
            try:
                return float(text)
            except ValueError:
                raise ValueError(f"not a number: {text!r}") from None
        if self.kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"expected true or false, got {text!r}")
            return text.lower() == "true"
        if self.kind == "list":
            return [part.strip() for part in text.split(",") if part.strip()]
        return text  # enums: the trainer's validation names unknown choices


@dataclass
class Section:
    name: str
    title: str
    description: str
    fields: list[FieldSpec] = field(default_factory=list)


def _resolve(schema: dict, node: dict) -> dict:
    ref = node.get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[-1]] if ref else node


def _field(schema: dict, section: str, name: str, prop: dict) -> FieldSpec:
    nullable = False
    options = prop.get("anyOf")
    body = prop
    if options:
        non_null = [o for o in options if o.get("type") != "null"]
        nullable = len(non_null) < len(options)
        body = {**_resolve(schema, non_null[0]), **{k: v for k, v in prop.items() if k != "anyOf"}}
    if "enum" in body:
        kind, choices = "enum", tuple(body["enum"])
    elif "const" in body:
        kind, choices = "enum", (body["const"],)
    else:
        kind = {"integer": "int", "number": "float", "boolean": "bool", "array": "list"}.get(body.get("type"), "str")
        choices = ()
    default = prop.get("default")
    return FieldSpec(
        path=f"{section}.{name}",
        label=name.replace("_", " "),
        kind=kind,
        default=default,
        description=prop.get("description", ""),
        choices=choices,
        nullable=nullable,
        minimum=body.get("minimum", body.get("exclusiveMinimum")),
        maximum=body.get("maximum", body.get("exclusiveMaximum")),
        multiline=kind == "str" and isinstance(default, str) and "\n" in default,
    )


@functools.cache
def config_sections() -> tuple[Section, ...]:
    schema = RunConfig.model_json_schema()
    sections = []
    for name, ref in schema["properties"].items():
        if name in HIDDEN_SECTIONS:
            continue
        body = _resolve(schema, ref)
        section = Section(
            name=name, title=body.get("title", name), description=ref.get("description") or body.get("description", "")
        )
        defaults = RunConfig().model_dump(mode="json")[name]
        for fname, prop in body.get("properties", {}).items():
            spec = _field(schema, name, fname, prop)
            if spec.default is None and not spec.nullable:  # default_factory fields (lists)
                spec = FieldSpec(**{**spec.__dict__, "default": defaults.get(fname)})
            section.fields.append(spec)
        sections.append(section)
    return tuple(sections)


@functools.cache
def fields_by_path() -> dict[str, FieldSpec]:
    return {f.path: f for s in config_sections() for f in s.fields}


def config_from_post(data) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(config, errors) from submitted fields named by dotted path; absent fields keep defaults."""
    config: dict[str, Any] = {}
    errors = []
    for path, spec in fields_by_path().items():
        raw = data.get(path)
        if raw is None:
            continue
        try:
            value = spec.parse(raw)
        except ValueError as exc:
            errors.append({"field": path, "message": str(exc)})
            continue
        section, name = path.split(".", 1)
        config.setdefault(section, {})[name] = value
    return config, errors


# Values that decide what runs: an export names them even at their defaults, so the file says
# which model learns which task by which objective, and defaults changing later do not change it.
ALWAYS_NAMED = {
    "model": ("name",),
    "task": ("name",),
    "algorithm": ("objective",),
    "staleness": ("mode", "k"),
    "train": ("steps", "seed"),
}


def minimal_config(config: dict[str, Any]) -> dict[str, Any]:
    """The values that differ from RunConfig's defaults, and those that decide what runs (ALWAYS_NAMED):
    short, readable YAML exports."""
    defaults = RunConfig().model_dump(mode="json")
    out: dict[str, Any] = {}
    for section, values in config.items():
        if not isinstance(values, dict):
            out[section] = values
            continue
        named = ALWAYS_NAMED.get(section, ())
        changed = {k: v for k, v in values.items() if k in named or defaults.get(section, {}).get(k, object()) != v}
        if changed:
            out[section] = changed
    return out


def parse_values(spec: FieldSpec, text: str) -> list[Any]:
    """A comma-separated list of values of one field, each typed like the field."""
    parts = [p for p in re.split(r"\s*,\s*", text.strip()) if p != ""]
    if not parts:
        raise ValueError("give at least one value")
    return [spec.parse(p) for p in parts]
