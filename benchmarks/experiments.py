"""Time the experiments app at lab scale: queuing a 1,000-run sweep, rendering the runs table over
10,000 runs with a filter, and one dispatcher decision over 10,000 queued runs.

    .venv/bin/python benchmarks/experiments.py [--repeats 5]

It creates a throwaway test database (test_<name> of DATABASE_URL; default PostgreSQL on
127.0.0.1, database opl_bench) and drops it at the end. Each line gives the median of the
repeats, a baseline measured in the same run on the same data, and their ratio:
  - sweep: the naive way validates every run (seeds included) and INSERTs runs one by one;
  - runs table: the naive way loads every visible run, filters the config in Python and renders
    every matching row (no query pushdown, no paging);
  - dispatch: the plain FIFO pick (priority, then age, no limits or fairness) that the fair policy
    replaced, to show what fairness costs.
Targets: sweep under 2 s, runs table under 300 ms (server time: the whole Django request).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orchestrator.settings")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opl_bench")
os.environ.setdefault("SECRET_KEY", "benchmark-only")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1")

import django

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.template.loader import render_to_string  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from orchestrator.experiments.access import visible_runs  # noqa: E402
from orchestrator.experiments.limits import run_gpus  # noqa: E402
from orchestrator.experiments.models import Experiment, Project, Run  # noqa: E402
from orchestrator.experiments.queue import runs_to_dispatch  # noqa: E402
from orchestrator.experiments.runconfig import set_dotted, validate_run_config  # noqa: E402
from orchestrator.experiments.services import experiment_create, project_for  # noqa: E402
from orchestrator.experiments.sweeps import parse_sweep, sweep_points  # noqa: E402

CONFIG = {"model": {"name": "tiny"}, "train": {"device": "cpu", "steps": 50}}
SWEEP_1000 = {"staleness.k": list(range(10)), "algorithm.lr": {"log": [1e-6, 1e-3, 10]}}
QUERY = "algorithm.objective = m2po and staleness.k >= 64"


def median_ms(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


class Rollback(Exception):
    pass


def rolled_back(fn):
    """Run fn in a transaction that is rolled back, so each repeat starts from the same data."""

    def wrapper():
        try:
            with transaction.atomic():
                fn()
                raise Rollback
        except Rollback:
            pass

    return wrapper


def naive_sweep(owner: User) -> None:
    experiment = Experiment.objects.create(
        name="naive", project=project_for("bench", owner), owner=owner, base_config=validate_run_config(CONFIG)
    )
    for point in sweep_points(parse_sweep(SWEEP_1000, None, 10)):
        cfg = CONFIG
        for path, value in point.values.items():
            cfg = set_dotted(cfg, path, value)
        cfg = validate_run_config(set_dotted(cfg, "train.seed", 1 + point.seed_offset))
        Run.objects.create(
            experiment=experiment,
            owner=owner,
            name="x",
            config=cfg,
            sweep_values=point.values,
            seed=cfg["train"]["seed"],
            gpus=run_gpus(cfg),
            queued_at=timezone.now(),
        )


def fill_10k(alice: User, bob: User) -> None:
    """10,000 queued runs in two projects from two users: 5 sweeps of 2,000 each."""
    for i, owner in enumerate([alice, bob, alice, bob, alice]):
        if (lab := Project.objects.filter(name="lab").first()) is not None:
            lab.members.add(owner)  # projects are private: bob joins alice's "lab" before adding to it
        experiment_create(
            owner=owner,
            name=f"big{i}",
            project="lab",
            config=CONFIG,
            seeds=10,
            sweep={
                "staleness.k": [0, 16, 64, 256, 512],
                "algorithm.objective": ["grpo", "no_clip", "m2po", "gspo"],
                "algorithm.tau_m2": [0.02, 0.04, 0.06, 0.08, 0.1, 0.12, 0.14, 0.16, 0.18, 0.2],
            },
        )


def naive_table(user: User) -> str:
    rows = [
        run
        for run in visible_runs(user).order_by("-id")
        if run.config["algorithm"]["objective"] == "m2po" and run.config["staleness"]["k"] >= 64
    ]
    for run in rows:
        run.latest = [None, None, None]
    return "".join(render_to_string("experiments/_run_row.html", {"run": run}) for run in rows)


def fifo_pick() -> list[int]:
    return list(
        Run.objects.filter(state=Run.State.QUEUED, experiment__state=Experiment.State.ACTIVE)
        .order_by("-priority", "id")
        .values_list("id", flat=True)[:4]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    old_name = connection.settings_dict["NAME"]
    connection.creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        alice = User.objects.create_user("alice")
        bob = User.objects.create_user("bob")
        rows = []

        ours = median_ms(
            rolled_back(
                lambda: experiment_create(
                    owner=alice, name="sweep", project="bench", config=CONFIG, sweep=SWEEP_1000, seeds=10
                )
            ),
            args.repeats,
        )
        naive = median_ms(rolled_back(lambda: naive_sweep(alice)), max(1, args.repeats // 2))
        rows.append(("expand + queue a 1,000-run sweep", ours, naive, "naive: validate + INSERT per run", 2000))

        fill_10k(alice, bob)
        assert Run.objects.count() == 10_000
        client = Client()
        client.force_login(alice)
        url_params = {"q": QUERY, "sort": "-id"}
        response = client.get("/", url_params, HTTP_HX_REQUEST="true")
        assert response.status_code == 200 and b"runs" in response.content, response.content[:500]
        matches = Run.objects.filter(config__algorithm__objective="m2po", config__staleness__k__gte=64).count()
        ours = median_ms(lambda: client.get("/", url_params, HTTP_HX_REQUEST="true"), args.repeats * 2)
        full = median_ms(lambda: client.get("/", url_params), args.repeats * 2)
        naive = median_ms(lambda: naive_table(alice), max(1, args.repeats // 2))
        rows.append(
            (
                f"runs table, 10k runs, filter ({matches} match, htmx fragment)",
                ours,
                naive,
                "naive: load all, filter in Python, no paging",
                300,
            )
        )
        rows.append(("runs table, 10k runs, filter (full page)", full, naive, "same naive baseline", 300))

        ours = median_ms(runs_to_dispatch, args.repeats * 2)
        fifo = median_ms(fifo_pick, args.repeats * 2)
        rows.append(
            ("dispatcher decision over 10k queued runs", ours, fifo, "plain FIFO pick (no limits, no fairness)", None)
        )

        print(f"\ndatabase: {connection.vendor}, runs: {Run.objects.count():,}, repeats: {args.repeats} (median)\n")
        print(
            f"| {'benchmark':<58} | {'ours ms':>8} | {'baseline ms':>11} | {'baseline/ours':>13} "
            f"| {'target':>8} | met |"
        )
        print(f"|{'-' * 60}|{'-' * 10}|{'-' * 13}|{'-' * 15}|{'-' * 10}|-----|")
        for name, ours_ms, base_ms, _, target in rows:
            met = "-" if target is None else ("yes" if ours_ms < target else "NO")
            target_text = "-" if target is None else f"< {target}"
            print(
                f"| {name:<58} | {ours_ms:>8.1f} | {base_ms:>11.1f} | {base_ms / ours_ms:>12.1f}x "
                f"| {target_text:>8} | {met:>3} |"
            )
        print("\nbaselines:")
        for name, _, _, why, _ in rows:
            print(f"  {name}: {why}")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
