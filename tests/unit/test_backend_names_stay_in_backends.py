"""No code outside the backends tests for a backend by name: what sets one backend apart is
answered by the backend itself (orchestrator/cluster/backends/base.py, `Capabilities`), so adding
a backend means adding its module and one registry entry, nothing else."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from orchestrator.cluster.backends.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[2]
# the backends themselves, and the client package of the one that talks to Slurm's REST API
ALLOWED = ("cluster/backends", "cluster/slurm")


def named_in_code(package: Path) -> list[str]:
    """Every string literal in the package's Python code (outside the backends and migrations)
    that is exactly a backend's name."""
    allowed = [package / folder for folder in ALLOWED]
    found = []
    for path in sorted(package.rglob("*.py")):
        if "migrations" in path.parts or any(path.is_relative_to(folder) for folder in allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in REGISTRY:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}: {node.value!r}")
    return found


def named_in_templates(root: Path) -> list[str]:
    """Every quoted backend name in a template (`{% if backend == "..." %}` and the like)."""
    names = "|".join(map(re.escape, REGISTRY))
    quoted = re.compile(rf"""(["'])({names})\1""")
    found = []
    for path in sorted(root.rglob("*.html")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [f"{path.relative_to(root)}:{number}: {m.group(0)}" for m in quoted.finditer(line)]
    return found


def test_no_backend_is_named_outside_the_backends():
    assert named_in_code(ROOT / "orchestrator") == []
    assert named_in_templates(ROOT / "templates") == []


def test_the_check_finds_a_backend_named_in_code_and_in_a_template(tmp_path):
    package = tmp_path / "orchestrator"
    (package / "cluster/backends").mkdir(parents=True)
    (package / "cluster/backends/extra.py").write_text('name = "slurm"\n')  # allowed there
    (package / "views.py").write_text('if settings.CLUSTER_BACKEND == "slurm":\n    pass\n')
    (tmp_path / "page.html").write_text("{% if backend == 'local' %}here{% endif %}\n")
    assert named_in_code(package) == ["orchestrator/views.py:1: 'slurm'"]
    assert named_in_templates(tmp_path) == ["page.html:1: 'local'"]
