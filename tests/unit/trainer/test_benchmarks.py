"""Eval sets: each set's fields are mapped explicitly; unreadable rows name the file and line."""

import pytest

from trainer.data.benchmarks import (
    BENCHMARK_SETS,
    DataError,
    benchmarks_dir,
    last_boxed,
    load_benchmark,
    load_train_file,
)

needs_data = pytest.mark.skipif(
    not benchmarks_dir().is_dir(), reason=f"benchmark files not found at {benchmarks_dir()}"
)


@needs_data
@pytest.mark.parametrize("name", sorted(BENCHMARK_SETS))
def test_every_set_yields_questions_and_answers(name):
    problems = load_benchmark(name, limit=5)
    assert len(problems) == 5
    assert all(p.question.strip() and p.answer.strip() for p in problems)


@needs_data
@pytest.mark.parametrize(
    "name, answer",
    [("gsm8k", "18"), ("amc23", "27"), ("aime24", "204"), ("minerva_math", "1.6"), ("olympiadbench", "2")],
)
def test_first_answers_are_mapped_from_each_sets_own_field(name, answer):
    assert load_benchmark(name, limit=1)[0].answer == answer


def test_last_boxed_balances_braces():
    assert last_boxed(r"so \boxed{1} then \boxed{\frac{1}{2}} done") == r"\frac{1}{2}"
    assert last_boxed("no box") is None


def test_a_bad_row_names_the_file_and_line(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"problem": "1+1", "answer": "2"}\n{"problem": "no answer here"}\n')
    with pytest.raises(DataError, match=r"train.jsonl:2"):
        load_train_file(str(path))


def test_train_file_accepts_gsm8k_style_answers(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"question": "q", "answer": "work... #### 1,234"}\n')
    assert load_train_file(str(path))[0].answer == "1234"
