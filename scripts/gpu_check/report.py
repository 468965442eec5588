"""The GPU check's last step: every phase's record and figures in OUT/gpu-figures.json, and one
closing line that sums them up (stdlib only).

    python3 scripts/gpu_check/report.py WORKDIR OUT --budget 450 --started EPOCH

WORKDIR holds what the phases wrote: phases.tsv (name, exit code, seconds, timeout, note, start),
env.json (preflight), install.json, bench.json, study.json; OUT holds junit.xml. Exit 0 when every
phase that ran passed, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

PHASES = ("preflight", "install", "tests", "benchmark", "study")
OUT_LIMITS = {"files": 8, "bytes": 16 << 20}  # what the device tool brings back from $OUT


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def read_phases(path: Path) -> dict[str, dict]:
    phases = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        name, rc, seconds, timeout, note, start = (line.split("\t") + [""] * 6)[:6]
        phases[name] = {
            "rc": int(rc) if rc.lstrip("-").isdigit() else rc,
            "start_s": int(start or 0),
            "seconds": int(seconds or 0),
            "timeout": int(timeout or 0),
            "note": note,
        }
        if phases[name]["rc"] in (124, 137):
            phases[name]["note"] = (note + "; " if note else "") + f"timed out after {timeout} s"
    return phases


def read_junit(path: Path) -> dict | None:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for suite in [root] if root.tag == "testsuite" else root.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    failed = [
        f"{case.get('classname')}::{case.get('name')}"
        for case in root.iter("testcase")
        if case.find("failure") is not None or case.find("error") is not None
    ]
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {
        "passed": passed,
        "failed": counts["failures"] + counts["errors"],
        "skipped": counts["skipped"],
        "failed_tests": failed,
    }


def out_files(out: Path) -> tuple[list[dict], list[str]]:
    files = sorted(p for p in out.rglob("*") if p.is_file())
    rows = [{"file": str(p.relative_to(out)), "bytes": p.stat().st_size} for p in files]
    problems = []
    if len(files) + 1 > OUT_LIMITS["files"]:  # + gpu-figures.json, written after this
        problems.append(f"{len(files) + 1} files under OUT: only {OUT_LIMITS['files']} come back")
    problems += [
        f"{r['file']} is {r['bytes'] >> 20} MiB: over 16 MiB, it will not come back"
        for r in rows
        if r["bytes"] > OUT_LIMITS["bytes"]
    ]
    return rows, problems


def phase_word(phases: dict, name: str) -> str:
    p = phases.get(name)
    if p is None:
        return "not run"
    return str(p["rc"])


def summary_line(figures: dict, elapsed: int, budget: int) -> str:
    phases, env, bench, tests, study = (
        figures.get(k) or {} for k in ("phases", "environment", "benchmark", "tests", "study")
    )
    parts = [" ".join(f"{name}={phase_word(phases, name)}" for name in PHASES)]
    where = env.get("gpu") or ("CPU (dry run)" if env.get("device") == "cpu" else "no GPU")
    parts.append(
        f"{where}, torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, "
        f"python {env.get('python', '?')}"
    )
    if tests:
        parts.append(f"tests {tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped")
    if bench:
        tps = bench["train_tokens_per_s"]
        parts.append(
            f"train tok/s grpo {tps['grpo']:.0f}, m2po {tps['m2po']:.0f}, "
            f"m2po/grpo time {bench['m2po_over_grpo_time']:.4f}"
        )
        parts.append(f"generate {bench['generate']['tokens_per_s']:.0f} tok/s")
        peak = bench["peak_gib"]
        if peak.get("train") is not None:
            parts.append(f"peak GiB train {peak['train']:.2f}, generate {peak['generate']:.2f}")
    if study.get("planned") is not None:
        parts.append(f"study {study['done']}/{study['planned']} runs")
    parts.append(f"{elapsed} s of {budget}")
    return "gpu-check summary: " + " | ".join(parts)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("work", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--budget", type=int, required=True)
    p.add_argument("--started", type=int, required=True)
    p.add_argument("--dry", default="")
    args = p.parse_args()
    phases = read_phases(args.work / "phases.tsv")
    study = read_json(args.work / "study.json")
    if study and study.get("skipped") and "study" in phases:
        phases["study"].update(rc="skipped", note=study["skipped"])
    files, out_problems = out_files(args.out)
    figures = {
        "dry_run": args.dry or None,
        "elapsed_s": int(time.time()) - args.started,
        "budget_s": args.budget,
        "phases": phases,
        "environment": read_json(args.work / "env.json"),
        "install": read_json(args.work / "install.json"),
        "tests": read_junit(args.out / "junit.xml"),
        "benchmark": read_json(args.work / "bench.json"),
        "study": study,
        "out_files": files,
        "out_problems": out_problems,
    }
    (args.out / "gpu-figures.json").write_text(json.dumps(figures, indent=1))
    print(
        "gpu-check: phases: "
        + "; ".join(
            f"{n} rc={p['rc']} {p['seconds']}s/{p['timeout']}s" + (f" ({p['note']})" if p["note"] else "")
            for n, p in phases.items()
        )
    )
    print(
        "gpu-check: under OUT: "
        + ", ".join(f"{r['file']} ({r['bytes'] / 1024:.0f} KiB)" for r in files)
        + ", gpu-figures.json"
    )
    for problem in out_problems:
        print(f"gpu-check: PROBLEM {problem}")
    if figures["tests"] and figures["tests"]["failed_tests"]:
        print("gpu-check: failed tests: " + ", ".join(figures["tests"]["failed_tests"]))
    print(summary_line(figures, figures["elapsed_s"], args.budget))
    failed = [n for n, p in phases.items() if p["rc"] not in (0, "skipped", "off")]
    return 1 if failed or out_problems else 0


if __name__ == "__main__":
    sys.exit(main())
