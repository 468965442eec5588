"""No import circles in the product, counting imports placed inside functions: they hide
a circle from Python's start-up but not from a reader. An import graph of orchestrator/ and
trainer/ (migrations aside) from an AST walk; a circle is a strongly connected set of two or more
modules. The rule it keeps: experiments owns the run state machine and announces what the cluster
must do (experiments/signals.py); metrics owns ingestion and calls alerts through its registry;
the trainer's command line and loop share only trainer/run_markers.py."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("orchestrator", "trainer")


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules `name` imports anywhere in its file (a name imported from a package counts
    as its submodule when there is one)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and not name.startswith(target + "."):  # a package's own __init__
                out.add(target)
    return out


def circles(known: dict[str, Path]) -> list[list[str]]:
    """Strongly connected sets of two or more modules (Tarjan)."""
    graph = {name: imported(name, path, known) for name, path in known.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_product_has_no_import_circle():
    known = modules(REPO)
    assert len(known) > 150
    assert circles(known) == []


def test_the_walk_finds_a_circle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "orchestrator"
    (pkg / "a").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a" / "__init__.py").write_text("")
    (pkg / "a" / "services.py").write_text("from orchestrator.b.tasks import run\n")
    (pkg / "b").mkdir()
    (pkg / "b" / "__init__.py").write_text("")
    (pkg / "b" / "tasks.py").write_text("def run():\n    from ..a import services\n")
    (pkg / "c.py").write_text("from orchestrator.a import services\n")
    assert circles(modules(tmp_path, ("orchestrator",))) == [["orchestrator.a.services", "orchestrator.b.tasks"]]
