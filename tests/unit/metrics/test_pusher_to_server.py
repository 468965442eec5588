"""The trainer's pusher against the real ingestion endpoint (uvicorn): gzip batches are stored,
and a run whose queue is full answers 429, which the pusher waits out without losing points."""

import base64
from urllib.parse import urlsplit

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
    """16 anonymous gzip bombs once filled the run's 16 queue places while they were
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
            bomb_answers.append(
                http.post(
                    url, content=bomb, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
                ).status_code
            )

    bombers = [threading.Thread(target=send_bomb) for _ in range(16)]
    for t in bombers:
        t.start()
    deadline = time.monotonic() + 1.0  # the bombs in flight (or answered): as many places held as they can take
    while (
        time.monotonic() < deadline
        and len(bomb_answers) < 16
        and ingest_queue._queued.get(run.pk, 0) < ingest_queue.limit()
    ):
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


def _samples_spool(run_dir, samples):
    import json

    with open(run_dir / "samples.jsonl", "a") as fh:
        fh.writelines(json.dumps(s) + "\n" for s in samples)


def test_a_samples_batch_too_large_for_the_server_is_sent_in_halves_and_all_of_it_stored(
    server, alice, tiny_config, tmp_path, settings, caplog
):
    """64 samples of 4,096 tokens are ~1.9 MB gzipped in the pusher's 4 MB posts; behind a
    1 MiB limit (nginx's default client_max_body_size) Django answered an HTML 400, the pusher
    skipped the batch as bad, and the samples were gone."""
    from orchestrator.samples.models import RolloutSample
    from tests.unit.samples.helpers import long_sample

    settings.OPL_INGEST_MAX_BODY_BYTES = settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1 << 20
    run, token = make_run(alice, tiny_config)
    _samples_spool(tmp_path, [long_sample(1, i) for i in range(64)])
    cfg = ReportingConfig(dashboard_url=server, run_id=str(run.pk), token=token, attempt=1, flush_timeout_s=60)
    Pusher(tmp_path, cfg, total_steps=1).close()
    assert "as too large (HTTP 413" in caplog.text and "OPL_INGEST_MAX_BODY_BYTES" in caplog.text
    assert sorted(RolloutSample.objects.filter(run=run).values_list("index", flat=True)) == list(range(64))
    assert read_offset(tmp_path, "samples.pushed.json")[0] == (tmp_path / "samples.jsonl").stat().st_size


def test_batches_refused_for_good_are_kept_and_stored_by_resend_rejected(server, alice, tiny_config, tmp_path, capsys):
    """A trainer restarted in its folder days after its run ended: its token has expired, so the
    backfill is refused (403). The lines stay marked rejected; resend_rejected stores them."""
    from datetime import timedelta

    from django.core.management import call_command
    from django.utils import timezone

    from orchestrator.experiments.models import Run
    from orchestrator.samples.models import RolloutSample
    from tests.unit.samples.helpers import sample
    from trainer.reporting import read_rejected

    run, token = make_run(alice, tiny_config)
    Run.objects.filter(pk=run.pk).update(state=Run.State.SUCCEEDED, finished_at=timezone.now() - timedelta(hours=25))
    spool = MetricSpool(tmp_path)
    for step in range(3):
        spool.log(step, {"train/loss": step / 2})
    spool.close()
    _samples_spool(tmp_path, [sample(2, i) for i in range(2)])
    cfg = ReportingConfig(dashboard_url=server, run_id=str(run.pk), token=token, attempt=1, flush_timeout_s=30)
    pusher = Pusher(tmp_path, cfg, total_steps=3)
    pusher.close()
    assert pusher.failure_counts() == {"metrics/push_failures": 3.0, "samples/push_failures": 2.0}  # not stored
    assert [r["status"] for name in ("metrics.jsonl", "samples.jsonl") for r in read_rejected(tmp_path, name)] == [
        403,
        403,
    ]
    assert not live_series(run.pk) and not RolloutSample.objects.filter(run=run).exists()

    call_command("resend_rejected", run.pk, run_dir=tmp_path)
    assert live_series(run.pk)["train/loss"].steps.tolist() == [0, 1, 2]
    assert RolloutSample.objects.filter(run=run).count() == 2
    assert read_rejected(tmp_path, "metrics.jsonl") == read_rejected(tmp_path, "samples.jsonl") == []
    assert "2 of 2 rejected batch(es) stored" in capsys.readouterr().out


@pytest.fixture
def proxy_env(monkeypatch):
    """monkeypatch with the machine's own proxy settings removed: each test sets what it means."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


DASHBOARD_NAME = "dashboard.lab.test"  # resolved by the proxy only, as a name beyond a cluster's egress


@pytest.mark.parametrize("direct", [False, True], ids=["named-beyond-the-proxy", "loopback-is-never-proxied"])
def test_the_pusher_goes_through_the_proxy_the_environment_names(
    server, alice, tiny_config, tmp_path, proxy_env, settings, direct
):
    """A node whose only way to the dashboard is its cluster's proxy (HTTP_PROXY with credentials,
    as urllib, httpx and curl read it) still delivers every point. A dashboard on the node's own
    loopback is reached directly: no proxy elsewhere could reach it."""
    from .forward_proxy import forward_proxy

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, DASHBOARD_NAME]
    run, token = make_run(alice, tiny_config)
    spool = MetricSpool(tmp_path)
    for step in range(50):
        spool.log(step, {"train/loss": 1.0 / (step + 1)})
    spool.close()
    port = urlsplit(server).port
    dashboard = server if direct else f"http://{DASHBOARD_NAME}:{port}"
    with forward_proxy(hosts={DASHBOARD_NAME: "127.0.0.1"}) as (proxy_url, seen):
        proxy_env.setenv("HTTP_PROXY", proxy_url.replace("http://", "http://lab%20user:s3cret@"))
        cfg = ReportingConfig(dashboard_url=dashboard, run_id=str(run.pk), token=token, attempt=1, flush_timeout_s=30)
        Pusher(tmp_path, cfg, total_steps=50).close()
    assert live_series(run.pk)["train/loss"].steps.tolist() == list(range(50))
    if direct:
        assert seen == []
    else:
        posts = [s for s in seen if s[0] == "POST" and s[1].startswith(f"{dashboard}/api/v1/runs/{run.pk}/")]
        assert posts, seen
        assert {auth for _, _, auth in posts} == {"Basic " + base64.b64encode(b"lab user:s3cret").decode()}


