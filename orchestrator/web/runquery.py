"""The runs table's small filter language, parsed into ORM lookups (never into SQL text).

    algorithm.objective = m2po and staleness.k >= 64
    state in (queued, running) and tag = baseline and name ~ seed2

A query is clauses joined by `and`. A clause is `field op value` with op one of
= != > >= < <= ~ (contains), or `field in (v1, v2, ...)`. Fields are the run's own columns
(state, user, project, experiment, tag, name, backend, job, node, priority, step, seed, gpus, id,
alert: the kind of an alert that fired, e.g. `alert = nonfinite`, `alert ~ ""` for any) or any
RunConfig field path. Values are numbers, true/false/null, bare words or quoted strings.
`summary.<metric key>` compares a run's summary of that key: its tail mean (the mean of the last
10% of its steps), or with a suffix .last, .min, .max, .count or .last_step that field:

    summary.train/reward_mean > 0.5 and summary.eval/avg_acc.max >= 0.8
"""

from __future__ import annotations

import difflib
import math
import re
import typing
from typing import Any

from django.db.models import Q

from orchestrator.alerts.models import Alert
from orchestrator.experiments.models import Run
from orchestrator.metrics.models import MetricSeries
from orchestrator.metrics.schemas import KEY_PATTERN
from orchestrator.metrics.summaries import refresh_stale_tails
from trainer.config import RunConfig

OPS = {"=": "exact", "==": "exact", "!=": "exact", ">": "gt", ">=": "gte", "<": "lt", "<=": "lte", "~": "icontains"}

COLUMNS = {
    "state": "state",
    "user": "owner__username",
    "owner": "owner__username",
    "project": "experiment__project__name",
    "experiment": "experiment__name",
    "sweep": "experiment_id",
    "tag": "tag__name",  # on the run-tag link table, see _tag_subquery
    "name": "name",
    "backend": "backend",
    "job": "job_id",
    "node": "node_list",
    "priority": "priority",
    "step": "step",
    "seed": "seed",
    "gpus": "gpus",
    "id": "id",
    "attempt": "attempt",
    "alert": "kind",  # a fired alert's kind (orchestrator/alerts), see _tag_subquery
}

INTEGER_COLUMNS = {"priority", "step", "seed", "gpus", "id", "attempt", "sweep"}

TOKEN = re.compile(r"""\s*(?:(?P<str>"[^"]*"|'[^']*')|(?P<op>>=|<=|!=|==|[=<>~(),])|(?P<word>[^\s=<>!~(),"']+))""")


class QueryError(ValueError):
    """A filter that cannot be parsed; the message says where and why."""


def _config_fields() -> set[str]:
    fields = set()
    for section, info in RunConfig.model_fields.items():
        sub = getattr(info.annotation, "model_fields", {})
        for name in sub:
            if section != "reporting":
                fields.add(f"{section}.{name}")
    return fields


CONFIG_FIELDS = _config_fields()


def _numeric_config_fields() -> set[str]:
    """Config paths whose type is a number (int or float, optionally null): compared only with numbers."""
    numeric = set()
    for section, info in RunConfig.model_fields.items():
        for name, sub in getattr(info.annotation, "model_fields", {}).items():
            types = set(typing.get_args(sub.annotation)) or {sub.annotation}
            if types - {type(None)} and types - {type(None)} <= {int, float}:
                numeric.add(f"{section}.{name}")
    return numeric


NUMERIC_CONFIG_FIELDS = _numeric_config_fields()


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise QueryError(f"cannot read the query at {text[pos : pos + 20]!r}")
        kind = m.lastgroup
        value = m.group(kind)
        tokens.append((kind, value[1:-1] if kind == "str" else value))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return tokens


def lookup_for(field: str) -> str:
    if field in COLUMNS:
        return COLUMNS[field]
    if field in CONFIG_FIELDS:
        return "config__" + field.replace(".", "__")
    known = sorted(COLUMNS) + sorted(CONFIG_FIELDS)
    close = difflib.get_close_matches(field, known, n=1)
    hint = (
        f"; did you mean '{close[0]}'?"
        if close
        else "; use a run column (state, user, project, tag...) or a config path"
    )
    raise QueryError(f"unknown field '{field}'{hint}")


MAX_CLAUSES = 20
MAX_IN_VALUES = 100
MAX_QUERY_LENGTH = 2000


def literal(kind: str, text: str) -> Any:
    if kind == "str":
        return text
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    if text.isascii():
        try:
            value = int(text)
        except ValueError:
            pass
        else:
            if not -(2**63) <= value < 2**63:
                raise QueryError(f"the number {text[:30]} is out of range (64 bits)")
            return value
        try:
            value = float(text)
        except ValueError:
            return text
        if not math.isfinite(value):
            return text  # nan, inf: words, not numbers
        return value
    return text


def parse_query(text: str) -> Q:
    """A Q object for the query; raises QueryError naming the problem."""
    if len(text or "") > MAX_QUERY_LENGTH:
        raise QueryError(f"the query is longer than {MAX_QUERY_LENGTH} characters")
    tokens = tokenize(text or "")
    q, i, clauses = Q(), 0, 0
    while i < len(tokens):
        clauses += 1
        if clauses > MAX_CLAUSES:
            raise QueryError(f"at most {MAX_CLAUSES} clauses joined by 'and'")
        if i and not (tokens[i] == ("word", "and") or tokens[i] == ("word", "AND")):
            raise QueryError(f"expected 'and' before {tokens[i][1]!r}")
        if i:
            i += 1
        clause, i = _clause(tokens, i)
        q &= clause
    return q


