# Shared helpers for test.sh: make sure PostgreSQL, Redis and Chromium are there, installing from
# Debian's packages on a fresh machine (as root, or with sudo).
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
APT_UPDATED=""

apt_install() {
  if [ -z "$APT_UPDATED" ]; then $SUDO apt-get update -qq; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_postgres() {  # leaves a role opl/opl with CREATEDB, reachable on 127.0.0.1:5432
  if ! pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; then
    command -v pg_ctlcluster >/dev/null || apt_install postgresql
    local version; version=$(ls /etc/postgresql | sort -V | tail -1)
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
    for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
  fi
  local sql="DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='opl') THEN
             CREATE ROLE opl LOGIN CREATEDB PASSWORD 'opl'; END IF; END \$\$;"
  if psql -h 127.0.0.1 -U postgres -d postgres -tAc "select 1" >/dev/null 2>&1; then
    psql -q -h 127.0.0.1 -U postgres -d postgres -c "$sql" >/dev/null
  else
    $SUDO su postgres -c "psql -q -d postgres -c \"$sql\"" >/dev/null
  fi
}

ensure_redis() {
  if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then return; fi
  command -v redis-server >/dev/null || apt_install redis-server redis-tools
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 20); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && return; sleep 0.5; done
  echo "Redis did not start on 127.0.0.1:6379" >&2; return 1
}

ensure_node() {  # eslint 9 needs Node.js 18.18 or newer (Debian 12 ships 18.19)
  command -v npm >/dev/null || apt_install nodejs npm
  node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 18 || (a === 18 && b >= 18) ? 0 : 1)' \
    || { echo "Node.js $(node --version) is older than 18.18, which eslint needs" >&2; return 1; }
}

ensure_chromium() {
  [ -x /usr/bin/chromium ] || apt_install chromium
}
