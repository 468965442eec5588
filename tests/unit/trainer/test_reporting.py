"""The spool and the push: valid JSON lines, backfill from the acknowledged offset, bad batches skipped."""

import json

from trainer.config import ReportingConfig
from trainer.reporting import (
    MetricSpool,
    Pusher,
    mark_rejected,
    read_offset,
    read_rejected,
    rejected_lines,
    truncate_spool,
)

from .fake_dashboard import Dashboard


def _reporting(url, attempt=1, **kw):
    kw.setdefault("push_interval_s", 0.05)
    return ReportingConfig(dashboard_url=url, run_id="17", token="tok-17", attempt=attempt, **kw)


def _spool_lines(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_spool_writes_one_valid_json_object_per_point_with_nan_as_strings(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(
        3,
        {
            "train/reward_mean": 0.5,
            "actor/m2": float("nan"),
            "actor/ratio_max": float("inf"),
            "actor/ratio_min": float("-inf"),
        },
        now=1.0,
    )
    spool.close()
    values = {p["key"]: p["value"] for p in _spool_lines(tmp_path)}
    assert values == {
        "train/reward_mean": 0.5,
        "actor/m2": "NaN",
        "actor/ratio_max": "Infinity",
        "actor/ratio_min": "-Infinity",
    }
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


def test_a_refused_batch_is_passed_over_counted_and_kept_marked_rejected(tmp_path, caplog):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0, "a/y": 2.0})
    size = (tmp_path / "metrics.jsonl").stat().st_size
    with Dashboard(statuses=[400]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, attempt=2), total_steps=1)
        pusher.push_once()  # the first two points, refused
        spool.log(2, {"a/x": 3.0})
        pusher.close()  # the rest goes on
    assert [r["status"] for r in dash.requests if r["path"].endswith("/metrics")] == [400, 200]
    assert read_offset(tmp_path)[0] == (tmp_path / "metrics.jsonl").stat().st_size
    [record] = read_rejected(tmp_path, "metrics.jsonl")
    assert (record["start"], record["end"], record["lines"], record["attempt"], record["status"]) == (
        0,
        size,
        2,
        2,
        400,
    )
    assert [json.loads(line)["key"] for line in rejected_lines(tmp_path, "metrics.jsonl", record)] == ["a/x", "a/y"]
    assert pusher.failure_counts() == {"metrics/push_failures": 2.0} and pusher.failure_counts() == {}
    assert "resend_rejected 17" in caplog.text and "refused 2 points for good (HTTP 400" in caplog.text


def test_a_413_sends_the_batch_again_in_halves_and_loses_nothing(tmp_path):
    spool = MetricSpool(tmp_path)
    for step in range(300):
        spool.log(step, {f"k/{i}": float(i) for i in range(10)})  # 3,000 points
    with Dashboard(statuses=[413, 413]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url), total_steps=1)
        pusher.close()
    posts = [r for r in dash.requests if r["path"].endswith("/metrics")]
    sizes = [len(r["body"]["points"]) for r in posts]
    assert [r["status"] for r in posts[:3]] == [413, 413, 200] and sizes[0] == 3000
    assert 1450 <= sizes[1] <= 1550 and 700 <= sizes[2] <= 800 and max(sizes[2:]) <= 800  # halved, then kept that small
    assert [(p["step"], p["key"]) for p in dash.accepted_points()] == [
        (p["step"], p["key"]) for p in _spool_lines(tmp_path)
    ]
    assert read_rejected(tmp_path, "metrics.jsonl") == [] and pusher.failure_counts() == {}  # a split is no failure


def test_one_line_that_is_still_too_large_is_marked_rejected(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard(statuses=[413]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url), total_steps=1)
        pusher.close()
    assert [r["status"] for r in dash.requests if r["path"].endswith("/metrics")] == [413]
    assert [r["status"] for r in read_rejected(tmp_path, "metrics.jsonl")] == [413]


