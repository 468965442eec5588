"""The spool and the push: valid JSON lines, backfill from the acknowledged offset, bad batches skipped."""

import json

from trainer.config import ReportingConfig
from trainer.reporting import MetricSpool, Pusher, read_offset, truncate_spool

from .fake_dashboard import Dashboard


def _reporting(url, attempt=1, **kw):
    return ReportingConfig(dashboard_url=url, run_id="17", token="tok-17", attempt=attempt, push_interval_s=0.05, **kw)


def _spool_lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_spool_writes_one_valid_json_object_per_point_with_nan_as_strings(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(3, {"train/reward_mean": 0.5, "actor/m2": float("nan"), "actor/ratio_max": float("inf"), "actor/ratio_min": float("-inf")}, now=1.0)
    spool.close()
    values = {p["key"]: p["value"] for p in _spool_lines(tmp_path)}
    assert values == {"train/reward_mean": 0.5, "actor/m2": "NaN", "actor/ratio_max": "Infinity", "actor/ratio_min": "-Infinity"}
    assert all(p["step"] == 3 and p["time"] == 1.0 for p in _spool_lines(tmp_path))


def test_push_sends_the_spool_with_token_and_attempt(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0, "a/y": 2.0})
    with Dashboard() as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, attempt=2), total_steps=10)
        pusher.step = 1
        pusher.close()  # final flush
    metrics = [r for r in dash.requests if r["path"] == "/api/v1/runs/17/metrics"]
    assert metrics and metrics[0]["auth"] == "Bearer tok-17" and metrics[0]["body"]["attempt"] == 2
    assert [p["key"] for p in dash.accepted_points()] == ["a/x", "a/y"]
    beats = [r for r in dash.requests if r["path"] == "/api/v1/runs/17/heartbeat"]
    assert beats[-1]["body"] == {"attempt": 2, "step": 1, "total_steps": 10}
    assert read_offset(tmp_path)[0] == (tmp_path / "metrics.jsonl").stat().st_size


def test_a_server_error_is_retried_and_nothing_is_lost(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard(statuses=[503]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, flush_timeout_s=5), total_steps=1)
        pusher.close()
    assert [r["status"] for r in dash.requests if r["path"].endswith("/metrics")] == [503, 200]
    assert [p["key"] for p in dash.accepted_points()] == ["a/x"]


def test_a_refused_batch_is_skipped_not_retried_forever(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard(statuses=[400]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url), total_steps=1)
        pusher.close()
    assert [r["status"] for r in dash.requests if r["path"].endswith("/metrics")] == [400]
    assert read_offset(tmp_path)[0] == (tmp_path / "metrics.jsonl").stat().st_size


def test_a_dashboard_that_is_down_never_blocks_beyond_the_flush_timeout(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    pusher = Pusher(tmp_path, _reporting("http://127.0.0.1:9", flush_timeout_s=0.5), total_steps=1)
    pusher.start()
    pusher.close()
    assert read_offset(tmp_path)[0] == 0  # nothing acknowledged: a restarted trainer backfills it


def test_a_restarted_pusher_backfills_only_what_was_not_acknowledged(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard() as dash:
        Pusher(tmp_path, _reporting(dash.url), total_steps=2).close()
        spool.log(2, {"a/x": 2.0})
        Pusher(tmp_path, _reporting(dash.url), total_steps=2).close()
    assert [p["step"] for p in dash.accepted_points()] == [1, 2]


def test_resume_truncation_drops_later_steps_and_repushes_the_resume_step_under_the_new_attempt(tmp_path):
    spool = MetricSpool(tmp_path)
    for step in (1, 2, 3, 4):
        spool.log(step, {"a/x": float(step)})
    spool.close()
    with Dashboard() as dash:
        Pusher(tmp_path, _reporting(dash.url, attempt=1), total_steps=4).close()
        truncate_spool(tmp_path, keep_through_step=2, attempt=2)
        assert [p["step"] for p in _spool_lines(tmp_path)] == [1, 2]
        Pusher(tmp_path, _reporting(dash.url, attempt=2), total_steps=4).close()
    second = [r for r in dash.requests if r["path"].endswith("/metrics")][-1]["body"]
    assert second["attempt"] == 2 and [p["step"] for p in second["points"]] == [2]
