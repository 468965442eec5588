"""The launcher run form: the fields a launcher's parameters make, read back into raw values that
definition.parse_params checks (so the form and the API refuse the same values, alike)."""

from typing import Any

from orchestrator.launchers.definition import Definition, as_text

INPUT_TYPES = {"int": "number", "float": "number", "str": "text"}


def param_fields(definition: Definition, posted: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """One entry per parameter for the template: its input, current value, help and bounds."""
    fields = []
    for name, param in definition.parameters.items():
        default = "" if param.default is None else as_text(param.default)
        fields.append(
            {
                "name": name,
                "input": f"param-{name}",
                "type": param.type,
                "html_type": INPUT_TYPES.get(param.type, "text"),
                "step": "1" if param.type == "int" else "any",
                "value": (posted or {}).get(f"param-{name}", default),
                "choices": param.choices or (["true", "false"] if param.type == "bool" else []),
                "required": param.default is None,
                "help": param.help,
                "min": param.min,
                "max": param.max,
            }
        )
    return fields


def posted_params(definition: Definition, post) -> dict[str, str]:
    """The raw value of each parameter the form sent (an empty box is left to its default)."""
    return {name: post[f"param-{name}"] for name in definition.parameters if f"param-{name}" in post}
