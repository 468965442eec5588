"""A real trainer run with samples.per_step 64 and samples.max_tokens 4,096
stores every sample and point it recorded, counted spool against database, although its samples
batch is too big for the dashboard.

The tiny random-init model ends its answers at EOS after about 20 tokens (its vocabulary is ~20
characters), so its 64 samples are ~10 KB gzipped, not the ~2 MB of a model that writes 4,096
tokens (and the pusher may read them in pieces while they are written); the dashboard's limit is
lowered to 2 KiB here so that these real batches are really over it while each sample alone fits
(a sample carries per-token entropy and every correction's marks since the correction lab: one went over 1 KiB)
(tests/unit/metrics/test_pusher_to_server.py sends 64 full-length samples past a 1 MiB limit).
On main the 413 (an HTML 400 before that) was taken for a bad batch and the samples were skipped.
"""

import gzip
import json

import pytest

from orchestrator.metrics.chunks import live_series
from orchestrator.samples.models import RolloutSample
from tests.integration.trainer.cli_helpers import read_points, run_trainer, write_config
from tests.unit.metrics.asgi_server import serve_asgi
from tests.unit.metrics.helpers import make_run
from trainer.reporting import batch_body, read_rejected

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

CONFIG = {
    "model": {"name": "tiny"},
    "task": {"name": "arithmetic"},
    "rollout": {"group_size": 8, "prompts_per_step": 8, "max_new_tokens": 4096},
    "algorithm": {"objective": "m2po", "updates_per_step": 1},  # one minibatch of all 64 rows
    "staleness": {"mode": "stale_k", "k": 0},
    "train": {"steps": 1, "seed": 3, "torch_threads": 1, "device": "cpu"},
    "eval": {"every": 0, "at_start": False},
    "checkpoint": {"every": 0},
    "samples": {"every": 1, "per_step": 64, "max_tokens": 4096},
    "reporting": {"push_interval_s": 0.2, "flush_timeout_s": 60, "system_s": 0},
}


def test_a_real_run_whose_samples_batch_is_too_big_stores_every_sample(alice, tmp_path, settings):
    settings.OPL_INGEST_MAX_BODY_BYTES = LIMIT = 2048
    run, token = make_run(alice, CONFIG)
    run_dir = tmp_path / "run"
    with serve_asgi() as url:
        done = run_trainer(
            write_config(tmp_path / "run.yaml", CONFIG),
            run_dir,
            timeout=300,
            OPL_DASHBOARD_URL=url,
            OPL_RUN_ID=str(run.pk),
            OPL_RUN_TOKEN=token,
            OPL_ATTEMPT="1",
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "as too large (HTTP 413" in done.stderr, "the batch should really have been too big"

    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    alone = max(len(gzip.compress(batch_body(1, "samples", [line.encode()]), compresslevel=1)) for line in lines)
    assert alone < LIMIT, f"a single sample ({alone} bytes gzipped) is over the limit: the test's premise broke"
    spooled = [json.loads(line) for line in lines]
    assert sum(s["kind"] == "train" for s in spooled) == 64  # and the final evaluation's answers
    stored = RolloutSample.objects.filter(run=run)
    assert sorted(stored.values_list("kind", "step", "index")) == sorted(
        (s["kind"], s["step"], s["index"]) for s in spooled
    )
    by_id = {(s.kind, s.index): s for s in stored}
    assert all(by_id[s["kind"], s["index"]].tokens == s["tokens"] for s in spooled)

    points = read_points(run_dir)
    series = live_series(run.pk)
    assert sorted((p["key"], p["step"]) for p in points) == sorted(
        (key, step) for key, s in series.items() for step in s.steps.tolist()
    )
    assert "metrics/push_failures" not in series and "samples/push_failures" not in series  # a split is no failure
    assert read_rejected(run_dir, "samples.jsonl") == read_rejected(run_dir, "metrics.jsonl") == []
