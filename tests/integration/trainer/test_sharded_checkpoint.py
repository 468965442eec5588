"""Sharded checkpoints (torch.distributed.checkpoint) written by one world size and read by another.

CPU and gloo stand in for GPUs and NCCL (this machine has no GPU); torchrun, FSDP2's sharding and
DCP's resharding are the real ones. Each phase runs tests/integration/trainer/sharded_worker.py."""

from __future__ import annotations

import subprocess
import sys

from tests.integration.trainer.cli_helpers import REPO, trainer_env
from trainer.sharded_checkpoint import is_sharded

WORKER = REPO / "tests" / "integration" / "trainer" / "sharded_worker.py"


def on_ranks(world: int, phase: str, folder) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}"]
    done = subprocess.run(
        [*cmd, str(WORKER), phase, str(folder)],
        cwd=REPO,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, f"{phase} on {world} ranks failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def test_a_checkpoint_saved_on_2_ranks_loads_on_3_and_on_1_and_exports_hugging_face_weights(tmp_path):
    """Saved on 2 ranks, then loaded on 3 ranks and on 1 into a model built from another seed: every
    weight and every Adam moment equals the saved one, by name. Then the shards as a Hugging Face
    folder that transformers loads, with the same weights."""
    on_ranks(2, "save", tmp_path)
    assert is_sharded(tmp_path / "step")
    shard_files = sorted(p.name for p in (tmp_path / "step" / "dcp").glob("*.distcp"))
    assert len(shard_files) == 2  # each rank wrote its own shards; none gathered them
    for world in (3, 1):
        on_ranks(world, "load", tmp_path)
        assert (tmp_path / f"loaded-by-{world}").is_file()
    on_ranks(1, "export", tmp_path)
    assert (tmp_path / "hf" / "config.json").is_file() and list((tmp_path / "hf").glob("*.safetensors"))
    assert int((tmp_path / "exported").read_text()) > 0
