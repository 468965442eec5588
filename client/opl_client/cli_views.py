"""`opl views`: a project's saved chart views (panels, grouping, smoothing, filters, runs), as
the run, compare and experiment pages save them.

    opl views list PROJECT [--json]
    opl views show VIEW                       (the view as JSON, its state included)
    opl views create PROJECT NAME [--state FILE|-] [--page compare|run:ID|experiment:ID] [--default]
    opl views update VIEW [--name N] [--state FILE|-] [--default | --no-default]
    opl views delete VIEW
    opl views url VIEW                        (the link that opens the view's page with it applied)
"""

from __future__ import annotations

import argparse
import json
import sys

from opl_client.client import Client


def _state(path: str | None) -> dict | None:
    if path is None:
        return None
    text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    try:
        state = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--state {path}: not JSON: {exc}") from None
    if not isinstance(state, dict):
        raise ValueError(f"--state {path}: must be a JSON object (panels, group, smooth, x, filters, runs)")
    return state


def _dump(value, out) -> None:
    json.dump(value, out, indent=1)
    out.write("\n")


def cmd_list(lab: Client, args, out) -> int:
    views = lab.views(args.project)
    if args.json:
        _dump(views, out)
        return 0
    rows = [["id", "name", "panels", "page", "default", "owner"]] + [
        [
            v["id"],
            v["name"],
            v["panels"],
            v["page"] or "-",
            "yes" if v["default"] else "",
            v["owner"],
        ]
        for v in views
    ]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        out.write("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
    return 0


def cmd_show(lab: Client, args, out) -> int:
    _dump(lab.view(args.view), out)
    return 0


def cmd_create(lab: Client, args, out) -> int:
    view = lab.view_create(args.project, args.name, state=_state(args.state), page=args.page, default=args.default)
    out.write(f"view {view['id']} {view['name']!r} saved in {view['project']}: {lab.view_url(view['id'])}\n")
    return 0


def cmd_update(lab: Client, args, out) -> int:
    view = lab.view_update(args.view, name=args.name, state=_state(args.state), default=args.default)
    out.write(f"view {view['id']} {view['name']!r} updated\n")
    return 0


def cmd_delete(lab: Client, args, out) -> int:
    lab.view_delete(args.view)
    out.write(f"view {args.view} deleted\n")
    return 0


def cmd_url(lab: Client, args, out) -> int:
    lab.view(args.view)  # a view you cannot see is an error, not a link
    out.write(lab.view_url(args.view) + "\n")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    views = sub.add_parser("views", help="a project's saved chart views").add_subparsers(dest="views", required=True)
    ls = views.add_parser("list", help="the project's views")
    ls.add_argument("project")
    ls.add_argument("--json", action="store_true", help="the API's view dicts, states included")
    ls.set_defaults(func=cmd_list)
    show = views.add_parser("show", help="one view as JSON")
    show.add_argument("view", type=int)
    show.set_defaults(func=cmd_show)
    create = views.add_parser("create", help="save a view")
    create.add_argument("project")
    create.add_argument("name")
    create.add_argument("--state", metavar="FILE", help="the view's state as JSON (- reads stdin); default: empty")
    create.add_argument("--page", default="", help="the page its link opens: compare, run:ID or experiment:ID")
    create.add_argument("--default", action="store_true", help="the project's default view")
    create.set_defaults(func=cmd_create)
    update = views.add_parser("update", help="rename a view, replace its state, or make it the default")
    update.add_argument("view", type=int)
    update.add_argument("--name")
    update.add_argument("--state", metavar="FILE", help="the new state as JSON (- reads stdin)")
    update.add_argument("--default", action=argparse.BooleanOptionalAction, default=None)
    update.set_defaults(func=cmd_update)
    delete = views.add_parser("delete", help="delete a view")
    delete.add_argument("view", type=int)
    delete.set_defaults(func=cmd_delete)
    url = views.add_parser("url", help="the link that opens the view")
    url.add_argument("view", type=int)
    url.set_defaults(func=cmd_url)
