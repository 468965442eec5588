"""The trainer stays readable in one sitting: loop.py composes the parts and is under 300
lines, and no function in trainer/ is over 50 lines (decorators and docstring included)."""

import ast
from pathlib import Path

TRAINER = Path(__file__).resolve().parents[3] / "trainer"
MAX_FUNCTION_LINES = 50
MAX_LOOP_LINES = 300


def _long_functions(source: str) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            length = node.end_lineno - first + 1
            if length > MAX_FUNCTION_LINES:
                out.append((node.name, length))
    return out


def test_no_trainer_function_is_over_50_lines():
    long = {
        str(p.relative_to(TRAINER)): f for p in sorted(TRAINER.rglob("*.py")) if (f := _long_functions(p.read_text()))
    }
    assert long == {}


def test_the_check_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"@staticmethod\ndef f():\n{body}\n") == [("f", MAX_FUNCTION_LINES + 2)]


def test_the_loop_is_under_300_lines():
    assert len((TRAINER / "loop.py").read_text().splitlines()) < MAX_LOOP_LINES
