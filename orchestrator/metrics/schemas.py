"""The wire format of metric batches, shared by the ingestion API and the trainer's spool.

A point is {"step": int >= 0, "key": "namespace/name", "value": number | "NaN" | "Infinity" |
"-Infinity", "time": unix seconds}. Batches carry up to ~10^5 points, so a well-formed batch is
decoded and type-checked by msgspec in C (straight from the request body when there is one);
anything msgspec refuses takes the plain-Python path, and the pydantic model then explains every
refused row. The paths accept the same batches.
"""

import math
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import msgspec
from django.conf import settings
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from orchestrator.metrics.models import MAX_KEY_LENGTH, MAX_STEP, Special
from orchestrator.metrics.store import Columns

# A key is any printable text as the user wrote it (W&B's convention: spaces, brackets, <>, %, #,
# non-ASCII letters). Refused: control characters (Unicode category Cc, which also covers the
# newline that every read would strip) and the bidi controls that make a key display as another.
_KEY_CHAR = r"[^\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
# Python's `$` also matches before a final newline; `\Z` is the end of the text.
KEY_PATTERN = re.compile(rf"{_KEY_CHAR}{{1,{MAX_KEY_LENGTH}}}\Z")  # use .match or .fullmatch
# The same rule for pydantic (Rust regex) and the OpenAPI document (ECMA-262), where `$` is the end
# of the text and `\Z` does not exist.
KEY_SCHEMA_PATTERN = f"^{_KEY_CHAR}+$"
_BAD_KEY_CHAR = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
SPECIAL_CODES = {"NaN": Special.NAN, "Infinity": Special.POS_INF, "-Infinity": Special.NEG_INF}
SPECIAL_NAMES = {int(code): name for name, code in SPECIAL_CODES.items()}
_SPECIAL_INTS = {name: int(code) for name, code in SPECIAL_CODES.items()}
MAX_ABS_VALUE = 1.7976931348623157e308  # a larger integer does not fit a float64
MAX_REFUSALS_LISTED = 1000  # an answer lists this many refused points; refused_keys counts them all


def key_problem(key: Any) -> str | None:
    """Why a metric key cannot be stored, or None when it can."""
    if not isinstance(key, str):
        return f"key must be text, got {type(key).__name__}"
    if not key:
        return "key is empty"
    if len(key) > MAX_KEY_LENGTH:
        return f"key is {len(key)} characters, at most {MAX_KEY_LENGTH}"
    if bad := _BAD_KEY_CHAR.search(key):
        char = bad.group()
        name = unicodedata.name(char, "control character")
        return f"key has U+{ord(char):04X} ({name}) at position {bad.start()}: control and bidi characters are refused"
    return None


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
    key: str = Field(min_length=1, max_length=MAX_KEY_LENGTH, pattern=KEY_SCHEMA_PATTERN)
    value: MetricValue = Field(allow_inf_nan=True)
    time: float = Field(allow_inf_nan=False)


