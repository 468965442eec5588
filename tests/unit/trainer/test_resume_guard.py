"""Resume refuses a checkpoint whose model section differs from the config's."""

import pytest

from trainer.config import parse_config
from trainer.loop import Trainer

BASE = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
    "train": {"steps": 1, "torch_threads": 1},
    "eval": {"every": 0, "at_start": False},
}


def test_a_changed_model_section_is_refused_on_resume(tmp_path):
    assert Trainer(parse_config(BASE), tmp_path / "run").run() == 0
    changed = {**BASE, "model": {"name": "tiny", "tiny_hidden_size": 64}}
    with pytest.raises(RuntimeError, match="model section changed"):
        Trainer(parse_config(changed), tmp_path / "run", resume=True).run()


def test_other_sections_may_change_on_resume(tmp_path):
    assert Trainer(parse_config(BASE), tmp_path / "run").run() == 0
    longer = {**BASE, "train": {"steps": 2, "torch_threads": 1}}
    trainer = Trainer(parse_config(longer), tmp_path / "run", resume=True)
    assert trainer.run() == 0
    assert trainer.version == 4
