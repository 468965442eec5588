"""What a saved view holds, checked strictly: a bad field is a 400 naming it (api.py)."""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.experiments.schemas import NAME_PATTERN
from orchestrator.metrics.schemas import KEY_SCHEMA_PATTERN

MAX_PANELS = 300
MAX_KEYS_PER_PANEL = 20
MAX_RUNS = 200  # the compare page's limit (metrics.access.MAX_COMPARE_RUNS)
MAX_EXPERIMENTS = 50
XAxis = Literal["step", "train_step", "tokens", "samples", "time"]
MetricKey = Annotated[str, Field(min_length=1, max_length=200, pattern=KEY_SCHEMA_PATTERN)]
Ident = Annotated[str, Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9_.:\-]+$")]
Id = Annotated[int, Field(ge=1, le=2**62)]
ViewName = Annotated[str, Field(min_length=1, max_length=100, pattern=NAME_PATTERN)]
PAGE_PATTERN = r"^(|compare|run:[0-9]{1,18}|experiment:[0-9]{1,18})$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PanelSpec(_Strict):
    """One chart: a curated panel (its id, e.g. "reward") or one the user made from any keys."""

    id: Ident
    title: str = Field(default="", max_length=200)
    keys: list[MetricKey] = Field(min_length=1, max_length=MAX_KEYS_PER_PANEL)
    log_y: bool = False
    x: XAxis | None = Field(default=None, description="this panel's x-axis; null: the page's")


class Filters(_Strict):
    band: Literal["minmax", "std", "stderr"] = "minmax"
    individual: bool = False
    hidden: list[Annotated[str, Field(max_length=200)]] = Field(default_factory=list, max_length=MAX_RUNS)


class ViewState(_Strict):
    panels: list[PanelSpec] = Field(default_factory=list, max_length=MAX_PANELS)
    group: str = Field(default="", max_length=200, description="the config field runs are grouped by")
    smooth: float = Field(default=0, ge=0, le=0.99)
    x: XAxis = "step"
    filters: Filters = Field(default_factory=Filters)
    runs: list[Id] = Field(default_factory=list, max_length=MAX_RUNS)
    experiments: list[Id] = Field(default_factory=list, max_length=MAX_EXPERIMENTS)


class ViewIn(_Strict):
    name: ViewName
    page: str = Field(default="", pattern=PAGE_PATTERN, description='"run:<id>", "compare" or "experiment:<id>"')
    state: ViewState = Field(default_factory=ViewState)
    default: bool = Field(default=False, description="the project's default view, applied to its runs' pages")


class ViewPatchIn(_Strict):
    name: ViewName | None = None
    page: str | None = Field(default=None, pattern=PAGE_PATTERN)
    state: ViewState | None = None
    default: bool | None = None
