"""Slurm settings: read from Django settings when configured, else from the environment.

Names (all optional except a URL, a user and a token or key file):
  SLURM_REST_URL          e.g. http://slurm-head:6820
  SLURM_REST_USER         user name sent to slurmrestd; jobs run as this user
  SLURM_JWT               a token (e.g. from `scontrol token lifespan=...`), or
  SLURM_JWT_KEY_FILE      the cluster's HS256 key: tokens are minted and renewed here
  SLURM_REST_API_VERSION  "auto" (newest offered) or v0.0.38 / v0.0.40 / v0.0.41 / v0.0.42
  SLURM_REST_TIMEOUT      seconds per request (10)
  SLURM_ACCOUNTING        1/true when the cluster runs slurmdbd: final states of jobs that
                          slurmctld has forgotten (after MinJobAge) are read from it
  SLURM_RUN_DIR_MODE      octal mode for run and log directories, e.g. 1777, when the
                          job user differs from the dashboard's user ("" = leave as is)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any


def setting(name: str, default: Any = "") -> Any:
    try:
        from django.conf import settings

        if settings.configured and hasattr(settings, name):
            value = getattr(settings, name)
            if value not in (None, ""):
                return value
    except ImportError:  # pragma: no cover - Django is always installed in this project
        pass
    return os.environ.get(name, default)


@dataclass(frozen=True)
class SlurmConfig:
    url: str
    user: str
    token: str
    key_file: str
    api_version: str
    timeout_s: float
    run_dir_mode: int | None
    accounting: bool = False

    @classmethod
    def from_settings(cls) -> SlurmConfig:
        mode = str(setting("SLURM_RUN_DIR_MODE", "")).strip()
        try:
            run_dir_mode = int(mode, 8) if mode else None
        except ValueError:
            raise ValueError(f"SLURM_RUN_DIR_MODE: not an octal mode: {mode!r}") from None
        return cls(
            url=str(setting("SLURM_REST_URL", "")),
            user=str(setting("SLURM_REST_USER", "")),
            token=str(setting("SLURM_JWT", "")),
            key_file=str(setting("SLURM_JWT_KEY_FILE", "")),
            api_version=str(setting("SLURM_REST_API_VERSION", "auto")) or "auto",
            timeout_s=float(setting("SLURM_REST_TIMEOUT", 10)),
            run_dir_mode=run_dir_mode,
            accounting=str(setting("SLURM_ACCOUNTING", "")).strip().lower() in ("1", "true", "yes", "on"),
        )

    def __repr__(self) -> str:  # the token stays out of logs and tracebacks
        return (
            f"SlurmConfig(url={self.url!r}, user={self.user!r}, token={'<set>' if self.token else '<unset>'}, "
            f"key_file={self.key_file!r}, api_version={self.api_version!r})"
        )
