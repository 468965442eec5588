"""The dashboard's view of the trainer's one run schema (trainer.config.RunConfig).

The form, the API and the trainer validate with the same pydantic model, so a value the trainer
would reject is refused here, before any job is submitted.
"""
import copy
from typing import Any

from trainer.config import ConfigError as TrainerConfigError
from trainer.config import parse_config


class ConfigError(ValueError):
    """A run config failed validation; `errors` is [{field, message}] with dotted field paths."""

    def __init__(self, errors: list[dict[str, str]]):
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))
        self.errors = errors


def validate_run_config(data: dict[str, Any]) -> dict[str, Any]:
    """Validate a (partial) config and return the full config with every default filled in."""
    try:
        config = parse_config(data)
    except TrainerConfigError as exc:
        raise ConfigError([{"field": field, "message": message} for field, message in exc.problems]) from None
    return config.model_dump(mode="json", exclude={"reporting"})


EXPERIMENT_FIELDS = ("sweep", "random", "seeds", "tags", "(")


def experiment_fields(errors: list[dict[str, str]]) -> list[dict[str, str]]:
    """Errors as fields of an experiment: config paths get a `config.` prefix (the API's body
    and the form both name `config.algorithm.lr`); sweep, random and seeds errors stay as they are."""
    return [e if e["field"].startswith(EXPERIMENT_FIELDS) else {**e, "field": f"config.{e['field']}"} for e in errors]


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
