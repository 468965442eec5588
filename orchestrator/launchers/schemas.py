"""The API's request body for a run of a launcher."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.experiments.schemas import NAME_PATTERN, Priority, Tag
from orchestrator.lib.bounds import MAX_NOTES, MAX_TAGS


class LauncherRunIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    params: dict[str, Any] = Field(default_factory=dict, description="The launcher's parameters by name")
    name: str = Field(default="", max_length=200, description="The run's name; empty: the launcher's")
    project: str | None = Field(default=None, min_length=1, max_length=100, pattern=NAME_PATTERN)
    priority: Priority = 0
    tags: list[Tag] = Field(default_factory=list, max_length=MAX_TAGS)
    notes: str = Field(default="", max_length=MAX_NOTES)
