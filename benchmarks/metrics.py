"""Metric storage and serving on this machine's PostgreSQL, each measure against a naive baseline
measured in the same run.

    .venv/bin/python benchmarks/metrics.py [--quick] [--keep]

Uses its own database (opl_bench_metrics, dropped at the end unless --keep) and Redis db 13.

| measure | ours | baseline |
|---|---|---|
| ingestion, 1/8/32 writers | `metrics_ingest` (validate, one chunk per key by binary COPY, summaries, rollups, publish) in 5,000-point batches, one run per writer, separate processes | the previous storage, one row per point: binary COPY into a table with its three indexes, plus the same summaries and rollups, 1 writer |
| ingestion over HTTP | the same, posted as JSON to uvicorn (2 workers, DATABASE_POOL=1) by 1 and by 8 threads | (same baseline) |
| chart query, 1M and 10M points | `selectors.series` at a 1,500-point budget (rollups) | read every point (from the chunks), downsample with tsdownsample MinMaxLTTB |
| compare, 50 runs x 100k | one `selectors.series` call for the 50 runs | the same naive read, run by run |
| live latency | POST over HTTP -> event on an SSE connection (uvicorn, Redis pub/sub) | polling every 2 s, as the previous chart did |

Targets: ingestion >= 100k points/s; chart query over 1M points <= 150 ms; live p95 <= 500 ms.
Big series are generated with numpy and stored as chunks of 1,000 steps.
"""
from __future__ import annotations

import argparse
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
BENCH_DB = "opl_bench_metrics"
ADMIN_URL = "postgres://postgres@127.0.0.1:5432/postgres"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}"
os.environ["REDIS_URL"] = "redis://127.0.0.1:6379/13"
os.environ.setdefault("SECRET_KEY", "bench-secret-key")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")

KEY = "train/reward_mean"
BATCH = 5_000
KEYS = [f"bench/k{i:02d}" for i in range(50)]  # a batch: 50 keys x 100 steps


def admin(sql: str) -> None:
    import psycopg

    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(sql)


