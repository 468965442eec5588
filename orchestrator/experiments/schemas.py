"""Request bodies of the JSON API, also used to check experiment files (submit_experiment).
orchestrator/web/openapi.py builds the API document from these models."""

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.lib.bounds import (
    INT32,
    MAX_DESCRIPTION,
    MAX_MEMBERS_PER_REQUEST,
    MAX_NOTES,
    MAX_TAG_LENGTH,
    MAX_TAGS,
)

# Names that end up in URLs (/api/v1/projects/<name>) and download headers: no '/', quotes or CR/LF.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
NAME_RE = re.compile(NAME_PATTERN)
TAG_PATTERN = r"^[A-Za-z0-9_.:@+\-][A-Za-z0-9_.:@+\- ]*$"
TAG_RE = re.compile(TAG_PATTERN)
Priority = Annotated[int, Field(ge=INT32[0], le=INT32[1], description="Higher runs first; a 32-bit integer.")]
Tag = Annotated[str, Field(min_length=1, max_length=MAX_TAG_LENGTH, pattern=TAG_PATTERN)]
Username = Annotated[str, Field(min_length=1, max_length=150)]
Role = Literal["owner", "member", "viewer"]
SWEEP_DOC = {
    "type": "object",
    "description": 'Dotted RunConfig paths to values: a list, {"linear": [start, stop, count]} or '
    '{"log": [start, stop, count]}. Together they make a grid.',
    "additionalProperties": {
        "anyOf": [
            {"type": "array", "items": {}},
            {"$ref": "#/components/schemas/LinearRange"},
            {"$ref": "#/components/schemas/LogRange"},
        ]
    },
}


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExperimentIn(_In):
    name: str = Field(min_length=1, max_length=200, pattern=NAME_PATTERN)
    project: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        pattern=NAME_PATTERN,
        description="An existing project you may add experiments to, or a new name "
        "(creates it, you its owner); omitted: your personal project.",
    )
    config: dict[str, Any] = Field(default_factory=dict, description="A (partial) RunConfig; defaults fill the rest.")
    # Checked by the sweep parser (errors name sweep.<path>); documented as SWEEP_DOC and RandomSearch.
    sweep: dict[str, Any] = Field(default_factory=dict)
    random: dict[str, Any] = Field(default_factory=dict, description="Random search: see RandomSearch.")
    seeds: int = Field(default=1, ge=1, le=1000, description="Seeds per point: train.seed, +1, ... (k in all)")
    priority: Priority = 0
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    notes: str = Field(
        default="", max_length=MAX_NOTES, description="The experiment's notes (not copied onto its runs)."
    )
    warmup_run: dict[str, Any] | None = Field(
        default=None,
        description="Config overrides for one warm-up run (e.g. {algorithm: {objective: grpo}, train: {steps: 200}}), "
        "created first as experiment '<name>-warmup'; every run of this experiment then starts from "
        "its final checkpoint (init.from_run).",
    )


class PriorityIn(_In):
    priority: Priority


class RunAnnotationIn(_In):
    tags: list[Tag] | None = Field(default=None, max_length=MAX_TAGS, description="Replaces the run's tags when given.")
    notes: str | None = Field(default=None, max_length=MAX_NOTES)


class ProjectIn(_In):
    name: str = Field(min_length=1, max_length=100, pattern=NAME_PATTERN)
    description: str = Field(default="", max_length=MAX_DESCRIPTION)


class ProjectPatchIn(_In):
    """Owners (and staff) change members and roles; staff alone change limits."""

    add_members: list[Username] = Field(
        default_factory=list,
        max_length=MAX_MEMBERS_PER_REQUEST,
        description="Usernames to add as members (or set to `role`).",
    )
    role: Role = Field(default="member", description="The role given to add_members.")
    set_roles: dict[Username, Role] = Field(
        default_factory=dict,
        max_length=MAX_MEMBERS_PER_REQUEST,
        description="Username -> role for existing or new members.",
    )
    remove_members: list[Username] = Field(default_factory=list, max_length=MAX_MEMBERS_PER_REQUEST)
    max_active_runs: int | None = Field(
        default=None, ge=0, le=INT32[1], description="Staff only; null: the site default."
    )
    max_gpus: int | None = Field(default=None, ge=0, le=INT32[1], description="Staff only; null: the site default.")
