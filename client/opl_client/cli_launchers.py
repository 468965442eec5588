"""`opl launchers`: the commands the lab's staff allow on its queue, and runs of them.

    opl launchers list [--json]
    opl launchers run NAME [-p PARAM=VALUE ...] [--name N] [--project P] [--priority N] [--tag T ...]
                           [--notes TEXT] [--wait [--timeout S]]

Values are sent as typed; the server checks them against the launcher as the form does, and a
bad one is an error naming params.<name>.
"""

from __future__ import annotations

import argparse
import json

from opl_client.client import Client


def _params(pairs: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"-p {pair!r}: expected PARAM=VALUE")
        if name in params:
            raise ValueError(f"-p {name}: given twice")
        params[name] = value
    return params


def _number(value):
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _parameter_line(param: dict) -> str:
    bounds = [f"{k} {_number(param[k])}" for k in ("min", "max") if k in param]
    if "choices" in param:
        bounds.append("one of " + ", ".join(map(str, param["choices"])))
    default = f"default {param['default']!r}" if "default" in param else "required"
    extra = "; ".join([param.get("type", "str"), default, *bounds])
    return f"    {param['name']} ({extra})" + (f": {param['help']}" if param.get("help") else "")


def cmd_list(lab: Client, args, out) -> int:
    launchers = lab.launchers()
    if args.json:
        json.dump(launchers, out, indent=1)
        out.write("\n")
        return 0
    if not launchers:
        out.write("no launchers are enabled (staff define them: docs/LAUNCHERS.md)\n")
    for launcher in launchers:
        res = launcher["resources"]
        out.write(
            f"{launcher['name']}: {launcher['description'] or '-'}\n"
            f"  resources: {res.get('nodes', 1)} node(s), {res.get('gpus', 0)} GPU(s) and {res.get('cpus', 1)} "
            f"CPU(s) per node, {res.get('mem_gb', '?')} GB, {res.get('time_limit_min', '?')} min\n"
        )
        for param in launcher["parameters"]:
            out.write(_parameter_line(param) + "\n")
    return 0


def cmd_run(lab: Client, args, out) -> int:
    created = lab.launcher_run(
        args.launcher,
        _params(args.param),
        name=args.name,
        project=args.project,
        priority=args.priority,
        tags=args.tag,
        notes=args.notes,
    )
    out.write(f"run {created['id']} of launcher {created['launcher']} queued (experiment {created['experiment']})\n")
    if not args.wait:
        return 0
    (run,) = lab.wait([created["id"]], timeout=args.timeout)
    out.write(f"run {run['id']}: {run['state']}\n")
    return 0 if run["state"] == "succeeded" else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    launchers = sub.add_parser("launchers", help="commands the lab allows on its queue, and runs of them")
    verbs = launchers.add_subparsers(dest="launchers", required=True)
    ls = verbs.add_parser("list", help="the enabled launchers with their parameters and resources")
    ls.add_argument("--json", action="store_true", help="the API's launcher dicts")
    ls.set_defaults(func=cmd_list)
    run = verbs.add_parser("run", help="queue a run of a launcher")
    run.add_argument("launcher", metavar="NAME")
    run.add_argument(
        "-p", "--param", action="append", default=[], metavar="PARAM=VALUE", help="a parameter (repeatable)"
    )
    run.add_argument("--name", default="", help="the run's name (default: the launcher's)")
    run.add_argument("--project")
    run.add_argument("--priority", type=int, default=0)
    run.add_argument("--tag", action="append", default=[])
    run.add_argument("--notes", default="")
    run.add_argument("--wait", action="store_true", help="wait until the run ended; exit 1 unless it succeeded")
    run.add_argument("--timeout", type=float, default=3600)
    run.set_defaults(func=cmd_run)
