"""Property: any valid run config comes back exactly as it went in through the new-experiment form
(rendered, read as a browser reads it, submitted unchanged), through an exported and imported YAML
file, and through the API's JSON body.

Configs are drawn from RunConfig's JSON schema: every section and field optional; integers,
numbers, booleans, enums, lists, nulls and strings within the schema's bounds. A few fields take
values the schema cannot say: a prompt template holds {question}, a metric name is one the trainer
logs, a model name is a preset or a hub id, file paths are real files under the data roots (the
dashboard stores paths resolved, so only a resolved path comes back as typed). A drawn config the
trainer refuses on a cross-field check (e.g. updates_per_step not dividing prompts_per_step) is
repaired by dropping the fields its errors name, so nearly every draw is used.

Numbers stay below 1e15 in size: PostgreSQL's jsonb prints a large float such as 1e23 without its
exponent, and it comes back as the integer 10**23 (that storage is outside this test).
Line breaks are LF: a browser sends every line break of a textarea as CR LF and the form takes
those back as LF, so a lone CR cannot survive any browser.
"""

import json
import re

from django.http import QueryDict
from django.template.loader import render_to_string
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from orchestrator.experiments.experiment_file import dump_experiment_yaml, parse_experiment_yaml
from orchestrator.experiments.runconfig import ConfigError, data_roots, validate_run_config
from orchestrator.experiments.schema_form import config_from_post, minimal_config
from orchestrator.experiments.schemas import ExperimentIn
from orchestrator.experiments.services import experiment_plan
from orchestrator.web.experiment_form import flat_from_spec, form_context
from tests.unit.experiments.browser_form import submitted_fields
from trainer.config import KNOWN_EVAL_SETS, RunConfig
from trainer.metric_keys import METRIC_KEYS

SCHEMA = RunConfig.model_json_schema()
BIG = 10**15
LINE = st.characters(exclude_categories=("Cs", "Cc")) | st.sampled_from("\n\t ")
TEXT = st.text(LINE, max_size=30)


def _real_paths() -> tuple[list[str], list[str]]:
    """(files, folders) under the first data root, resolved: the values the dashboard stores."""
    root = data_roots()[0]
    files = sorted(str(p.resolve()) for p in root.rglob("*") if p.is_file())[:3]
    folders = [str(root.resolve())] + sorted(str(p.resolve()) for p in root.iterdir() if p.is_dir())[:2]
    assert files and folders, f"no files under the data root {root}"
    return files, folders


FILES, FOLDERS = _real_paths()
HUB_ID = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,10}(/[A-Za-z0-9][A-Za-z0-9_-]{0,10})?\Z")
SPECIAL = {  # values the schema cannot describe
    "model.name": st.sampled_from(["tiny", "smollm2-135m", "Qwen/Qwen3-1.7B-Base", *FOLDERS]),
    "task.train_file": st.none() | st.sampled_from(FILES),
    "task.hf_dataset": st.sampled_from([None, ""]) | HUB_ID,  # "" where null is allowed is null
    "task.prompt_template": st.builds(lambda a, b: a + "{question}" + b, TEXT, TEXT),
    "task.eval_sets": st.lists(st.sampled_from(KNOWN_EVAL_SETS), unique=True, max_size=4),
    "checkpoint.keep_best_metric": st.sampled_from([None, "", *sorted(METRIC_KEYS)]),
    "init.from_path": st.none() | st.sampled_from(FOLDERS),
}


def _resolve(node: dict) -> dict:
    ref = node.get("$ref")
    return SCHEMA["$defs"][ref.rsplit("/", 1)[-1]] if ref else node


