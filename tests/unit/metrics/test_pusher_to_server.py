"""The trainer's pusher against the real ingestion endpoint (uvicorn): gzip batches are stored,
and a run whose queue is full answers 429, which the pusher waits out without losing points."""
import pytest

from orchestrator.metrics import ingest_queue
from orchestrator.metrics.chunks import live_series
from trainer.config import ReportingConfig
from trainer.reporting import MetricSpool, Pusher, read_offset

from .asgi_server import serve_asgi
from .helpers import make_run


@pytest.fixture
def server(transactional_db):
    with serve_asgi() as url:
        yield url


def test_the_pusher_stores_a_gzip_backlog_and_waits_out_a_429(server, alice, tiny_config, tmp_path, settings):
    run, token = make_run(alice, tiny_config)
    spool = MetricSpool(tmp_path)
    for step in range(1500):  # 7,500 points: two posts, compressed
        spool.log(step, {f"train/k{i}": step * 0.5 + i for i in range(5)})
    spool.close()
    cfg = ReportingConfig(dashboard_url=server, run_id=str(run.pk), token=token, attempt=1, flush_timeout_s=30)
    pusher = Pusher(tmp_path, cfg, total_steps=1500)
    settings.OPL_INGEST_MAX_QUEUED = 1
    with ingest_queue.slot(run.pk):  # the one place is taken: the run's queue is full
        assert pusher.push_once() is False
        assert read_offset(tmp_path)[0] == 0 and pusher._backoff > 0  # refused, nothing acknowledged
    pusher.close()  # the final flush delivers everything
    series = live_series(run.pk)
    assert sorted(series) == [f"train/k{i}" for i in range(5)]
    assert all(p.steps.tolist() == list(range(1500)) for p in series.values())
    assert read_offset(tmp_path)[0] == (tmp_path / "metrics.jsonl").stat().st_size


def test_anonymous_gzip_bombs_do_not_starve_the_real_trainer(server, alice, tiny_config):
    """Issue 22: 16 anonymous gzip bombs once filled the run's 16 queue places while they were
    inflated, and the real trainer got 429 on 5 of 7 posts. The token is now checked first."""
    import gzip
    import json
    import threading
    import time

    import httpx

    from .helpers import points

    run, token = make_run(alice, tiny_config)
    bomb = gzip.compress(b" " * (80 << 20), 9)  # 80 KB, inflates to more than the 64 MiB cap
    url = f"{server}/api/v1/runs/{run.pk}/metrics"
    bomb_answers = []

    def send_bomb():
        with httpx.Client(timeout=60) as http:
            bomb_answers.append(http.post(url, content=bomb, headers={"Content-Encoding": "gzip",
                                                                      "Content-Type": "application/json"}).status_code)

    bombers = [threading.Thread(target=send_bomb) for _ in range(16)]
    for t in bombers:
        t.start()
    deadline = time.monotonic() + 1.0  # the bombs in flight (or answered): as many places held as they can take
    while (time.monotonic() < deadline and len(bomb_answers) < 16
           and ingest_queue._queued.get(run.pk, 0) < ingest_queue.limit()):
        time.sleep(0.01)
    real = []
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {token}"}) as http:
        for step in range(7):
            body = json.dumps({"attempt": 1, "points": points("train/loss", [step])}).encode()
            real.append(http.post(url, content=body, headers={"Content-Type": "application/json"}).status_code)
    for t in bombers:
        t.join()
    assert real == [202] * 7
    assert bomb_answers == [401] * 16
    assert live_series(run.pk)["train/loss"].steps.tolist() == list(range(7))
