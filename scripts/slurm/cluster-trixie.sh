#!/usr/bin/env bash
# The second test cluster: Debian 13's Slurm 24.11 (REST v0.0.40-v0.0.42) in a
# debootstrap chroot, next to the host's Slurm 22.05 on other ports. Jobs run
# inside the chroot, so the repository, the Python installation behind its venv and
# the shared run directory are bind-mounted there at the same paths.
#   cluster-trixie.sh up      create the chroot if missing (debootstrap), start
#   cluster-trixie.sh down    stop the cluster, unmount (chroot kept)
#   cluster-trixie.sh purge   down, then delete the chroot
# Knobs: OPL_SLURM_TRIXIE_ROOT (/srv/opl-slurm-trixie), OPL_SLURM_TRIXIE_MIRROR (the
#   host's Debian mirror), OPL_SLURM_TRIXIE_PORTS ("6830 6837 6838": rest ctld slurmd),
#   OPL_SLURM_ENV_DIR (/run/opl-slurm), OPL_SLURM_SHARED_DIR (/var/lib/opl-test),
#   OPL_SLURM_PYTHON (<repo>/.venv/bin/python)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
R=${OPL_SLURM_TRIXIE_ROOT:-/srv/opl-slurm-trixie}
read -r REST_PORT CTLD_PORT SLURMD_PORT <<<"${OPL_SLURM_TRIXIE_PORTS:-6830 6837 6838}"
ENV_DIR=${OPL_SLURM_ENV_DIR:-/run/opl-slurm}
SHARED=${OPL_SLURM_SHARED_DIR:-/var/lib/opl-test}
PYTHON=${OPL_SLURM_PYTHON:-$REPO/.venv/bin/python}
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }

