#!/usr/bin/env bash
# PostgreSQL 15 primary + one streaming replica on loopback, for the failover tests of lease-sql
# (lease-sql/tests/failover_postgres.rs) and the soak's cluster runs:
#   pg1 127.0.0.1:55432 (the first primary)
#   pg2 127.0.0.1:55433 (its streaming replica, a fresh pg_basebackup)
#   proxy 127.0.0.1:55430: where clients connect; forwards to the current primary.
# CLUSTER_PORT_OFFSET (default 0) is added to every one of these ports (both nodes and the
# proxy): a second cluster beside the one CI uses, e.g. CLUSTER_PORT_OFFSET=1000 (56432, 56433,
# proxy 56430) with a CLUSTER_DIR of its own. Give the same offset to every call on one cluster.
# Clients reach the primary through the proxy, a socat (Debian's) that the script restarts
# pointing at the new primary on `promote`: the address that moves, as a virtual IP, HAProxy or
# a cloud endpoint does in production. Restarting it drops every connection it carried, as a
# moved virtual IP does. Not the soak's fault proxy (lease-conformance's FaultProxy): that one
# lives inside one client process, and the address must be shared by separate processes (the
# tests, the soak, psql) and be switched by the script that promotes. Not a multi-host URL: sqlx
# takes one host.
#
# Replication mode (kept in $NODE_DIR/mode, set by `start MODE` or `mode MODE`):
#   async          synchronous_standby_names = '' (PostgreSQL's default): a commit is
#                  acknowledged once on the primary's disk; a failover loses what the replica
#                  had not received.
#   sync           synchronous_standby_names = 'FIRST 1 (pg1, pg2)', synchronous_commit = on:
#                  a commit is acknowledged once the replica has it on disk too.
#   remote_apply   the same, synchronous_commit = remote_apply: once the replica applied it.
# In the synchronous modes a primary with no replica attached blocks every commit until one
# attaches (no fallback to async, as Patroni's synchronous_mode_strict): that is what keeps a
# failover from losing an acknowledged commit.
#
# Small servers (shared_buffers 16MB; 1000 connections: sessions waiting for a synchronous
# standby keep theirs, and the soak's clients open new ones meanwhile). Data, config and logs under
# $CLUSTER_DIR/postgres (see lib.sh), owned by the postgres user (the server refuses root).
# Uses Debian's PostgreSQL 15 binaries (/usr/lib/postgresql/15/bin; apt-get installs
# postgresql-15 when missing) and socat. The machine's server on 5432 is never touched.
#
#   bash ci/cluster/postgres.sh start [async|sync|remote_apply] | stop | clean | status | url |
#        primary | replica | kill-primary | kill <pg1|pg2> | promote | reattach | mode MODE |
#        detach-replica | attach-replica
#
#   kill-primary    SIGKILL the primary's whole process group (a host crash); prints the node
#   promote         promote the replica (pg_promote), point the proxy at it; prints the node
#   reattach        the old primary back as the new primary's replica: pg_rewind, or a fresh
#                   pg_basebackup when rewinding fails; starts it and waits until it streams
#   detach-replica  the replica stops streaming (primary_conninfo emptied): commits made now
#                   reach the primary only (to show what a failover then loses)
#   attach-replica  the replica streams again from the primary
set -euo pipefail
CLUSTER_NAME=postgres-cluster
# shellcheck source=ci/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_DIR=$CLUSTER_DIR/postgres
NODES="pg1 pg2"
LEADER_WORD=primary
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PORT_OFFSET=${CLUSTER_PORT_OFFSET:-0}
[[ $PORT_OFFSET =~ ^[0-9]+$ ]] || die "CLUSTER_PORT_OFFSET=$PORT_OFFSET: give a whole number of ports (e.g. 1000)"
PROXY_PORT=$((55430 + PORT_OFFSET))
DB=test

node_port() {
  case $1 in
    pg1) echo $((55432 + PORT_OFFSET)) ;;
    pg2) echo $((55433 + PORT_OFFSET)) ;;
    proxy) echo $PROXY_PORT ;;
  esac
}
other() { if [[ $1 == pg1 ]]; then echo pg2; else echo pg1; fi; }
url() { echo "postgres://postgres@127.0.0.1:$PROXY_PORT/$DB"; }

as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }
# q NODE SQL : one value from NODE (empty when it does not answer).
q() {
  timeout 5 "$PGBIN/psql" -h 127.0.0.1 -p "$(node_port "$1")" -U postgres -d postgres -XAtq \
    -c "$2" 2>/dev/null || true
}
NOT_SERVING="not answering"
serving() { [[ $(q "$1" 'SELECT 1') == 1 ]]; }
in_recovery() { [[ $(q "$1" 'SELECT pg_is_in_recovery()') == t ]]; }

