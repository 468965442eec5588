"""The `opl` logging SDK: what one `log` call costs the training thread, and how fast its
pusher drains a spool, against the bundled trainer's previous pusher and spool, measured in the
same run on this machine.

    .venv/bin/python benchmarks/sdk.py [--calls 20000] [--steps 5000] [--rounds 3] [--baseline-rev REV]

The previous implementation is trainer/reporting.py as of `--baseline-rev` (default: the commit
before it moved into the client package), loaded from git: httpx for HTTP, json.dumps per point.

What it measures:

- log call, 40 keys: `run.log({...40 floats}, step=i)` on the training thread, each call timed,
  with the run online (its pusher thread posting to the sink every 0.2 s meanwhile) and offline
  (spool only); against the previous spool's `MetricSpool.log` of the same 40 keys. Target: median
  under 50 us.
- push throughput: a spool of steps x 40 points drained by each pusher's final flush (batches of
  5,000 points, gzip, one kept-alive connection) into the sink, points per second, median of the
  rounds (the two pushers interleaved, so a change in the machine's load hits both).

The sink is a stdlib HTTP/1.1 server in its own process that reads each body and answers 202: it
measures the client's side (build, compress, send), not the dashboard's ingestion (benchmarks/metrics.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opl_client import sdk  # noqa: E402
from opl_client.pusher import Pusher, PushSettings  # noqa: E402
from opl_client.spool import MetricSpool, read_offset  # noqa: E402
from tests.faults.stack import free_port  # noqa: E402

KEYS = [f"actor/metric_{i:02d}" for i in range(40)]
SINK = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"stored": 0}'
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
"""


def start_sink() -> tuple[subprocess.Popen, str]:
    port = free_port()
    sink = subprocess.Popen([sys.executable, "-c", SINK, str(port)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return sink, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the sink did not start")


def baseline_module(rev: str):
    """trainer/reporting.py as of `rev`, as a module of its own."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:trainer/reporting.py"], check=True, capture_output=True, text=True
    ).stdout
    path = Path(tempfile.mkdtemp()) / "baseline_reporting.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("baseline_reporting", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def values_at(step: int) -> dict[str, float]:
    return {key: step * 1e-3 + i / 7 for i, key in enumerate(KEYS)}


def time_calls(log, calls: int) -> list[float]:
    """Microseconds of each log(step, values); the values are built before the clock starts, as a
    trainer has them."""
    rows = [values_at(step) for step in range(calls)]
    out = []
    clock = time.perf_counter_ns
    for step, values in enumerate(rows):
        start = clock()
        log(step, values)
        out.append((clock() - start) / 1000)
    return out


def log_cost_rows(url: str, calls: int, baseline) -> list[tuple]:
    import logging

    logging.getLogger("opl").setLevel(logging.ERROR)
    results = {}
    with tempfile.TemporaryDirectory() as d:
        spool = baseline.MetricSpool(Path(d))
        results["previous spool: MetricSpool.log (json.dumps per point)"] = time_calls(spool.log, calls)
        spool.close()
    with tempfile.TemporaryDirectory() as d:
        spool = MetricSpool(Path(d))
        results["this spool: MetricSpool.log"] = time_calls(spool.log, calls)
        spool.close()
    for mode in ("offline", "online"):
        with tempfile.TemporaryDirectory() as d:
            os.environ["OPL_RUN_ID"], os.environ["OPL_TOKEN"] = "1", "oplrun_bench"  # attach: no run to open
            run = sdk.Run(name="bench", dir=d, mode=mode, url=url, push_interval_s=0.2, heartbeat_s=3600)
            results[f"SDK run.log, {mode}" + (" (pusher posting meanwhile)" if mode == "online" else "")] = time_calls(
                lambda step, values, run=run: run.log(values, step=step), calls
            )
            run.finish()
            del os.environ["OPL_RUN_ID"], os.environ["OPL_TOKEN"]
    base = statistics.median(results["previous spool: MetricSpool.log (json.dumps per point)"])
    rows = []
    for name, times in results.items():
        med = statistics.median(times)
        rows.append(
            (
                f"log call, 40 keys, {name}: median / p95 / p99",
                f"{med:.1f} / {pct(times, 0.95):.1f} / {pct(times, 0.99):.1f} us",
                f"{base:.1f} us (previous spool)",
                f"{med / base:.2f}x",
                "< 50 us median" if name.startswith("SDK") else "",
            )
        )
        print(rows[-1], flush=True)
    return rows


def write_spool(folder: Path, steps: int) -> None:
    spool = MetricSpool(folder)
    for step in range(steps):
        spool.log(step, values_at(step), now=1.7e9 + step)
    spool.close()


def drain(pusher_class, settings, spool_dir: Path, work: Path) -> float:
    """Seconds for the pusher's final flush to push the whole spool (checked: all acknowledged)."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(spool_dir, work)
    pusher = pusher_class(work, settings, total_steps=0)
    start = time.perf_counter()
    pusher.close()
    took = time.perf_counter() - start
    size = (work / "metrics.jsonl").stat().st_size
    if read_offset(work)[0] != size:
        raise RuntimeError(f"{pusher_class.__module__}: the spool was not fully pushed")
    return took


def throughput_rows(url: str, steps: int, rounds: int, baseline) -> list[tuple]:
    import logging

    logging.getLogger("opl").setLevel(logging.ERROR)
    logging.getLogger("trainer.reporting").setLevel(logging.ERROR)
    points = steps * len(KEYS)
    settings = PushSettings(url, "1", "oplrun_bench", 1, push_interval_s=2.0, heartbeat_s=3600, flush_timeout_s=600)
    with tempfile.TemporaryDirectory() as d:
        source, work = Path(d) / "source", Path(d) / "work"
        source.mkdir()
        write_spool(source, steps)
        mb = (source / "metrics.jsonl").stat().st_size / 1e6
        print(f"spool: {points:,} points, {mb:.1f} MB of JSON lines", flush=True)
        times: dict[str, list[float]] = {"this pusher (opl_client.pusher, stdlib HTTP)": [], "previous pusher": []}
        drain(Pusher, settings, source, work)  # warm-up: imports, the sink's first connection
        drain(baseline.Pusher, settings, source, work)
        for _ in range(rounds):
            times["this pusher (opl_client.pusher, stdlib HTTP)"].append(drain(Pusher, settings, source, work))
            times["previous pusher"].append(drain(baseline.Pusher, settings, source, work))
    base = points / statistics.median(times["previous pusher"])
    rows = []
    for name, took in times.items():
        rate = points / statistics.median(took)
        rows.append(
            (
                f"push throughput, {name}: points/s (median of {rounds})",
                f"{rate:,.0f}",
                f"{base:,.0f} (previous pusher)",
                f"{rate / base:.2f}x",
                ">= 1x",
            )
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--steps", type=int, default=5_000, help="steps of 40 points in the spool to push")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-rev", default="4c5e329^", help="the git revision of the previous pusher")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", flush=True)
    baseline = baseline_module(args.baseline_rev)
    sink, url = start_sink()
    try:
        rows = log_cost_rows(url, args.calls, baseline) + throughput_rows(url, args.steps, args.rounds, baseline)
    finally:
        sink.terminate()
        sink.wait(10)
    header = ("measure", "value", "baseline (same run)", "ratio", "target")
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    print()
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


if __name__ == "__main__":
    main()
