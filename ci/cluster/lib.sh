#!/usr/bin/env bash
# Shared helpers of the cluster scripts (ci/cluster/etcd.sh, nats.sh, redis-sentinel.sh):
# process bookkeeping by pid file, waiting, the usage line, and the commands every cluster has
# (cluster_main). Sourced, never run.
#
# Every process a cluster script starts is recorded in $CLUSTER_DIR/<cluster>/<node>.pid and
# logs to $CLUSTER_DIR/<cluster>/<node>.log; nothing is found or stopped by name, so the
# shared single servers (etcd 2379, NATS 4222, Redis 6379) are never touched.
# CLUSTER_DIR defaults to /var/lib/lease-ci/cluster (root) or $TMPDIR/lease-ci-cluster.
set -euo pipefail

if [[ -z ${CLUSTER_DIR:-} ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    CLUSTER_DIR=/var/lib/lease-ci/cluster
  else
    CLUSTER_DIR=${TMPDIR:-/tmp}/lease-ci-cluster
  fi
fi
WAIT_SECS=${WAIT_SECS:-30}

# reserve_ports RANGE... : adds port ranges (e.g. 42220-42243) to the kernel's reserved ports, so
# that no outgoing connection is given one of them as its local port. The clusters' fixed ports
# lie in Linux's ephemeral range (32768-60999): a test's or soak's connection could hold one when
# a node starts, which then fails to bind ("address already in use": seen on the NATS cluster's
# route port 42232 in .ci/run, after which it had no JetStream meta leader). Explicit binds still
# work on reserved ports. Root only (elsewhere a no-op); the list is the network namespace's, and
# a reboot clears it.
reserve_ports() {
  local file=/proc/sys/net/ipv4/ip_local_reserved_ports current IFS=,
  [[ -w $file ]] || return 0
  current=$(cat "$file" 2>/dev/null || true)
  echo "${current:+$current,}$*" >"$file" 2>/dev/null || true
}
# Every cluster's ports in the ephemeral range (etcd's 237xx/238xx, Redis's 263xx/637xx are
# below or above it): NATS 42220-42243; the MariaDB and PostgreSQL clusters' nodes and proxies,
# moved by CLUSTER_PORT_OFFSET as their scripts move them.
reserve_ports 42220-42243 \
  "$((33060 + ${CLUSTER_PORT_OFFSET:-0}))-$((33062 + ${CLUSTER_PORT_OFFSET:-0}))" \
  "$((55430 + ${CLUSTER_PORT_OFFSET:-0}))-$((55433 + ${CLUSTER_PORT_OFFSET:-0}))"

log() { echo "${CLUSTER_NAME:-cluster}: $*" >&2; }
die() {
  log "$*"
  exit 1
}

# need COMMAND PACKAGE : installs Debian's PACKAGE with apt-get when COMMAND is missing (a
# fresh machine), keeping the package's maintainer scripts from starting its service (a
# temporary policy-rc.d, as ci/start-services.sh does); dies when that fails.
need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  command -v apt-get >/dev/null 2>&1 || die "no $1, and no apt-get to install $2"
  local policy=/usr/sbin/policy-rc.d made=0 rc=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1; fi
  log "no $1: apt-get install $2"
  { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2"; } >&2 || rc=$?
  if ((made)); then rm -f "$policy"; fi
  ((rc == 0)) && command -v "$1" >/dev/null 2>&1 || die "apt-get install $2 failed (no $1)"
}

# pid_of NODE : the pid recorded for NODE when that process is alive, else nothing.
pid_of() {
  local file="$NODE_DIR/$1.pid" pid
  [[ -f $file ]] || return 0
  pid=$(<"$file")
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then echo "$pid"; fi
}

running() { [[ -n $(pid_of "$1") ]]; }

# spawn NODE COMMAND... : starts COMMAND in the background in a session of its own, output to
# NODE's log, and records its pid.
spawn() {
  local node=$1
  shift
  setsid "$@" >>"$NODE_DIR/$node.log" 2>&1 </dev/null &
  echo $! >"$NODE_DIR/$node.pid"
}

# signal_node SIGNAL NODE : sends SIGNAL to NODE's process, if running; with KILL waits until
# it is gone, with TERM up to WAIT_SECS (then KILL).
signal_node() {
  local sig=$1 node=$2 pid deadline
  pid=$(pid_of "$node")
  [[ -n $pid ]] || return 0
  kill -s "$sig" "$pid" 2>/dev/null || true
  deadline=$((SECONDS + WAIT_SECS))
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      log "$node (pid $pid) still running after SIG$sig for ${WAIT_SECS}s: SIGKILL"
      kill -s KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.05
  done
  rm -f "$NODE_DIR/$node.pid"
}

# wait_until PROBE ARGS... : polls PROBE until it succeeds or WAIT_SECS pass.
wait_until() {
  local deadline=$((SECONDS + WAIT_SECS))
  while ((SECONDS < deadline)); do
    if "$@"; then return 0; fi
    sleep 0.1
  done
  "$@"
}

# is_node NAME : whether NAME is one of $NODES.
is_node() {
  local n
  for n in $NODES; do [[ $n == "$1" ]] && return 0; done
  return 1
}

usage() {
  cat >&2 <<USAGE
usage: $0 start | stop | clean | status | kill <${NODES// /|}|$LEADER_WORD> | restart <node> | url
  start    start every node that is not running (idempotent), wait until the cluster serves
  stop     stop every node gracefully (SIGTERM), keep the data
  clean    stop, then remove the data ($NODE_DIR)
  status   one line per node (up/down), and the $LEADER_WORD
  kill X   SIGKILL node X, or the current $LEADER_WORD; prints the node killed
  restart X start node X again on its data (after a kill or a stop), wait until it serves
  leader   the name of the current $LEADER_WORD
  url      the client URL of the cluster
  (redis-sentinel.sh also: freeze <node|primary> (SIGSTOP) and thaw <node> (SIGCONT))
USAGE
  exit 2
}

# target_node NAME VERB : NAME, or the current $LEADER_WORD's node when NAME is that word;
# exits with the usage line when it names no node.
target_node() {
  local target=$1
  [[ -n $target ]] || usage
  if [[ $target == "$LEADER_WORD" ]]; then target=$(leader) || die "no $LEADER_WORD to $2"; fi
  is_node "$target" || usage
  echo "$target"
}

# cluster_main COMMAND [NODE] : the commands every cluster script has. The script defines
#   start_node N   start node N unless it runs (idempotent)
#   serving N      whether node N serves; NOT_SERVING says what it lacks otherwise
#   node_port N    the port clients reach N on
#   leader, url    as in the usage line
# and may define after_start (waits for what the whole cluster must reach) and STOP_ORDER (the
# order nodes are stopped in; $NODES by default).
cluster_main() {
  local cmd=${1:-} n target
  case $cmd in
    start)
      mkdir -p "$NODE_DIR"
      for n in $NODES; do start_node "$n"; done
      for n in $NODES; do
        wait_until serving "$n" || die "$n $NOT_SERVING after ${WAIT_SECS}s: $(tail -n 2 "$NODE_DIR/$n.log")"
      done
      if declare -F after_start >/dev/null; then after_start; fi
      log "up: $(url), $LEADER_WORD $(leader || echo none)"
      ;;
    stop | clean)
      for n in ${STOP_ORDER:-$NODES}; do signal_node TERM "$n"; done
      if [[ $cmd == clean ]]; then rm -rf "$NODE_DIR"; fi
      ;;
    status)
      for n in $NODES; do
        if ! running "$n"; then
          echo "$n down"
        elif serving "$n"; then
          echo "$n up 127.0.0.1:$(node_port "$n")"
        else
          echo "$n running, $NOT_SERVING"
        fi
      done
      echo "$LEADER_WORD $(leader || echo none)"
      ;;
    kill)
      target=$(target_node "${2:-}" kill)
      # A node whose process is not recorded (a pid file that could not be written, e.g. on a
      # full disk) would be "killed" without a signal: say so instead.
      running "$target" || die "$target is not running (no live pid in $NODE_DIR/$target.pid): nothing to kill"
      signal_node KILL "$target"
      echo "$target"
      ;;
    restart)
      target=${2:-}
      is_node "$target" || usage
      signal_node TERM "$target"
      start_node "$target"
      wait_until serving "$target" || die "$target $NOT_SERVING after ${WAIT_SECS}s"
      ;;
    leader) leader ;;
    url) url ;;
    *) usage ;;
  esac
}
