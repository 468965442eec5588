"""Test-wide defaults, set before pytest-django loads the settings (loaded with -p from
pytest.ini). `make test` sets the same values; these let a plain `pytest` run against the
services already on 127.0.0.1."""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/opl")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