# primary : the node that runs and is not in recovery (the one the proxy points at when both
# claim it, after a promotion whose old primary came back on its own).
primary() {
  local n target
  target=$(cat "$NODE_DIR/proxy.target" 2>/dev/null || true)
  if [[ -n $target ]] && running "$target" && [[ $(q "$target" 'SELECT pg_is_in_recovery()') == f ]]; then
    echo "$target"
    return 0
  fi
  for n in $NODES; do
    if running "$n" && [[ $(q "$n" 'SELECT pg_is_in_recovery()') == f ]]; then
      echo "$n"
      return 0
    fi
  done
  return 1
}
leader() { primary; }
replica() {
  local n
  for n in $NODES; do
    if running "$n" && in_recovery "$n"; then
      echo "$n"
      return 0
    fi
  done
  return 1
}

mode() { cat "$NODE_DIR/mode" 2>/dev/null || echo async; }
# mode_conf MODE : the replication settings of MODE, as postgresql.conf lines.
mode_conf() {
  case $1 in
    async) printf "synchronous_standby_names = ''\nsynchronous_commit = on\n" ;;
    sync) printf "synchronous_standby_names = 'FIRST 1 (pg1, pg2)'\nsynchronous_commit = on\n" ;;
    remote_apply) printf "synchronous_standby_names = 'FIRST 1 (pg1, pg2)'\nsynchronous_commit = remote_apply\n" ;;
    *) die "mode $1: give async, sync or remote_apply" ;;
  esac
}

conninfo() { echo "host=127.0.0.1 port=$(node_port "$1") user=postgres application_name=$2"; }

# write_conf N : the settings of node N (its port is given on the command line, so a rewound or
# copied data directory keeps working under either name).
write_conf() {
  local n=$1 d=$NODE_DIR/$1
  cat >"$d/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = ''
max_connections = 1000
superuser_reserved_connections = 10
shared_buffers = 16MB
wal_level = replica
max_wal_senders = 4
max_replication_slots = 4
wal_keep_size = 128MB
wal_log_hints = on
hot_standby = on
wal_receiver_status_interval = 1s
wal_retrieve_retry_interval = 500ms
fsync = on
log_line_prefix = '%m [%p] '
include_if_exists = '$NODE_DIR/mode.conf'
CONF
  chown postgres:postgres "$d/postgresql.conf"
}

write_mode() {
  mode_conf "$1" >"$NODE_DIR/mode.conf"
  echo "$1" >"$NODE_DIR/mode"
  chmod 644 "$NODE_DIR/mode.conf"
}

# as_standby N OF : node N's directory made a standby of node OF.
as_standby() {
  local n=$1 of=$2 d=$NODE_DIR/$1
  as_pg touch "$d/standby.signal"
  # postgresql.auto.conf is ALTER SYSTEM's file: keep only the primary_conninfo line of ours.
  as_pg bash -c "grep -v '^primary_conninfo' '$d/postgresql.auto.conf' >'$d/auto.tmp' 2>/dev/null; \
    echo \"primary_conninfo = '$(conninfo "$of" "$n")'\" >>'$d/auto.tmp'; mv '$d/auto.tmp' '$d/postgresql.auto.conf'"
}

init_primary() {
  local d=$NODE_DIR/pg1
  log "initdb pg1"
  install -d -o postgres -g postgres -m 700 "$d"
  as_pg "$PGBIN/initdb" -D "$d" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >>"$NODE_DIR/pg1.log" 2>&1 ||
    die "initdb failed: $(tail -n 3 "$NODE_DIR/pg1.log")"
  write_conf pg1
}

# basebackup N FROM : a fresh copy of FROM's data as N, a standby of FROM.
basebackup() {
  local n=$1 from=$2 d=$NODE_DIR/$1
  rm -rf "$d"
  install -d -o postgres -g postgres -m 700 "$d"
  log "pg_basebackup $n from $from"
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$(node_port "$from")" -U postgres -D "$d" \
    --wal-method=stream --checkpoint=fast >>"$NODE_DIR/$n.log" 2>&1 ||
    die "pg_basebackup of $n failed: $(tail -n 3 "$NODE_DIR/$n.log")"
  write_conf "$n"
  as_standby "$n" "$from"
}

start_pg() {
  local n=$1
  running "$n" && return 0
  write_conf "$n"
  log "starting $n on $(node_port "$n")"
  spawn "$n" setpriv --reuid=postgres --regid=postgres --init-groups -- \
    "$PGBIN/postgres" -D "$NODE_DIR/$n" -c port="$(node_port "$n")"
}

