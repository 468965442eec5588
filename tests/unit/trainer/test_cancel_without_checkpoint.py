"""A cancel that finds the alert's marker (trainer/cli.py NO_CHECKPOINT_MARKER) exits 130 without
writing a checkpoint; a plain cancel checkpoints; a marker left by an earlier attempt is removed
at start, so it cannot turn a later cancel into one without a checkpoint."""

import signal

import pytest

from trainer.ckpt import checkpoint as ckpt
from trainer.cli import NO_CHECKPOINT_MARKER
from trainer.config import parse_config
from trainer.loop import EX_CANCELLED, Trainer
from trainer.stopping import CANCEL, CANCEL_WITHOUT_CHECKPOINT, StopRequest

CONFIG = {
    "model": {"name": "tiny", "tiny_hidden_size": 32},
    "task": {"name": "arithmetic"},
    "rollout": {"group_size": 2, "prompts_per_step": 2, "max_new_tokens": 3},
    "algorithm": {"updates_per_step": 1},
    "staleness": {"mode": "stale_k", "k": 0},
    "train": {"steps": 50, "seed": 1, "torch_threads": 1},
    "eval": {"every": 0},
    "checkpoint": {"every": 0},
}


@pytest.mark.parametrize("skip", [False, True])
def test_a_cancel_checkpoints_unless_the_alert_said_not_to(tmp_path, skip):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / NO_CHECKPOINT_MARKER).write_text("attempt 0\n")  # an earlier attempt's
    stop = StopRequest()
    trainer = Trainer(parse_config(CONFIG), run_dir, stop=stop)
    # as StopRequest.note records a SIGINT (a cancel) before the first step, with and without the marker
    stop.signal, stop.level = signal.SIGINT, (CANCEL_WITHOUT_CHECKPOINT if skip else CANCEL)
    assert trainer.run() == EX_CANCELLED
    assert not (run_dir / NO_CHECKPOINT_MARKER).exists()
    assert len(ckpt.list_checkpoints(run_dir)) == (0 if skip else 1)
