#!/usr/bin/env bash
# Bring up ONE single-node Slurm test cluster on this Debian root (the host, or a
# chroot): munge, slurmctld, slurmd with fake GPUs, slurmrestd with JWT on 127.0.0.1.
# No systemd, no cgroups. Idempotent and fast when already up: installs only what
# is missing, rewrites configs only when they change, starts only dead daemons.
# Called by cluster-up.sh (host, Slurm 22.05) and cluster-trixie.sh (chroot, 24.11).
#
# Knobs (environment): OPL_SLURM_REST_PORT (6820), OPL_SLURM_CTLD_PORT (6817),
#   OPL_SLURM_SLURMD_PORT (6818), OPL_SLURM_USER (slurmtest), OPL_SLURM_CPUS (16),
#   OPL_SLURM_MEM_MB (16000), OPL_SLURM_GPUS (4), OPL_SLURM_GPU_TYPE (a100),
#   OPL_SLURM_PARTITION (debug), OPL_SLURM_CLUSTER (opl), OPL_SLURM_FRESH=1 (wipe job
#   state), OPL_SLURM_TOKEN_LIFESPAN (86400), OPL_SLURM_ENV_FILE (/run/opl-slurm.env),
#   OPL_SLURM_FORCE=1 (take over an /etc/slurm/slurm.conf this script did not write).
# Writes the env file the tests read: SLURM_VERSION, SLURM_REST_URL,
#   SLURM_REST_API_VERSION(S), SLURM_REST_USER, SLURM_JWT, SLURM_JWT_KEY_FILE, ...
set -euo pipefail