start_proxy() {
  local target=$1
  signal_group KILL proxy
  echo "$target" >"$NODE_DIR/proxy.target"
  spawn proxy socat "TCP-LISTEN:$PROXY_PORT,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$(node_port "$target")"
  wait_until proxy_up || die "proxy not listening on $PROXY_PORT"
}
proxy_up() { ss -Hltn "sport = :$PROXY_PORT" | grep -q .; }

# signal_group SIGNAL NODE : SIGNAL to NODE's whole process group (spawn gives each node a
# session of its own: the postmaster and its backends, or socat and its forks); waits until the
# leader is gone. INT is PostgreSQL's fast shutdown (sessions ended, data kept); KILL a crash.
signal_group() {
  local sig=$1 node=$2 pid
  pid=$(pid_of "$node")
  [[ -n $pid ]] || return 0
  kill -s "$sig" -- "-$pid" 2>/dev/null || true
  wait_until bash -c "! kill -0 $pid 2>/dev/null" || true
  # The backends of a SIGKILLed postmaster: gone before a restart reuses the data directory.
  if [[ $sig == KILL ]]; then wait_until bash -c "! pgrep -g $pid >/dev/null" || true; fi
  rm -f "$NODE_DIR/$node.pid"
}

streaming() {
  local p=$1 r=$2
  [[ $(q "$p" "SELECT count(*) FROM pg_stat_replication WHERE application_name = '$r' AND state = 'streaming'") == 1 ]]
}

cmd_start() {
  local m=${1:-}
  need setpriv util-linux
  need socat socat
  [[ -x $PGBIN/postgres ]] || need "$PGBIN/postgres" postgresql-15
  mkdir -p "$NODE_DIR"
  chmod 755 "$NODE_DIR"
  if [[ -n $m ]]; then write_mode "$m"; elif [[ ! -f $NODE_DIR/mode.conf ]]; then write_mode async; fi
  if [[ ! -f $NODE_DIR/pg1/PG_VERSION ]]; then init_primary; fi
  # The last primary first (the proxy's target), then the other: as a replica when its data
  # says so, else (an old primary never reattached) rewound onto the primary, never a second
  # primary.
  local p o
  p=$(cat "$NODE_DIR/proxy.target" 2>/dev/null || echo pg1)
  if [[ -f $NODE_DIR/$p/standby.signal ]] && running "$(other "$p")"; then p=$(other "$p"); fi
  start_pg "$p"
  wait_until serving "$p" || die "$p not answering: $(tail -n 3 "$NODE_DIR/$p.log")"
  if in_recovery "$p"; then
    # Both were replicas (a promotion cut short): promote this one.
    q "$p" 'SELECT pg_promote(true, 30)' >/dev/null
  fi
  o=$(other "$p")
  if [[ -f $NODE_DIR/$o/PG_VERSION ]]; then
    if [[ -f $NODE_DIR/$o/standby.signal ]]; then
      start_pg "$o"
    elif ! running "$o"; then
      cmd_reattach >/dev/null
    fi
  fi
  p=$(primary) || die "no primary among the running nodes"
  if [[ $(q "$p" "SELECT 1 FROM pg_database WHERE datname = '$DB'") != 1 ]]; then
    q "$p" "CREATE DATABASE $DB" >/dev/null
  fi
  if [[ ! -f $NODE_DIR/$(other "$p")/PG_VERSION ]]; then
    basebackup "$(other "$p")" "$p"
    start_pg "$(other "$p")"
  fi
  if [[ -n $m ]]; then reload_all; fi
  [[ $(cat "$NODE_DIR/proxy.target" 2>/dev/null) == "$p" ]] && running proxy || start_proxy "$p"
  wait_until streaming "$p" "$(other "$p")" || die "$(other "$p") not streaming from $p"
  log "up ($(mode)): $(url), primary $p"
}

reload_all() {
  local n
  for n in $NODES; do if running "$n"; then q "$n" 'SELECT pg_reload_conf()' >/dev/null; fi; done
}

cmd_kill() {
  local target=$1
  running "$target" || die "$target is not running: nothing to kill"
  signal_group KILL "$target"
  echo "$target"
}

cmd_promote() {
  local r
  r=$(replica) || die "no replica to promote"
  log "promoting $r"
  [[ $(q "$r" 'SELECT pg_promote(true, 30)') == t ]] || die "pg_promote on $r failed"
  wait_until bash -c "[[ \$(timeout 5 $PGBIN/psql -h 127.0.0.1 -p $(node_port "$r") -U postgres -d postgres -XAtqc 'SELECT pg_is_in_recovery()' 2>/dev/null) == f ]]" ||
    die "$r still in recovery"
  start_proxy "$r"
  echo "$r"
}

