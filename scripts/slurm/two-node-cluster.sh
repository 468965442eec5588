#!/usr/bin/env bash
# A two-node Slurm test cluster on this machine (the host's Slurm, 22.05 on Debian 12): each
# slurmd runs in its own network namespace, with its own hostname (UTS namespace) and address,
# so a job on `nodes: 2` really spans two hosts and torchrun's rendezvous crosses a network.
#
#   host (root ns)          bridge opl2n-br 10.250.26.1/24: slurmctld, slurmrestd (127.0.0.1), munged
#     +-- veth opl2n-v1 --- netns opl2n-1: eth0 10.250.26.11, hostname opl2n-1, slurmd
#     +-- veth opl2n-v2 --- netns opl2n-2: eth0 10.250.26.12, hostname opl2n-2, slurmd
#
# The namespaces have one route, the bridge's /24: no default route, nothing forwarded (the
# host's ip_forward is left alone), so their traffic stays on these links and loopback. The
# cluster is separate from the single-node ones (own ports, cluster name, config, state, munged
# with its own key and socket): it neither reads nor restarts anything of theirs.
#
#   two-node-cluster.sh up             create what is missing, start dead daemons (idempotent)
#   two-node-cluster.sh down           stop everything, remove the links and namespaces
#   two-node-cluster.sh purge          down, then delete state, logs and config
#   two-node-cluster.sh crash-node N   node N dies: its link goes silent, then every process in its
#                                      namespace (slurmd, job steps) is killed; `up` brings it back
#
# Knobs: OPL_SLURM_2NODE_SUBNET (10.250.26: the /24's first three octets), OPL_SLURM_2NODE_PORTS
#   ("6850 6857 6858": rest ctld slurmd), OPL_SLURM_USER (slurmtest), OPL_SLURM_2NODE_CPUS (8),
#   OPL_SLURM_2NODE_MEM_MB (16000), OPL_SLURM_ENV_DIR (/run/opl-slurm), OPL_SLURM_FRESH=1
#   (wipe job state), OPL_SLURM_TOKEN_LIFESPAN (86400).
# Writes $OPL_SLURM_ENV_DIR/2node.env, which the tests read.
set -euo pipefail

NAME=opl2n
SUBNET=${OPL_SLURM_2NODE_SUBNET:-10.250.26}
read -r REST_PORT CTLD_PORT SLURMD_PORT <<<"${OPL_SLURM_2NODE_PORTS:-6850 6857 6858}"
JOB_USER=${OPL_SLURM_USER:-slurmtest}
NODE_CPUS=${OPL_SLURM_2NODE_CPUS:-8}
NODE_MEM=${OPL_SLURM_2NODE_MEM_MB:-16000}
ENV_DIR=${OPL_SLURM_ENV_DIR:-/run/opl-slurm}
FRESH=${OPL_SLURM_FRESH:-0}
TOKEN_LIFESPAN=${OPL_SLURM_TOKEN_LIFESPAN:-86400}

NODES=("$NAME-1" "$NAME-2")
BRIDGE=$NAME-br
HOST_ADDR=$SUBNET.1
node_addr() { echo "$SUBNET.$((10 + ${1##*-}))"; }   # opl2n-1 -> .11
node_veth() { echo "$NAME-v${1##*-}"; }              # host side of node's link

CONF_DIR=/etc/opl-slurm-2node
CONF=$CONF_DIR/slurm.conf
STATE=/var/lib/opl-slurm-2node
LOG=/var/log/opl-slurm-2node
RUN=/run/opl-slurm-2node
MUNGE_SOCKET=$RUN/munge/munge.socket
JWT_KEY=$STATE/jwt_hs256.key
REST_USER=slurmrestd
MARKER="# managed by OffPolicy Lab scripts/slurm/two-node-cluster.sh (test cluster)"
export SLURM_CONF=$CONF   # every Slurm command below talks to this cluster, never the host's

