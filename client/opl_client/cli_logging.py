"""The `opl` commands of the logging SDK: `opl sync DIR` (upload a spool logged offline) and
`opl import FILE` (a TensorBoard, JSON-lines or CSV history as a run)."""

from __future__ import annotations

import argparse
import sys

from opl_client.client import Client, OplError


def cmd_sync(lab: Client, args, out) -> int:
    from opl_client.sync import run_dirs, sync_dir

    left = 0
    for run_dir in run_dirs(args.dir):
        synced = sync_dir(run_dir, lab, timeout_s=args.timeout)
        state = "finished" if synced.finished else ("complete" if synced.left_bytes == 0 else "incomplete")
        out.write(f"{run_dir}: run {synced.run_id} {state} ({synced.left_bytes} bytes left) {synced.url}\n")
        left += synced.left_bytes + report_refused(synced, out)
    return 0 if left == 0 else 1


def cmd_import(lab: Client, args, out) -> int:
    from opl_client.importers.importer import import_history

    synced = import_history(
        args.path,
        lab,
        format=args.format,
        project=args.project,
        name=args.name,
        group=args.group,
        config_file=args.config,
        tags=args.tag,
    )
    out.write(f"{args.path}: run {synced.run_id} ({synced.left_bytes} bytes left) {synced.url}\n")
    lost = report_refused(synced, out)
    return 0 if synced.left_bytes == 0 and lost == 0 else 1


SHOWN_REFUSALS = 50


def report_refused(synced, out) -> int:
    """Name each point the dashboard refused (key, step, reason; the first SHOWN_REFUSALS) and
    return how many there were."""
    if not synced.lost:
        return 0
    out.write(f"{synced.lost} points were refused by the dashboard and are not stored:\n")
    for key, step, reason in synced.refused[:SHOWN_REFUSALS]:
        out.write(f"  {key!r} at step {step}: {reason}\n")
    if synced.lost > SHOWN_REFUSALS:
        out.write(f"  ... and {synced.lost - SHOWN_REFUSALS} more\n")
    return synced.lost


def cmd_logging_token(lab: Client, args, out) -> int:
    body = {"name": args.name}
    if args.days is not None:  # otherwise the server's default lifetime, which is within its own maximum
        body["days"] = args.days
    try:
        answer = lab.request("POST", "/api/v1/sdk/tokens", body=body)
    except OplError as exc:
        refused = next((e.get("message") for e in exc.errors if e.get("field") == "days"), None)
        if exc.status != 400 or refused is None:
            raise
        sys.stderr.write(
            f"opl: --days {args.days} refused by the dashboard: {refused}; "
            "leave --days out for the dashboard's default lifetime\n"
        )
        return 1
    out.write(f"{answer['token']}\n")
    sys.stderr.write(
        f"opl: logging token {answer['name']!r}, valid until {answer['expires_at']}: it opens runs and writes only "
        "those; shown once\n"
    )
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("sync", help="upload runs logged with mode='offline' (a spool folder or a folder of them)")
    s.add_argument("dir", help="a run's spool folder, or a folder of them (the SDK's default: ~/.local/share/opl/runs)")
    s.add_argument("--timeout", type=float, default=600, help="seconds to keep trying per run (default 600)")
    s.set_defaults(func=cmd_sync)
    i = sub.add_parser(
        "import",
        help="a TensorBoard folder or event file, a JSON-lines history (verl's file backend, prime-rl's "
        "metrics.jsonl) or a CSV as a run; importing it again finds the same run",
    )
    i.add_argument("path")
    i.add_argument("--format", choices=["tensorboard", "jsonl", "csv"], help="default: from the name")
    i.add_argument("--project")
    i.add_argument("--name", help="default: the file's or folder's name")
    i.add_argument("--group", help="the experiment the run joins (runs judged together)")
    i.add_argument("--config", help="a YAML or JSON file with the run's config")
    i.add_argument("--tag", action="append", help="repeatable")
    i.set_defaults(func=cmd_import)
    t = sub.add_parser("logging-token", help="make a logging token for OPL_TOKEN on training nodes (printed once)")
    t.add_argument("--name", default="default")
    t.add_argument(
        "--days",
        type=int,
        help="lifetime in days, at most the dashboard's maximum (default: the dashboard's default lifetime)",
    )
    t.set_defaults(func=cmd_logging_token)
