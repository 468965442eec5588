"""Math evaluation sets: where each lives and how its fields map to (question, answer).

Where the Hugging Face hub can be reached (the `datasets` package installed, HF_HUB_OFFLINE unset)
the sets are read by their hub names; otherwise from OPL_BENCHMARKS_DIR (`<set>/test.jsonl`, by
default <repo>/../shared/data/benchmarks, which a user's own clone does not have). Field names
differ between sets, so each set maps its question and reference answer explicitly.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
MATH_PROMPT_TEMPLATE = "{question}\n" + MATH_INSTRUCTION  # the paper's prompt (verl's math recipes)
QUESTION_SLOT = "{question}"


def fill_prompt(template: str, question: str) -> str:
    """The template with its {question} slot filled (str.format would choke on \\boxed{})."""
    return template.replace(QUESTION_SLOT, question)


@dataclass(frozen=True)
class Problem:
    question: str
    answer: str


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in text, braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _number(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _gsm8k_answer(row: dict) -> str:
    return row["answer"].split("####")[-1].strip().replace(",", "")


def _minerva_answer(row: dict) -> str:
    boxed = last_boxed(row["solution"])
    if boxed is None:
        raise KeyError("solution has no \\boxed{} answer")
    return boxed


def _olympiad_answer(row: dict) -> str:
    answers = row["final_answer"]
    return ", ".join(a.strip("$ ") for a in answers) if isinstance(answers, list) else str(answers)


def _strip_dollars(text: str) -> str:
    return re.sub(r"^\$+|\$+$", "", str(text).strip())


@dataclass(frozen=True)
class BenchmarkSet:
    name: str
    question: Callable[[dict], str]
    answer: Callable[[dict], str]
    hub: tuple[str, str | None, str] | None  # (dataset, config, split)


BENCHMARK_SETS: dict[str, BenchmarkSet] = {
    s.name: s
    for s in [
        BenchmarkSet(
            "math500", lambda r: r["problem"], lambda r: str(r["answer"]), ("HuggingFaceH4/MATH-500", None, "test")
        ),
        BenchmarkSet(
            "aime24", lambda r: r["problem"], lambda r: _number(r["answer"]), ("HuggingFaceH4/aime_2024", None, "train")
        ),
        BenchmarkSet("amc23", lambda r: r["problem"], lambda r: _number(r["answer"]), ("math-ai/amc23", None, "test")),
        BenchmarkSet("minerva_math", lambda r: r["problem"], _minerva_answer, ("math-ai/minervamath", None, "test")),
        BenchmarkSet(
            "olympiadbench", lambda r: r["question"], _olympiad_answer, ("math-ai/olympiadbench", None, "test")
        ),
        BenchmarkSet("gaokao2023en", lambda r: r["question"], lambda r: _strip_dollars(r["answer"]), None),
        BenchmarkSet("gsm8k", lambda r: r["question"], _gsm8k_answer, ("openai/gsm8k", "main", "test")),
    ]
}


def resolve_data_path(path: str) -> Path:
    """A data file path: absolute as given; relative against the working directory, else the
    repository root (jobs run inside their run folder, the dashboard in the repository)."""
    p = Path(path)
    if p.is_absolute() or p.exists():
        return p
    return REPO_ROOT / p


def benchmarks_dir() -> Path:
    return Path(os.environ.get("OPL_BENCHMARKS_DIR", REPO_ROOT.parent / "shared" / "data" / "benchmarks"))


class DataError(ValueError):
    """A data file or row that cannot be read; the message names the file and line."""


def read_problem_rows(
    path: Path, question: Callable[[dict], str], answer: Callable[[dict], str], limit: int | None = None
) -> list[Problem]:
    problems: list[Problem] = []
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                problems.append(Problem(question(row), answer(row)))
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                raise DataError(f"{path}:{lineno}: cannot read a question and answer ({exc!r})") from None
            if limit is not None and len(problems) >= limit:
                break
    if not problems:
        raise DataError(f"{path}: no problems")
    return problems


def load_benchmark(name: str, limit: int | None = None) -> list[Problem]:
    """An eval set: from the Hugging Face hub by its dataset name where the hub can be reached,
    else from OPL_BENCHMARKS_DIR/<set>/test.jsonl. When neither works the error names both."""
    spec = BENCHMARK_SETS[name]
    path = benchmarks_dir() / name / "test.jsonl"
    why_not_hub = _hub_unavailable(spec)
    if why_not_hub is None:
        dataset, config, split = spec.hub
        try:
            import datasets

            rows = datasets.load_dataset(dataset, config, split=split)
            return [
                Problem(spec.question(r), spec.answer(r))
                for r in rows.select(range(min(limit or len(rows), len(rows))))
            ]
        except Exception as exc:  # offline, unknown name, auth: all mean the set cannot be read there
            why_not_hub = f"loading it failed: {exc}"
    if path.is_file():
        return read_problem_rows(path, spec.question, spec.answer, limit)
    hub = f"hub dataset {spec.hub[0]}" if spec.hub else "the hub (the set has no hub name)"
    raise DataError(
        f"eval set '{name}': not on {hub} ({why_not_hub}) and not in {path} "
        "(set OPL_BENCHMARKS_DIR to a folder holding <set>/test.jsonl)"
    )


def _hub_unavailable(spec: BenchmarkSet) -> str | None:
    """Why the hub cannot be tried for this set, or None when it can."""
    if spec.hub is None:
        return "the set has no hub name"
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set"
    try:
        import datasets  # noqa: F401 - optional: only machines that reach the hub install it
    except ImportError:
        return "the `datasets` package is not installed"
    return None


def load_train_file(path: str, limit: int | None = None) -> list[Problem]:
    """A JSONL training file: question in problem/question/prompt, answer in answer/final_answer/solution's box."""

    def question(r: dict) -> str:
        for key in ("problem", "question", "prompt"):
            if key in r:
                return str(r[key])
        raise KeyError("no 'problem', 'question' or 'prompt' field")

    def answer(r: dict) -> str:
        for key in ("answer", "final_answer"):
            if key in r:
                v = r[key]
                if isinstance(v, list):
                    return ", ".join(map(str, v))
                return _gsm8k_answer(r) if isinstance(v, str) and "####" in v else _number(v)
        if "solution" in r and last_boxed(r["solution"]) is not None:
            return last_boxed(r["solution"])
        raise KeyError("no 'answer' or 'final_answer' field")

    return read_problem_rows(resolve_data_path(path), question, answer, limit)