def _value(node: dict):
    """A strategy for one JSON-schema node: anyOf (null), enum, integer, number, boolean, string."""
    if "anyOf" in node:
        return st.one_of(
            *[
                _value({**_resolve(o), **{k: v for k, v in node.items() if k not in ("anyOf", "default")}})
                for o in node["anyOf"]
            ]
        )
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low = node.get("minimum", node.get("exclusiveMinimum", -(2**31) - 1) + 1)
        high = node.get("maximum", node.get("exclusiveMaximum", 2**31) - 1)
        return st.integers(low, high)
    if kind == "number":
        return st.floats(
            node.get("minimum", node.get("exclusiveMinimum", -BIG)),
            node.get("maximum", node.get("exclusiveMaximum", BIG)),
            exclude_min="exclusiveMinimum" in node,
            exclude_max="exclusiveMaximum" in node,
            allow_nan=False,
            allow_infinity=False,
        )
    if kind == "string":
        return st.text(LINE, min_size=node.get("minLength", 0), max_size=min(node.get("maxLength", 30), 30))
    raise AssertionError(f"no strategy for schema node {node}")


def _section(name: str, node: dict):
    fields = _resolve(node).get("properties", {})
    return st.fixed_dictionaries(
        {},
        optional={
            f: SPECIAL[f"{name}.{f}"] if f"{name}.{f}" in SPECIAL else _value(prop) for f, prop in fields.items()
        },
    )


DRAWN = st.fixed_dictionaries(
    {}, optional={name: _section(name, node) for name, node in SCHEMA["properties"].items() if name != "reporting"}
)
DOTTED = re.compile(r"\b([a-z_]+)\.([a-z_0-9]+)\b")


def _valid(config: dict) -> dict:
    """The drawn config, or a repaired one: each round drops the fields the errors name or mention
    (a whole section when a named field was not set; resources for a world-size problem)."""
    for _ in range(12):
        try:
            return validate_run_config(config)
        except ConfigError as exc:
            before = json.dumps(config, sort_keys=True)
            for error in exc.errors:
                section, _, field = error["field"].partition(".")
                field = field.split(".")[0]
                mentioned = [(section, field)] + DOTTED.findall(error["message"])
                for s, f in mentioned:
                    config.get(s, {}).pop(f, None)
                if json.dumps(config, sort_keys=True) == before:
                    config.pop(section, None)
                if "training processes" in error["message"]:  # a world-size check: resources set the process count
                    config.pop("resources", None)
            assume(json.dumps(config, sort_keys=True) != before)
    assume(False)


def _through_the_form(config: dict) -> dict:
    flat = flat_from_spec({"name": "x", "config": config})
    html = render_to_string("experiments/_config_fields.html", form_context(flat, []))
    sent = QueryDict(mutable=True)
    sent.update(submitted_fields(html))
    parsed, errors = config_from_post(sent)
    assert errors == []
    return validate_run_config(parsed)


def _through_yaml(config: dict) -> dict:
    text = dump_experiment_yaml({"name": "x", "config": minimal_config(config)})
    return validate_run_config(parse_experiment_yaml(text)["config"])


def _through_the_api(config: dict) -> dict:
    body = ExperimentIn.model_validate_json(json.dumps({"name": "x", "config": config}))
    (planned,) = experiment_plan(name=body.name, config=body.config)
    return planned.config


ROUND_TRIPS: list[dict] = []  # the configs the property below really sent round


# 250 drawn for at least 150 distinct: how many draws the repair collapses into one config varies
# with what the suite has loaded before this test (149 of 200 in one full run, 162 alone).
@settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(DRAWN)
def _round_trip(drawn):
    config = _valid(drawn)
    assert _through_the_form(config) == config
    assert _through_yaml(config) == config
    assert _through_the_api(config) == config
    ROUND_TRIPS.append(config)


def test_any_config_comes_back_exactly_through_form_yaml_and_api():
    ROUND_TRIPS.clear()
    _round_trip()
    # max_examples is Hypothesis's target, not a promise: count the configs that went all the way
    distinct = {json.dumps(c, sort_keys=True) for c in ROUND_TRIPS}
    print(f"{len(ROUND_TRIPS)} configs round-tripped, {len(distinct)} distinct")
    assert len(ROUND_TRIPS) >= 200 and len(distinct) >= 150, (len(ROUND_TRIPS), len(distinct))
