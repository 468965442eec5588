"""Every change of a run's state goes through experiments.services.run_transition (a conditional
UPDATE that also stamps the time and writes the history event): the orchestrator's code is
walked for any other write of `state` on a Run, as a queryset `.update(state=...)`, a
`run.state = ...` assignment, a `Run(state=...)` / `Run.objects.create(state=...)`, or SQL."""

import ast
import re
from pathlib import Path

import pytest

import orchestrator

ROOT = Path(orchestrator.__file__).parent
ALLOWED = {("experiments/services.py", "run_transition")}
# Receivers whose `.update(state=...)` writes another model's state (experiments pause and cancel).
OTHER_MODELS = ("Experiment",)
SQL = re.compile(r"update\s+\"?experiments_run\"?\s+set\b[^;]*\bstate\s*=", re.IGNORECASE | re.DOTALL)


def _root_names(node: ast.AST) -> list[str]:
    """The names along a receiver chain, outermost first: Run.objects.filter(...) -> [Run, objects, filter]."""
    names = []
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            if isinstance(node, ast.Name):
                names.append(node.id)
            return names[::-1]


def _writes_other_model(receiver: ast.AST) -> bool:
    names = _root_names(receiver)
    return bool(names) and (names[0] in OTHER_MODELS or names[0] == "experiment" and "runs" not in names)


def direct_state_writes(source: str, filename: str = "<code>") -> list[str]:
    """Each write of a Run's state outside run_transition, as 'file:line: code'."""
    tree = ast.parse(source)
    found = []

    class Walker(ast.NodeVisitor):
        def __init__(self):
            self.function = None

        def visit_FunctionDef(self, node):
            outer, self.function = self.function, node.name
            self.generic_visit(node)
            self.function = outer

        visit_AsyncFunctionDef = visit_FunctionDef

        def note(self, node):
            if (filename, self.function) not in ALLOWED:
                found.append(f"{filename}:{node.lineno}: {ast.unparse(node)[:120]}")

        def visit_Call(self, node):
            keywords = {k.arg for k in node.keywords}
            func = node.func
            if "state" in keywords and isinstance(func, ast.Attribute):
                updates_a_run = func.attr in ("update", "bulk_update") and not _writes_other_model(func.value)
                creates_a_run = func.attr in ("create", "get_or_create", "update_or_create") and _root_names(
                    func.value
                )[:1] == ["Run"]
                if updates_a_run or creates_a_run:
                    self.note(node)
            if "state" in keywords and isinstance(func, ast.Name) and func.id == "Run":
                self.note(node)
            if isinstance(func, ast.Name) and func.id == "setattr" and len(node.args) >= 2:
                name = node.args[1]
                if isinstance(name, ast.Constant) and name.value == "state":
                    self.note(node)
            self.generic_visit(node)

        def visit_Assign(self, node):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and target.attr == "state":
                    names = _root_names(target.value)
                    if names and "run" in names[-1].lower():
                        self.note(node)
            self.generic_visit(node)

        def visit_Constant(self, node):
            if isinstance(node.value, str) and SQL.search(node.value):
                self.note(node)

    Walker().visit(tree)
    return found


def test_no_code_writes_a_runs_state_outside_run_transition():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        found += direct_state_writes(path.read_text(), str(path.relative_to(ROOT)))
    assert found == [], "change these through experiments.services.run_transition:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        "Run.objects.filter(pk=1, state=S.SUBMITTED).update(state=S.QUEUED, attempt=0)",
        "runs = Run.objects.filter(pk=1)\nruns.update(state='failed')",
        "experiment.runs.update(state='cancelled')",
        "run.state = Run.State.FAILED\nrun.save()",
        "Run.objects.create(experiment=e, state='running')",
        "setattr(run, 'state', 'lost')",
        "cursor.execute('UPDATE experiments_run SET state = %s WHERE id = %s', ['lost', 1])",
    ],
)
def test_the_walk_finds_each_kind_of_direct_write(code):
    assert len(direct_state_writes("def f():\n" + "".join(f"    {line}\n" for line in code.splitlines()))) == 1


@pytest.mark.parametrize(
    "code",
    [
        "Experiment.objects.filter(pk=1).update(state=Experiment.State.PAUSED)",
        "experiment.state = Experiment.State.CANCELLED",
        "Run.objects.filter(state=S.RUNNING).update(state_reason='stalled?')",
        "run_transition(run=run, to=S.QUEUED, reason='x')",
    ],
)
def test_the_walk_leaves_other_writes_alone(code):
    assert direct_state_writes(f"def f():\n    {code}\n") == []
