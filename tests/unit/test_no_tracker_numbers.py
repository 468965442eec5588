"""The product speaks of itself only: no number of our own issue tracker in code, comments, docs,
templates, scripts, test names or file names. The tracker is not part of the product, its numbers
mean nothing to a reader of the code, and the commit history keeps them. A reference to another
project's tracker ("vLLM issue 1234", a URL to its issues) documents a fact about that project and
may stay."""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = {".py", ".md", ".html", ".js", ".mjs", ".css", ".sh", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".ini"}
NOT_OURS = ("static/vendor/", "tests/fixtures/", "package-lock.json", "tests/unit/test_no_tracker_numbers.py")
# "issue 23", "Issue 23's", "issues 16 and 24", "issue-23", "issue #23", "issue_23", "issue23", "(#23)", "PR #23"
TRACKER_NUMBER = re.compile(r"\b[Ii]ssues?[ _-]?#?\d+|\(#\d+\)|\b(?:PR|[Pp]ull request) #?\d+")
# another project's tracker, named just before the number: "verl issue 6780", "vLLM #1234"
OTHER_PROJECT = re.compile(
    r"\b(?:verl|vLLM|vllm|TRL|trl|torch|PyTorch|pytorch|transformers|Slurm|slurm|Celery|celery|Django|django|"
    r"Plotly|plotly|htmx|MLflow|mlflow|uvicorn|redis|Redis|PostgreSQL|schemathesis|Playwright|playwright)"
    r"(?:'s)? (?:[Ii]ssue |PR |pull request )?#?\d+$"
)


def tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [f for f in out.splitlines() if not f.startswith(NOT_OURS)]


def our_tracker_numbers(line: str) -> list[str]:
    return [m.group(0) for m in TRACKER_NUMBER.finditer(line) if not OTHER_PROJECT.search(line[: m.end()])]


def test_the_pattern_tells_our_numbers_from_other_projects_and_from_words():
    assert our_tracker_numbers("Corrections panels (issue 23).") == ["issue 23"]
    assert our_tracker_numbers("def issue18_rows(args):") == ["issue18"]
    assert our_tracker_numbers("the pages Issue 24 changed; see (#31)") == ["Issue 24", "(#31)"]
    assert our_tracker_numbers("a bug of verl issue 6780 and vLLM #1234") == []
    assert our_tracker_numbers("https://github.com/volcengine/verl/issues/6780") == []
    assert our_tracker_numbers("the issue's collapsing minibatch; tokens issued at 10; color #111") == []


def test_no_tracker_issue_number_of_ours_in_code_docs_or_templates():
    files = tracked_files()
    assert any(f.endswith("README.md") for f in files)  # git listed the tree
    found = [f"{f}: the file's name" for f in files if our_tracker_numbers(Path(f).name)]
    for name in files:
        path = REPO / name
        if name == "Makefile" or path.suffix in TEXT:
            if not path.is_file():
                continue  # listed by git, deleted in the work tree
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if our_tracker_numbers(line):
                    found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "tracker issue numbers (say what the code does instead):\n" + "\n".join(found)