cmd_reattach() {
  local p old d
  p=$(primary) || die "no primary to reattach to"
  old=$(other "$p")
  d=$NODE_DIR/$old
  if running "$old" && in_recovery "$old"; then
    wait_until streaming "$p" "$old" || die "$old runs as a replica but does not stream from $p"
    echo "$old"
    return 0
  fi
  signal_group INT "$old"
  # A promoted server writes its new timeline to its control file at its next checkpoint;
  # before that pg_rewind sees one timeline and rewinds nothing.
  q "$p" CHECKPOINT >/dev/null
  log "pg_rewind $old onto $p"
  if [[ -f $d/PG_VERSION ]] && as_pg "$PGBIN/pg_rewind" --target-pgdata="$d" \
    --source-server="host=127.0.0.1 port=$(node_port "$p") user=postgres dbname=postgres" \
    >>"$NODE_DIR/$old.log" 2>&1; then
    write_conf "$old"
    as_standby "$old" "$p"
  else
    log "pg_rewind of $old failed: a fresh base backup"
    basebackup "$old" "$p"
  fi
  start_pg "$old"
  if ! WAIT_SECS=10 wait_until streaming "$p" "$old"; then
    log "$old does not stream after the rewind: a fresh base backup"
    signal_group INT "$old"
    basebackup "$old" "$p"
    start_pg "$old"
    wait_until streaming "$p" "$old" || die "$old not streaming from $p: $(tail -n 3 "$NODE_DIR/$old.log")"
  fi
  echo "$old"
}

# set_conninfo VALUE : the replica's primary_conninfo (reloadable since PostgreSQL 13).
set_conninfo() {
  local r
  r=$(replica) || die "no replica"
  q "$r" "ALTER SYSTEM SET primary_conninfo = '$1'" >/dev/null
  q "$r" 'SELECT pg_reload_conf()' >/dev/null
  echo "$r"
}

case ${1:-} in
  start) cmd_start "${2:-}" ;;
  stop | clean)
    signal_group KILL proxy
    for n in $NODES; do signal_group INT "$n"; done
    if [[ $1 == clean ]]; then rm -rf "$NODE_DIR"; fi
    ;;
  status)
    for n in $NODES; do
      if ! running "$n"; then
        echo "$n down"
      elif serving "$n"; then
        if in_recovery "$n"; then echo "$n replica 127.0.0.1:$(node_port "$n")"; else echo "$n primary 127.0.0.1:$(node_port "$n")"; fi
      else
        echo "$n running, $NOT_SERVING"
      fi
    done
    echo "proxy 127.0.0.1:$PROXY_PORT -> $(cat "$NODE_DIR/proxy.target" 2>/dev/null || echo none)$(running proxy || echo ' (down)')"
    echo "mode $(mode)"
    ;;
  url) url ;;
  primary | leader) primary ;;
  replica) replica ;;
  kill-primary)
    p=$(cat "$NODE_DIR/proxy.target" 2>/dev/null || true)
    [[ -n $p ]] || p=$(primary) || die "no primary to kill"
    cmd_kill "$p"
    ;;
  kill)
    is_node "${2:-}" || usage
    cmd_kill "$2"
    ;;
  promote) cmd_promote ;;
  reattach) cmd_reattach ;;
  mode)
    [[ -n ${2:-} ]] || die "mode: give async, sync or remote_apply"
    write_mode "$2"
    reload_all
    # New sessions get the mode once the postmaster has read the file again.
    want=$(mode_conf "$2" | sed -n "s/^synchronous_standby_names = '\(.*\)'$/\1/p")
    p=$(primary) || die "no primary"
    wait_until bash -c "[[ \$(timeout 5 $PGBIN/psql -h 127.0.0.1 -p $(node_port "$p") -U postgres -d postgres -XAtqc 'SHOW synchronous_standby_names' 2>/dev/null) == \"$want\" ]]" ||
      die "$p does not show the $2 mode"
    ;;
  detach-replica)
    r=$(set_conninfo '')
    wait_until bash -c "[[ -z \$(timeout 5 $PGBIN/psql -h 127.0.0.1 -p $(node_port "$r") -U postgres -d postgres -XAtqc 'SELECT pid FROM pg_stat_wal_receiver' 2>/dev/null) ]]" ||
      die "$r still receiving"
    echo "$r"
    ;;
  attach-replica)
    p=$(primary) || die "no primary"
    r=$(set_conninfo "$(conninfo "$p" "$(other "$p")")")
    wait_until streaming "$p" "$r" || die "$r not streaming"
    echo "$r"
    ;;
  *)
    echo "usage: $0 start [async|sync|remote_apply] | stop | clean | status | url | primary | replica | kill-primary | kill <pg1|pg2> | promote | reattach | mode MODE | detach-replica | attach-replica" >&2
    exit 2
    ;;
esac
