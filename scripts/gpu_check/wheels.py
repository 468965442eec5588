"""Wheels and pins for the GPU check: what a wheel file says about itself (read without installing
it), the GPU machine's package list, and the pins the trainer and its tests need there. Stdlib and
`packaging` only, so the GPU machine's python3 runs it as well as this machine's."""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
# torch: the machine's own CUDA build is used, never one of ours. accelerate and gguf: only the
# smollm2-135m preset's GGUF load needs them, and a study plan that uses it asks for them.
NEVER_CARRIED = {"torch", "accelerate", "gguf"}
TEST_RUNNER = {"pytest", "pytest-timeout"}
# This repository's own packages, by name and folder: the bundle carries them as wheels built from the
# checkout, and the install there always takes the bundle's (an older one on the machine is not ours).
OURS = {"opl-client": "client"}
MIB = 1 << 20


def canonical(name: str) -> str:
    """PEP 503 name: PyYAML, pyyaml and py_yaml are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Wheel:
    path: Path
    name: str  # canonical
    version: str
    requires: tuple[Requirement, ...]  # Requires-Dist, as written (markers not yet evaluated)

    def needs(self, environment: dict[str, str]) -> list[Requirement]:
        """The requirements that apply on the interpreter described by `environment` (no extras)."""
        out = []
        for req in self.requires:
            if req.marker is None or req.marker.evaluate({**environment, "extra": ""}):
                out.append(req)
        return out


def read_wheel(path: Path) -> Wheel:
    with zipfile.ZipFile(path) as zf:
        meta_name = next(n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(meta_name).decode("utf-8"))
    return Wheel(
        path=path,
        name=canonical(meta["Name"]),
        version=meta["Version"],
        requires=tuple(Requirement(r) for r in meta.get_all("Requires-Dist") or ()),
    )


def read_machine_packages(path: Path) -> dict[str, str | None]:
    """h200-packages.txt: {canonical name: version or None where the list gives none}."""
    out: dict[str, str | None] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, *version = line.split()
            out[canonical(name)] = version[0] if version else None
    return out


def pins(path: Path) -> list[str]:
    """The `name==version` lines of a requirements file (comments, -r lines and blanks skipped)."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-") and "==" in line:
            out.append(line)
    return out


def pin_name(pin: str) -> str:
    return canonical(pin.split("==", 1)[0].split("[", 1)[0])


def needed_pins() -> list[str]:
    trainer = [p for p in pins(REPO / "requirements-trainer.txt") if pin_name(p) not in NEVER_CARRIED]
    runner = [p for p in pins(REPO / "requirements-test.txt") if pin_name(p) in TEST_RUNNER]
    return trainer + runner
