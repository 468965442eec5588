"""Ctrl-C on `make demo`: scripts/demo.sh sends SIGTERM to each running job's process
group, so the trainer gets SIGTERM (a requeue) and its local supervisor answers with SIGINT (a
cancel, which its exit.json records). The job must end cancelled in all three places: the
trainer's log line, its exit code and exit.json."""

import json
import os
import signal
import subprocess
import sys
import time

from tests.integration.trainer.cli_helpers import REPO, trainer_cmd, trainer_env, write_config
from trainer.ckpt import checkpoint as ckpt

CONFIG = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic", "eval_sets": []},
    "rollout": {"group_size": 4, "prompts_per_step": 4, "max_new_tokens": 4},
    "algorithm": {"objective": "m2po", "updates_per_step": 2, "lr": 1e-3},
    "staleness": {"mode": "stale_k", "k": 1},
    "train": {"steps": 100000, "seed": 5, "torch_threads": 1},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 4, "keep": 2},
}


def _wait_for_checkpoint(run_dir, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while ckpt.latest_checkpoint(run_dir) is None:
        assert proc.poll() is None, "the job ended before its first checkpoint"
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)


def test_sigterm_to_the_jobs_process_group_ends_it_cancelled_in_log_exit_code_and_exit_json(tmp_path):
    cfg = write_config(tmp_path / "run.yaml", CONFIG)
    job_dir, run_dir, stdout = tmp_path / "job", tmp_path / "run", tmp_path / "stdout.log"
    job_dir.mkdir()
    supervisor = [sys.executable, "-m", "orchestrator.cluster.backends.local_supervisor", str(job_dir)]
    supervisor += ["--stdout", str(stdout), "--stderr", str(tmp_path / "stderr.log"), "--grace-s", "60"]
    proc = subprocess.Popen(
        [*supervisor, "--", *trainer_cmd(cfg, run_dir)], cwd=REPO, env=trainer_env(), start_new_session=True
    )
    try:
        _wait_for_checkpoint(run_dir, proc)
        os.killpg(proc.pid, signal.SIGTERM)  # demo.sh's cleanup: kill -TERM -- -$pgid
        assert proc.wait(timeout=120) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    ended = json.loads((job_dir / "exit.json").read_text())
    log = stdout.read_text()
    assert ended["cancelled"] and not ended["timed_out"], ended
    assert ended["exit_code"] == 130, (ended, log)
    assert "stopping for requeue" not in log and "cancelled at update" in log, log
    last = max(int(p.name.split("-")[1]) for p in ckpt.list_checkpoints(run_dir))
    assert f"cancelled at update {last}:" in log  # checkpointed where it stopped