def test_a_proxy_asking_for_credentials_keeps_the_batch_for_a_retry(
    server, alice, tiny_config, tmp_path, proxy_env, settings
):
    """407 is the proxy's answer, not the dashboard's: nothing is marked rejected, and the batch
    goes through once the proxy's credentials are right."""
    from .forward_proxy import forward_proxy

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, DASHBOARD_NAME]
    run, token = make_run(alice, tiny_config)
    spool = MetricSpool(tmp_path)
    for step in range(20):
        spool.log(step, {"train/loss": 1.0 / (step + 1)})
    spool.close()
    auth = "Basic " + base64.b64encode(b"lab:right").decode()
    dashboard = f"http://{DASHBOARD_NAME}:{urlsplit(server).port}"
    with forward_proxy(hosts={DASHBOARD_NAME: "127.0.0.1"}, required_auth=auth) as (proxy_url, seen):
        proxy_env.setenv("HTTP_PROXY", proxy_url.replace("http://", "http://lab:wrong@"))
        cfg = ReportingConfig(dashboard_url=dashboard, run_id=str(run.pk), token=token, attempt=1, flush_timeout_s=5)
        pusher = Pusher(tmp_path, cfg, total_steps=20)
        assert pusher.push_once() is False
        assert read_offset(tmp_path)[0] == 0 and not (tmp_path / "metrics.rejected.jsonl").exists()
        proxy_env.setenv("HTTP_PROXY", proxy_url.replace("http://", "http://lab:right@"))
        pusher.close()
    assert live_series(run.pk)["train/loss"].steps.tolist() == list(range(20))


def test_no_proxy_and_the_proxys_scheme_are_read_as_urllib_reads_them(proxy_env):
    from opl_client.http import proxy_for

    proxy_env.setenv("HTTP_PROXY", "proxy.lab.test:3128")  # no scheme: http://, as urllib takes it
    proxy_env.setenv("NO_PROXY", ".internal.test")
    assert proxy_for(urlsplit("http://dashboard.lab.test/x"))[:2] == ("http", "proxy.lab.test:3128")
    assert proxy_for(urlsplit("http://opl.internal.test/x")) is None
    assert proxy_for(urlsplit("https://dashboard.lab.test/x")) is None  # no HTTPS_PROXY named
    proxy_env.setenv("HTTPS_PROXY", "socks5://user:pw@proxy.lab.test:1080")
    with pytest.raises(ValueError, match=r"HTTPS_PROXY=socks5://proxy.lab.test: only an http:// proxy") as refused:
        proxy_for(urlsplit("https://dashboard.lab.test/x"))
    assert "pw" not in str(refused.value)


def test_a_connection_the_server_closed_while_idle_is_retried_without_a_warning(
    transactional_db, alice, tiny_config, tmp_path, caplog
):
    """uvicorn closes a kept-alive connection after keep_alive_s of silence; a run whose steps are
    further apart than that must push and beat without a 'push failed' or 'heartbeat failed'."""
    import logging
    import time

    run, token = make_run(alice, tiny_config)
    spool = MetricSpool(tmp_path)
    with serve_asgi(keep_alive_s=0.5) as url, caplog.at_level(logging.WARNING):
        cfg = ReportingConfig(dashboard_url=url, run_id=str(run.pk), token=token, attempt=1, flush_timeout_s=30)
        pusher = Pusher(tmp_path, cfg, total_steps=3)
        for step in range(3):
            spool.log(step, {"train/loss": step / 2})
            pusher.push_once()
            pusher.heartbeat_if_due(force=True)
            time.sleep(1.5)  # longer than the server keeps the idle connection
        spool.close()
        pusher.close()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert pusher.metric_push_failures == 0 and pusher.failure_counts() == {}
    assert live_series(run.pk)["train/loss"].steps.tolist() == [0, 1, 2]