def test_resume_truncation_moves_the_rejected_marks_with_their_lines(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(9, {"a/early": 0.0})  # a line the cut drops ahead of the marked ones: their offsets move
    for step in (1, 2, 3, 4, 5, 6):
        spool.log(step, {"a/x": float(step), "a/y": float(step)})
    spool.close()
    lines = (tmp_path / "metrics.jsonl").read_bytes().splitlines(keepends=True)
    at = [sum(map(len, lines[:i])) for i in range(len(lines) + 1)]
    for first, last in ((3, 9), (11, 13)):  # steps 2-4, and step 6
        mark_rejected(
            tmp_path,
            "metrics.jsonl",
            {
                "start": at[first],
                "end": at[last],
                "lines": last - first,
                "attempt": 1,
                "status": 400,
                "reason": "x",
                "time": 0,
            },
        )
    truncate_spool(tmp_path, keep_through_step=3, attempt=2)
    [record] = read_rejected(tmp_path, "metrics.jsonl")  # step 6 is written again by the resumed attempt
    assert record["lines"] == 4 and record["start"] == at[3] - at[1]
    assert [
        (json.loads(x)["step"], json.loads(x)["key"]) for x in rejected_lines(tmp_path, "metrics.jsonl", record)
    ] == [(2, "a/x"), (2, "a/y"), (3, "a/x"), (3, "a/y")]
    truncate_spool(tmp_path, keep_through_step=-1, attempt=1)  # a fresh start forgets them
    assert read_rejected(tmp_path, "metrics.jsonl") == [] and not (tmp_path / "metrics.rejected.jsonl").exists()


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


def test_points_go_out_in_gzip_batches_of_at_most_5000_before_the_interval_when_many_wait(tmp_path):
    from trainer.reporting import MAX_POINTS_PER_POST

    spool = MetricSpool(tmp_path)
    with Dashboard() as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, push_interval_s=3600), total_steps=1)
        pusher.start()
        for step in range(1200):  # 12,000 points
            spool.log(step, {f"k/{i}": float(i) for i in range(10)})
        for _ in range(2):  # two full batches go out long before the hour is up
            assert dash.arrived.acquire(timeout=60)
        pusher.close()
    posts = [r for r in dash.requests if r["path"].endswith("/metrics")]
    assert [len(r["body"]["points"]) for r in posts] == [MAX_POINTS_PER_POST, MAX_POINTS_PER_POST, 2000]
    assert {r["encoding"] for r in posts} == {"gzip"}
    assert len(dash.accepted_points()) == 12_000


def test_a_429_waits_the_dashboards_retry_after_then_delivers(tmp_path):
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard(statuses=[429], headers={"Retry-After": "7"}) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url), total_steps=1)
        assert pusher.push_once() is False
        import time

        assert pusher._next_try - time.monotonic() >= 6.5  # waits the 7 s asked, not the 1 s backoff
        pusher.close()  # the final flush retries at once
    assert [r["status"] for r in dash.requests if r["path"].endswith("/metrics")] == [429, 200]
    assert [p["key"] for p in dash.accepted_points()] == ["a/x"]


def test_a_hung_dashboard_does_not_hold_up_training_and_loses_nothing(tmp_path):
    """The training thread only appends to the spool: while the pusher's first request hangs in
    the dashboard, every later step is logged, and all of them arrive once it answers."""
    import threading

    hold = threading.Event()
    spool = MetricSpool(tmp_path)
    spool.log(0, {"a/x": 0.0})
    with Dashboard(hold=hold) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, flush_timeout_s=30), total_steps=500)
        pusher.start()
        assert dash.arrived.acquire(timeout=30)  # the push is now stuck in the dashboard

        def train():  # the "training loop" goes on meanwhile
            for step in range(1, 500):
                spool.log(step, {"a/x": float(step), "a/y": 1.0})
                pusher.step = step

        trainer = threading.Thread(target=train)
        trainer.start()
        trainer.join(timeout=60)  # generous: it fails here (not hangs) if logging waited on the push
        assert not trainer.is_alive()
        assert len(_spool_lines(tmp_path)) == 999 and not dash.requests  # all logged, nothing answered yet
        hold.set()
        pusher.close()
    assert sorted({p["step"] for p in dash.accepted_points()}) == list(range(500))


def test_closing_with_a_hung_dashboard_returns_and_keeps_the_rest_in_the_spool(tmp_path):
    import threading

    hold = threading.Event()
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard(hold=hold) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, flush_timeout_s=0.5), total_steps=1)
        pusher.start()
        assert dash.arrived.acquire(timeout=30)
        pusher.close()  # returns while the request still hangs
        assert read_offset(tmp_path)[0] == 0  # not acknowledged: a restarted trainer sends it again


def test_a_failed_push_that_a_retry_gets_through_is_no_push_failure(tmp_path):
    """The run page's push-failures panel counts what the dashboard never stored: a transient
    failure whose retry goes through is not one (it counted failures ever, so one broken pipe read
    as 1 for the rest of the run)."""
    spool = MetricSpool(tmp_path)
    spool.log(1, {"a/x": 1.0})
    with Dashboard(statuses=[503]) as dash:
        pusher = Pusher(tmp_path, _reporting(dash.url, flush_timeout_s=5), total_steps=1)
        pusher.push_once()  # the 503
        assert pusher.failure_counts() == {}
        pusher.close()  # the retry goes through
    assert [r["status"] for r in dash.requests if r["path"].endswith("/metrics")] == [503, 200]
    assert pusher.failure_counts() == {} and pusher.lost_points == 0
    assert pusher.metric_push_failures == 1  # the failed push itself is still counted for the run's summary
