"""What a launcher is, checked: its command, typed parameters and resources; the typed values of a
run's parameters; and the argv they make. Plain Python and pydantic, no Django.

A command is an argument list. A `{name}` inside an entry is replaced by that entry's share of
the value, per entry: a value never becomes more or fewer entries and never meets a shell, so
`--lr={lr}` stays one entry whatever the value holds. `{{` and `}}` are literal braces. Besides
the parameters, the orchestrator fills `{python}` (the launcher's interpreter), `{repo}` (the
dashboard's checkout, where examples/ lives), `{run_dir}`, `{run_id}` and `{attempt}`.

Text values reach the program verbatim, so they may hold no control or bidirectional characters
(a new line, U+202E) that would make an argument read differently from how it shows. A `path`
parameter is a path inside the run's folder: relative, resolved there (`..` may not leave it),
and filled in as the absolute path. A shell given `-c` would run a value as shell code, so a
command that starts one is refused.
"""

from __future__ import annotations

import math
import posixpath
import re
import unicodedata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}\Z")
PARAM_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
TOKEN_RE = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
RESERVED = ("python", "repo", "run_dir", "run_id", "attempt")
# absolute, no '..', and no character a shell or Slurm's %-expansion would act on
PATH_RE = re.compile(r"^/[A-Za-z0-9_./+-]*\Z")
MAX_STR_VALUE = 1000
MAX_ENTRIES = 200
# a path parameter's value: relative, of characters neither a shell nor Slurm's %-expansion acts on
PATH_VALUE_RE = re.compile(r"^[A-Za-z0-9_.+/-]+\Z")
NEW_LINES = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash", "csh", "tcsh", "fish", "rbash"})
SHELL_OPTIONS_WITH_ARGUMENT = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


class FieldProblem(ValueError):
    """Raised inside a validator to name a field below the one being validated."""

    def __init__(self, sub: str, message: str):
        super().__init__(f"{sub}: {message}")
        self.sub, self.message = sub, message


class DefinitionError(ValueError):
    """A launcher definition or a run's parameters were refused; `errors` is [{field, message}]."""

    def __init__(self, errors: list[dict[str, str]]):
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))
        self.errors = errors


# --- the definition -------------------------------------------------------------------------------


