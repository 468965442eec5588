"""Each app says in its __init__ docstring which other apps it may import, and this test holds the
code to it, counting imports placed inside functions; the project's own modules (orchestrator/*.py)
are one more unit, `orchestrator`, whose contract is orchestrator/__init__.py's. The contract's line:

    May import: accounts, lib, trainer          (packages of orchestrator/, and `trainer`)

The "May import" lines must form layers (no app may reach itself through them), and an import
outside the contract fails: there are no exemptions. A lower app that must reach a higher one
does it through a hook it owns (a signal, a registry), never an import."""

import ast
import re
from pathlib import Path

from tests.unit.test_import_circles import REPO, imported, modules

# every package of orchestrator/: the Django apps and lib, the helpers below them
APPS = tuple(sorted(p.parent.name for p in (REPO / "orchestrator").glob("*/__init__.py")))
PROJECT = "orchestrator"
_MAY = re.compile(r"^May import: (.+)$", re.M)


def _names(text: str) -> set[str]:
    return {n.strip() for n in text.split(",")} - {"none", ""}


def contracts(root: Path, apps=APPS) -> dict[str, set[str]]:
    """app (or `orchestrator`, the project's own modules): the apps it may import."""
    out = {}
    for app in (*apps, PROJECT):
        init = root / "orchestrator" / ("" if app == PROJECT else app) / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        may = _MAY.search(doc)
        assert may, f"{init.relative_to(root)}: its docstring needs a 'May import:' line (see this test's docstring)"
        out[app] = _names(may.group(1))
    return out


def _unit(module: str, apps) -> str:
    """What a contract names a module by: its app, `trainer`, or `orchestrator` for the project's own."""
    parts = module.split(".")
    if parts[0] != "orchestrator":
        return parts[0]
    return parts[1] if len(parts) > 1 and parts[1] in apps else PROJECT


def breaches(root: Path, apps=APPS, packages=("orchestrator", "trainer")) -> list[str]:
    known = modules(root, packages)
    rules = contracts(root, apps)
    found = []
    for name, path in sorted(known.items()):
        if not name.startswith(PROJECT):
            continue
        app = _unit(name, apps)
        for target in sorted(imported(name, path, known)):
            unit = _unit(target, apps)
            if unit != app and unit not in rules[app]:
                found.append(f"{name} imports {target}: {app} may not import {unit}")
    for app in rules:  # the May-import lines must be layers: no app reaches itself through them
        seen, todo = set(), list(rules[app])
        while todo:
            other = todo.pop()
            if other in rules and other not in seen:
                seen.add(other)
                todo += rules[other]
        if app in seen:
            found.append(f"{app} may import itself through the other apps' contracts")
    return found


def test_every_app_imports_only_what_its_contract_allows():
    assert {"accounts", "cluster", "experiments", "lib", "metrics", "studies"} <= set(APPS)
    assert breaches(REPO) == []


def _app(root: Path, name: str, doc: str, files: dict[str, str]):
    (root / "orchestrator" / name).mkdir(parents=True)
    (root / "orchestrator" / name / "__init__.py").write_text(f'"""{doc}"""\n')
    for file, text in files.items():
        (root / "orchestrator" / name / file).write_text(text)


def test_the_check_fails_on_an_upward_import_in_an_app_or_the_project_and_on_contracts_in_a_circle(tmp_path):
    (tmp_path / "orchestrator").mkdir()
    (tmp_path / "orchestrator" / "__init__.py").write_text('"""May import: high"""\n')
    (tmp_path / "orchestrator" / "urls.py").write_text(
        "from orchestrator.high import models\nimport orchestrator.side.a\n"
    )
    _app(
        tmp_path,
        "low",
        "May import: none",
        {
            "models.py": "X = 1\n",
            "views.py": "from orchestrator.high.models import Y\n",
            "services.py": "def f():\n    from orchestrator.high import models\n",  # hidden in a function
            "admin.py": "from orchestrator import urls\n",  # the project's own modules are above every app
        },
    )
    _app(tmp_path, "high", "May import: low", {"models.py": "from orchestrator.low.models import X\nY = X\n"})
    _app(tmp_path, "side", "May import: low, loop", {"a.py": "import orchestrator.low.models\n"})
    _app(tmp_path, "loop", "May import: ring", {"b.py": ""})
    _app(tmp_path, "ring", "May import: side", {})
    assert breaches(tmp_path, ("low", "high", "side", "loop", "ring"), ("orchestrator",)) == [
        "orchestrator.low.admin imports orchestrator.urls: low may not import orchestrator",
        "orchestrator.low.services imports orchestrator.high.models: low may not import high",
        "orchestrator.low.views imports orchestrator.high.models: low may not import high",
        "orchestrator.urls imports orchestrator.side.a: orchestrator may not import side",
        "side may import itself through the other apps' contracts",
        "loop may import itself through the other apps' contracts",
        "ring may import itself through the other apps' contracts",
    ]