t0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '[opl-slurm-2node %d.%03ds] %s\n' $((ms / 1000)) $((ms % 1000)) "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
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
# signal_pidfile PIDFILE COMM SIG: prints the pid it signalled
signal_pidfile() {
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
# Every process in node's namespace is this cluster's: only its slurmd and what that started
# run there. `ip netns pids` finds them by namespace, not by name.
kill_node_processes() {
  local ns=$1 pids
  [ -e "/run/netns/$ns" ] || return 0
  for _ in 1 2 3; do   # a dying slurmstepd may still fork: sweep until nothing is left
    pids=$(ip netns pids "$ns" 2>/dev/null | paste -sd' ' -)
    [ -z "$pids" ] && return 0
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
}

# ------------------------------------------------------------------ network
net_up() {
  # the subnet must be ours alone: refuse one the host already routes elsewhere
  local other
  other=$(ip -4 route show to "$SUBNET.0/24" | grep -v " dev $BRIDGE " || true)
  [ -z "$other" ] || die "$SUBNET.0/24 is already routed on this host ($other); set OPL_SLURM_2NODE_SUBNET"
  ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
  ip -4 addr show dev "$BRIDGE" | grep -qF " $HOST_ADDR/24 " || ip addr add "$HOST_ADDR/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  local n veth addr
  for n in "${NODES[@]}"; do
    veth=$(node_veth "$n"); addr=$(node_addr "$n")
    [ -e "/run/netns/$n" ] || ip netns add "$n"
    ip link show "$veth" >/dev/null 2>&1 || ip link add "$veth" type veth peer name eth0 netns "$n"
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    ip -n "$n" -4 addr show dev eth0 | grep -qF " $addr/24 " || ip -n "$n" addr add "$addr/24" dev eth0
    ip -n "$n" link set eth0 up
    ip -n "$n" link set lo up
    [ -z "$(ip -n "$n" route show default)" ] || die "$n has a default route; it must have none"
    # every node resolves every node (node_up binds it over /etc/hosts, as `ip netns exec` does)
    mkdir -p "/etc/netns/$n"
    {
      echo "$MARKER"
      echo "127.0.0.1 localhost"
      echo "$HOST_ADDR $NAME-ctl"
      for m in "${NODES[@]}"; do echo "$(node_addr "$m") $m"; done
    } > "/etc/netns/$n/hosts.tmp"
    # replaced only when it changes: a running node's bind mount holds the old file
    if cmp -s "/etc/netns/$n/hosts.tmp" "/etc/netns/$n/hosts"; then rm "/etc/netns/$n/hosts.tmp"
    else mv "/etc/netns/$n/hosts.tmp" "/etc/netns/$n/hosts"; fi
  done
}
net_down() {
  local n
  for n in "${NODES[@]}"; do
    kill_node_processes "$n"
    ip link del "$(node_veth "$n")" 2>/dev/null || true
    [ -e "/run/netns/$n" ] && ip netns del "$n"
    rm -rf "/etc/netns/$n"
  done
  ip link del "$BRIDGE" 2>/dev/null || true
}

# ------------------------------------------------------------------ packages, users, dirs
install_packages() {
  local missing=0 b
  for b in munged slurmctld slurmd sinfo slurmrestd curl ip nsenter unshare; do command -v "$b" >/dev/null 2>&1 || missing=1; done
  ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || missing=1
  [ "$missing" = 1 ] || return 0
  log "installing Slurm packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  local pkgs="munge slurmctld slurmd slurm-client slurmrestd curl iproute2 util-linux"
  apt-cache show slurm-wlm-jwt-plugin >/dev/null 2>&1 && pkgs="$pkgs slurm-wlm-jwt-plugin"
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
}

prepare_dirs() {
  getent passwd slurm >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin slurm
  getent passwd munge >/dev/null || useradd --system --no-create-home --shell /usr/sbin/nologin munge
  id "$REST_USER" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$REST_USER"
  id "$JOB_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$JOB_USER"
  local n
  mkdir -p "$CONF_DIR" "$STATE/slurmctld" "$LOG" "$RUN"
  for n in "${NODES[@]}"; do mkdir -p "$STATE/slurmd-$n"; done
  chown slurm:slurm "$STATE/slurmctld" "$LOG"
  # munged refuses directories (and their parents) that others can write to: its log lives in $STATE
  install -d -o munge -g munge -m 0700 "$CONF_DIR/munge" "$STATE/munge"
  install -d -o munge -g munge -m 0755 "$RUN/munge"
}

# ------------------------------------------------------------------ munge (its own key and socket)
munge_up() {
  local key=$CONF_DIR/munge/munge.key
  if [ ! -s "$key" ]; then
    dd if=/dev/urandom of="$key" bs=1024 count=1 status=none
    chown munge:munge "$key"; chmod 0400 "$key"
  fi
  if ! alive "$RUN/munge/munged.pid" munged; then
    log "starting munged on $MUNGE_SOCKET"
    setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged --socket="$MUNGE_SOCKET" \
      --key-file="$key" --pid-file="$RUN/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
      --seed-file="$STATE/munge/munged.seed"
  fi
  retry 20 sh -c "munge -S '$MUNGE_SOCKET' -n | unmunge -S '$MUNGE_SOCKET'" || die "munge does not work"
}

# ------------------------------------------------------------------ config
write_config() {
  [ -s "$JWT_KEY" ] || dd if=/dev/urandom of="$JWT_KEY" bs=32 count=1 status=none
  chown slurm:slurm "$JWT_KEY"; chmod 0600 "$JWT_KEY"
  local tmp n; tmp=$(mktemp)
  cat > "$tmp" <<EOF
$MARKER, Slurm $VERSION
ClusterName=$NAME
# localhost for slurmctld's own-host check; the nodes reach it on the bridge
SlurmctldHost=localhost($HOST_ADDR)
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$JWT_KEY
StateSaveLocation=$STATE/slurmctld
SlurmdSpoolDir=$STATE/slurmd-%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd-%n.log
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$LOG/jobcomp.log
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
SlurmdParameters=config_overrides
# a node that stops answering is DOWN after 10 s (the node-failure test waits for it) and comes
# back by itself when its slurmd registers again
SlurmdTimeout=6
MessageTimeout=5
ReturnToService=1
KillWait=5
MinJobAge=300
InactiveLimit=0
# a job in partition urgent preempts jobs in main: SIGTERM to every task on every node at once,
# SIGKILL GraceTime later, then the job ends PREEMPTED
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
EOF
  for n in "${NODES[@]}"; do
    echo "NodeName=$n NodeAddr=$(node_addr "$n") CPUs=$NODE_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$NODE_CPUS ThreadsPerCore=1 RealMemory=$NODE_MEM State=UNKNOWN" >> "$tmp"
  done
  cat >> "$tmp" <<EOF
PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2 PreemptMode=OFF
EOF
  CHANGED=0
  if ! cmp -s "$tmp" "$CONF"; then
    log "writing $CONF for Slurm $VERSION"
    install -m 0644 "$tmp" "$CONF"; CHANGED=1
  fi
  # Slurm >= 24.05 (a Debian 13 host) initialises cgroups regardless; 22.05 rejects "disabled"
  if [ "$(echo "$VERSION" | awk -F. '{printf "%d%02d", $1, $2}')" -ge 2405 ]; then
    printf '%s\nCgroupPlugin=disabled\n' "$MARKER" > "$tmp"
    cmp -s "$tmp" "$CONF_DIR/cgroup.conf" || { install -m 0644 "$tmp" "$CONF_DIR/cgroup.conf"; CHANGED=1; }
  fi
  rm -f "$tmp"
  touch "$LOG/jobcomp.log"; chown slurm:slurm "$LOG/jobcomp.log"
}

# ------------------------------------------------------------------ daemons
stop_daemons() {
  local pids n
  pids=$(signal_pidfile "$RUN/slurmrestd.pid" slurmrestd INT; signal_pidfile "$RUN/slurmctld.pid" slurmctld TERM
         for n in "${NODES[@]}"; do signal_pidfile "$RUN/slurmd-$n.pid" slurmd TERM; done)
  # shellcheck disable=SC2086
  await $pids
}

ctld_up() {
  if ! alive "$RUN/slurmctld.pid" slurmctld; then
    local args=-i
    if [ "$FRESH" = 1 ]; then
      log "wiping slurmctld state (job ids restart at 1)"
      find "$STATE/slurmctld" -mindepth 1 -delete; args="-c -i"
    fi
    log "starting slurmctld on $HOST_ADDR:$CTLD_PORT"
    rm -f "$RUN/slurmctld.pid"
    # shellcheck disable=SC2086
    /usr/sbin/slurmctld -f "$CONF" $args
  fi
  ping_ok() {
    scontrol ping 2>/dev/null | grep -q UP && return 0
    [ -s "$RUN/slurmctld.pid" ] && ! alive "$RUN/slurmctld.pid" slurmctld && return 2
    return 1
  }
  retry 30 ping_ok || die "slurmctld is not up: $(tail -n 5 "$LOG/slurmctld.log" 2>/dev/null)"
}

node_up() { # node_up NODE: its slurmd in its network namespace, under its own hostname
  local n=$1
  alive "$RUN/slurmd-$n.pid" slurmd && return 0
  log "starting slurmd on $n ($(node_addr "$n"))"
  rm -f "$RUN/slurmd-$n.pid"
  # a crashed node's job steps may survive it (e.g. a slurmd killed alone): a rebooted node has none
  kill_node_processes "$n"
  # nsenter: the node's network namespace; unshare: a UTS namespace for its hostname and a mount
  # namespace for its hosts file. Not `ip netns exec`: it mounts a fresh /sys without
  # /sys/fs/cgroup, and 22.05's slurmd will not start without one. slurmd daemonizes inside.
  nsenter --net="/run/netns/$n" unshare --uts --mount --propagation slave /bin/sh -c \
    'hostname "$1" && mount --bind "/etc/netns/$1/hosts" /etc/hosts && shift && exec "$@"' sh "$n" \
    /usr/sbin/slurmd -f "$CONF" -N "$n"
}

nodes_ready() {
  local n state
  for n in "${NODES[@]}"; do
    state=$(sinfo -h -n "$n" -o %T 2>/dev/null)
    [[ "$state" =~ ^(idle|mixed|allocated|completing) ]] || return 1
  done
}

rest_up() {
  local plugins
  plugins=$(setpriv --reuid=$REST_USER --regid=$REST_USER --clear-groups slurmrestd -s list 2>&1 \
    | awk '/openapi\// && !/openapi\/(dbv|slurmdbd)/ {print $NF}' | paste -sd, -) || true
  [ -n "$plugins" ] || die "slurmrestd lists no openapi plugins"
  if ! alive "$RUN/slurmrestd.pid" slurmrestd; then
    log "starting slurmrestd on 127.0.0.1:$REST_PORT"
    # started as root with -u/-g it drops privileges itself, so $! is the daemon; setsid: a
    # session of its own, so it outlives the shell that started it (single-cluster-up.sh)
    (cd / && { SLURM_JWT=daemon setsid nohup /usr/sbin/slurmrestd -f "$CONF" -a rest_auth/jwt -s "$plugins" \
      -u $REST_USER -g $REST_USER "127.0.0.1:$REST_PORT" >>"$LOG/slurmrestd.log" 2>&1 & echo $! > "$RUN/slurmrestd.pid"; })
  fi
}

write_env() {
  local token spec versions n names="" addrs=""
  token=$(scontrol token username="$JOB_USER" lifespan="$TOKEN_LIFESPAN" | sed -n 's/^SLURM_JWT=//p')
  [ -n "$token" ] || die "scontrol token failed"
  spec=$(mktemp)
  rest_ok() { curl -fsS -o "$spec" -H "X-SLURM-USER-NAME: $JOB_USER" -H "X-SLURM-USER-TOKEN: $token" "http://127.0.0.1:$REST_PORT/openapi/v3"; }
  retry 30 rest_ok || die "slurmrestd does not answer; see $LOG/slurmrestd.log"
  versions=$(grep -oE '"(\\?/)slurm\\?/v0\.0\.[0-9]+' "$spec" | grep -oE 'v0\.0\.[0-9]+' | sort -t. -k3,3n -u | paste -sd' ' -) || true
  rm -f "$spec"
  [ -n "$versions" ] || die "the served OpenAPI document has no /slurm/v0.0.x paths"
  for n in "${NODES[@]}"; do names="$names $n"; addrs="$addrs $(node_addr "$n")"; done
  mkdir -p "$ENV_DIR"
  (umask 077; cat > "$ENV_DIR/2node.env.tmp" <<EOF
SLURM_VERSION=$VERSION
SLURM_REST_URL=http://127.0.0.1:$REST_PORT
SLURM_REST_API_VERSION=${versions##* }
SLURM_REST_API_VERSIONS="$versions"
SLURM_REST_USER=$JOB_USER
SLURM_JOB_UID=$(id -u "$JOB_USER")
SLURM_JWT=$token
SLURM_JWT_KEY_FILE=$JWT_KEY
SLURM_PARTITION=main
SLURM_PREEMPT_PARTITION=urgent
SLURM_FAKE_GPUS=0
SLURM_CONF=$CONF
SLURM_NODES="${names# }"
SLURM_NODE_ADDRS="${addrs# }"
SLURM_NODE_CPUS=$NODE_CPUS
SLURM_HOST_ADDR=$HOST_ADDR
SLURM_JOBCOMP_LOG=$LOG/jobcomp.log
SLURM_CLUSTER_SCRIPT=$(readlink -f "$0")
EOF
  mv "$ENV_DIR/2node.env.tmp" "$ENV_DIR/2node.env")
}

up() {
  install_packages
  VERSION=$(slurmctld -V | awk '{print $2}')
  prepare_dirs
  net_up
  munge_up
  write_config
  if [ "$CHANGED" = 1 ] || [ "$FRESH" = 1 ]; then stop_daemons; fi
  ctld_up
  local n
  for n in "${NODES[@]}"; do node_up "$n"; done
  if ! retry 30 nodes_ready; then
    # a node left DOWN by hand (not by silence) does not return by itself
    for n in "${NODES[@]}"; do scontrol update nodename="$n" state=resume 2>/dev/null || true; done
    retry 15 nodes_ready || die "nodes not ready: $(sinfo -h -N -o '%N %T %E' | paste -sd';' -)"
  fi
  rest_up
  write_env
  log "Slurm $VERSION two-node cluster ready: ${NODES[*]} on $SUBNET.0/24, REST on 127.0.0.1:$REST_PORT, env in $ENV_DIR/2node.env"
}

down() {
  # job steps outlive slurmd: cancel while the controller still runs
  if alive "$RUN/slurmctld.pid" slurmctld; then
    local jobs
    jobs=$(squeue -h -o %A 2>/dev/null | paste -sd' ' -)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086
      scancel $jobs 2>/dev/null || true
      for _ in $(seq 50); do [ -z "$(squeue -h -t R,CG -o %A 2>/dev/null)" ] && break; sleep 0.2; done
    fi
  fi
  stop_daemons
  # shellcheck disable=SC2046
  await $(signal_pidfile "$RUN/munge/munged.pid" munged TERM)
  net_down
  rm -f "$ENV_DIR/2node.env"
}

crash_node() { # the node stops answering at once, as on a power cut: no FIN or RST reaches its peers
  local n=$NAME-$1
  [[ " ${NODES[*]} " == *" $n "* ]] || die "no node $1 (nodes: ${NODES[*]})"
  ip link set "$(node_veth "$n")" down
  kill_node_processes "$n"
  rm -f "$RUN/slurmd-$n.pid"
  log "$n crashed: link down, its processes killed; \`$0 up\` brings it back"
}

case ${1:-up} in
up) up ;;
down) down ;;
purge) down; rm -rf "$STATE" "$LOG" "$CONF_DIR" "$RUN" ;;
crash-node) [ -n "${2:-}" ] || die "usage: $0 crash-node 1|2"; crash_node "$2" ;;
*) echo "usage: $0 up|down|purge|crash-node N" >&2; exit 2 ;;
esac
