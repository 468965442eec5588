"""Launcher definitions, parameter values and the argv they make (plain functions, no database)."""

import pytest

from orchestrator.launchers.definition import DefinitionError, build_argv, parse_definition, parse_params
from tests.unit.launchers.helpers import tiny_sdk


def errors(data) -> dict[str, str]:
    with pytest.raises(DefinitionError) as err:
        parse_definition(data)
    return {e["field"]: e["message"] for e in err.value.errors}


def param_errors(definition, raw) -> dict[str, str]:
    with pytest.raises(DefinitionError) as err:
        parse_params(definition, raw)
    return {e["field"]: e["message"] for e in err.value.errors}


def test_the_example_definition_is_valid_and_fills_defaults():
    definition = parse_definition(tiny_sdk())
    assert definition.name == "tiny-sdk" and definition.resources.mem_gb == 1
    assert parse_params(definition, {}) == {"steps": 5, "lr": 0.1, "sleep": 0.2, "note": "none"}


@pytest.mark.parametrize(
    "change,field,message",
    [
        ({"name": "Tiny SDK"}, "name", "lower-case letters"),
        ({"command": []}, "command", "at least 1 item"),
        ({"command": ["{python}", "--x", "{nope}"]}, "command[2]", "{nope} names no parameter"),
        ({"command": ["{python}", "--x={"]}, "command[1]", "is not a placeholder"),
        ({"command": ["{python}", "{a b}"]}, "command[1]", "is not a placeholder"),
        ({"command": ["", "x"]}, "command[0]", "the program is empty"),
        ({"command": ["/bin/echo", "a\x00b"]}, "command[1]", "NUL"),
        ({"python": "venv/bin/python"}, "python", "an absolute path"),
        ({"python": "/opt/../etc/python"}, "python", "without '..'"),
        ({"container": "/images/x;rm"}, "container", "an absolute path"),
        (
            {"parameters": {"python": {"type": "str", "default": "x"}}},
            "parameters.python",
            "filled in by the orchestrator",
        ),
        ({"parameters": {"a-b": {"type": "int"}}}, "parameters.a-b", "a parameter name is a letter"),
        ({"parameters": {"lr": {"type": "decimal"}}}, "parameters.lr.type", "Input should be"),
        ({"parameters": {"lr": {"type": "float", "min": 2, "max": 1}}}, "parameters.lr.min", "2 is above max 1"),
        ({"parameters": {"lr": {"type": "float", "default": 5, "max": 1}}}, "parameters.lr.default", "at most 1"),
        ({"parameters": {"mode": {"type": "choice"}}}, "parameters.mode.choices", "non-empty list"),
        ({"parameters": {"s": {"type": "str", "min": 1}}}, "parameters.s.min", "only int and float"),
        ({"parameters": {"lr": {"type": "float", "unit": "x"}}}, "parameters.lr.unit", "Extra inputs"),
        ({"resources": {"gpus": -1}}, "resources.gpus", "greater than or equal to 0"),
        ({"resources": {"nodes": 0}}, "resources.nodes", "greater than or equal to 1"),
        ({"resources": {"gpu": 1}}, "resources.gpu", "Extra inputs"),
    ],
)
def test_a_bad_definition_names_the_field_and_the_reason(change, field, message):
    data = {**tiny_sdk(), **change}
    if "parameters" in change:
        data["command"] = ["/bin/echo"]
    found = errors(data)
    assert field in found, found
    assert message in found[field]


def test_bad_values_name_the_parameter_and_the_reason():
    definition = parse_definition(
        {
            "name": "x",
            "command": ["/bin/echo", "{n}", "{lr}", "{mode}", "{flag}", "{text}"],
            "parameters": {
                "n": {"type": "int", "min": 1, "max": 10},
                "lr": {"type": "float", "default": 0.1, "min": 0},
                "mode": {"type": "choice", "choices": ["fast", "slow"], "default": "fast"},
                "flag": {"type": "bool", "default": False},
                "text": {"type": "str", "default": "a"},
            },
        }
    )
    assert param_errors(definition, {}) == {"params.n": "required (int)"}
    found = param_errors(
        definition, {"n": 11, "lr": "fast", "mode": "medium", "flag": "maybe", "text": "--config=/etc/passwd", "x": 1}
    )
    assert found == {
        "params.x": "x has no such parameter (it has: n, lr, mode, flag, text)",
        "params.n": "must be at most 10, got 11",
        "params.lr": "must be a number, got 'fast'",
        "params.mode": "must be one of fast, slow, got 'medium'",
        "params.flag": "must be true or false, got 'maybe'",
        "params.text": "must not start with '-': the program would read it as an option",
    }
    assert param_errors(definition, {"n": 2.5})["params.n"] == "must be a whole number, got 2.5"
    assert param_errors(definition, {"n": True})["params.n"] == "must be a whole number, got True"
    assert param_errors(definition, {"n": 1, "lr": "nan"})["params.lr"] == "must be a finite number, got 'nan'"
    assert param_errors(definition, {"n": 1, "text": "a\x00b"})["params.text"] == "must not contain a NUL character"
    # the form sends text: it is typed the same way the API's JSON is
    assert parse_params(definition, {"n": "3", "lr": "0.5", "flag": "true"}) == {
        "n": 3,
        "lr": 0.5,
        "mode": "fast",
        "flag": True,
        "text": "a",
    }


def test_each_placeholder_is_filled_inside_its_own_entry():
    command = ["{python}", "-u", "/x/train.py", "--lr={lr}", "--name", "{name}", "{{literal}}", "{n}{n}"]
    values = {"python": "/venv/bin/python", "lr": 0.25, "name": "a b; $(id) `x` 'q\"", "n": 3}
    argv = build_argv(command, values)
    assert argv == [
        "/venv/bin/python",
        "-u",
        "/x/train.py",
        "--lr=0.25",
        "--name",
        "a b; $(id) `x` 'q\"",
        "{literal}",
        "33",
    ]
    assert len(argv) == len(command)
    assert build_argv(["{b}", "{f}"], {"b": False, "f": 1e-07}) == ["false", "1e-07"]
    # a value that looks like a placeholder is not filled again
    assert build_argv(["{a}", "{b}"], {"a": "{b}", "b": "x"}) == ["{b}", "x"]