class Parameter(BaseModel):
    """One typed parameter: no default means the user must give it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["int", "float", "str", "bool", "choice", "path"]
    default: Any = None
    min: float | None = None
    max: float | None = None
    choices: list[str] | None = None
    help: str = Field(default="", max_length=500)

    @model_validator(mode="after")
    def _consistent(self) -> Parameter:
        if self.type == "choice" and not self.choices:
            raise FieldProblem("choices", "a choice parameter needs a non-empty list of choices")
        if self.type != "choice" and self.choices is not None:
            raise FieldProblem("choices", f"only a choice parameter has choices (this one is {self.type})")
        if (self.min is not None or self.max is not None) and self.type not in ("int", "float"):
            raise FieldProblem("min", f"only int and float parameters have bounds (this one is {self.type})")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise FieldProblem("min", f"{_num(self.min)} is above max {_num(self.max)}")
        if self.default is not None:
            problem = value_problem(self, self.default)
            if problem:
                raise FieldProblem("default", problem)
        return self


class Resources(BaseModel):
    """What each run of the launcher asks the cluster for."""

    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(default=0, ge=0, le=64, description="GPUs per node")
    cpus: int = Field(default=1, ge=1, le=256, description="CPUs per node")
    mem_gb: float = Field(default=4.0, gt=0, le=4096)
    nodes: int = Field(default=1, ge=1, le=64)
    time_limit_min: int | None = Field(default=None, ge=1, le=60 * 24 * 30)

    @property
    def total_gpus(self) -> int:
        return self.gpus * self.nodes


class Definition(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = Field(default="", max_length=2000)
    enabled: bool = True
    python: str = ""  # a venv's interpreter, filled in for {python}; empty: the trainer's python
    container: str = ""  # an OCI bundle for Slurm's --container
    command: list[str] = Field(min_length=1, max_length=MAX_ENTRIES)
    parameters: dict[str, Parameter] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError(
                "lower-case letters, digits, '_', '.' and '-', starting with a letter or digit, at most 63"
            )
        return v

    @field_validator("python", "container")
    @classmethod
    def _path(cls, v: str) -> str:
        if v and (not PATH_RE.match(v) or ".." in v.split("/")):
            raise ValueError("an absolute path of letters, digits and _ . / + - only, without '..'")
        return v

    @field_validator("parameters", mode="before")
    @classmethod
    def _listed(cls, v: Any) -> Any:
        """A list of {name, ...} keeps its order where a JSON object would not (PostgreSQL's jsonb
        sorts keys): the database stores the list, a YAML file may write either."""
        if not isinstance(v, list):
            return v
        out = {}
        for i, entry in enumerate(v):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise FieldProblem(str(i), "each listed parameter is a mapping with a name")
            out[entry["name"]] = {k: value for k, value in entry.items() if k != "name"}
        return out

    @field_validator("parameters")
    @classmethod
    def _param_names(cls, v: dict[str, Parameter]) -> dict[str, Parameter]:
        for name in v:
            if not PARAM_NAME_RE.match(name):
                raise FieldProblem(name[:60], "a parameter name is a letter or '_', then letters, digits or '_'")
            if name in RESERVED:
                raise FieldProblem(name, "filled in by the orchestrator: pick another name")
        return v

    @model_validator(mode="after")
    def _placeholders(self) -> Definition:
        known = set(self.parameters) | set(RESERVED)
        for i, entry in enumerate(self.command):
            if "\x00" in entry:
                raise FieldProblem(f"command[{i}]", "contains a NUL character")
            for name in placeholders(entry, f"command[{i}]"):
                if name not in known:
                    raise FieldProblem(
                        f"command[{i}]", f"{{{name}}} names no parameter (known: {', '.join(sorted(known))})"
                    )
        if not self.command[0]:
            raise FieldProblem("command[0]", "the program is empty")
        self._no_shell_script()
        self._paths_stand_alone()
        return self

    def _no_shell_script(self) -> None:
        """A shell given -c parses its argument as a script: a value inside it would be shell code,
        where every other program gets each value as one argument, unread."""
        found = shell_script_entry(self.command, self.python)
        if found is not None:
            at, shell = found
            raise FieldProblem(
                f"command[{at}]",
                f"the shell {shell!r} given {self.command[at]!r} runs its argument as shell code, so a value "
                "would be parsed by the shell instead of reaching the program as one argument: run the program "
                "itself, or a script file with the values as its arguments",
            )

    def _paths_stand_alone(self) -> None:
        """Text joined under {run_dir} could climb out of it; a path parameter is already inside."""
        for i, entry in enumerate(self.command):
            names = placeholders(entry, f"command[{i}]")
            after = names[names.index("run_dir") + 1 :] if "run_dir" in names else []
            for name in after:
                kind = self.parameters[name].type if name in self.parameters else None
                if kind == "str":
                    raise FieldProblem(
                        f"command[{i}]",
                        f"{{{name}}} is text inside a path under {{run_dir}}, which '..' would leave: "
                        f"make {name} a path parameter, kept inside the run folder",
                    )
                if kind == "path":
                    raise FieldProblem(
                        f"command[{i}]",
                        f"{{{name}}} is a path parameter, filled in as its absolute path inside the run folder: "
                        f"write {{{name}}} without {{run_dir}}",
                    )


def shell_script_entry(command: list[str], python: str = "") -> tuple[int, str] | None:
    """The index of the `-c` (or `-ec`, `-lc`...) that makes a shell run its next argument as a
    script, and the shell; or None. Looks through `env [NAME=value...]` to the program it starts."""
    program = python if command[0] == "{python}" and python else command[0]
    at = 1
    if posixpath.basename(program) == "env":
        while at < len(command) and (command[at].startswith("-") or "=" in command[at]):
            at += 1
        if at == len(command):
            return None
        program, at = command[at], at + 1
    if posixpath.basename(program) not in SHELLS:
        return None
    while at < len(command):
        entry = command[at]
        if entry in SHELL_OPTIONS_WITH_ARGUMENT:
            at += 2
            continue
        if re.fullmatch(r"[-+][A-Za-z]*c[A-Za-z]*", entry) or entry == "--command":
            return at, program
        if not entry.startswith(("-", "+")) or entry == "--":
            return None  # a script file: what follows are its arguments
        at += 1
    return None


def placeholders(entry: str, field: str = "command") -> list[str]:
    """The names an entry's `{name}` tokens refer to; a lone brace or a bad name is an error."""
    names = []
    for match in TOKEN_RE.finditer(entry):
        token = match.group(0)
        if token in ("{{", "}}"):
            continue
        name = match.group(1)
        if name is None or not PARAM_NAME_RE.match(name):
            raise FieldProblem(field, f"{token!r} is not a placeholder; write {{{{ or }}}} for a literal brace")
        names.append(name)
    return names


