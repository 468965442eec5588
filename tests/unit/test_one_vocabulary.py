"""The trainer's vocabulary is defined once (trainer/vocabulary.py) and derived nowhere else: no
other module lists the objective names again, and every reader of a run's sizes and variant name
gets the trainer's own answer."""

import ast
from pathlib import Path

import pytest

from orchestrator.experiments.progress import updates_per_step as page_updates_per_step
from orchestrator.metrics.corrections import variant_of as dashboard_variant
from trainer.algo.counterfactual import run_variant
from trainer.config import AlgorithmConfig, derive_sizes, parse_config
from trainer.vocabulary import OBJECTIVES, OPTIONS, updates_per_step

ROOT = Path(__file__).resolve().parents[2]
SOURCE_TREES = ("orchestrator", "trainer", "client", "scripts", "benchmarks")
HOME = ROOT / "trainer" / "vocabulary.py"


def literal_lists(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            names = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            yield node.lineno, names


def test_the_objective_names_are_listed_in_one_place():
    """A literal naming more than half the objectives, anywhere but trainer/vocabulary.py, is a second
    copy of the list (a subset such as the clip objectives, or a sweep over four of them, names fewer)."""
    copies = []
    for tree_name in SOURCE_TREES:
        for path in sorted((ROOT / tree_name).rglob("*.py")):
            if path == HOME or "migrations" in path.parts:
                continue
            for line, names in literal_lists(ast.parse(path.read_text(), str(path))):
                if len(set(names) & set(OBJECTIVES)) * 2 > len(OBJECTIVES):
                    copies.append(f"{path.relative_to(ROOT)}:{line}")
    assert copies == [], f"objective names listed again: {copies}"


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("options", [(), ("dual_clip",), ("token_mask", "tis"), OPTIONS])
def test_the_trainer_and_the_dashboard_name_a_variant_alike(objective, options):
    algorithm = {
        "objective": objective,
        "dual_clip_c": 3.0 if "dual_clip" in options else None,
        "token_mask": "token_mask" in options,
        "seq_mask": "seq_mask" in options,
        "tis_cap": 2.0 if "tis" in options else None,
        "sq_log_ratio_coef": 0.1 if "sq_penalty" in options else 0.0,
    }
    # model_construct: the name must agree even for a pairing the config refuses (dual clip on cispo)
    alg = AlgorithmConfig.model_construct(**{**AlgorithmConfig().model_dump(), **algorithm})
    assert run_variant(alg) == dashboard_variant({"algorithm": algorithm})


@pytest.mark.parametrize("algorithm", [{}, {"updates_per_step": 4}, {"updates_per_step": 4, "epochs": 3}])
def test_updates_per_step_is_the_trainers_for_a_stored_config(algorithm):
    """A stored config may leave out defaulted fields; the pages and the study figures read the same
    number of updates per step as the trainer derives (epochs included)."""
    config = {"algorithm": {"objective": "m2po", **algorithm}}
    trainer_value = derive_sizes(parse_config(config)).updates_per_step
    assert updates_per_step(config) == trainer_value == page_updates_per_step(config)


def test_the_fields_that_name_files_are_listed_once_and_each_path_rule_is_named_once():
    """The trainer's check of a job's roots and the dashboard's check of a submitted config read one
    list of file fields (trainer.config.FILE_FIELDS); two functions of one name with different rules
    (named_paths, path_problems) were how the two checks came to drift apart."""
    defined: dict[str, list[str]] = {}
    for tree_name in SOURCE_TREES:
        for path in sorted((ROOT / tree_name).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.FunctionDef) and node.name in ("named_paths", "path_problems", "file_values"):
                    defined.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: len(where) for name, where in defined.items()} == {
        "named_paths": 1,
        "path_problems": 1,
        "file_values": 1,
    }, defined
