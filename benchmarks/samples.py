"""Rollout samples storage per run: a long run's samples posted through the real
ingestion endpoint, kept under the per-run bound by thinning, against the same samples stored
without a bound, measured in the same run on this machine's PostgreSQL.

    .venv/bin/python benchmarks/samples.py [--updates 20000] [--every 50] [--per-step 8] [--keep]

Uses its own database (opl_bench_samples, dropped at the end unless --keep) and Redis db 6.

The samples are shaped like the trainer's (trainer/telemetry/samples.py): per_step rows per recording step
(every `every` updates, and the first), responses of 64..max_tokens tokens (mean about
max_tokens / 2) decoded one by one, a float32 log ratio per token (shortest repr, as the trainer
writes it), about 1% of the tokens masked, prompts from a pool of 64 (the groups share one), plus
eval answers (2 sets x 4) every 500 updates. They are posted as the trainer's pusher posts them:
gzip JSON batches of 64 samples, with the run's token, through Django's handler (the whole view:
admission, gzip, pydantic, storage, thinning) in this process.

What it measures:

- samples posted / kept: what the run sent, what the run keeps (bound: OPL_SAMPLES_MAX_PER_RUN
  train + OPL_SAMPLES_MAX_EVAL_PER_RUN eval)
- steps kept, span: recorded steps still held, first and newest step: the whole history stays
  covered
- bytes stored per run: sum(pg_column_size(row)) of the run's live rows (after TOAST compression),
  and the table's pg_total_relation_size (heap + TOAST + indexes) after VACUUM FULL, with only
  that run in it (the rows the thinning deletes are dead space until autovacuum lets new rows
  reuse it)
- ingestion rate: samples/s through the endpoint (bounded: includes the thinning)
- backfill: the whole spool posted again (a pusher that lost its offset): stored 0, kept unchanged
- log ratios: packed float32 (ours) against the same values as JSON numbers (jsonb), summed
  pg_column_size
- page: the run page's samples card for one step (per_step samples of max_tokens tokens) rendered,
  median of 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
BENCH_DB = "opl_bench_samples"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{BENCH_DB}"
os.environ["REDIS_URL"] = "redis://127.0.0.1:6379/6"
os.environ.setdefault("SECRET_KEY", "bench-secret-key")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
os.environ.setdefault("LOG_LEVEL", "WARNING")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")

from benchmarks.bench_db import drop_database, fresh_database  # noqa: E402 (after the environment)

BATCH = 64  # samples per post, as the trainer's pusher
PIECES = [
    " the",
    " of",
    " x",
    " =",
    " 2",
    " 3",
    "7",
    "\\",
    "frac",
    "{",
    "}",
    " answer",
    " is",
    " so",
    " we",
    " get",
    " sqrt",
    "(",
    ")",
    " +",
    " -",
    " *",
    "\n",
    " Let",
    " boxed",
    " therefore",
    ".",
    ",",
    " 1",
    "0",
]


def tokened_run(name: str):
    from django.contrib.auth.models import User

    from orchestrator.experiments.models import Experiment, Project, Run
    from orchestrator.experiments.tokens import derive_token, token_hash

    user, _ = User.objects.get_or_create(username="bench", defaults={"is_staff": True})
    project, _ = Project.objects.get_or_create(name="bench")
    project.members.add(user)
    experiment = Experiment.objects.create(name=name, project=project, owner=user, base_config={})
    run = Run.objects.create(
        experiment=experiment, owner=user, name=name, config={}, state=Run.State.RUNNING, attempt=1, token_salt="bench"
    )
    token = derive_token(run.pk, 1, "bench")
    run.token_hash = token_hash(token)
    run.save()
    return run, token, user


def f32(value: float) -> float:
    import numpy as np

    return float(str(np.float32(value)))  # the trainer writes float32's shortest repr


def spool(updates: int, every: int, per_step: int, max_tokens: int, seed: int = 0) -> list[dict]:
    """A run's samples.jsonl, as dicts."""
    rng = random.Random(seed)
    prompts = [f"Problem {i}: " + " ".join(rng.choice(PIECES).strip() or "y" for _ in range(60)) for i in range(64)]
    steps = [every * k for k in range(1, updates // every + 1)]
    steps = [2] + steps  # the first training step records too
    out, t = [], 1.7e9
    for step in steps:
        prompt = rng.choice(prompts)
        for index in range(per_step):
            n = rng.randint(64, max_tokens)
            tokens = [rng.choice(PIECES) for _ in range(n)]
            lr = [f32(rng.gauss(0, 0.05)) for _ in range(n)]
            masked = sorted(rng.sample(range(n), max(0, round(n * 0.01))))
            reward = rng.choice([0.0, 1.0])
            out.append(
                {
                    "kind": "train",
                    "step": step,
                    "index": index,
                    "eval_set": None,
                    "prompt": prompt,
                    "response": "".join(tokens),
                    "reference": "42",
                    "reward": reward,
                    "correct": reward >= 1,
                    "policy_version": max(0, step - 4),
                    "staleness": 4,
                    "objective": "m2po",
                    "tokens": tokens,
                    "log_ratio": lr,
                    "clipped": [],
                    "masked": masked,
                    "truncated": n == max_tokens,
                    "time": t,
                }
            )
        if step % 500 == 0:
            for index in range(8):
                out.append(
                    {
                        "kind": "eval",
                        "step": step,
                        "index": index,
                        "eval_set": ["math500", "aime24"][index // 4],
                        "prompt": prompts[index],
                        "response": "".join(rng.choice(PIECES) for _ in range(200)),
                        "reference": "42",
                        "reward": 1.0,
                        "correct": True,
                        "policy_version": step,
                        "staleness": None,
                        "objective": None,
                        "tokens": [],
                        "log_ratio": [],
                        "clipped": [],
                        "masked": [],
                        "truncated": False,
                        "time": t,
                    }
                )
        t += 10
    return out


def post_all(client, run_id: int, token: str, samples: list[dict]) -> tuple[float, dict]:
    """Post the spool in the pusher's gzip batches; (seconds, summed answers)."""
    bodies = [
        gzip.compress(json.dumps({"attempt": 1, "samples": samples[i : i + BATCH]}).encode())
        for i in range(0, len(samples), BATCH)
    ]
    totals = {"stored": 0, "duplicates": 0, "dropped": 0}
    t0 = time.perf_counter()
    for body in bodies:
        answer = client.post(
            f"/api/v1/runs/{run_id}/samples",
            data=body,
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {token}",
            HTTP_CONTENT_ENCODING="gzip",
        )
        assert answer.status_code == 200, answer.content[:300]
        for key, value in answer.json().items():
            totals[key] += value
    return time.perf_counter() - t0, totals


def sizes(run_id: int) -> dict:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("VACUUM FULL samples_rolloutsample")  # the thinning's dead rows: autovacuum's to reuse
        cur.execute(
            "SELECT count(*), coalesce(sum(pg_column_size(s.*)), 0), coalesce(sum(pg_column_size(log_ratio)), 0), "
            "count(DISTINCT (kind, step)), min(step), max(step), count(*) FILTER (WHERE kind = 'train') "
            "FROM samples_rolloutsample s WHERE run_id = %s",
            [run_id],
        )
        kept, row_bytes, lr_bytes, steps, first, last, train = cur.fetchone()
        cur.execute("SELECT pg_total_relation_size('samples_rolloutsample')")
        (total,) = cur.fetchone()
    return {
        "kept": kept,
        "train": train,
        "row_bytes": row_bytes,
        "lr_bytes": lr_bytes,
        "steps": steps,
        "first": first,
        "last": last,
        "total": total,
    }


def json_log_ratio_bytes(samples: list[dict], run_id: int) -> int:
    """The kept samples' log ratios as jsonb arrays, summed pg_column_size (compressed as stored)."""
    from django.db import connection

    from orchestrator.samples.models import RolloutSample

    kept = set(RolloutSample.objects.filter(run_id=run_id).values_list("kind", "step", "index"))
    texts = [json.dumps(s["log_ratio"]) for s in samples if (s["kind"], s["step"], s["index"]) in kept]
    with connection.cursor() as cur:
        cur.execute("CREATE TEMP TABLE lr_json (v jsonb)")
        cur.execute("INSERT INTO lr_json SELECT x::jsonb FROM unnest(%s::text[]) x", [texts])
        cur.execute("SELECT coalesce(sum(pg_column_size(v)), 0) FROM lr_json")
        (size,) = cur.fetchone()
        cur.execute("DROP TABLE lr_json")
    return size


def page_ms(client, user, run_id: int) -> float:
    client.force_login(user)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        answer = client.get(f"/runs/{run_id}/samples/")
        times.append(time.perf_counter() - t0)
        assert answer.status_code == 200
    return statistics.median(times) * 1000


def mb(n: int) -> str:
    return f"{n / 1e6:,.2f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--updates", type=int, default=20_000)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--per-step", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--keep", action="store_true", help=f"keep the {BENCH_DB} database")
    args = parser.parse_args()

    fresh_database(BENCH_DB)
    from django.conf import settings
    from django.db import connection
    from django.test import Client

    from orchestrator.samples.services import sample_bounds

    samples = spool(args.updates, args.every, args.per_step, args.max_tokens)
    n_train = sum(s["kind"] == "train" for s in samples)
    spool_bytes = sum(len(json.dumps(s)) + 1 for s in samples)
    print(f"load average at start: {os.getloadavg()}", flush=True)
    print(f"spool: {len(samples):,} samples ({n_train:,} train), {mb(spool_bytes)} of JSON lines", flush=True)
    bounds = sample_bounds()
    client = Client()
    results = {}
    try:
        warm, warm_token, _ = tokened_run("warm-up")  # imports, connections and caches, before timing
        post_all(client, warm.pk, warm_token, samples[: 2 * BATCH])
        for label, unbounded in (("bounded", False), ("baseline", True)):
            with connection.cursor() as cur:
                cur.execute("TRUNCATE samples_rolloutsample, samples_thinnedstep")
            if unbounded:
                settings.OPL_SAMPLES_MAX_PER_RUN = settings.OPL_SAMPLES_MAX_EVAL_PER_RUN = 10**9
            run, token, user = tokened_run(label)
            seconds, answers = post_all(client, run.pk, token, samples)
            measured = sizes(run.pk)
            backfill_s, backfill = post_all(client, run.pk, token, samples)
            assert sizes(run.pk)["kept"] == measured["kept"], "a backfill must not change what is kept"
            results[label] = {
                "run": run.pk,
                "seconds": seconds,
                "answers": answers,
                **measured,
                "backfill_s": backfill_s,
                "backfill": backfill,
                "page_ms": page_ms(client, user, run.pk),
                "lr_json": json_log_ratio_bytes(samples, run.pk),
            }
            print(label, {k: v for k, v in results[label].items() if k != "run"}, flush=True)
        print(f"load average at end: {os.getloadavg()}", flush=True)
    finally:
        from django.db import connections

        connections.close_all()
        if not args.keep:
            drop_database(BENCH_DB)

    ours, base = results["bounded"], results["baseline"]
    rows = [
        ("samples posted", f"{len(samples):,}", f"{len(samples):,}", "—"),
        (
            "samples kept: train + eval",
            f"{ours['train']:,} + {ours['kept'] - ours['train']:,} (bound {bounds['train']:,} + {bounds['eval']:,})",
            f"{base['train']:,} + {base['kept'] - base['train']:,} (no bound)",
            f"{ours['kept'] / base['kept']:.2f}x",
        ),
        (
            "answers: stored / duplicates / dropped",
            "{stored:,} / {duplicates:,} / {dropped:,}".format(**ours["answers"]),
            "{stored:,} / {duplicates:,} / {dropped:,}".format(**base["answers"]),
            "—",
        ),
        (
            "recorded steps kept (first .. newest)",
            f"{ours['steps']:,} ({ours['first']} .. {ours['last']})",
            f"{base['steps']:,} ({base['first']} .. {base['last']})",
            "—",
        ),
        (
            "bytes stored per run: live rows, sum(pg_column_size)",
            mb(ours["row_bytes"]),
            mb(base["row_bytes"]),
            f"{ours['row_bytes'] / base['row_bytes']:.2f}x",
        ),
        (
            "bytes stored per run: pg_total_relation_size (heap+TOAST+indexes, after VACUUM FULL)",
            mb(ours["total"]),
            mb(base["total"]),
            f"{ours['total'] / base['total']:.2f}x",
        ),
        (
            "bytes per kept sample",
            f"{ours['row_bytes'] / ours['kept']:,.0f} B",
            f"{base['row_bytes'] / base['kept']:,.0f} B",
            "—",
        ),
        (
            "ingestion rate (gzip batches of 64, whole view)",
            f"{len(samples) / ours['seconds']:,.0f} samples/s",
            f"{len(samples) / base['seconds']:,.0f} samples/s",
            f"{base['seconds'] / ours['seconds']:.2f}x",
        ),
        (
            "backfill: the whole spool posted again",
            "stored {stored:,}, {s:.1f} s".format(s=ours["backfill_s"], **ours["backfill"]),
            "stored {stored:,}, {s:.1f} s".format(s=base["backfill_s"], **base["backfill"]),
            "—",
        ),
        (
            "log ratios of the kept samples: float32 packed (ours) vs jsonb numbers",
            mb(ours["lr_bytes"]),
            mb(ours["lr_json"]),
            f"{ours['lr_bytes'] / ours['lr_json']:.2f}x",
        ),
        (
            f"run page samples card, one step ({args.per_step} samples), median of 5",
            f"{ours['page_ms']:.0f} ms",
            f"{base['page_ms']:.0f} ms",
            "—",
        ),
    ]
    print()
    print(
        f"{args.updates:,} updates, samples every {args.every}, per_step {args.per_step}, "
        f"max_tokens {args.max_tokens}; "
        f"baseline: the same samples with no bound"
    )
    print("| measure | bounded (ours) | baseline | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