# The Python the venv points at: a whole private installation (e.g. /root/.pyenv/versions/
# 3.11.7), or for a system Python only its interpreter and standard library: binding the
# host's /usr over the chroot's would hide the chroot's own Slurm.
python_binds() {
  [ -e "$PYTHON" ] || return 0
  local real prefix
  real=$(readlink -f "$PYTHON"); prefix=$(dirname "$(dirname "$real")")
  case $prefix in
    /|/usr|/usr/local) echo "$real"; echo "$prefix/lib/$(basename "$real")" ;;
    *) echo "$prefix" ;;
  esac
}
# A venv that is a link to one outside the repository (a git worktree sharing another
# checkout's .venv): jobs start its python by the link, so its target must be there too.
venv_bind() {
  local venv; venv=$(dirname "$(dirname "$PYTHON")")
  [ -L "$venv" ] && readlink -f "$venv"
  return 0
}
# The client package, installed editable, is imported from its source: in a shared venv (above)
# that is the other checkout's client/, which jobs must see as well.
client_bind() {
  [ -x "$PYTHON" ] || return 0
  local src
  src=$(cd / && env -u PYTHONPATH "$PYTHON" -c \
    'import os, opl_client; print(os.path.dirname(os.path.dirname(os.path.realpath(opl_client.__file__))))' \
    2>/dev/null) || return 0
  case $src in "$REPO"/*) ;; *) echo "$src" ;; esac
  return 0
}
binds() { echo "$REPO"; echo "$SHARED"; python_binds; venv_bind; client_bind; }

mount_all() {
  local d
  for d in proc sys dev dev/pts; do mountpoint -q "$R/$d" || mount --bind "/$d" "$R/$d"; done
  mountpoint -q "$R/run" || mount -t tmpfs tmpfs "$R/run"
  binds | while read -r d; do
    [ -n "$d" ] && [ -e "$d" ] || continue
    if [ -d "$d" ]; then mkdir -p "$R$d"; else mkdir -p "$(dirname "$R$d")"; [ -e "$R$d" ] || touch "$R$d"; fi
    # A bind made before the source was deleted and re-created (a re-cloned repository at the
    # same path) still shows the old, deleted tree: re-bind when the two are not the same inode.
    if mountpoint -q "$R$d" && [ "$(stat -c %d:%i "$d")" != "$(stat -c %d:%i "$R$d")" ]; then
      umount "$R$d" 2>/dev/null || umount -l "$R$d"
    fi
    mountpoint -q "$R$d" || mount --bind "$d" "$R$d"
  done
  # the chroot's /root is 0700; jobs (as the test user) must reach a prefix below it
  chmod o+x "$R/root"
}
unmount_all() {
  local m
  # deepest first; every mount below $R, whatever put it there
  awk -v r="$R/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }

case ${1:-up} in
up)
  mkdir -p "$ENV_DIR" "$SHARED"; chmod 1777 "$SHARED"
  if [ ! -x "$R/usr/bin/apt-get" ]; then
    if ! command -v debootstrap >/dev/null; then
      export DEBIAN_FRONTEND=noninteractive
      apt-get install -y -qq debootstrap >/dev/null 2>&1 || { apt-get update -qq; apt-get install -y -qq debootstrap >/dev/null; }
    fi
    mirror=${OPL_SLURM_TRIXIE_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1)}
    [ -n "$mirror" ] || mirror=$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)
    [ -n "$mirror" ] || { echo "no Debian mirror in the apt sources; set OPL_SLURM_TRIXIE_MIRROR" >&2; exit 1; }
    echo "creating the Debian 13 chroot $R from $mirror" >&2
    # python3 brings the shared libraries (libssl, libffi, sqlite...) a bound-in Python needs
    debootstrap --variant=minbase --include=procps,curl,python3 trixie "$R" "$mirror" >/dev/null
  fi
  # munged and slurmctld must resolve this host's name as the host does
  cp /etc/hosts /etc/resolv.conf "$R/etc/"
  # package scripts must not start services inside the chroot
  printf '#!/bin/sh\nexit 101\n' > "$R/usr/sbin/policy-rc.d"; chmod +x "$R/usr/sbin/policy-rc.d"
  mount_all
  mkdir -p "$R/opt/opl-slurm"
  cp "$HERE/single-cluster-up.sh" "$HERE/single-cluster-down.sh" "$R/opt/opl-slurm/"
  in_root OPL_SLURM_REST_PORT="$REST_PORT" OPL_SLURM_CTLD_PORT="$CTLD_PORT" OPL_SLURM_SLURMD_PORT="$SLURMD_PORT" \
    OPL_SLURM_FRESH="${OPL_SLURM_FRESH:-0}" OPL_SLURM_ENV_FILE=/run/opl-slurm.env bash /opt/opl-slurm/single-cluster-up.sh
  # same keys as the host's env file; the key file path made valid outside the chroot
  sed -e "s#^SLURM_JWT_KEY_FILE=#SLURM_JWT_KEY_FILE=$R#" "$R/run/opl-slurm.env" > "$ENV_DIR/trixie.env.tmp"
  echo "SLURM_CHROOT=$R" >> "$ENV_DIR/trixie.env.tmp"
  chmod 0600 "$ENV_DIR/trixie.env.tmp"; mv "$ENV_DIR/trixie.env.tmp" "$ENV_DIR/trixie.env"
  ;;
down|purge)
  if [ -x "$R/opt/opl-slurm/single-cluster-down.sh" ] && mountpoint -q "$R/proc"; then
    in_root bash /opt/opl-slurm/single-cluster-down.sh --purge || true
  fi
  unmount_all
  rm -f "$ENV_DIR/trixie.env"
  if [ "$1" = purge ] && [ -d "$R" ]; then
    # bind mounts share st_dev with / so --one-file-system would not stop rm at the
    # repository: refuse to delete while anything is still mounted below $R
    if awk -v r="$R/" 'index($2, r) == 1' /proc/mounts | grep -q .; then
      echo "still mounted below $R; not deleting it" >&2; exit 1
    fi
    rm -rf --one-file-system "$R"
  fi
  ;;
*) echo "usage: $0 up|down|purge" >&2; exit 2 ;;
esac
