"""Where the client finds the dashboard and its token, as the W&B and MLflow clients do: the
environment first (OPL_URL, OPL_TOKEN), then a config file (OPL_CONFIG, default
~/.config/opl/config), INI with a [default] section:

    [default]
    url = https://lab.example.org
    token = opl_...
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str | None


def config_path() -> Path:
    return Path(os.environ.get("OPL_CONFIG") or Path.home() / ".config" / "opl" / "config")


def load_settings(url: str | None = None, token: str | None = None, profile: str = "default") -> Settings:
    """Arguments win over the environment, which wins over the config file."""
    file: dict[str, str] = {}
    path = config_path()
    if path.is_file():
        parser = configparser.ConfigParser()
        parser.read(path)
        if parser.has_section(profile):
            file = dict(parser.items(profile))
    url = url or os.environ.get("OPL_URL") or file.get("url") or DEFAULT_URL
    token = token or os.environ.get("OPL_TOKEN") or file.get("token")
    return Settings(url=url.rstrip("/"), token=token or None)