REST_PORT=${OPL_SLURM_REST_PORT:-6820}
CTLD_PORT=${OPL_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${OPL_SLURM_SLURMD_PORT:-6818}
JOB_USER=${OPL_SLURM_USER:-slurmtest}
NODE_CPUS=${OPL_SLURM_CPUS:-16}
NODE_MEM=${OPL_SLURM_MEM_MB:-16000}
GPUS=${OPL_SLURM_GPUS:-4}
GPU_TYPE=${OPL_SLURM_GPU_TYPE-a100}
PARTITION=${OPL_SLURM_PARTITION:-debug}
CLUSTER=${OPL_SLURM_CLUSTER:-opl}
TOKEN_LIFESPAN=${OPL_SLURM_TOKEN_LIFESPAN:-86400}
ENV_FILE=${OPL_SLURM_ENV_FILE:-/run/opl-slurm.env}
FRESH=${OPL_SLURM_FRESH:-0}

CONF_DIR=/etc/slurm
STATE_DIR=/var/lib/slurm/slurmctld
SPOOL_DIR=/var/lib/slurm/slurmd
JWT_KEY=/var/lib/slurm/jwt_hs256.key
FAKE_GPU_DIR=/var/lib/slurm/fakegpu
LOG_DIR=/var/log/slurm
REST_USER=slurmrestd
REST_PID=/run/slurmrestd.pid
MARKER="# managed by OffPolicy Lab scripts/slurm (test cluster)"

t0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '[opl-slurm %d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
trap 'die "command failed (line $LINENO): $BASH_COMMAND"' ERR
[ "$(id -u)" = 0 ] || die "must run as root"

# alive PIDFILE COMM: the pid in PIDFILE is a live process named COMM (never match by name alone)
alive() { local pid; [ -s "$1" ] && pid=$(cat "$1") && [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]; }
# retry SECONDS CMD...: until CMD succeeds; CMD exiting 2 means "it will not, stop now"
retry() {
  local until=$(( $(date +%s) + $1 )) rc; shift
  while :; do
    rc=0; "$@" >/dev/null 2>&1 || rc=$?
    [ "$rc" = 0 ] && return 0
    [ "$rc" = 2 ] && return 1
    [ "$(date +%s)" -lt "$until" ] || return 1
    sleep 0.2
  done
}
stop() { # stop PIDFILE COMM [SIGNAL]
  alive "$1" "$2" || return 0
  local pid; pid=$(cat "$1"); kill -"${3:-TERM}" "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
}

# ------------------------------------------------------------------ packages
missing=0
for b in munged slurmctld slurmd sinfo slurmrestd curl; do command -v "$b" >/dev/null 2>&1 || missing=1; done
ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || missing=1
if [ "$missing" = 1 ]; then
  log "installing Slurm packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  pkgs="munge slurmctld slurmd slurm-client slurmrestd curl"
  # auth/jwt is a separate package from Debian's 22.05.7 on
  apt-cache show slurm-wlm-jwt-plugin >/dev/null 2>&1 && pkgs="$pkgs slurm-wlm-jwt-plugin"
  # without --no-install-recommends slurm-wlm-plugins drags in ~45 packages (mysql, hdf5...)
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
fi
VERSION=$(slurmctld -V | awk '{print $2}')
VNUM=$(echo "$VERSION" | awk -F. '{printf "%d%02d", $1, $2}')

# ------------------------------------------------------------------ users, dirs
getent passwd slurm >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin slurm
id "$REST_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$REST_USER"
id "$JOB_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$JOB_USER"
mkdir -p "$CONF_DIR" "$STATE_DIR" "$SPOOL_DIR" "$LOG_DIR" "$FAKE_GPU_DIR" /run/munge
chown slurm:slurm "$STATE_DIR" "$LOG_DIR"
chown munge:munge /run/munge; chmod 0755 /run/munge

# ------------------------------------------------------------------ munge
if [ ! -s /etc/munge/munge.key ]; then
  install -d -o munge -g munge -m 0700 /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid munged; then
  log "starting munged"
  setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged
fi
retry 20 sh -c 'munge -n | unmunge' || die "munge does not work"

# ------------------------------------------------------------------ config
if [ -f "$CONF_DIR/slurm.conf" ] && ! grep -qF "$MARKER" "$CONF_DIR/slurm.conf" && [ "${OPL_SLURM_FORCE:-0}" != 1 ]; then
  die "$CONF_DIR/slurm.conf was not written by this script; set OPL_SLURM_FORCE=1 to replace it"
fi
[ -s "$JWT_KEY" ] || dd if=/dev/urandom of="$JWT_KEY" bs=32 count=1 status=none
chown slurm:slurm "$JWT_KEY"; chmod 0600 "$JWT_KEY"

gres_line=""; node_gres=""
if [ "$GPUS" -gt 0 ]; then
  gres_line="GresTypes=gpu"
  node_gres=" Gres=gpu${GPU_TYPE:+:$GPU_TYPE}:$GPUS"
  # slurmd drops GPUs without File= and complains about files that are not char
  # devices: give it char devices that are really /dev/null (1,3)
  for i in $(seq 0 $((GPUS - 1))); do
    f=$FAKE_GPU_DIR/nvidia$i
    [ -c "$f" ] && continue
    rm -f "$f"; mknod -m 0666 "$f" c 1 3 2>/dev/null || touch "$f"
  done
fi

tmp=$(mktemp -d)
cat > "$tmp/slurm.conf" <<EOF
$MARKER, Slurm $VERSION
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SPOOL_DIR
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
MpiDefault=none
SwitchType=switch/none
# no cgroups on a test box: plain process tracking, no containment
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG_DIR/jobcomp.log
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# without a default every job takes all memory and jobs run one at a time
DefMemPerCPU=256
# trust the sizes below even though the machine is smaller
SlurmdParameters=config_overrides
# a node set DOWN by an admin (or a test) stays down until resumed, as on a real cluster
ReturnToService=1
KillWait=5
MinJobAge=300
InactiveLimit=0
$gres_line
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1 RealMemory=$NODE_MEM$node_gres State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
{
  echo "$MARKER"
  echo "AutoDetect=off"
  [ "$GPUS" -gt 0 ] && echo "NodeName=localhost Name=gpu${GPU_TYPE:+ Type=$GPU_TYPE} File=$FAKE_GPU_DIR/nvidia[0-$((GPUS - 1))]"
  true
} > "$tmp/gres.conf"
# Slurm >= 24.05 slurmd initialises cgroups regardless and dies without usable
# /sys/fs/cgroup; "disabled" is new in 24.05 and 22.05 rejects it.
[ "$VNUM" -ge 2405 ] && printf '%s\nCgroupPlugin=disabled\n' "$MARKER" > "$tmp/cgroup.conf"

changed=0
for f in slurm.conf gres.conf; do cmp -s "$tmp/$f" "$CONF_DIR/$f" || changed=1; done
if [ -f "$tmp/cgroup.conf" ]; then cmp -s "$tmp/cgroup.conf" "$CONF_DIR/cgroup.conf" || changed=1; fi
if [ "$changed" = 1 ]; then
  log "writing $CONF_DIR/{slurm,gres,cgroup}.conf for Slurm $VERSION"
  install -m 0644 "$tmp/slurm.conf" "$tmp/gres.conf" "$CONF_DIR/"
  [ -f "$tmp/cgroup.conf" ] && install -m 0644 "$tmp/cgroup.conf" "$CONF_DIR/"
fi
rm -rf "$tmp"
touch "$LOG_DIR/jobcomp.log"; chown slurm:slurm "$LOG_DIR/jobcomp.log"

if [ "$changed" = 1 ] || [ "$FRESH" = 1 ]; then
  # each daemon needs ~2 s to exit: stop them together
  stop "$REST_PID" slurmrestd INT & stop /run/slurmd.pid slurmd & stop /run/slurmctld.pid slurmctld &
  wait
fi

# ------------------------------------------------------------------ slurmctld
if ! alive /run/slurmctld.pid slurmctld; then
  args=-i
  if [ "$FRESH" = 1 ]; then
    log "wiping slurmctld state (job ids restart at 1)"
    find "$STATE_DIR" -mindepth 1 -delete; args="-c -i"
  fi
  log "starting slurmctld"
  rm -f /run/slurmctld.pid
  /usr/sbin/slurmctld $args
fi
ctld_up() {
  scontrol ping 2>/dev/null | grep -q UP && return 0
  [ -s /run/slurmctld.pid ] && ! alive /run/slurmctld.pid slurmctld && return 2   # died: see its log
  return 1
}
retry 30 ctld_up || die "slurmctld is not up: $(tail -n 5 $LOG_DIR/slurmctld.log 2>/dev/null)"

# ------------------------------------------------------------------ slurmd
if ! alive /run/slurmd.pid slurmd; then
  log "starting slurmd"
  rm -f /run/slurmd.pid
  /usr/sbin/slurmd -N localhost
fi
node_ok() { [[ "$(sinfo -h -n localhost -o %T)" =~ ^(idle|mixed|allocated|completing) ]]; }
if ! retry 30 node_ok; then
  # a node left down/drained (e.g. by a NODE_FAIL test) does not always return alone
  scontrol update nodename=localhost state=resume 2>/dev/null || true
  retry 15 node_ok || die "node not ready: $(scontrol show node localhost | grep -E 'State|Reason')"
fi

# ------------------------------------------------------------------ slurmrestd
# It refuses root; started as root with -u/-g it drops privileges itself, so $! is
# the daemon. The slurmdbd plugins (openapi/dbv*, openapi/slurmdbd) are fatal
# without slurmdbd, so pass -s with the others only. Unlike slurmctld and slurmd it
# does not daemonize: setsid gives it a session of its own, so it outlives the shell
# that ran this script (in its session it died with it, leaving the env file and the
# other daemons behind, and the next tests met a refused connection).
plugins=$(setpriv --reuid=$REST_USER --regid=$REST_USER --clear-groups slurmrestd -s list 2>&1 \
  | awk '/openapi\// && !/openapi\/(dbv|slurmdbd)/ {print $NF}' | paste -sd, -) || true
[ -n "$plugins" ] || die "slurmrestd lists no openapi plugins"
if ! alive "$REST_PID" slurmrestd; then
  log "starting slurmrestd on 127.0.0.1:$REST_PORT ($plugins)"
  cd /
  SLURM_JWT=daemon setsid nohup /usr/sbin/slurmrestd -a rest_auth/jwt -s "$plugins" \
    -u $REST_USER -g $REST_USER "127.0.0.1:$REST_PORT" >>"$LOG_DIR/slurmrestd.log" 2>&1 &
  echo $! > "$REST_PID"
fi

token=$(scontrol token username="$JOB_USER" lifespan="$TOKEN_LIFESPAN" | sed -n 's/^SLURM_JWT=//p')
[ -n "$token" ] || die "scontrol token failed"
spec=$(mktemp)
rest_ok() { curl -fsS -o "$spec" -H "X-SLURM-USER-NAME: $JOB_USER" -H "X-SLURM-USER-TOKEN: $token" "http://127.0.0.1:$REST_PORT/openapi/v3"; }
retry 30 rest_ok || die "slurmrestd does not answer; see $LOG_DIR/slurmrestd.log"
# 22.05 escapes '/' as '\/' in its JSON
versions=$(grep -oE '"(\\?/)slurm\\?/v0\.0\.[0-9]+' "$spec" | grep -oE 'v0\.0\.[0-9]+' | sort -t. -k3,3n -u | paste -sd' ' -) || true
rm -f "$spec"
[ -n "$versions" ] || die "the served OpenAPI document has no /slurm/v0.0.x paths"

umask 077
cat > "$ENV_FILE" <<EOF
SLURM_VERSION=$VERSION
SLURM_REST_URL=http://127.0.0.1:$REST_PORT
SLURM_REST_API_VERSION=${versions##* }
SLURM_REST_API_VERSIONS="$versions"
SLURM_REST_USER=$JOB_USER
SLURM_JOB_UID=$(id -u "$JOB_USER")
SLURM_JWT=$token
SLURM_JWT_KEY_FILE=$JWT_KEY
SLURM_PARTITION=$PARTITION
SLURM_FAKE_GPUS=$GPUS
EOF
log "Slurm $VERSION ready: REST $versions on 127.0.0.1:$REST_PORT, env in $ENV_FILE"
