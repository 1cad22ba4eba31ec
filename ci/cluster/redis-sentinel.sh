#!/usr/bin/env bash
# Redis primary + 2 replicas + 3 Sentinels on loopback for the cluster runs of the lease soak:
#   r1 Redis 127.0.0.1:63791 (the first primary)   s1 Sentinel 127.0.0.1:26391
#   r2 Redis 127.0.0.1:63792 (a replica)           s2 Sentinel 127.0.0.1:26392
#   r3 Redis 127.0.0.1:63793 (a replica)           s3 Sentinel 127.0.0.1:26393
# Two replicas, so that a store waiting for one replica's acknowledgement (replica_acks(1)) still
# finds one while a killed node is away.
# Master name `lease-ci`, quorum 2, down-after 1000 ms, failover timeout 5 s. Redis nodes keep
# an AOF synced on every write (what lease-redis's start-up check asks for). Replication is
# asynchronous: see lease-redis/README.md, "Failover", for what that costs a lease and the
# store's remedy (RedisConfig::replica_acks). Config files, data and logs under
# $CLUSTER_DIR/redis (see lib.sh); Sentinel and Redis rewrite their config files on failover,
# so a restart keeps the roles they agreed on. Uses the machine's redis-server (`redis-server
# --sentinel` runs a Sentinel; apt-get installs it when missing). The single Redis on 6379 is never touched.
#
#   bash ci/cluster/redis-sentinel.sh start|stop|clean|status|kill <r1|r2|r3|s1|s2|s3|primary>|
#                                     freeze <node|primary>|thaw <node>|restart <node>|url|primary|leader
#
# `freeze` stops a node with SIGSTOP (cut off from clients, replicas and Sentinels alike, as in a
# network partition: the Sentinels fail over after 1 s) and prints it; `thaw` continues it.
set -euo pipefail
CLUSTER_NAME=redis-sentinel
# shellcheck source=ci/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_DIR=$CLUSTER_DIR/redis
NODES="r1 r2 r3 s1 s2 s3"
LEADER_WORD=primary
MASTER=lease-ci
STOP_ORDER="s1 s2 s3 r1 r2 r3"

node_port() {
  case $1 in
    r*) echo $((63790 + ${1#r})) ;;
    s*) echo $((26390 + ${1#s})) ;;
  esac
}
url() { echo "redis+sentinel://127.0.0.1:26391,127.0.0.1:26392,127.0.0.1:26393/$MASTER"; }

rcli() { timeout 3 redis-cli -h 127.0.0.1 -p "$@" 2>/dev/null; }
NOT_SERVING="not answering"
serving() { [[ $(rcli "$(node_port "$1")" ping) == PONG ]]; }

# leader : the node the Sentinels name as primary (the first Sentinel that answers).
leader() {
  local s p
  for s in s1 s2 s3; do
    p=$(rcli "$(node_port "$s")" sentinel get-master-addr-by-name "$MASTER" | sed -n 2p)
    case $p in
      63791) echo r1; return 0 ;;
      63792) echo r2; return 0 ;;
      63793) echo r3; return 0 ;;
    esac
  done
  return 1
}

# in_sync : the primary has both replicas online.
in_sync() {
  local p
  p=$(leader) || return 1
  rcli "$(node_port "$p")" info replication | grep -q '^connected_slaves:2'
}

after_start() {
  wait_until in_sync || die "no primary with both replicas online after ${WAIT_SECS}s"
}

# node_conf N : the settings every node has, Redis and Sentinel alike.
node_conf() {
  cat <<CONF
port $(node_port "$1")
bind 127.0.0.1
protected-mode no
daemonize no
dir $NODE_DIR/$1
CONF
}

write_config() {
  local n=$1 file="$NODE_DIR/$n.conf"
  [[ -f $file ]] && return 0
  case $n in
    r*)
      {
        node_conf "$n"
        cat <<CONF
appendonly yes
appendfsync always
repl-diskless-sync-delay 0
save ""
CONF
      } >"$file"
      if [[ $n != r1 ]]; then echo "replicaof 127.0.0.1 $(node_port r1)" >>"$file"; fi
      ;;
    s*)
      {
        node_conf "$n"
        cat <<CONF
sentinel monitor $MASTER 127.0.0.1 $(node_port r1) 2
sentinel down-after-milliseconds $MASTER 1000
sentinel failover-timeout $MASTER 5000
sentinel parallel-syncs $MASTER 1
CONF
      } >"$file"
      ;;
  esac
}

start_node() {
  local n=$1
  if running "$n"; then return 0; fi
  need redis-server redis-server
  need redis-cli redis-tools
  mkdir -p "$NODE_DIR/$n"
  write_config "$n"
  log "starting $n on $(node_port "$n")"
  case $n in
    r*) spawn "$n" redis-server "$NODE_DIR/$n.conf" ;;
    s*) spawn "$n" redis-server "$NODE_DIR/$n.conf" --sentinel ;;
  esac
}

case ${1:-} in
  freeze)
    target=$(target_node "${2:-}" freeze)
    pid=$(pid_of "$target")
    [[ -n $pid ]] || die "$target is not running"
    kill -s STOP "$pid"
    echo "$target"
    ;;
  thaw)
    target=${2:-}
    is_node "$target" || usage
    pid=$(pid_of "$target")
    [[ -n $pid ]] || die "$target is not running"
    kill -s CONT "$pid"
    ;;
  primary) leader ;;
  *) cluster_main "$@" ;;
esac