def setup_database() -> None:
    admin(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")
    admin(f"CREATE DATABASE {BENCH_DB}")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def make_runs(n: int, name: str):
    from django.contrib.auth.models import User

    from orchestrator.experiments.models import Experiment, Project, Run

    user, _ = User.objects.get_or_create(username="bench")
    project, _ = Project.objects.get_or_create(name="bench")
    project.members.add(user)
    experiment = Experiment.objects.create(name=name, project=project, owner=user, base_config={})
    return [Run.objects.create(experiment=experiment, owner=user, name=f"{name}-{i}", config={"seed": i},
                               state=Run.State.RUNNING, attempt=1) for i in range(n)]


def batch_rows(writer: int, start_step: int) -> list[dict]:
    t = 1.7e9 + start_step
    return [{"step": start_step + s, "key": k, "value": (writer + s) * 0.001, "time": t + s}
            for s in range(BATCH // len(KEYS)) for k in KEYS]


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
        cur.execute(f"CREATE TABLE {ROW_TABLE} (id bigserial PRIMARY KEY, run_id int8, attempt int4, key text, "
                    "step int8, value float8, special int2, time float8, seq int8, superseded bool)")
        cur.execute(f"CREATE UNIQUE INDEX ON {ROW_TABLE} (run_id, key, step) WHERE NOT superseded")
        cur.execute(f"CREATE INDEX ON {ROW_TABLE} (run_id, seq) WHERE NOT superseded")
    payloads = [batch_rows(0, b * (BATCH // len(KEYS))) for b in range(batches)]
    start = time.perf_counter()
    for seq, rows in enumerate(payloads, 1):
        cols = parse_columns(rows)
        batch = batch_ops.sort_batch(cols)
        with transaction.atomic():
            with store._raw_pg_cursor() as cur, cur.copy(
                    f"COPY {ROW_TABLE} (run_id, attempt, key, step, value, special, time, seq, superseded) "
                    "FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int4", "text", "int8", "float8", "int2", "float8", "int8", "bool"])
                for row in zip(cols.keys, cols.steps, cols.values, cols.specials, cols.times, strict=True):
                    copy.write_row((run.pk, 1, *row, seq, False))
            store.upsert_series(run.pk, batch_ops.key_summaries(batch))
            store.merge_rollups(run.pk, batch_ops.rollup_rows(batch, store.LEVELS))
    return batches * BATCH / (time.perf_counter() - start)


# --- big series --------------------------------------------------------------------------------

def generate(run_ids: list[int], n: int, chunk: int = 1_000) -> None:
    """n points of KEY per run, as chunks of `chunk` steps, then summaries and rollups."""
    import numpy as np
    from django.db import connection, transaction

    from orchestrator.metrics import store
    from orchestrator.metrics.chunks import Points

    rng = np.random.default_rng(0)
    for rid in run_ids:
        with transaction.atomic():
            for seq, lo in enumerate(range(0, n, chunk), 1):
                steps = np.arange(lo, min(n, lo + chunk), dtype=np.int64)
                values = np.sin(steps / 5000.0) + rng.random(len(steps)) * 0.1
                store.insert_chunks(rid, 1, seq, {KEY: Points(steps, values, np.zeros(len(steps), np.int8),
                                                              1.7e9 + steps.astype(np.float64))})
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
            with httpx.stream("GET", f"{base}/api/v1/runs/{run.pk}/metrics/stream", params={"keys": KEY},
                              cookies=cookies, timeout=30) as response:
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
                    pts = http.get(f"/api/v1/runs/{run.pk}/metrics", params={"key": KEY, "start": samples}).json()["points"]
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
                http.post(f"/api/v1/runs/{run.pk}/metrics",
                          json={"attempt": 1, "points": [{"step": step, "key": KEY, "value": 0.5, "time": 1.7e9}]})
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
        rows.append((f"compare query, {n_runs} runs x 100k points, {budget:,}-point budget per run",
                     f"{ours * 1000:.1f} ms", f"{base * 1000:,.0f} ms (read all + MinMaxLTTB at 1,500)",
                     f"{base / ours:,.0f}x", "—"))
        print(rows[-1], flush=True)
    return rows


def start_uvicorn(workers: int = 1):
    import httpx

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "orchestrator.asgi:application", "--port", str(port),
                               "--workers", str(workers), "--log-level", "warning", "--no-access-log"],
                              cwd=ROOT, env={**os.environ, "DATABASE_POOL": os.environ.get("DATABASE_POOL", "1")})
    base = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            httpx.get(f"{base}/login/", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return server, base


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
    bodies = {r.pk: [json.dumps({"attempt": 1, "points": batch_rows(i, b * (BATCH // len(KEYS)))}).encode()
                     for b in range(batches)] for i, r in enumerate(runs)}
    server, base = start_uvicorn(workers=2)
    try:
        def post_all(run_id):
            with httpx.Client(base_url=base, timeout=60, headers={"Authorization": f"Bearer {tokens[run_id]}",
                                                                  "Content-Type": "application/json"}) as http:
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


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (1M/2M points, 10 compare runs)")
    parser.add_argument("--keep", action="store_true", help=f"keep the {BENCH_DB} database")
    parser.add_argument("--only", nargs="+", choices=["ingest", "chart", "compare", "live"],
                        default=["ingest", "chart", "compare", "live"], help="measures to run")
    args = parser.parse_args()
    big = 2_000_000 if args.quick else 10_000_000
    compare_runs = 10 if args.quick else 50

    setup_database()
    from orchestrator.metrics import selectors

    rows: list[tuple[str, str, str, str, str]] = []
    try:
        print(f"load average at start: {os.getloadavg()}", flush=True)
        naive = row_per_point_rate(40) if "ingest" in args.only else 0
        for writers, per in ((1, 300_000), (8, 60_000), (32, 20_000)) if "ingest" in args.only else ():
            rate = ingest_rate(writers, per)
            rows.append((f"ingestion, {writers} writer(s), {BATCH:,}-point batches", f"{rate:,.0f} pts/s",
                         f"{naive:,.0f} pts/s (row per point, 1 writer)", f"{rate / naive:,.1f}x", ">= 100k pts/s"))
            print(rows[-1], flush=True)

        for writers, per in ((1, 200_000), (8, 40_000)) if "ingest" in args.only else ():
            rate = http_ingest_rate(writers, per)
            rows.append((f"ingestion over HTTP (uvicorn, 2 workers), {writers} writer(s), {BATCH:,}-point batches",
                         f"{rate:,.0f} pts/s", f"{naive:,.0f} pts/s (row per point, no HTTP)", f"{rate / naive:,.1f}x",
                         "(whole path)"))
            print(rows[-1], flush=True)
        for n, label in ((1_000_000, "1M"), (big, f"{big // 1_000_000}M")) if "chart" in args.only else ():
            [run] = make_runs(1, f"chart{label}")
            t0 = time.perf_counter()
            generate([run.pk], n)
            print(f"generated {label} points + rollups in {time.perf_counter() - t0:.1f} s", flush=True)
            ours = timed(lambda rid=run.pk: selectors.series([rid], KEY, max_points=1500), repeats=7)
            points = len(selectors.series([run.pk], KEY, max_points=1500)[run.pk])
            base = timed(lambda rid=run.pk: naive_series([rid]), repeats=1 if n > 1_000_000 else 3)
            rows.append((f"chart query, 1 key, {label} points, 1,500 budget ({points} pts)", f"{ours * 1000:.1f} ms",
                         f"{base * 1000:,.0f} ms (read all + MinMaxLTTB)", f"{base / ours:,.0f}x",
                         "<= 150 ms at 1M" if n == 1_000_000 else "—"))
            print(rows[-1], flush=True)
            if n == 1_000_000:  # a zoom below the coarsest-level threshold reads the chunks themselves
                zoom = timed(lambda rid=run.pk: selectors.series([rid], KEY, start=0, end=59_999, max_points=1500),
                             repeats=7)
                rows.append(("chart query, zoomed to 60k of the 1M steps (reads chunks), 1,500 budget",
                             f"{zoom * 1000:.1f} ms", "—", "—", "—"))
                print(rows[-1], flush=True)

        if "compare" in args.only:
            rows.extend(compare_rows(compare_runs))
        if "live" in args.only:
            sse, polled = live_latency(200)
            rows.append(("live latency POST -> SSE event, p50 / p95",
                         f"{pct(sse, .5) * 1000:.0f} / {pct(sse, .95) * 1000:.0f} ms (n={len(sse)})",
                         f"{pct(polled, .5) * 1000:.0f} / {pct(polled, .95) * 1000:.0f} ms (2 s polling, n={len(polled)})",
                         f"{pct(polled, .95) / pct(sse, .95):,.1f}x at p95", "p95 <= 500 ms"))
            print(rows[-1], flush=True)
        print(f"load average at end: {os.getloadavg()}", flush=True)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            admin(f"DROP DATABASE IF EXISTS {BENCH_DB} WITH (FORCE)")

    print()
    print("| measure | ours | baseline | ratio | target |")
    print("|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
