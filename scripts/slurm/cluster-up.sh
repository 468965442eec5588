#!/usr/bin/env bash
# Bring up the Slurm test clusters (idempotent; ~1 s when already up):
#   slurm-22.05        Debian 12's Slurm on this host, REST on 127.0.0.1:6820
#   slurm-24.11        Debian 13's Slurm in a debootstrap chroot, REST on 127.0.0.1:6830
#   slurm-22.05-2node  the host's Slurm on two nodes, each a network namespace, REST on
#                      127.0.0.1:6850 (two-node-cluster.sh)
# usage: cluster-up.sh [all|host|trixie|2node]   (default: $OPL_SLURM_CLUSTERS or all)
# Writes $OPL_SLURM_ENV_DIR/{host,trixie,2node}.env (default /run/opl-slurm), which the
# tests read. Must run as root on Debian; installs what is missing with apt-get.
# OPL_SLURM_FRESH=1 wipes job state first. See single-cluster-up.sh for more knobs.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
ENV_DIR=${OPL_SLURM_ENV_DIR:-/run/opl-slurm}
SHARED=${OPL_SLURM_SHARED_DIR:-/var/lib/opl-test}
PYTHON=${OPL_SLURM_PYTHON:-$REPO/.venv/bin/python}
JOB_USER=${OPL_SLURM_USER:-slurmtest}
which=${1:-${OPL_SLURM_CLUSTERS:-all}}
[ "$(id -u)" = 0 ] || { echo "cluster-up.sh must run as root" >&2; exit 1; }
mkdir -p "$ENV_DIR" "$SHARED"; chmod 1777 "$SHARED"

# Jobs run as $JOB_USER and start the project's venv Python. When that Python lives
# under a private directory (e.g. /root/.pyenv), let the job user (only) traverse
# the directories on the way, with an ACL rather than opening them to everyone.
grant_python() {
  local target d
  [ -e "$PYTHON" ] || return 0
  for target in "$(readlink -f "$PYTHON")" "$REPO"; do
    d=$(dirname "$target")
    while [ "$d" != / ]; do
      if [ "$(( $(stat -c %a "$d" | sed 's/.*\(.\)$/\1/') & 1 ))" = 0 ]; then
        if ! command -v setfacl >/dev/null; then
          export DEBIAN_FRONTEND=noninteractive
          apt-get install -y -qq --no-install-recommends acl >/dev/null 2>&1 \
            || { apt-get update -qq; apt-get install -y -qq --no-install-recommends acl >/dev/null; }
        fi
        setfacl -m "u:$JOB_USER:x" "$d"
      fi
      d=$(dirname "$d")
    done
  done
}

start=$(date +%s%N)
case $which in
all|host)
  OPL_SLURM_ENV_FILE="$ENV_DIR/host.env" "$HERE/single-cluster-up.sh"
  grant_python
  ;;&
all|trixie)
  OPL_SLURM_ENV_DIR="$ENV_DIR" OPL_SLURM_SHARED_DIR="$SHARED" OPL_SLURM_PYTHON="$PYTHON" "$HERE/cluster-trixie.sh" up
  ;;&
all|2node)
  OPL_SLURM_ENV_DIR="$ENV_DIR" "$HERE/two-node-cluster.sh" up
  grant_python
  ;;
host|trixie) ;;
*) echo "usage: $0 [all|host|trixie|2node]" >&2; exit 2 ;;
esac
ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "Slurm test clusters ($which) up in $((ms / 1000)).$(printf %03d $((ms % 1000))) s; env files in $ENV_DIR" >&2
