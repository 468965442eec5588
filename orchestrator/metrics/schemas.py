"""The wire format of metric batches, shared by the ingestion API and the trainer's spool.

A point is {"step": int >= 0, "key": "namespace/name", "value": number | "NaN" | "Infinity" |
"-Infinity", "time": unix seconds}. Batches carry up to ~10^5 points, so a well-formed batch is
decoded and type-checked by msgspec in C (straight from the request body when there is one);
anything msgspec refuses takes the plain-Python path, and the pydantic model then explains every
refused row. The paths accept the same batches.
"""

import math
import re
from typing import Annotated, Any, Literal

import msgspec
from django.conf import settings
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from orchestrator.metrics.models import Special
from orchestrator.metrics.store import Columns

_KEY = r"[A-Za-z0-9_.@:\-]+(?:/[A-Za-z0-9_.@:\-]+)*"
# Python's `$` also matches before a final newline: "train/loss\n" passed `^...$` and was stored,
# but every read strips the key, so the series could never be read. `\Z` is the end of the text.
KEY_PATTERN = re.compile(_KEY + r"\Z")  # use .match (anchored at the start) or .fullmatch
# The same rule for pydantic (Rust regex) and the OpenAPI document (ECMA-262), where `$` is the end
# of the text and `\Z` does not exist.
KEY_SCHEMA_PATTERN = f"^{_KEY}$"
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
SPECIAL_CODES = {"NaN": Special.NAN, "Infinity": Special.POS_INF, "-Infinity": Special.NEG_INF}
SPECIAL_NAMES = {int(code): name for name, code in SPECIAL_CODES.items()}
_SPECIAL_INTS = {name: int(code) for name, code in SPECIAL_CODES.items()}
# Steps fit Run.step (32 bits, which ingestion copies as progress) and stay far below the 2**62 that
# reads cover; a wider span would also make a rollup rebuild walk millions of empty slices.
MAX_STEP = 2**31 - 1
MAX_ABS_VALUE = 1.7976931348623157e308  # a larger integer does not fit a float64


def max_points_per_batch() -> int:
    return int(settings.OPL_INGEST_MAX_POINTS_PER_BATCH)


def _special_float(value):
    if isinstance(value, str) and value in SPECIAL_FLOATS:
        return SPECIAL_FLOATS[value]
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    return value


MetricValue = Annotated[float, BeforeValidator(_special_float)]


class MetricIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: int = Field(ge=0, le=MAX_STEP)
    key: str = Field(min_length=1, max_length=200, pattern=KEY_SCHEMA_PATTERN)
    value: MetricValue = Field(allow_inf_nan=True)
    time: float = Field(allow_inf_nan=False)


