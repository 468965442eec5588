"""Metric storage and serving on this machine's PostgreSQL, each measure against a naive baseline
measured in the same run.

    .venv/bin/python benchmarks/metrics.py [--quick] [--keep]

Uses its own database (opl_bench_metrics, dropped at the end unless --keep) and Redis db 13.

- ingestion, 1/8/32 writers: `metrics_ingest` (validate, one chunk per key by binary COPY,
  summaries, rollups, publish) in 5,000-point batches, one run per writer, separate processes.
  Baseline: the previous storage, one row per point: binary COPY into a table with its three
  indexes, plus the same summaries and rollups, 1 writer
- ingestion over HTTP: the same, posted as JSON to uvicorn (2 workers, DATABASE_POOL=1) by 1 and by
  8 threads. Baseline: the same
- chart query, 1M and 10M points: `selectors.series` at a 1,500-point budget (rollups). Baseline:
  read every point (from the chunks), downsample with tsdownsample MinMaxLTTB
- compare, 50 runs x 100k: one `selectors.series` call for the 50 runs. Baseline: the same naive
  read, run by run
- live latency: POST over HTTP -> event on an SSE connection (uvicorn, Redis pub/sub). Baseline:
  polling every 2 s, as the previous chart did

Targets: ingestion >= 100k points/s; chart query over 1M points <= 150 ms; live p95 <= 500 ms.
Big series are generated with numpy and stored as chunks of 1,000 steps.

The ingestion measures (uvicorn, 2 workers; the MLflow column is its tracking server, 2 workers, on
the same PostgreSQL, driven over REST with the same requests, when MLflow is installed in a separate
environment: see benchmarks/mlflow_baseline.py; otherwise the column says it was skipped):

- writers: one run, 1/8/32 writer threads: own keys in step order; one shared key with interleaved
  steps; 50 keys x 20 steps a request with each writer its own step range. Points/s, and each
  W-writer rate / 1-writer rate
- small: 1-, 50-, 1,000-point requests: server time (in-process, the whole view) and database round
  trips (libpq protocol trace), and points/s over HTTP
- behind: a 1,000-point batch behind a key's head, retried, and appended, into series of 10k/100k/1M
  points: time against the 10k-point series
- trainer: a training loop's step time (real spool and pusher) with the dashboard up, slow, hung,
  down and answering 429, against no dashboard
- chart-http: the chart query over HTTP for a 1M-point key against MLflow's chart query on the same
  series

    .venv/bin/python benchmarks/metrics.py --only writers small behind trainer chart-http [--quick] [--no-mlflow]

The alert rules' cost on ingestion, in-process like `small`:

- alerts: a trainer's batch (the 37 keys a step logs, 5 watched by the alert rules), 1 step and 40
  steps: server time and round trips, against the same batch with its keys renamed so that no rule
  watches them

    .venv/bin/python benchmarks/metrics.py --only alerts [--quick]

Side by side with MLflow 3.17.2 (installed into its own environment by the benchmark,
benchmarks/mlflow_baseline.py), over HTTP with the same client, 1,000-point requests, 2 workers each:

    flock /tmp/opl-heavy.lock .venv/bin/python benchmarks/metrics.py --mlflow [--quick]

- 1 and 8 writers x 1 and 50 keys, at 200k and 1M points: points/s, ours and MLflow's (on a quarter
  of the points), the ratio, and ours as a fraction of the physical limit: a raw COPY of the same
  rows into an indexed table, measured in the same run; every point of both sides read back and
  compared (lost = missing, different or extra)
- cost per point, 1M : 200k: each scenario's 200k rate / its 1M rate (flat = 1)
- small requests: 1-, 50- and 1,000-point requests, 1 writer: server time, round trips, points/s
  against MLflow's

OPL_BENCH_DB and OPL_BENCH_REDIS_URL name another database and Redis db (two benchmarks on one machine).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing as mp
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH_DB = os.environ.get("OPL_BENCH_DB", "opl_bench_metrics")  # another name when two benchmarks share a machine
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}"
os.environ["REDIS_URL"] = os.environ.get("OPL_BENCH_REDIS_URL", "redis://127.0.0.1:6379/13")
os.environ.setdefault("SECRET_KEY", "bench-secret-key")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

from benchmarks.bench_db import admin, drop_database, fresh_database  # noqa: E402 (after the environment)
from benchmarks.bench_server import start_uvicorn  # noqa: E402

KEY = "train/reward_mean"
BATCH = 5_000
KEYS = [f"bench/k{i:02d}" for i in range(50)]  # a batch: 50 keys x 100 steps


def make_runs(n: int, name: str):
    from django.contrib.auth.models import User

    from orchestrator.experiments.models import Experiment, Project, Run

    user, _ = User.objects.get_or_create(username="bench")
    project, _ = Project.objects.get_or_create(name="bench")
    project.members.add(user)
    experiment = Experiment.objects.create(name=name, project=project, owner=user, base_config={})
    return [
        Run.objects.create(
            experiment=experiment,
            owner=user,
            name=f"{name}-{i}",
            config={"seed": i},
            state=Run.State.RUNNING,
            attempt=1,
        )
        for i in range(n)
    ]


def batch_rows(writer: int, start_step: int) -> list[dict]:
    t = 1.7e9 + start_step
    return [
        {"step": start_step + s, "key": k, "value": (writer + s) * 0.001, "time": t + s}
        for s in range(BATCH // len(KEYS))
        for k in KEYS
    ]


# --- ingestion --------------------------------------------------------------------------------


def _writer(run_id: int, writer: int, batches: int, barrier, out) -> None:
    from django.db import connections

    from orchestrator.experiments.models import Run
    from orchestrator.metrics.services import metrics_ingest

    connections.close_all()
    run = Run.objects.get(pk=run_id)
    payloads = [batch_rows(writer, b * (BATCH // len(KEYS))) for b in range(batches)]
    barrier.wait()
    for rows in payloads:
        metrics_ingest(run=run, attempt=1, points=rows)
    out.put(time.perf_counter())


def ingest_rate(writers: int, points_per_writer: int) -> float:
    from django.db import connections

    runs = make_runs(writers, f"ingest{writers}")
    batches = max(1, points_per_writer // BATCH)
    connections.close_all()
    ctx = mp.get_context("fork")
    barrier, out = ctx.Barrier(writers + 1), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(r.pk, i, batches, barrier, out)) for i, r in enumerate(runs)]
    for p in procs:
        p.start()
    barrier.wait()
    start = time.perf_counter()
    ends = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return writers * batches * BATCH / (max(ends) - start)


ROW_TABLE = "bench_row_per_point"


def row_per_point_rate(batches: int) -> float:
    """The storage this replaced: each point a row of a table indexed on (id), (run, key, step)
    and (run, seq), written by binary COPY; summaries and rollups as ingestion does them."""
    from django.db import connection, transaction

    from orchestrator.metrics import batches as batch_ops
    from orchestrator.metrics import store
    from orchestrator.metrics.schemas import parse_columns

    [run] = make_runs(1, "rows")
    with connection.cursor() as cur:
        cur.execute(
            f"CREATE TABLE {ROW_TABLE} (id bigserial PRIMARY KEY, run_id int8, attempt int4, key text, "
            "step int8, value float8, special int2, time float8, seq int8, superseded bool)"
        )
        cur.execute(f"CREATE UNIQUE INDEX ON {ROW_TABLE} (run_id, key, step) WHERE NOT superseded")
        cur.execute(f"CREATE INDEX ON {ROW_TABLE} (run_id, seq) WHERE NOT superseded")
    payloads = [batch_rows(0, b * (BATCH // len(KEYS))) for b in range(batches)]
    start = time.perf_counter()
    for seq, rows in enumerate(payloads, 1):
        cols = parse_columns(rows)
        batch = batch_ops.sort_batch(cols)
        with transaction.atomic():
            db = store.direct()
            with (
                db.cursor() as cur,
                cur.copy(
                    f"COPY {ROW_TABLE} (run_id, attempt, key, step, value, special, time, seq, superseded) "
                    "FROM STDIN (FORMAT BINARY)"
                ) as copy,
            ):
                copy.set_types(["int8", "int4", "text", "int8", "float8", "int2", "float8", "int8", "bool"])
                for row in zip(cols.keys, cols.steps, cols.values, cols.specials, cols.times, strict=True):
                    copy.write_row((run.pk, 1, *row, seq, False))
            store.fold_series(db, run.pk, batch)
            store.insert_rollups(db, run.pk, batch)
    return batches * BATCH / (time.perf_counter() - start)


# --- big series --------------------------------------------------------------------------------


def generate(run_ids: list[int], n: int, chunk: int = 1_000) -> None:
    """n points of KEY per run, as chunks of `chunk` steps, then summaries and rollups."""
    import numpy as np
    from django.db import connection, transaction

    from orchestrator.metrics import store
    from orchestrator.metrics.batches import from_points
    from orchestrator.metrics.chunks import Points

    rng = np.random.default_rng(0)
    for rid in run_ids:
        with transaction.atomic():
            for seq, lo in enumerate(range(0, n, chunk), 1):
                steps = np.arange(lo, min(n, lo + chunk), dtype=np.int64)
                values = np.sin(steps / 5000.0) + rng.random(len(steps)) * 0.1
                store.insert_chunks(
                    store.direct(),
                    rid,
                    1,
                    seq,
                    from_points(
                        {KEY: Points(steps, values, np.zeros(len(steps), np.int8), 1.7e9 + steps.astype(np.float64))}
                    ),
                )
            store.rebuild_series(rid)
            store.rebuild_rollups(rid)
    with connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE metrics_metricrollup")
        cur.execute("ANALYZE metrics_metricchunk")


def timed(fn, repeats: int) -> float:
    fn()  # warm
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def naive_series(run_ids: list[int], budget: int = 1500):
    """Read every point of the key and downsample in Python (MinMaxLTTB)."""
    from tsdownsample import MinMaxLTTBDownsampler

    from orchestrator.metrics.chunks import live_points

    out = {}
    for rid in run_ids:
        points = live_points([rid], [KEY])[(rid, KEY)]
        x, y = points.steps, points.values
        idx = MinMaxLTTBDownsampler().downsample(x, y, n_out=budget)
        out[rid] = list(zip(x[idx].tolist(), y[idx].tolist(), strict=True))
    return out


# --- live latency ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def live_latency(samples: int) -> tuple[list[float], list[float]]:
    import httpx
    from django.test import Client

    from orchestrator.experiments.tokens import derive_token, token_hash

    [run] = make_runs(1, "live")
    run.token_salt = "bench"
    token = derive_token(run.pk, 1, "bench")
    run.token_hash = token_hash(token)
    run.save()
    client = Client()
    client.force_login(run.owner)
    cookies = {"sessionid": client.cookies["sessionid"].value}
    server, base = start_uvicorn()
    try:
        sent: dict[int, float] = {}
        received: dict[int, float] = {}
        ready = threading.Event()

        def listen():
            with httpx.stream(
                "GET", f"{base}/api/v1/runs/{run.pk}/metrics/stream", params={"keys": KEY}, cookies=cookies, timeout=30
            ) as response:
                ready.set()
                for line in response.iter_lines():
                    if line.startswith("data:") and '"points"' in line:
                        import json

                        for step, _ in json.loads(line[5:])["points"][KEY]:
                            received[step] = time.perf_counter()
                    if len(received) >= samples:
                        return

        listener = threading.Thread(target=listen, daemon=True)
        listener.start()
        ready.wait(10)
        time.sleep(0.5)
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
            for step in range(samples):
                time.sleep(random.uniform(0.03, 0.08))
                points = [{"step": step, "key": k, "value": 0.5, "time": 1.7e9 + step} for k in (KEY, *KEYS[:39])]
                sent[step] = time.perf_counter()
                http.post(f"/api/v1/runs/{run.pk}/metrics", json={"attempt": 1, "points": points}).raise_for_status()
        listener.join(10)
        sse = [received[s] - sent[s] for s in sent if s in received]

        # baseline: the previous chart polled the series every 2 s
        polled: list[float] = []
        stop = threading.Event()
        seen = {"last": samples - 1}

        def poll():
            with httpx.Client(base_url=base, cookies=cookies, timeout=10) as http:
                while not stop.is_set():
                    pts = http.get(f"/api/v1/runs/{run.pk}/metrics", params={"key": KEY, "start": samples}).json()[
                        "points"
                    ]
                    now = time.perf_counter()
                    for step, _ in pts:
                        if step > seen["last"]:
                            seen["last"] = step
                            polled.append(now - sent[step])
                    stop.wait(2.0)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        with httpx.Client(base_url=base, headers=headers, timeout=10) as http:
            for step in range(samples, samples + 12):
                time.sleep(random.uniform(0.4, 0.9))
                sent[step] = time.perf_counter()
                http.post(
                    f"/api/v1/runs/{run.pk}/metrics",
                    json={"attempt": 1, "points": [{"step": step, "key": KEY, "value": 0.5, "time": 1.7e9}]},
                )
        time.sleep(2.5)
        stop.set()
        poller.join(5)
        return sse, polled
    finally:
        server.terminate()
        server.wait(10)


def compare_rows(n_runs: int) -> list[tuple]:
    from orchestrator.metrics import selectors

    runs = make_runs(n_runs, "compare")
    ids = [r.pk for r in runs]
    t0 = time.perf_counter()
    generate(ids, 100_000)
    print(f"generated {n_runs} x 100k points in {time.perf_counter() - t0:.1f} s", flush=True)
    base = timed(lambda: naive_series(ids), repeats=1)
    rows = []
    for budget in (1500, 300):
        ours = timed(lambda b=budget: selectors.series(ids, KEY, max_points=b), repeats=5)
        rows.append(
            (
                f"compare query, {n_runs} runs x 100k points, {budget:,}-point budget per run",
                f"{ours * 1000:.1f} ms",
                f"{base * 1000:,.0f} ms (read all + MinMaxLTTB at 1,500)",
                f"{base / ours:,.0f}x",
                "—",
            )
        )
        print(rows[-1], flush=True)
    return rows


def http_ingest_rate(writers: int, points_per_writer: int) -> float:
    """The whole path: JSON over HTTP to uvicorn (2 workers), token check, validation, storage."""
    import json

    import httpx

    from orchestrator.experiments.tokens import derive_token, token_hash

    runs = make_runs(writers, f"http{writers}")
    tokens = {}
    for r in runs:
        r.token_salt = "bench"
        tokens[r.pk] = derive_token(r.pk, 1, "bench")
        r.token_hash = token_hash(tokens[r.pk])
        r.save()
    batches = max(1, points_per_writer // BATCH)
    bodies = {
        r.pk: [
            json.dumps({"attempt": 1, "points": batch_rows(i, b * (BATCH // len(KEYS)))}).encode()
            for b in range(batches)
        ]
        for i, r in enumerate(runs)
    }
    server, base = start_uvicorn(workers=2)
    try:

        def post_all(run_id):
            with httpx.Client(
                base_url=base,
                timeout=60,
                headers={"Authorization": f"Bearer {tokens[run_id]}", "Content-Type": "application/json"},
            ) as http:
                for body in bodies[run_id]:
                    http.post(f"/api/v1/runs/{run_id}/metrics", content=body).raise_for_status()

        threads = [threading.Thread(target=post_all, args=(r.pk,)) for r in runs]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return writers * batches * BATCH / (time.perf_counter() - start)
    finally:
        server.terminate()
        server.wait(10)


# --- alerts: a trainer's batch carries the keys the alert rules watch ----------------------------

# The keys one training step of a tiny CPU run logs (m2po, stale_k; `python -m trainer run`, its
# metrics.jsonl): 5 of them are watched by the alert rules (orchestrator/alerts/rules.py KEYS).
TRAINER_STEP_KEYS = (
    "actor/clip_frac",
    "actor/clip_frac_high",
    "actor/clip_frac_low",
    "actor/entropy",
    "actor/grad_norm",
    "actor/lr",
    "actor/m2",
    "actor/m2_after",
    "actor/m2_all",
    "actor/m2po_tau",
    "actor/pg_loss",
    "actor/ppo_kl",
    "actor/ratio_max",
    "actor/ratio_mean",
    "actor/ratio_min",
    "actor/tr_frac",
    "perf/gen_s",
    "perf/samples_per_s",
    "perf/step_s",
    "perf/tokens_per_s",
    "perf/train_s",
    "reward/errors",
    "reward/timeouts",
    "rollout/engine_kl",
    "rollout/queue_batches",
    "rollout/reward_mean",
    "rollout/staleness_max",
    "rollout/staleness_mean",
    "rollout/staleness_min",
    "train/adv_abs_mean",
    "train/response_len_mean",
    "train/reward_mean",
    "train/reward_std",
    "train/samples_seen",
    "train/solved_frac",
    "train/tokens_seen",
    "train/train_step",
)


def alert_rows(requests: int) -> list[tuple]:
    """A trainer's batches (1 training step, as a GPU run's pusher sends them every 2 s, and 40 steps,
    as a fast CPU run's) through the ingestion view in-process: server time and database round trips,
    against the same batches with the keys renamed so that no alert rule watches them (the cost
    the ingestion rows measure). The run has a project rule, and its values fire nothing."""
    import json

    from django.test import Client

    from orchestrator.alerts.rules import WATCHED_KEYS
    from orchestrator.alerts.services import alert_rule_set

    rows = []
    for steps in (1, 40):
        measured = {}
        for label, rename in (("watched", lambda k: k), ("unwatched", lambda k: f"bench/{k}")):
            run, token = tokened_run(f"alerts{steps}{label}")
            alert_rule_set(project=run.experiment.project, kind="entropy_floor", threshold=0.001)
            client = Client(HTTP_HOST="127.0.0.1")

            def body(i, steps=steps, rename=rename):
                return json.dumps(
                    {
                        "attempt": 1,
                        "points": [
                            {
                                "step": 2 * (i * steps + s + 1),
                                "key": rename(k),
                                "value": 0.5 + 0.001 * (i % 7),
                                "time": 1.7e9 + i,
                            }
                            for s in range(steps)
                            for k in TRAINER_STEP_KEYS
                        ],
                    }
                )

            def post(i, token=token, run=run, body=body, client=client):
                return client.post(
                    f"/api/v1/runs/{run.pk}/metrics",
                    data=body(i),
                    content_type="application/json",
                    HTTP_AUTHORIZATION=f"Bearer {token}",
                )

            post(0)
            times = []
            for i in range(1, requests + 1):
                start = time.perf_counter()
                assert post(i).status_code == 202
                times.append(time.perf_counter() - start)
            response, trips = round_trips(lambda i=requests + 1, post=post: post(i))
            assert response.status_code == 202
            measured[label] = (statistics.median(times), trips)
        assert not run.alerts.exists()
        (ours, ours_trips), (base, base_trips) = measured["watched"], measured["unwatched"]
        watched = sum(k in WATCHED_KEYS for k in TRAINER_STEP_KEYS)
        rows.append(
            (
                f"trainer batch, {steps} step(s) x {len(TRAINER_STEP_KEYS)} keys ({watched} watched by alerts): "
                "server time median, round trips",
                f"{ours * 1000:.1f} ms, {ours_trips} round trips",
                f"{base * 1000:.1f} ms, {base_trips} round trips (keys unwatched)",
                f"{ours / base:.2f}x time, {ours_trips - base_trips:+d} round trips",
                "+0 round trips",
            )
        )
        print(rows[-1], flush=True)
    return rows


# --- many writers to one run, small batches, batches behind the head, the trainer ---


def tokened_run(name: str):
    from orchestrator.experiments.tokens import derive_token, token_hash

    [run] = make_runs(1, name)
    run.token_salt = "bench"
    token = derive_token(run.pk, 1, "bench")
    run.token_hash = token_hash(token)
    run.save()
    return run, token


def scenario_rows(scenario: str, writers: int, total: int) -> list[list[list[dict]]]:
    """Per writer, its requests' points (1,000 each) for one run:
    own: each writer its own key, steps in order (ranks, the generator beside the trainer);
    interleaved: one shared key, writer w sends steps w, w+W, w+2W...;
    50x20: 50 shared keys, 20 steps a request, each writer its own contiguous range of steps
    (all but one writer behind the keys' head, the case that was quadratic)."""
    t0 = 1.7e9
    out = []
    for w in range(writers):
        if scenario == "own":
            steps = list(range(total // writers))
            reqs = [
                [
                    {"step": s, "key": f"bench/w{w:02d}", "value": (s % 97) * 0.01, "time": t0 + s}
                    for s in steps[i : i + 1000]
                ]
                for i in range(0, len(steps), 1000)
            ]
        elif scenario == "interleaved":
            steps = list(range(w, total, writers))
            reqs = [
                [
                    {"step": s, "key": "bench/shared", "value": (s % 97) * 0.01, "time": t0 + s}
                    for s in steps[i : i + 1000]
                ]
                for i in range(0, len(steps), 1000)
            ]
        else:
            per = total // len(KEYS) // writers
            lo = w * per
            reqs = [
                [
                    {"step": s, "key": k, "value": (s % 97) * 0.01, "time": t0 + s}
                    for s in range(a, min(a + 20, lo + per))
                    for k in KEYS
                ]
                for a in range(lo, lo + per, 20)
            ]
        out.append(reqs)
    return out


def post_all(url: str, bodies: list[list[bytes]], headers: dict) -> tuple[float, int]:
    """Each writer (a thread with its own connection) posts its bodies in order; 429s are
    retried after their Retry-After, as the trainer's pusher does. (seconds, 429s)."""
    import httpx

    barrier, busy = threading.Barrier(len(bodies) + 1), [0]

    def writer(mine):
        with httpx.Client(timeout=120, headers=headers) as http:
            barrier.wait()
            for body in mine:
                while True:
                    response = http.post(url, content=body)
                    if response.status_code != 429:
                        response.raise_for_status()
                        break
                    busy[0] += 1
                    time.sleep(float(response.headers.get("Retry-After", "1")))

    threads = [threading.Thread(target=writer, args=(b,)) for b in bodies]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - start, busy[0]


def ours_rate(base: str, scenario: str, writers: int, total: int) -> tuple[float, int]:
    import json

    run, token = tokened_run(f"{scenario}{writers}")
    bodies = [
        [json.dumps({"attempt": 1, "points": r}).encode() for r in reqs]
        for reqs in scenario_rows(scenario, writers, total)
    ]
    n = sum(len(r) for reqs in scenario_rows(scenario, writers, total) for r in reqs)
    seconds, busy = post_all(
        f"{base}/api/v1/runs/{run.pk}/metrics",
        bodies,
        {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    return n / seconds, busy


def mlflow_rate(mlflow, scenario: str, writers: int, total: int) -> float:
    run_id = mlflow.new_run()
    rows = scenario_rows(scenario, writers, total)
    bodies = [[mlflow.batch_body(run_id, r) for r in reqs] for reqs in rows]
    seconds, _ = post_all(mlflow.log_url(), bodies, {"Content-Type": "application/json"})
    return sum(len(r) for reqs in rows for r in reqs) / seconds


def writers_rows(base: str, mlflow, total: int, mlflow_total: int) -> list[tuple]:
    rows, rates = [], {}
    for scenario, counts in (("own", (1, 8, 32)), ("interleaved", (1, 8, 32)), ("50x20", (1, 8))):
        label = {
            "own": "own keys, 1,000-point requests",
            "interleaved": "one shared key, interleaved steps, 1,000-point requests",
            "50x20": "50 keys x 20 steps a request, own step ranges",
        }[scenario]
        for w in counts:
            rate, busy = ours_rate(base, scenario, w, total)
            rates[(scenario, w)] = rate
            theirs = mlflow_rate(mlflow, scenario, w, mlflow_total) if mlflow else None
            rows.append(
                (
                    f"one run, {w} writer(s), {label}",
                    f"{rate:,.0f} pts/s ({total // 1000}k pts, {busy} x 429)",
                    f"{theirs:,.0f} pts/s ({mlflow_total // 1000}k pts)" if theirs else MLFLOW_NOTE[0],
                    f"{rate / theirs:,.1f}x" if theirs else "—",
                    ">= 10x MLflow" + ("; >= 100k pts/s" if (scenario, w) == ("own", 8) else ""),
                )
            )
            print(rows[-1], flush=True)
        for w in counts[1:]:
            ratio = rates[(scenario, w)] / rates[(scenario, 1)]
            rows.append((f"  {w} writers / 1 writer, {scenario}", f"{ratio:.2f}", "—", "—", ">= 1 (8 writers)"))
            print(rows[-1], flush=True)
    return rows


def round_trips(fn) -> tuple[object, int]:
    """fn()'s result and its database round trips on this thread's connection, counted from
    libpq's protocol trace: each time the client turns from sending to reading."""
    import tempfile

    from django.db import connection
    from psycopg.pq import Trace

    connection.ensure_connection()
    pg = connection.connection.pgconn
    fd, path = tempfile.mkstemp()
    pg.trace(fd)
    pg.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
    try:
        result = fn()
    finally:
        pg.untrace()
        os.close(fd)
    trips, prev = 0, None
    for line in Path(path).read_text().splitlines():
        side = line[:1]
        trips += side == "B" and prev == "F"
        prev = side or prev
    os.unlink(path)
    return result, trips


def small_batch_rows(base: str, mlflow, requests: int) -> list[tuple]:
    """1-, 50- and 1,000-point requests: server time and round trips (in-process, the view and
    everything under it), and the rate over HTTP with one writer against MLflow's."""
    import json

    from django.test import Client

    rows = []
    for size in (1, 50, 1000):
        keys = KEYS[: min(50, size)]
        steps_per = max(1, size // len(keys))
        run, token = tokened_run(f"small{size}")
        client = Client(HTTP_HOST="127.0.0.1")

        def body(i, run=run, keys=keys, steps_per=steps_per):
            return json.dumps(
                {
                    "attempt": 1,
                    "points": [
                        {"step": i * steps_per + s, "key": k, "value": 0.5, "time": 1.7e9 + i}
                        for s in range(steps_per)
                        for k in keys
                    ],
                }
            )

        def post(i, token=token, run=run, client=client):
            return client.post(
                f"/api/v1/runs/{run.pk}/metrics",
                data=body(i),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Bearer {token}",
            )

        post(0)
        times = []
        for i in range(1, requests + 1):
            start = time.perf_counter()
            assert post(i).status_code == 202
            times.append(time.perf_counter() - start)
        response, trips = round_trips(lambda i=requests + 1: post(i))
        assert response.status_code == 202
        run2, token2 = tokened_run(f"smallhttp{size}")
        bodies = [
            [json.dumps({"attempt": 1, "points": json.loads(body(i))["points"]}).encode() for i in range(requests)]
        ]
        seconds, _ = post_all(
            f"{base}/api/v1/runs/{run2.pk}/metrics",
            bodies,
            {"Authorization": f"Bearer {token2}", "Content-Type": "application/json"},
        )
        ours = requests * size / seconds
        theirs = None
        if mlflow:
            mrun = mlflow.new_run()
            mbodies = [[mlflow.batch_body(mrun, json.loads(body(i))["points"]) for i in range(requests)]]
            theirs = requests * size / post_all(mlflow.log_url(), mbodies, {"Content-Type": "application/json"})[0]
        rows.append(
            (
                f"{size:,}-point requests, 1 writer: server time median, round trips; rate over HTTP",
                f"{statistics.median(times) * 1000:.1f} ms, {trips} round trips; {ours:,.0f} pts/s",
                f"{theirs:,.0f} pts/s" if theirs else MLFLOW_NOTE[0],
                f"{ours / theirs:,.1f}x" if theirs else "—",
                "<= 3 round trips (appending); >= 10x MLflow",
            )
        )
        print(rows[-1], flush=True)
    return rows


# --- the MLflow side by side, with the physical limit and a point-by-point read back ---

# (label, scenario_rows scenario, writers): 1 and 8 writers, 1 and 50 keys
SIDE_BY_SIDE = (
    ("1 writer, 1 key", "own", 1),
    ("8 writers, 1 shared key, interleaved steps", "interleaved", 8),
    ("1 writer, 50 keys x 20 steps a request", "50x20", 1),
    ("8 writers, 50 keys x 20 steps a request, own step ranges", "50x20", 8),
)
COPY_TABLE = "bench_copy_limit"


def copy_limit_rate(requests: list[list[list[dict]]]) -> float:
    """The physical limit: the same rows, one row per point, by one raw text COPY (pre-rendered,
    so the time is PostgreSQL's) into a table with a primary key and a unique (run, key, step) index."""
    import psycopg

    from benchmarks.bench_db import ADMIN_URL

    rows = [p for reqs in requests for r in reqs for p in r]
    text = "".join(f"1\t{p['key']}\t{p['step']}\t{p['value']!r}\t{p['time']!r}\n" for p in rows).encode()
    with psycopg.connect(ADMIN_URL.rsplit("/", 1)[0] + f"/{BENCH_DB}", autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {COPY_TABLE}")
        conn.execute(
            f"CREATE TABLE {COPY_TABLE} (id bigserial PRIMARY KEY, run_id int8, key text, step int8, "
            "value float8, time float8)"
        )
        conn.execute(f"CREATE UNIQUE INDEX ON {COPY_TABLE} (run_id, key, step)")
        start = time.perf_counter()
        with conn.cursor() as cur, cur.copy(f"COPY {COPY_TABLE} (run_id, key, step, value, time) FROM STDIN") as copy:
            for i in range(0, len(text), 1 << 20):
                copy.write(text[i : i + (1 << 20)])
        seconds = time.perf_counter() - start
        conn.execute(f"DROP TABLE {COPY_TABLE}")
    return len(rows) / seconds


def expected_points(requests: list[list[list[dict]]]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for reqs in requests:
        for r in reqs:
            for p in r:
                out.setdefault(p["key"], {})[p["step"]] = p["value"]
    return out


def lost_points(expected: dict[str, dict[int, float]], stored: dict[str, dict[int, float]]) -> int:
    """Points sent but not read back with their value (missing or different), plus points read back
    that were never sent."""
    lost = 0
    for key, sent in expected.items():
        got = stored.get(key, {})
        lost += sum(1 for step, value in sent.items() if got.get(step) != value)
        lost += len(set(got) - set(sent))
    return lost + sum(len(v) for k, v in stored.items() if k not in expected)


def ours_read_back(run_id: int) -> dict[str, dict[int, float]]:
    from orchestrator.metrics.chunks import live_series

    return {key: dict(zip(p.steps.tolist(), p.values.tolist(), strict=True)) for key, p in live_series(run_id).items()}


def side_by_side_rows(base: str, mlflow, totals: tuple[int, ...], mlflow_share: int) -> list[tuple]:
    """Each scenario at each size over HTTP: ours, MLflow (on 1/mlflow_share of the points), the
    ratio, the fraction of the physical limit (a raw COPY of the same rows, measured here), and
    the points lost by either side when read back point by point."""
    import json

    rows, rates = [], {}
    for total in totals:
        for label, scenario, writers in SIDE_BY_SIDE:
            requests = scenario_rows(scenario, writers, total)
            limit = copy_limit_rate(requests)
            run, token = tokened_run(f"side{scenario}{writers}-{total}")
            bodies = [[json.dumps({"attempt": 1, "points": r}).encode() for r in reqs] for reqs in requests]
            n = sum(len(r) for reqs in requests for r in reqs)
            seconds, busy = post_all(
                f"{base}/api/v1/runs/{run.pk}/metrics",
                bodies,
                {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
            ours = rates[(scenario, writers, total)] = n / seconds
            lost = lost_points(expected_points(requests), ours_read_back(run.pk))
            theirs_text, ratio = MLFLOW_NOTE[0], "—"
            if mlflow:
                mrequests = scenario_rows(scenario, writers, total // mlflow_share)
                mrun = mlflow.new_run()
                mbodies = [[mlflow.batch_body(mrun, r) for r in reqs] for reqs in mrequests]
                mn = sum(len(r) for reqs in mrequests for r in reqs)
                theirs = mn / post_all(mlflow.log_url(), mbodies, {"Content-Type": "application/json"})[0]
                mlost = lost_points(expected_points(mrequests), mlflow.read_back(mrun))
                theirs_text = f"{theirs:,.0f} pts/s ({mn // 1000}k pts, {mlost} lost)"
                ratio = f"{ours / theirs:,.1f}x"
            rows.append(
                (
                    f"{label}, {total // 1000:,}k points, 1,000-point requests",
                    f"{ours:,.0f} pts/s ({busy} x 429, {lost} lost)",
                    theirs_text,
                    ratio,
                    f"{ours / limit:.0%} of raw COPY ({limit / 1e6:.2f}M rows/s)",
                )
            )
            print(rows[-1], flush=True)
    if len(totals) > 1:
        small, big = totals[0], totals[-1]
        for label, scenario, writers in SIDE_BY_SIDE:
            cost = rates[(scenario, writers, small)] / rates[(scenario, writers, big)]
            rows.append(
                (
                    f"  cost per point, {big // 1000:,}k : {small // 1000:,}k, {label}",
                    f"{cost:.2f}",
                    "—",
                    "—",
                    "<= 1.2 (8 writers x 50 keys)" if (scenario, writers) == ("50x20", 8) else "—",
                )
            )
            print(rows[-1], flush=True)
    return rows


def mlflow_rows(args) -> list[tuple]:
    """`--mlflow`: install MLflow into its own environment if needed, then the side by side and the
    small requests, against its tracking server (2 workers) on the same PostgreSQL."""
    from benchmarks.mlflow_baseline import MLflow, ensure_installed

    exe = ensure_installed()
    t0 = time.perf_counter()
    mlflow = MLflow(exe, admin, free_port())
    print(f"mlflow server up in {time.perf_counter() - t0:.0f} s ({exe})", flush=True)
    server, base = start_uvicorn(workers=2)
    try:
        totals = (50_000, 200_000) if args.quick else (200_000, 1_000_000)
        rows = side_by_side_rows(base, mlflow, totals, mlflow_share=4)
        rows.extend(small_batch_rows(base, mlflow, 40 if args.quick else 100))
    finally:
        server.terminate()
        server.wait(10)
        mlflow.close()
    return rows


def behind_rows(lengths: tuple[int, ...], repeats: int) -> list[tuple]:
    """Cost of a 1,000-point batch behind a key's head (new steps between stored ones), of a
    retried one (the same points again) and of an appending one, against the series' length."""
    import numpy as np
    from django.db import transaction

    from orchestrator.metrics import store
    from orchestrator.metrics.batches import from_points
    from orchestrator.metrics.chunks import Points
    from orchestrator.metrics.services import metrics_ingest

    rows, base = [], {}
    for n in lengths:
        [run] = make_runs(1, f"behind{n}")
        steps_all = np.arange(0, 2 * n, 2, dtype=np.int64)  # even steps: odd ones are free behind the head
        with transaction.atomic():
            for seq, lo in enumerate(range(0, n, 1000), 1):
                st = steps_all[lo : lo + 1000]
                store.insert_chunks(
                    store.direct(),
                    run.pk,
                    1,
                    seq,
                    from_points(
                        {KEY: Points(st, np.sin(st / 500.0), np.zeros(len(st), np.int8), 1.7e9 + st.astype(np.float64))}
                    ),
                )
            store.rebuild_series(run.pk)
            store.rebuild_rollups(run.pk)
        store.direct().execute(f"UPDATE {store.STREAM} SET last_seq = %s WHERE run_id = %s", [n // 1000 + 1, run.pk])

        def batch(steps):
            return [{"step": int(s), "key": KEY, "value": 0.25, "time": 1.7e9 + int(s)} for s in steps]

        middle = n  # odd steps from the middle of the series on
        timings = {}
        for kind in ("behind", "retry", "append"):
            samples = []
            for r in range(repeats):
                if kind == "behind" or kind == "retry":
                    rows_ = batch(range(middle + 1 + 2000 * r, middle + 2000 * (r + 1), 2))
                else:
                    rows_ = batch(range(2 * n + 1000 * r, 2 * n + 1000 * (r + 1)))
                start = time.perf_counter()
                metrics_ingest(run=run, attempt=1, points=rows_)
                samples.append(time.perf_counter() - start)
            timings[kind] = statistics.median(samples)
        base = base or timings
        rows.append(
            (
                f"1,000-point batch into a {n:,}-point series: behind the head / retried / appended",
                " / ".join(f"{timings[k] * 1000:.1f} ms" for k in ("behind", "retry", "append")),
                f"vs {lengths[0]:,}-point series: "
                + " / ".join(f"{timings[k] / base[k]:.2f}x" for k in ("behind", "retry", "append")),
                "—",
                "O(batch): ~1x at any length",
            )
        )
        print(rows[-1], flush=True)
    return rows


FAKE_DASHBOARD = """
import sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
mode = sys.argv[2]
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if mode == "hung":
            time.sleep(3600)
        if mode == "slow":
            time.sleep(2)
        try:
            self.send_response(429 if mode == "busy" else 202)
            self.send_header("Retry-After", "1")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")
        except OSError:
            pass  # the pusher gave up waiting (its close)
    def log_message(self, *a):
        pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def trainer_step_rows(base: str, steps: int, rounds: int = 5) -> list[tuple]:
    """A training loop's step time with the real spool and pusher (push every 0.2 s, 50 keys a
    step) against dashboards that are up, slow (2 s an answer), hung, down and busy (429), and
    without one. A step is ~20 ms of numpy work, as an optimizer update would be on CPU."""
    import tempfile

    import numpy as np

    from trainer.config import ReportingConfig
    from trainer.reporting import MetricSpool, Pusher

    run, token = tokened_run("trainer-steps")
    a = np.random.default_rng(0).random((200, 200))

    cpu_times: list[float] = []

    def loop(url: str | None) -> list[float]:
        with tempfile.TemporaryDirectory() as d:
            cfg = ReportingConfig(
                dashboard_url=url,
                run_id=str(run.pk),
                token=token,
                attempt=1,
                push_interval_s=0.2,
                flush_timeout_s=1,
                heartbeat_s=5,
            )
            spool, pusher = MetricSpool(Path(d)), Pusher(Path(d), cfg, total_steps=steps)
            pusher.start()
            times = []
            for step in range(steps):
                start, cpu = time.perf_counter(), time.thread_time()
                m = a
                for _ in range(8):
                    m = np.tanh(m @ a / 200.0)
                spool.log(step, {k: float(m[0, i]) for i, k in enumerate(KEYS)})
                pusher.step = step
                times.append(time.perf_counter() - start)
                cpu_times.append(time.thread_time() - cpu)
            pusher.close()
            spool.close()
            return times

    servers, urls = [], {"no dashboard": None, "dashboard up (ours, uvicorn)": base}
    for mode, name in (
        ("slow", "dashboard slow (2 s an answer)"),
        ("hung", "dashboard hung (never answers)"),
        ("busy", "dashboard busy (always 429)"),
    ):
        port = free_port()
        servers.append(subprocess.Popen([sys.executable, "-c", FAKE_DASHBOARD, str(port), mode]))
        urls[name] = f"http://127.0.0.1:{port}"
    urls["dashboard down (connection refused)"] = f"http://127.0.0.1:{free_port()}"
    time.sleep(1.0)
    logging.getLogger("trainer.reporting").setLevel(logging.CRITICAL)  # the expected warnings
    results: dict[str, list[float]] = {name: [] for name in urls}
    cpus: dict[str, list[float]] = {name: [] for name in urls}
    try:
        for _ in range(rounds):  # modes interleaved, so a change in the machine's load hits them all
            for name, url in urls.items():
                results[name] += loop(url)
                cpus[name] += cpu_times[:]
                cpu_times.clear()
    finally:
        for server in servers:
            server.terminate()
            server.wait(10)
    base_med = statistics.median(results["no dashboard"])
    rows = []
    for name, times in results.items():
        med = statistics.median(times)
        rows.append(
            (
                f"trainer step time, {name}: median / p95 (median CPU of the training thread)",
                f"{med * 1000:.1f} / {pct(times, 0.95) * 1000:.1f} ms ({statistics.median(cpus[name]) * 1000:.1f} ms)",
                f"{base_med * 1000:.1f} ms (no dashboard)",
                f"{med / base_med:.2f}x",
                "~1x whatever the dashboard does",
            )
        )
        print(rows[-1], flush=True)
    return rows


def chart_http_rows(base: str, mlflow, n: int) -> list[tuple]:
    """The chart query over HTTP for an n-point key at a 1,500-point budget, against MLflow's UI
    chart query (get-history-bulk-interval) and its full history, on a series of the same length."""
    import httpx
    import numpy as np
    from django.test import Client

    [run] = make_runs(1, "charthttp")
    generate([run.pk], n)
    client = Client()
    client.force_login(run.owner)
    cookies = {"sessionid": client.cookies["sessionid"].value}
    with httpx.Client(base_url=base, cookies=cookies, timeout=120) as http:

        def ours():
            response = http.get(f"/api/v1/runs/{run.pk}/metrics", params={"key": KEY, "max_points": 1500})
            response.raise_for_status()
            return len(response.json()["points"])

        drawn = ours()
        ours_s = timed(ours, repeats=7)
    rows = []
    if mlflow:
        mrun = mlflow.new_run()
        steps = np.arange(n, dtype=np.int64)
        mlflow.load_points(mrun, KEY, steps, np.sin(steps / 5000.0))
        sampled = timed(lambda: mlflow.chart(mrun, KEY, 1500), repeats=3)
        full = timed(lambda: mlflow.full_history(mrun, KEY), repeats=1)
        rows.append(
            (
                f"chart query over HTTP, {n // 1_000_000}M-point key, 1,500 budget ({drawn} pts)",
                f"{ours_s * 1000:.0f} ms",
                f"{sampled * 1000:,.0f} ms (UI's sampled query) / {full * 1000:,.0f} ms (get-history)",
                f"{sampled / ours_s:,.0f}x / {full / ours_s:,.0f}x",
                ">= 20x MLflow",
            )
        )
    else:
        rows.append(
            (
                f"chart query over HTTP, {n // 1_000_000}M-point key, 1,500 budget ({drawn} pts)",
                f"{ours_s * 1000:.0f} ms",
                MLFLOW_NOTE[0],
                "—",
                ">= 20x MLflow",
            )
        )
    print(rows[-1], flush=True)
    return rows


MLFLOW_NOTE = ["(MLflow not measured)"]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def ingestion_rows(args) -> list[tuple]:
    """The many-writers, small-batch, behind-the-head, trainer and HTTP chart measures, each with an
    MLflow column when MLflow is installed (benchmarks/mlflow_baseline.py)."""
    from benchmarks.mlflow_baseline import MLflow, executable

    wanted = [m for m in ("writers", "small", "behind", "trainer", "chart-http") if m in args.only]
    if not wanted:
        return []
    rows: list[tuple] = []
    mlflow = None
    exe = None if args.no_mlflow else executable()
    if args.no_mlflow:
        MLFLOW_NOTE[0] = "(MLflow left out: --no-mlflow)"
    elif exe is None:
        MLFLOW_NOTE[0] = "(MLflow not installed: set OPL_BENCH_MLFLOW to its mlflow executable)"
        print("MLflow column skipped: no mlflow executable (OPL_BENCH_MLFLOW or /work/mlflow-venv)", flush=True)
    elif set(wanted) & {"writers", "small", "chart-http"}:
        t0 = time.perf_counter()
        mlflow = MLflow(exe, admin, free_port())
        print(f"mlflow server up in {time.perf_counter() - t0:.0f} s ({exe})", flush=True)
    total = args.points or (32_000 if args.quick else 96_000)
    server, base = start_uvicorn(workers=2)
    try:
        if "writers" in wanted:
            rows.extend(writers_rows(base, mlflow, total, total // 4))
        if "small" in wanted:
            rows.extend(small_batch_rows(base, mlflow, 40 if args.quick else 100))
        if "behind" in wanted:
            rows.extend(behind_rows((10_000, 100_000, 1_000_000) if not args.quick else (10_000, 100_000), repeats=9))
        if "trainer" in wanted:
            rows.extend(trainer_step_rows(base, 40 if args.quick else 60))
        if "chart-http" in wanted:
            rows.extend(chart_http_rows(base, mlflow, 1_000_000))
    finally:
        server.terminate()
        server.wait(10)
        if mlflow is not None:
            mlflow.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (1M/2M points, 10 compare runs)")
    parser.add_argument("--keep", action="store_true", help=f"keep the {BENCH_DB} database")
    measures = ["ingest", "chart", "compare", "live", "writers", "small", "behind", "trainer", "chart-http", "alerts"]
    parser.add_argument(
        "--only",
        nargs="+",
        choices=measures,
        default=None,
        help="measures to run (default: all, or none beside --mlflow)",
    )
    parser.add_argument("--no-mlflow", action="store_true", help="leave out the MLflow column")
    parser.add_argument(
        "--mlflow",
        action="store_true",
        help="only the MLflow side by side (installs MLflow into its own environment if needed)",
    )
    parser.add_argument(
        "--points",
        type=int,
        default=0,
        help="points per writers row (default 96k, --quick 32k); MLflow rows get a quarter",
    )
    args = parser.parse_args()
    args.only = args.only if args.only is not None else ([] if args.mlflow else measures)
    big = 2_000_000 if args.quick else 10_000_000
    compare_runs = 10 if args.quick else 50

    fresh_database(BENCH_DB)
    from orchestrator.metrics import selectors

    rows: list[tuple[str, str, str, str, str]] = []
    try:
        print(f"load average at start: {os.getloadavg()}", flush=True)
        naive = row_per_point_rate(40) if "ingest" in args.only else 0
        for writers, per in ((1, 300_000), (8, 60_000), (32, 20_000)) if "ingest" in args.only else ():
            rate = ingest_rate(writers, per)
            rows.append(
                (
                    f"ingestion, {writers} writer(s), {BATCH:,}-point batches",
                    f"{rate:,.0f} pts/s",
                    f"{naive:,.0f} pts/s (row per point, 1 writer)",
                    f"{rate / naive:,.1f}x",
                    ">= 100k pts/s",
                )
            )
            print(rows[-1], flush=True)

        for writers, per in ((1, 200_000), (8, 40_000)) if "ingest" in args.only else ():
            rate = http_ingest_rate(writers, per)
            rows.append(
                (
                    f"ingestion over HTTP (uvicorn, 2 workers), {writers} writer(s), {BATCH:,}-point batches",
                    f"{rate:,.0f} pts/s",
                    f"{naive:,.0f} pts/s (row per point, no HTTP)",
                    f"{rate / naive:,.1f}x",
                    "(whole path)",
                )
            )
            print(rows[-1], flush=True)
        for n, label in ((1_000_000, "1M"), (big, f"{big // 1_000_000}M")) if "chart" in args.only else ():
            [run] = make_runs(1, f"chart{label}")
            t0 = time.perf_counter()
            generate([run.pk], n)
            print(f"generated {label} points + rollups in {time.perf_counter() - t0:.1f} s", flush=True)
            ours = timed(lambda rid=run.pk: selectors.series([rid], KEY, max_points=1500), repeats=7)
            points = len(selectors.series([run.pk], KEY, max_points=1500)[run.pk])
            base = timed(lambda rid=run.pk: naive_series([rid]), repeats=1 if n > 1_000_000 else 3)
            rows.append(
                (
                    f"chart query, 1 key, {label} points, 1,500 budget ({points} pts)",
                    f"{ours * 1000:.1f} ms",
                    f"{base * 1000:,.0f} ms (read all + MinMaxLTTB)",
                    f"{base / ours:,.0f}x",
                    "<= 150 ms at 1M" if n == 1_000_000 else "—",
                )
            )
            print(rows[-1], flush=True)
            if n == 1_000_000:  # a zoom below the coarsest-level threshold reads the chunks themselves
                zoom = timed(
                    lambda rid=run.pk: selectors.series([rid], KEY, start=0, end=59_999, max_points=1500), repeats=7
                )
                rows.append(
                    (
                        "chart query, zoomed to 60k of the 1M steps (reads chunks), 1,500 budget",
                        f"{zoom * 1000:.1f} ms",
                        "—",
                        "—",
                        "—",
                    )
                )
                print(rows[-1], flush=True)

        if args.mlflow:
            rows.extend(mlflow_rows(args))
        if "compare" in args.only:
            rows.extend(compare_rows(compare_runs))
        rows.extend(ingestion_rows(args))
        if "alerts" in args.only:
            rows.extend(alert_rows(40 if args.quick else 100))
        if "live" in args.only:
            sse, polled = live_latency(200)
            rows.append(
                (
                    "live latency POST -> SSE event, p50 / p95",
                    f"{pct(sse, 0.5) * 1000:.0f} / {pct(sse, 0.95) * 1000:.0f} ms (n={len(sse)})",
                    f"{pct(polled, 0.5) * 1000:.0f} / {pct(polled, 0.95) * 1000:.0f} ms (2 s polling, n={len(polled)})",
                    f"{pct(polled, 0.95) / pct(sse, 0.95):,.1f}x at p95",
                    "p95 <= 500 ms",
                )
            )
            print(rows[-1], flush=True)
        print(f"load average at end: {os.getloadavg()}", flush=True)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(BENCH_DB)

    print()
    print("| measure | ours | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
