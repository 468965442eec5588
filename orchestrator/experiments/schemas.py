"""Request bodies of the JSON API, also used to check experiment files (submit_experiment).
openapi.py builds the API document from these models."""
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
SWEEP_DOC = {
    "type": "object",
    "description": "Dotted RunConfig paths to values: a list, {\"linear\": [start, stop, count]} or "
    "{\"log\": [start, stop, count]}. Together they make a grid.",
    "additionalProperties": {"anyOf": [
        {"type": "array", "items": {}},
        {"$ref": "#/components/schemas/LinearRange"},
        {"$ref": "#/components/schemas/LogRange"},
    ]},
}


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExperimentIn(_In):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    project: str = Field(default="default", min_length=1, max_length=100)
    config: dict[str, Any] = Field(default_factory=dict, description="A (partial) RunConfig; defaults fill the rest.")
    # Checked by the sweep parser (errors name sweep.<path>); documented as SWEEP_DOC and RandomSearch.
    sweep: dict[str, Any] = Field(default_factory=dict)
    random: dict[str, Any] = Field(default_factory=dict, description="Random search: see RandomSearch.")
    seeds: int = Field(default=1, ge=1, le=1000, description="Seeds per point: train.seed, +1, ... (k in all)")
    priority: int = 0
    tags: list[str] = Field(default_factory=list)
    notes: str = ""


class PriorityIn(_In):
    priority: int


class RunAnnotationIn(_In):
    tags: list[str] | None = Field(default=None, description="Replaces the run's tags when given.")
    notes: str | None = None


class ProjectIn(_In):
    name: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN)
    description: str = ""


class ProjectPatchIn(_In):
    add_members: list[str] = Field(default_factory=list, description="Usernames to add.")
    max_active_runs: int | None = Field(default=None, ge=0, description="Staff only; null: the site default.")
    max_gpus: int | None = Field(default=None, ge=0, description="Staff only; null: the site default.")