def _clause(tokens: list[tuple[str, str]], i: int) -> tuple[Q, int]:
    def at(j: int) -> tuple[str, str]:
        if j >= len(tokens):
            raise QueryError("the query ends too early: expected field, operator and value")
        return tokens[j]

    kind, field = at(i)
    if kind != "word":
        raise QueryError(f"expected a field name, got {field!r}")
    if field.startswith(SUMMARY_PREFIX):
        return _summary_clause(field, at(i + 1), at(i + 2)), i + 3
    lookup = lookup_for(field)
    kind, op = at(i + 1)
    if kind == "word" and op.lower() == "in":
        if at(i + 2) != ("op", "("):
            raise QueryError(f"{field} in: expected '(' after 'in'")
        values, j = [], i + 3
        while True:
            vkind, vtext = at(j)
            if vkind == "op":
                raise QueryError(f"{field} in: expected a value, got {vtext!r}")
            values.append(literal(vkind, vtext))
            if len(values) > MAX_IN_VALUES:
                raise QueryError(f"{field} in: at most {MAX_IN_VALUES} values")
            sep = at(j + 1)
            j += 2
            if sep == ("op", ")"):
                break
            if sep != ("op", ","):
                raise QueryError(f"{field} in: expected ',' or ')', got {sep[1]!r}")
        for value in values:
            _check_type(field, value)
        clause = Q()
        for value in values:
            clause |= Q(**{lookup: value})
        return _tag_subquery(field, clause), j
    if kind != "op" or op not in OPS:
        raise QueryError(f"{field}: expected an operator (= != > >= < <= ~ in), got {op!r}")
    vkind, vtext = at(i + 2)
    if vkind == "op":
        raise QueryError(f"{field} {op}: expected a value, got {vtext!r}")
    value = literal(vkind, vtext)
    if op == "~":
        value = str(value)
    else:
        _check_type(field, value)
    if value is None and OPS[op] == "exact" and lookup.startswith("config__"):
        clause = Q(**{f"{lookup}__isnull": False}) & Q(**{lookup: None})
    else:
        clause = Q(**{f"{lookup}__{OPS[op]}": value})
    clause = _tag_subquery(field, clause)
    return (~clause if op == "!=" else clause), i + 3


SUMMARY_PREFIX = "summary."
# summary.<key> compares the tail mean; summary.<key>.<field> another field of the run summary.
SUMMARY_FIELDS = {
    "tail_mean": "tail_mean",
    "last": "last_value",
    "min": "min_value",
    "max": "max_value",
    "count": "count",
    "last_step": "last_step",
}


def _summary_clause(field: str, op_token: tuple[str, str], value_token: tuple[str, str]) -> Q:
    """Runs whose summary of a metric key passes a numeric comparison, e.g.
    `summary.train/reward_mean > 0.5` (the tail mean) or `summary.eval/avg_acc.max >= 0.9`.
    Runs without the key never match (except with !=)."""

    key, _, name = field[len(SUMMARY_PREFIX) :].rpartition(".")
    if name not in SUMMARY_FIELDS:
        key, name = field[len(SUMMARY_PREFIX) :], "tail_mean"
    if not KEY_PATTERN.match(key):
        raise QueryError(
            f"{field}: expected summary.<metric key>[.{'|'.join(SUMMARY_FIELDS)}], e.g. summary.train/reward_mean > 0.5"
        )
    kind, op = op_token
    if kind != "op" or op not in OPS or op == "~":
        raise QueryError(f"{field}: expected a comparison (= != > >= < <=), got {op!r}")
    vkind, vtext = value_token
    value = literal(vkind, vtext) if vkind != "op" else None
    if vkind == "str" or isinstance(value, bool) or not isinstance(value, int | float):
        raise QueryError(f"{field} {op}: compare with a number, got {vtext!r}")
    column = SUMMARY_FIELDS[name]
    if name == "tail_mean":
        refresh_stale_tails(key)
    matching = MetricSeries.objects.filter(key=key, **{f"{column}__{OPS[op]}": value})
    if name == "last":
        matching = matching.filter(last_special=0)  # NaN and infinities pass no comparison
    clause = Q(pk__in=matching.values("run_id"))
    return ~clause if op == "!=" else clause


def _check_type(field: str, value: Any) -> None:
    if field in INTEGER_COLUMNS and (not isinstance(value, int) or isinstance(value, bool)):
        raise QueryError(f"{field}: compare with a whole number, got {value!r}")
    # A word against a number field would match nothing, silently: say so instead.
    if (
        field in NUMERIC_CONFIG_FIELDS
        and value is not None
        and (not isinstance(value, int | float) or isinstance(value, bool))
    ):
        raise QueryError(f"{field} is a number: compare it with a number (or null), got {value!r}")


def _tag_subquery(field: str, clause: Q) -> Q:
    """Tags (and fired alerts) are many per run: match through a subquery so a run never appears twice."""
    if field == "alert":
        return Q(pk__in=Alert.objects.filter(clause).values("run_id"))
    if field != "tag":
        return clause
    return Q(pk__in=Run.tags.through.objects.filter(clause).values("run_id"))
