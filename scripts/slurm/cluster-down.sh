#!/usr/bin/env bash
# Stop the Slurm test clusters. Packages and the chroot stay for a fast next start.
#   --purge   also wipe job state and logs (and delete the 24.11 chroot and the two-node
#             cluster's config)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ENV_DIR=${OPL_SLURM_ENV_DIR:-/run/opl-slurm}
purge=0; [ "${1:-}" = --purge ] && purge=1
[ "$(id -u)" = 0 ] || { echo "cluster-down.sh must run as root" >&2; exit 1; }
if [ "$purge" = 1 ]; then "$HERE/cluster-trixie.sh" purge & else "$HERE/cluster-trixie.sh" down & fi
if [ "$purge" = 1 ]; then OPL_SLURM_ENV_DIR="$ENV_DIR" "$HERE/two-node-cluster.sh" purge &
else OPL_SLURM_ENV_DIR="$ENV_DIR" "$HERE/two-node-cluster.sh" down & fi
if [ "$purge" = 1 ]; then "$HERE/single-cluster-down.sh" --purge; else "$HERE/single-cluster-down.sh"; fi
wait
rm -f "$ENV_DIR/host.env"