def parse_definition(data: Any) -> Definition:
    """A checked definition, or DefinitionError naming each bad field."""
    try:
        return Definition.model_validate(data)
    except ValidationError as exc:
        raise DefinitionError(pydantic_errors(exc)) from None


def pydantic_errors(exc: ValidationError) -> list[dict[str, str]]:
    out = []
    for err in exc.errors():
        path = [str(p) for p in err["loc"]]
        message = str(err["msg"]).removeprefix("Value error, ")
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, FieldProblem):
            path, message = [*path, cause.sub], cause.message
        out.append({"field": ".".join(path) or "(launcher)", "message": message})
    return out


# --- a run's parameter values ---------------------------------------------------------------------

TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off", "")


def coerce(param: Parameter, raw: Any) -> Any:
    """The typed value of a raw one (JSON from the API, text from the form); ValueError says why."""
    if param.type == "bool":
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in TRUE + FALSE:
            return raw.strip().lower() in TRUE
        raise ValueError(f"must be true or false, got {_shown(raw)}")
    if param.type == "int":
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise ValueError(f"must be a whole number, got {_shown(raw)}")
        if isinstance(raw, float) and not raw.is_integer():
            raise ValueError(f"must be a whole number, got {raw!r}")
        try:
            return int(raw.strip()) if isinstance(raw, str) else int(raw)
        except (ValueError, OverflowError):
            raise ValueError(f"must be a whole number, got {_shown(raw)}") from None
    if param.type == "float":
        if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
            raise ValueError(f"must be a number, got {_shown(raw)}")
        try:
            value = float(raw.strip()) if isinstance(raw, str) else float(raw)
        except (ValueError, OverflowError):
            raise ValueError(f"must be a number, got {_shown(raw)}") from None
        if not math.isfinite(value):
            raise ValueError(f"must be a finite number, got {_shown(raw)}")
        return value
    if not isinstance(raw, str):
        raise ValueError(f"must be text, got {_shown(raw)}")
    return raw


def value_problem(param: Parameter, raw: Any) -> str | None:
    """Why a raw value is not acceptable for the parameter, or None."""
    try:
        value = coerce(param, raw)
    except ValueError as exc:
        return str(exc)
    if param.type in ("int", "float"):
        if param.min is not None and value < param.min:
            return f"must be at least {_num(param.min)}, got {value!r}"
        if param.max is not None and value > param.max:
            return f"must be at most {_num(param.max)}, got {value!r}"
        if param.type == "int" and abs(value) > 2**63 - 1:
            return "must fit in 64 bits"
    if param.type == "choice" and value not in (param.choices or []):
        return f"must be one of {', '.join(param.choices or [])}, got {_shown(value)}"
    if param.type == "str":
        if len(value) > MAX_STR_VALUE:
            return f"at most {MAX_STR_VALUE} characters, got {len(value)}"
        if problem := text_problem(value):
            return problem
        if value.startswith("-"):
            return "must not start with '-': the program would read it as an option"
    if param.type == "path":
        return path_problem(value)
    return None


