"""Reading the end of a job's stdout/stderr from the shared run directory."""

from __future__ import annotations

from pathlib import Path


def tail(path: Path, lines: int = 40, max_bytes: int = 64 * 1024) -> str:
    """The last `lines` lines of a text file (at most `max_bytes` read), "" if it is missing."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except (FileNotFoundError, PermissionError, IsADirectoryError):
        return ""
    text = data.decode("utf-8", errors="replace")
    if size > max_bytes:
        text = text.split("\n", 1)[-1]  # drop the partial first line
    return "\n".join(text.splitlines()[-lines:])
