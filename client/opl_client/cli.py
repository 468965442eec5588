"""`opl`: the OffPolicy Lab API from a shell.

    opl submit sweep.yaml [--project P] [--preview] [--wait]
    opl runs [-q "staleness.k >= 4 and state = running"] [--experiment N] [--json]
    opl metrics RUN KEY [KEY ...] [--csv] [--max-points N]
    opl samples RUN [--step N] [--kind train|eval] [--marks] [--as VARIANT] [--json]
    opl cancel RUN [RUN ...]
    opl sync DIR                                  (a run logged with `import opl`, mode="offline")
    opl import PATH [--format tensorboard|jsonl|csv] [--project P] [--config FILE]
    opl logging-token [--name N] [--days D]       (for OPL_TOKEN on training nodes: opens and writes its own runs)
    opl views list|show|create|update|delete|url ...   (saved chart views: opl views -h)
    opl launchers list | run NAME [-p PARAM=VALUE ...] [--wait]   (commands the lab allows on its queue)

The dashboard's URL and a personal API token come from OPL_URL and OPL_TOKEN, or from
~/.config/opl/config ([default] url=..., token=...). Exit status: 0 done, 1 the server refused
(its message on stderr), 2 bad usage.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys

from opl_client import cli_launchers, cli_logging, cli_views, samples_text
from opl_client.client import Client, OplError


def _table(rows: list[list], out) -> None:
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")


def cmd_submit(lab: Client, args, out) -> int:
    overrides = {"project": args.project, "seeds": args.seeds, "priority": args.priority}
    if args.preview:
        answer = lab.preview(args.file, **overrides)
        _table(
            [["name", "seed", "values"]] + [[r["name"], r["seed"], json.dumps(r["values"])] for r in answer["runs"]],
            out,
        )
        out.write(f"{answer['count']} run(s) would be queued\n")
        return 0
    answer = lab.submit(args.file, **overrides)
    out.write(f"experiment {answer['id']}: {len(answer['runs'])} run(s) queued: {' '.join(map(str, answer['runs']))}\n")
    if args.wait:
        runs = lab.wait(answer["runs"], timeout=args.timeout)
        _table([["id", "name", "state"]] + [[r["id"], r["name"], r["state"]] for r in runs], out)
        return 0 if all(r["state"] == "succeeded" for r in runs) else 1
    return 0


def cmd_runs(lab: Client, args, out) -> int:
    runs = lab.runs(args.query or "", state=args.state or "", experiment=args.experiment)
    if args.json:
        json.dump(runs, out, indent=1)
        out.write("\n")
        return 0
    rows = [["id", "name", "state", "updates", "experiment", "owner"]]
    for r in runs:
        total = f"/{r['total_steps']}" if r.get("total_steps") else ""
        rows.append([r["id"], r["name"], r["state"], f"{r['step']}{total}", r["experiment"], r["owner"]])
    _table(rows, out)
    return 0


def cmd_metrics(lab: Client, args, out) -> int:
    try:
        series = lab.metrics(args.run, args.keys, start=args.start, end=args.end, max_points=args.max_points)
    except OplError as exc:
        if exc.status != 404:
            raise
        # The 404's message already names the known keys; its field error repeats that list.
        sys.stderr.write(f"opl: HTTP 404: {exc.message}\n")
        return 1
    if args.csv:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["run", "key", "step", "value"])
        for key, points in series.items():
            writer.writerows([args.run, key, step, value] for step, value in points)
        return 0
    for key, points in series.items():
        last = points[-1] if points else None
        out.write(
            f"{key}: {len(points)} point(s)" + (f", last {last[1]:.4g} at update {last[0]}" if last else "") + "\n"
        )
    return 0


def _colour(choice: str, out) -> bool:
    if choice != "auto":
        return choice == "always"
    return (
        bool(getattr(out, "isatty", lambda: False)())
        and not os.environ.get("NO_COLOR")
        and os.environ.get("TERM") != "dumb"
    )


def cmd_samples(lab: Client, args, out) -> int:
    answer = lab.samples(args.run, args.step, kind=args.kind, verdict=args.verdict, sort=args.sort)
    if args.json:
        if args.index:
            answer["samples"] = [s for s in answer["samples"] if s["index"] in args.index]
        json.dump(answer if not args.steps else answer["steps"], out, indent=1)
        out.write("\n")
        return 0
    if args.steps:
        rows = [["step", "samples"] + (["masked", "clipped"] if answer["kind"] == "train" else [])]
        rows += [
            [s["step"], s["n"]] + ([s.get("masked") or 0, s.get("clipped") or 0] if answer["kind"] == "train" else [])
            for s in answer["steps"]
        ]
        if len(rows) == 1:
            out.write(f"run {args.run} has no {answer['kind']} samples recorded yet\n")
            return 0
        _table(rows, out)
        return 0
    if args.variant and args.variant not in (recorded := samples_text.recorded_variants(answer)):
        out.write(
            f"step {answer['step']} recorded no marks of {args.variant}; it has {', '.join(recorded) or 'none'}\n"
        )
        return 2
    out.write(
        samples_text.render_step(
            answer,
            marks=args.marks,
            colour=_colour(args.color, out),
            full=args.full,
            indices=args.index,
            variant=args.variant,
        )
    )
    return 0


def cmd_cancel(lab: Client, args, out) -> int:
    for run_id in args.runs:
        run = lab.cancel(run_id)
        out.write(f"run {run['id']}: {run['state']}{' (cancelling)' if run.get('cancel_requested') else ''}\n")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opl", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="dashboard URL (default: OPL_URL or the config file)")
    p.add_argument("--token", help="personal API token (default: OPL_TOKEN or the config file)")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="queue an experiment from a YAML file (experiment file or run config)")
    s.add_argument("file")
    s.add_argument("--project")
    s.add_argument("--seeds", type=int)
    s.add_argument("--priority", type=int)
    s.add_argument("--preview", action="store_true", help="list the runs it would queue, queue nothing")
    s.add_argument("--wait", action="store_true", help="wait until every run ended; exit 1 unless all succeeded")
    s.add_argument("--timeout", type=float, default=3600)
    s.set_defaults(func=cmd_submit)
    r = sub.add_parser("runs", help="list runs, filtered with the dashboard's query language")
    r.add_argument("-q", "--query", help='e.g. "algorithm.objective = m2po and staleness.k >= 4"')
    r.add_argument("--state")
    r.add_argument("--experiment", type=int)
    r.add_argument("--json", action="store_true", help="the API's run dicts")
    r.set_defaults(func=cmd_runs)
    m = sub.add_parser("metrics", help="a run's metric series (step = optimizer update)")
    m.add_argument("run", type=int)
    m.add_argument("keys", nargs="+", metavar="KEY")
    m.add_argument("--csv", action="store_true", help="run,key,step,value rows")
    m.add_argument("--start", type=int)
    m.add_argument("--end", type=int)
    m.add_argument("--max-points", type=int, dest="max_points")
    m.set_defaults(func=cmd_metrics)
    sm = sub.add_parser(
        "samples",
        help="one recorded step's rollout samples: prompt, response, reward, verdict, "
        "staleness, masked and clipped tokens (the newest step unless --step)",
    )
    sm.add_argument("run", type=int)
    sm.add_argument("--step", type=int, help="a recorded step (default: the newest); --steps lists them")
    sm.add_argument(
        "--kind", choices=["train", "eval"], help="default: train (eval when the run has only eval samples)"
    )
    sm.add_argument("--verdict", choices=["all", "right", "wrong"], default="all")
    sm.add_argument(
        "--sort",
        choices=["index", "ratio", "masked", "clipped", "reward"],
        default="index",
        help="ratio: largest |log ratio| first; reward: lowest first",
    )
    sm.add_argument("--index", type=int, action="append", metavar="I", help="only sample I (repeatable)")
    sm.add_argument(
        "--marks",
        action="store_true",
        help="mark tokens in the text: [[masked]] __clipped__ {{reweighted}} (no colour needed)",
    )
    sm.add_argument(
        "--as",
        dest="variant",
        metavar="VARIANT",
        help="the marks another correction would have made on the same tokens (e.g. grpo, m2po+dual_clip), "
        "as the trainer recorded them",
    )
    sm.add_argument(
        "--color",
        "--colour",
        choices=["auto", "always", "never"],
        default="auto",
        help="ANSI colour for verdicts and marked tokens (auto: on a terminal, unless NO_COLOR)",
    )
    sm.add_argument("--full", action="store_true", help="whole prompts (a long one shows its start and end)")
    sm.add_argument("--steps", action="store_true", help="list the recorded steps with their masked/clipped counts")
    sm.add_argument("--json", action="store_true", help="the API's answer: every field, log ratios per token")
    sm.set_defaults(func=cmd_samples)
    c = sub.add_parser("cancel", help="cancel runs")
    c.add_argument("runs", type=int, nargs="+", metavar="RUN")
    c.set_defaults(func=cmd_cancel)
    cli_logging.add_commands(sub)
    cli_views.add_commands(sub)
    cli_launchers.add_commands(sub)
    return p


def main(argv: list[str] | None = None, out=None) -> int:
    args = parser().parse_args(argv)
    out = out or sys.stdout
    try:
        return args.func(Client(args.url, args.token), args, out)
    except OplError as exc:
        sys.stderr.write(f"opl: {exc}\n")
        return 1
    except (OSError, ValueError, TimeoutError) as exc:
        sys.stderr.write(f"opl: {exc}\n")
        return 1
