#!/usr/bin/env bash
# Stop the single-node test cluster started by single-cluster-up.sh on this Debian
# root: cancel every job, then stop slurmrestd, slurmd, slurmctld and munged, each
# by the pid in its pid file after checking the process name (never by name match).
#   --purge   also delete job state, spool and logs (job ids restart at 1)
set -uo pipefail
PURGE=0
for a in "$@"; do case $a in --purge) PURGE=1 ;; *) echo "unknown option: $a" >&2; exit 2 ;; esac; done
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }

alive() { local pid; [ -s "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; }
signal() { # signal PIDFILE COMM SIG -> prints the pid it signalled
  if alive "$1" "$2"; then local pid; pid=$(cat "$1"); kill -"$3" "$pid" 2>/dev/null && echo "$pid"; fi
  rm -f "$1"
}
await() { # daemons need ~2 s each to exit, so signal all first, then wait here
  local left pid
  for _ in $(seq 50); do
    left=""; for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done
    [ -z "$left" ] && return 0; sleep 0.2
  done
  for pid in $left; do kill -KILL "$pid" 2>/dev/null; done
}

# job steps outlive slurmd, so cancel while the controller still runs
if alive /run/slurmctld.pid slurmctld; then
  jobs=$(squeue -h -o %A 2>/dev/null | paste -sd' ' -)
  if [ -n "$jobs" ]; then
    scancel $jobs 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(squeue -h -t R,CG,PD -o %A 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi
await $(signal /run/slurmrestd.pid slurmrestd INT) $(signal /run/slurmd.pid slurmd TERM) $(signal /run/slurmctld.pid slurmctld TERM)
await $(signal /run/munge/munged.pid munged TERM)
if [ "$PURGE" = 1 ]; then
  find /var/lib/slurm/slurmctld /var/lib/slurm/slurmd -mindepth 1 -delete 2>/dev/null
  rm -f /var/log/slurm/*.log
fi
exit 0