def text_problem(value: str) -> str | None:
    """Why text may not reach a program verbatim: a NUL, a new line, another control character or a
    bidirectional control (the argument would read differently from how it shows)."""
    if "\x00" in value:
        return "must not contain a NUL character"
    for char in value:
        code = f"U+{ord(char):04X}"
        if char in NEW_LINES:
            return f"must be one line: it contains a line break ({code})"
        if char in BIDI_CONTROLS:
            return f"must not contain the bidirectional control {code}: it shows the text in another order"
        if unicodedata.category(char) == "Cc":
            return f"must not contain the control character {code}"
    return None


def path_problem(value: str) -> str | None:
    """Why a path parameter's value is not a path inside the run folder, or None."""
    if len(value) > MAX_STR_VALUE:
        return f"at most {MAX_STR_VALUE} characters, got {len(value)}"
    if problem := text_problem(value):
        return problem
    if value.startswith("/"):
        return "must be relative to the run folder, not an absolute path"
    if not PATH_VALUE_RE.match(value):
        return "a path inside the run folder of letters, digits and _ . / + - only"
    normal = posixpath.normpath(value)
    if normal == ".." or normal.startswith("../"):
        return f"{_shown(value)} leaves the run folder ('..' climbs above it)"
    return None


def resolve_paths(definition: Definition, values: dict[str, Any], run_dir: str) -> dict[str, Any]:
    """The values with each path parameter resolved inside the run folder, as an absolute path;
    ValueError when one leaves it (through a link that points outside)."""
    root = Path(run_dir).resolve()
    out = dict(values)
    for name, param in definition.parameters.items():
        if param.type != "path" or name not in values:
            continue
        target = (root / values[name]).resolve()
        if not target.is_relative_to(root):
            raise ValueError(f"params.{name}: {_shown(values[name])} resolves to {target}, outside the run folder")
        out[name] = str(target)
    return out


def parse_params(definition: Definition, raw: dict[str, Any]) -> dict[str, Any]:
    """Every parameter's typed value (defaults filled in), or DefinitionError naming
    `params.<name>` for each missing, unknown or bad value."""
    if not isinstance(raw, dict):
        raise DefinitionError([{"field": "params", "message": "must be a mapping of parameter names to values"}])
    errors, values = [], {}
    for name in raw:
        if name not in definition.parameters:
            known = ", ".join(definition.parameters) or "none"
            errors.append(
                {
                    "field": f"params.{str(name)[:60]}",
                    "message": f"{definition.name} has no such parameter (it has: {known})",
                }
            )
    for name, param in definition.parameters.items():
        given = raw.get(name)
        if given is None or (given == "" and param.type != "str"):
            if param.default is None:
                errors.append({"field": f"params.{name}", "message": f"required ({param.type})"})
                continue
            given = param.default
        problem = value_problem(param, given)
        if problem:
            errors.append({"field": f"params.{name}", "message": problem})
        else:
            values[name] = coerce(param, given)
    if errors:
        raise DefinitionError(errors)
    return values


# --- argv -------------------------------------------------------------------------------------------


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def build_argv(command: list[str], values: dict[str, Any]) -> list[str]:
    """The command with each `{name}` replaced inside its own entry: one entry in, one entry out."""

    def fill(match: re.Match) -> str:
        token = match.group(0)
        if token == "{{":
            return "{"
        if token == "}}":
            return "}"
        return as_text(values[match.group(1)])

    return [TOKEN_RE.sub(fill, entry) for entry in command]


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