class BatchError(ValueError):
    """A batch was refused whole; `errors` lists [{index, field, message}] for each bad row."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(f"{len(errors)} invalid row(s)")
        self.errors = errors


class WirePoint(msgspec.Struct, forbid_unknown_fields=True):
    step: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
    key: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]  # the pattern is checked per distinct key
    value: float | Literal["NaN", "Infinity", "-Infinity"]
    time: float


class WireBatch(msgspec.Struct):
    points: list[WirePoint]
    attempt: int | None = None


_decode_batch = msgspec.json.Decoder(WireBatch).decode


def decode_batch(body: bytes) -> tuple[int | None, Columns] | None:
    """(attempt, columns) of a well-formed JSON batch body; None sends the body down the checked
    path (which also explains what is wrong)."""
    try:
        batch = _decode_batch(body)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
    cols = _struct_columns(batch.points)
    return None if cols is None else (batch.attempt, cols)


def _struct_columns(points: list[WirePoint]) -> Columns | None:
    """Columns of type-checked points; None when a check msgspec does not make fails (key
    pattern, finite time, batch size) or a (key, step) repeats (the plain path keeps the last)."""
    if len(points) > max_points_per_batch():
        return None
    keys = [p.key for p in points]
    steps = [p.step for p in points]
    if not all(KEY_PATTERN.match(key) for key in set(keys)) or len(set(zip(keys, steps))) != len(keys):
        return None
    times = [p.time for p in points]
    if not all(map(math.isfinite, times)):
        return None
    values, specials = [], []
    finite, codes = math.isfinite, _SPECIAL_INTS
    for point in points:
        value = point.value
        if type(value) is str:
            values.append(None), specials.append(codes[value])
        elif finite(value):
            values.append(value), specials.append(0)
        else:
            values.append(None), specials.append(special_code(value))
    return Columns(keys, steps, values, specials, times)


def special_code(value: float) -> int:
    if math.isnan(value):
        return Special.NAN
    return Special.POS_INF if value > 0 else Special.NEG_INF


def parse_columns(rows: Any) -> Columns:
    """Validate a batch and return it as columns, one point per (key, step) (the last wins).
    Raises BatchError naming every bad row when any row is bad."""
    if not isinstance(rows, list):
        raise BatchError([{"index": None, "field": "points", "message": "must be a list"}])
    if len(rows) > (most := max_points_per_batch()):
        raise BatchError(
            [
                {
                    "index": None,
                    "field": "points",
                    "message": f"at most {most} points per batch (OPL_INGEST_MAX_POINTS_PER_BATCH), got {len(rows)}",
                }
            ]
        )
    try:
        cols = _struct_columns(msgspec.convert(rows, list[WirePoint]))
    except msgspec.ValidationError:
        cols = None
    return cols or _fast_columns(rows) or _checked_columns(rows)


def _fast_columns(rows: list) -> Columns | None:
    """The common case without pydantic; None as soon as any row is not plainly valid."""
    at: dict[tuple[str, int], int] = {}
    keys, steps, values, specials, times = [], [], [], [], []
    known: set[str] = set()
    finite = math.isfinite
    for row in rows:
        if type(row) is not dict or len(row) != 4:
            return None
        try:
            step, key, value, time = row["step"], row["key"], row["value"], row["time"]
        except KeyError:
            return None
        if type(step) is not int or step < 0 or step > MAX_STEP:
            return None
        if key not in known:
            if type(key) is not str or len(key) > 200 or not KEY_PATTERN.match(key):
                return None
            known.add(key)
        kind = type(value)
        if kind is int and not -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE:
            return None  # the checked path names it
        if kind is float or kind is int:
            if kind is float and not finite(value):
                special, value = special_code(value), None
            else:
                special, value = 0, float(value)
        elif kind is str and value in SPECIAL_CODES:
            special, value = int(SPECIAL_CODES[value]), None
        else:
            return None
        if type(time) is int and -MAX_ABS_VALUE <= time <= MAX_ABS_VALUE:
            time = float(time)
        elif type(time) is not float or not finite(time):
            return None
        index = at.setdefault((key, step), len(keys))
        if index == len(keys):
            keys.append(key), steps.append(step), values.append(value), specials.append(special), times.append(time)
        else:
            values[index], specials[index], times[index] = value, special, time
    return Columns(keys, steps, values, specials, times)


def _checked_columns(rows: list) -> Columns:
    """The pydantic path: explains every bad row, and accepts what pydantic's lax mode accepts."""
    points, errors = [], []
    for index, row in enumerate(rows):
        try:
            points.append(MetricIn.model_validate(row))
        except ValidationError as exc:
            for err in exc.errors(include_url=False):
                field = ".".join(str(p) for p in err["loc"]) or "(row)"
                errors.append({"index": index, "field": field, "message": err["msg"]})
    if errors:
        raise BatchError(errors)
    return _fast_columns([p.model_dump() for p in points]) or Columns([], [], [], [], [])


def encode_value(value: float | None, special: int = 0):
    """JSON-safe value: NaN and ±inf become the strings the trainer writes."""
    if special:
        return SPECIAL_NAMES[special]
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
