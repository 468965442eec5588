#!/usr/bin/env bash
# `make test`: bring up every real service the suite uses, then run all of it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/services.sh

started=$(date +%s)
ensure_postgres
ensure_redis
ensure_chromium
bash scripts/slurm/cluster-up.sh
echo "services ready in $(( $(date +%s) - started )) s"

export DATABASE_URL="${TEST_DATABASE_URL:-postgres://opl:opl@127.0.0.1:5432/opl}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
export SECRET_KEY="test-secret-key-not-for-production"
export HF_HUB_OFFLINE=1
# GPU tests are deselected here (no GPU on CI machines); scripts/gpu-check.sh runs them on one.
exec .venv/bin/python -m pytest -m "not gpu" --durations=40 "$@"