class BatchError(ValueError):
    """A batch was refused whole (its envelope, or a caller that wants all or nothing); `errors`
    lists [{index, field, message}]."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(f"{len(errors)} invalid row(s)")
        self.errors = errors


class WirePoint(msgspec.Struct, forbid_unknown_fields=True):
    step: Annotated[int, msgspec.Meta(ge=0, le=MAX_STEP)]
    # the pattern is checked per distinct key
    key: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY_LENGTH)]
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


@dataclass
class Parsed:
    """A batch's storable points as columns, and the points refused one by one."""

    cols: Columns
    refused: list[dict[str, Any]] = field(default_factory=list)  # [{index, key, step, field, reason}]

    def refused_keys(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for r in self.refused:
            name = r["key"] if isinstance(r["key"], str) else "(no key)"
            counts[name] = counts.get(name, 0) + 1
        return counts


def _check_envelope(rows: Any) -> None:
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


def parse_points(rows: Any) -> Parsed:
    """Validate a batch point by point: the storable points as columns, one per (key, step) (the
    last wins), and each refused point with its index, key, step and reason. Raises BatchError
    only when the envelope is wrong (not a list, too many points)."""
    _check_envelope(rows)
    try:
        cols = _struct_columns(msgspec.convert(rows, list[WirePoint]))
    except msgspec.ValidationError:
        cols = None
    if cols is None:
        cols = _fast_columns(rows)
    return Parsed(cols) if cols is not None else _checked_points(rows)


def parse_columns(rows: Any) -> Columns:
    """All or nothing: the batch as columns, or BatchError naming every bad row."""
    parsed = parse_points(rows)
    if parsed.refused:
        raise BatchError([{"index": r["index"], "field": r["field"], "message": r["reason"]} for r in parsed.refused])
    return parsed.cols


def _fast_columns(rows: list) -> Columns | None:
    """The common case without pydantic; None as soon as any row is not plainly valid."""
    out = _ColumnsBuilder()
    for row in rows:
        point = _plain_point(row, out.known)
        if point is None:
            return None
        out.add(*point)
    return out.columns()


class _ColumnsBuilder:
    def __init__(self):
        self.at: dict[tuple[str, int], int] = {}
        self.keys, self.steps, self.values, self.specials, self.times = [], [], [], [], []
        self.known: set[str] = set()

    def add(self, key, step, value, special, time) -> None:
        index = self.at.setdefault((key, step), len(self.keys))
        if index == len(self.keys):
            self.keys.append(key), self.steps.append(step), self.values.append(value)
            self.specials.append(special), self.times.append(time)
        else:
            self.values[index], self.specials[index], self.times[index] = value, special, time

    def columns(self) -> Columns:
        return Columns(self.keys, self.steps, self.values, self.specials, self.times)


def _plain_point(row, known: set[str]) -> tuple | None:
    """(key, step, value, special, time) of a plainly valid row, else None. `known` caches the
    keys already found valid."""
    if type(row) is not dict or len(row) != 4:
        return None
    try:
        step, key, value, time = row["step"], row["key"], row["value"], row["time"]
    except KeyError:
        return None
    if type(step) is not int or step < 0 or step > MAX_STEP:
        return None
    if key not in known:
        if type(key) is not str or not KEY_PATTERN.match(key):
            return None
        known.add(key)
    kind = type(value)
    if kind is int and not -MAX_ABS_VALUE <= value <= MAX_ABS_VALUE:
        return None  # the checked path names it
    if kind is float or kind is int:
        if kind is float and not math.isfinite(value):
            special, value = special_code(value), None
        else:
            special, value = 0, float(value)
    elif kind is str and value in SPECIAL_CODES:
        special, value = int(SPECIAL_CODES[value]), None
    else:
        return None
    if type(time) is int and -MAX_ABS_VALUE <= time <= MAX_ABS_VALUE:
        time = float(time)
    elif type(time) is not float or not math.isfinite(time):
        return None
    return key, step, value, special, time


def _checked_points(rows: list) -> Parsed:
    """The point-by-point path: each row that is not plainly valid is checked by pydantic (which
    accepts what its lax mode accepts, such as a step of 2.0) or refused with its reason."""
    out, refused = _ColumnsBuilder(), []
    for index, row in enumerate(rows):
        point = _plain_point(row, out.known)
        if point is None:
            point, problem = _checked_point(row)
            if problem:
                refused.append(_refusal(index, row, *problem))
                continue
        out.add(*point)
    return Parsed(out.columns(), refused)


def _refusal(index: int, row: Any, field_name: str, reason: str) -> dict[str, Any]:
    row = row if isinstance(row, dict) else {}
    key, step = row.get("key"), row.get("step")
    shown_step = step if isinstance(step, int | float) and not isinstance(step, bool) and math.isfinite(step) else None
    return {
        "index": index,
        "key": key[: MAX_KEY_LENGTH + 44] if isinstance(key, str) else None,
        "step": shown_step,
        "field": field_name,
        "reason": reason,
    }


def _checked_point(row: Any) -> tuple[tuple | None, tuple[str, str] | None]:
    """(point, None) or (None, (field, reason))."""
    if not isinstance(row, dict):
        return None, ("(row)", "a point is an object with step, key, value and time")
    if problem := key_problem(row.get("key")):
        return None, ("key", problem)
    step = row.get("step")
    if isinstance(step, float) and math.isfinite(step) and not step.is_integer():
        return None, ("step", f"step must be a whole number, got {step}")
    if "value" in row and row["value"] is None:
        return None, ("value", 'value is null: send NaN as the string "NaN"')
    try:
        point = MetricIn.model_validate(row)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "(row)"
        return None, (where, f"{where}: {err['msg']}")
    value, special = point.value, 0
    if not math.isfinite(value):
        special, value = special_code(value), None
    return (point.key, point.step, value, special, point.time), None


def encode_value(value: float | None, special: int = 0):
    """JSON-safe value: NaN and ±inf become the strings the trainer writes."""
    if special:
        return SPECIAL_NAMES[special]
    if value is None or math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return value
