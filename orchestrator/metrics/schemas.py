"""The wire format of metric batches, shared by the ingestion API and the trainer's spool."""
import math
import re
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

KEY_PATTERN = re.compile(r"^[A-Za-z0-9_.@:\-]+(/[A-Za-z0-9_.@:\-]+)*$")
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _special_float(value):
    if isinstance(value, str) and value in SPECIAL_FLOATS:
        return SPECIAL_FLOATS[value]
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


MetricValue = Annotated[float, BeforeValidator(_special_float)]


class MetricIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0)
    key: str = Field(min_length=1, max_length=200, pattern=KEY_PATTERN.pattern)
    value: MetricValue = Field(allow_inf_nan=True)
    time: float = Field(allow_inf_nan=False)


def encode_value(value: float | None):
    """JSON-safe value: NaN and ±inf become the strings the trainer writes."""
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
