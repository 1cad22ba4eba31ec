#!/usr/bin/env bash
# MariaDB 10.11 primary + one replica on loopback, for the failover tests of lease-sql
# (lease-sql/tests/failover_mysql.rs):
#   m1 127.0.0.1:33061 (the first primary)
#   m2 127.0.0.1:33062 (its replica: GTID replication, log_slave_updates)
#   proxy 127.0.0.1:33060: where clients connect; forwards to the current primary (a socat the
#   script restarts on `promote`, as ci/cluster/postgres.sh: an address that moves, shared by
#   separate processes and switched by the script that promotes; see there).
# CLUSTER_PORT_OFFSET (default 0) is added to every one of these ports (both nodes and the
# proxy): a second cluster beside the one CI uses, e.g. CLUSTER_PORT_OFFSET=1000 (34061, 34062,
# proxy 34060) with a CLUSTER_DIR of its own. Give the same offset to every call on one cluster.
#
# Replication mode (kept in $NODE_DIR/mode, set by `start MODE` or `mode MODE`):
#   async     MariaDB's default: a commit is acknowledged once in the primary's binlog; a
#             failover loses what the replica had not received.
#   semisync  semi-synchronous replication (built into MariaDB since 10.3, no plugin to load):
#             rpl_semi_sync_master_enabled and _slave_enabled on both nodes, wait point
#             AFTER_SYNC (the commit becomes visible only once a replica has it in its relay
#             log), rpl_semi_sync_master_timeout 1 h (MariaDB's 10 s default falls back to
#             asynchronous replication, silently, after 10 s without a replica).
# `promote` stops the replica's receiving, waits until it applied all it received
# (MASTER_GTID_WAIT on its Gtid_IO_Pos, up to APPLY_SECS, default 120), then opens it for
# writes; `reattach` makes the old primary a fresh replica of the new one (a new data directory
# replicating the new primary's whole binlog, which log_slave_updates keeps complete: a killed
# primary can hold commits the new one never had, and GTID replication would refuse its
# diverged history). The semi-synchronous acknowledgement comes once a transaction is in the
# replica's relay log, not once applied, and a reattached replica replays that whole binlog
# (one soak run found its SQL thread 13,000 transactions behind 40 s after the reattach): so a
# replica applies without flushing each transaction (innodb_flush_log_at_trx_commit = 2,
# sync_binlog = 0: the scripts kill server processes, never the host, and the relay log it
# acknowledged from is what a promotion relies on), and the node promoted flushes every commit
# again (both = 1) before it takes writes.
#
# Galera (Debian's galera-4 26.4 is installed on this machine kind) is not run: see
# README, "Guarantees per backend" (left for later, not shown here).
#
# Small servers (16 MB buffer pool, no performance schema). Data, config and logs under
# $CLUSTER_DIR/mariadb (see lib.sh); the servers run as the mysql user. Uses the machine's
# mariadbd (apt-get installs mariadb-server when missing) and socat. The machine's server on 3306
# is never touched.
#
#   bash ci/cluster/mariadb.sh start [async|semisync] | stop | clean | status | url | primary |
#        replica | kill-primary | kill <m1|m2> | promote | reattach | mode MODE |
#        detach-replica | attach-replica
set -euo pipefail
CLUSTER_NAME=mariadb-cluster
# shellcheck source=ci/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_DIR=$CLUSTER_DIR/mariadb
NODES="m1 m2"
LEADER_WORD=primary
PORT_OFFSET=${CLUSTER_PORT_OFFSET:-0}
[[ $PORT_OFFSET =~ ^[0-9]+$ ]] || die "CLUSTER_PORT_OFFSET=$PORT_OFFSET: give a whole number of ports (e.g. 1000)"
PROXY_PORT=$((33060 + PORT_OFFSET))
DB=test

node_port() {
  case $1 in
    m1) echo $((33061 + PORT_OFFSET)) ;;
    m2) echo $((33062 + PORT_OFFSET)) ;;
  esac
}
other() { if [[ $1 == m1 ]]; then echo m2; else echo m1; fi; }
url() { echo "mysql://root@127.0.0.1:$PROXY_PORT/$DB"; }

# q NODE SQL : the answer of NODE (tab-separated, no headers; empty when it does not answer).
q() { timeout 10 mariadb -h 127.0.0.1 -P "$(node_port "$1")" -u root -N -B -e "$2" 2>/dev/null || true; }
# q_for SECS NODE SQL : as q, for a statement that may take up to SECS (a MASTER_GTID_WAIT).
q_for() { timeout "$(($1 + 10))" mariadb -h 127.0.0.1 -P "$(node_port "$2")" -u root -N -B -e "$3" 2>/dev/null || true; }
# APPLY_SECS : how long `promote` waits for the replica to apply what it received (a
# reattached replica replays the new primary's whole binlog, which grows with every run on the
# cluster). q's own 10 s bound cut the wait short before.
APPLY_SECS=${APPLY_SECS:-120}
# slave_status NODE : NODE's SHOW SLAVE STATUS, one "Field: value" a line.
slave_status() { timeout 10 mariadb -h 127.0.0.1 -P "$(node_port "$1")" -u root -B -e 'SHOW SLAVE STATUS\G' 2>/dev/null || true; }
# qs NODE SQL : SQL over NODE's socket (before the TCP user exists).
qs() { mariadb -S "$NODE_DIR/$1/mariadbd.sock" -u root -N -B -e "$2"; }
NOT_SERVING="not answering"
serving() { [[ $(q "$1" 'SELECT 1') == 1 ]]; }
is_replica() { [[ -n $(q "$1" 'SHOW SLAVE STATUS') ]]; }

primary() {
  local n target
  target=$(cat "$NODE_DIR/proxy.target" 2>/dev/null || true)
  if [[ -n $target ]] && running "$target" && serving "$target" && ! is_replica "$target"; then
    echo "$target"
    return 0
  fi
  for n in $NODES; do
    if running "$n" && serving "$n" && ! is_replica "$n"; then
      echo "$n"
      return 0
    fi
  done
  return 1
}
replica() {
  local n
  for n in $NODES; do
    if running "$n" && is_replica "$n"; then
      echo "$n"
      return 0
    fi
  done
  return 1
}

mode() { cat "$NODE_DIR/mode" 2>/dev/null || echo async; }
# mode_sql MODE ROLE : the statements that set MODE on a running node of ROLE (primary or
# replica). Only the primary waits for acknowledgements: a replica with the master side on would
# make its own applier wait for replicas of its own (log_slave_updates), none, forever.
mode_sql() {
  local master=OFF slave=OFF
  case $1 in
    async) ;;
    semisync) slave=ON; if [[ $2 == primary ]]; then master=ON; fi ;;
    *) die "mode $1: give async or semisync" ;;
  esac
  # Durable commits on the primary; a replica applies without a flush per transaction (see the
  # header).
  local flush=1 sync=1
  if [[ $2 == replica ]]; then flush=2 sync=0; fi
  echo "SET GLOBAL innodb_flush_log_at_trx_commit = $flush; SET GLOBAL sync_binlog = $sync; SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC; SET GLOBAL rpl_semi_sync_master_timeout = 3600000; SET GLOBAL rpl_semi_sync_slave_enabled = $slave; SET GLOBAL rpl_semi_sync_master_enabled = $master"
}
# mode_conf MODE : what a node starts with (as a replica; `start` and `promote` turn the
# primary's side on).
mode_conf() {
  local slave=OFF
  if [[ $1 == semisync ]]; then slave=ON; fi
  printf "rpl_semi_sync_master_enabled = OFF\nrpl_semi_sync_slave_enabled = %s\nrpl_semi_sync_master_wait_point = AFTER_SYNC\nrpl_semi_sync_master_timeout = 3600000\n" "$slave"
}

write_conf() {
  local n=$1 id
  id=$(cat "$NODE_DIR/$n.id" 2>/dev/null || echo "${n#m}")
  {
    cat <<CONF
[mariadbd]
datadir = $NODE_DIR/$n
socket = $NODE_DIR/$n/mariadbd.sock
pid-file = $NODE_DIR/$n/mariadb.pid
port = $(node_port "$n")
bind-address = 127.0.0.1
server-id = $id
log-bin = $NODE_DIR/$n/binlog
log-slave-updates = ON
binlog-format = ROW
gtid-strict-mode = ON
sync-binlog = 1
innodb-flush-log-at-trx-commit = 1
innodb-buffer-pool-size = 16M
performance-schema = OFF
max-connections = 1000
skip-name-resolve = ON
relay-log = $NODE_DIR/$n/relay
CONF
    mode_conf "$(mode)"
  } >"$NODE_DIR/$n.cnf"
}

start_db() {
  local n=$1
  running "$n" && return 0
  write_conf "$n"
  log "starting $n on $(node_port "$n")"
  spawn "$n" mariadbd --defaults-file="$NODE_DIR/$n.cnf" --user=mysql
}

# fresh N : a new data directory for N, started, with the root user over TCP (not binlogged).
fresh() {
  local n=$1 id
  signal_node TERM "$n"
  rm -rf "${NODE_DIR:?}/$n"
  # A new server_id for every new data directory: a replica skips the events of its own
  # server_id, and the new primary's binlog holds the old primary's events under the id this
  # node had before.
  id=$(cat "$NODE_DIR/next.id" 2>/dev/null || echo 1)
  echo $((id + 1)) >"$NODE_DIR/next.id"
  echo "$id" >"$NODE_DIR/$n.id"
  install -d -o mysql -g mysql -m 750 "$NODE_DIR/$n"
  write_conf "$n"
  log "mariadb-install-db $n"
  mariadb-install-db --defaults-file="$NODE_DIR/$n.cnf" --user=mysql --auth-root-authentication-method=normal \
    --skip-test-db >>"$NODE_DIR/$n.log" 2>&1 || die "mariadb-install-db $n failed: $(tail -n 3 "$NODE_DIR/$n.log")"
  start_db "$n"
  wait_until bash -c "mariadb -S '$NODE_DIR/$n/mariadbd.sock' -u root -e 'SELECT 1' >/dev/null 2>&1" ||
    die "$n not answering on its socket: $(tail -n 3 "$NODE_DIR/$n.log")"
  qs "$n" "SET sql_log_bin = 0; CREATE USER IF NOT EXISTS root@'127.0.0.1'; GRANT ALL ON *.* TO root@'127.0.0.1' WITH GRANT OPTION; FLUSH PRIVILEGES"
}

# follow N OF : N replicates from OF (from the start of OF's binlog when N is fresh).
follow() {
  local n=$1 of=$2
  q "$n" "STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = ON;
    CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = $(node_port "$of"), MASTER_USER = 'root',
      MASTER_CONNECT_RETRY = 1, MASTER_USE_GTID = slave_pos;
    START SLAVE" >/dev/null
}

replicating() {
  local p=$1 r=$2 st
  st=$(slave_status "$r")
  grep -q 'Slave_IO_Running: Yes' <<<"$st" && grep -q 'Slave_SQL_Running: Yes' <<<"$st" &&
    grep -q "Master_Port: $(node_port "$p")" <<<"$st" &&
    [[ $(q "$p" "SHOW GLOBAL STATUS LIKE 'Slaves_connected'" | cut -f2) -ge 1 ]] &&
    { [[ $(mode) != semisync ]] || [[ $(q "$p" "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'" | cut -f2) -ge 1 ]]; }
}

start_proxy() {
  local target=$1
  signal_group KILL proxy
  echo "$target" >"$NODE_DIR/proxy.target"
  spawn proxy socat "TCP-LISTEN:$PROXY_PORT,bind=127.0.0.1,fork,reuseaddr" "TCP:127.0.0.1:$(node_port "$target")"
  wait_until proxy_up || die "proxy not listening on $PROXY_PORT"
}
proxy_up() { ss -Hltn "sport = :$PROXY_PORT" | grep -q .; }

# signal_group SIGNAL NODE : SIGNAL to NODE's whole process group; waits until it is gone.
signal_group() {
  local sig=$1 node=$2 pid
  pid=$(pid_of "$node")
  [[ -n $pid ]] || return 0
  kill -s "$sig" -- "-$pid" 2>/dev/null || true
  wait_until bash -c "! kill -0 $pid 2>/dev/null" || true
  rm -f "$NODE_DIR/$node.pid"
}

cmd_start() {
  local m=${1:-} p o
  need socat socat
  need mariadbd mariadb-server
  mkdir -p "$NODE_DIR"
  chmod 755 "$NODE_DIR"
  if [[ -n $m ]]; then
    mode_sql "$m" primary >/dev/null
    echo "$m" >"$NODE_DIR/mode"
  fi
  if [[ ! -d $NODE_DIR/m1/mysql ]]; then
    fresh m1
    q m1 "CREATE DATABASE IF NOT EXISTS $DB" >/dev/null
  fi
  p=$(cat "$NODE_DIR/proxy.target" 2>/dev/null || echo m1)
  o=$(other "$p")
  start_db "$p"
  wait_until serving "$p" || die "$p not answering: $(tail -n 3 "$NODE_DIR/$p.log")"
  if [[ -n $(q "$p" 'SHOW SLAVE STATUS') ]]; then q "$p" 'STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = OFF' >/dev/null; fi
  q "$p" "$(mode_sql "$(mode)" primary)" >/dev/null
  if [[ -d $NODE_DIR/$o/mysql ]] && ! running "$o"; then
    start_db "$o"
    wait_until serving "$o" || die "$o not answering"
  fi
  if [[ -d $NODE_DIR/$o/mysql ]] && running "$o"; then q "$o" "$(mode_sql "$(mode)" replica)" >/dev/null; fi
  if [[ ! -d $NODE_DIR/$o/mysql ]] || ! is_replica "$o"; then
    # Never replicated, or an old primary never reattached: a fresh replica.
    fresh "$o"
    q "$o" "$(mode_sql "$(mode)" replica)" >/dev/null
    follow "$o" "$p"
  fi
  if [[ $(cat "$NODE_DIR/proxy.target" 2>/dev/null) != "$p" ]] || ! running proxy; then start_proxy "$p"; fi
  wait_until replicating "$p" "$o" || die "$o not replicating from $p"
  log "up ($(mode)): $(url), primary $p"
}

cmd_promote() {
  local r io
  r=$(replica) || die "no replica to promote"
  log "promoting $r"
  q "$r" 'STOP SLAVE IO_THREAD' >/dev/null
  io=$(slave_status "$r" | sed -n 's/^ *Gtid_IO_Pos: //p')
  [[ $(q_for "$APPLY_SECS" "$r" "SELECT MASTER_GTID_WAIT('$io', $APPLY_SECS)") == 0 ]] ||
    die "$r did not apply its relay log ($io) within $APPLY_SECS s"
  q "$r" "STOP SLAVE; RESET SLAVE ALL; $(mode_sql "$(mode)" primary); SET GLOBAL read_only = OFF" >/dev/null
  start_proxy "$r"
  echo "$r"
}

cmd_reattach() {
  local p old
  p=$(primary) || die "no primary to reattach to"
  old=$(other "$p")
  if running "$old" && is_replica "$old"; then
    wait_until replicating "$p" "$old" || die "$old is a replica but does not replicate from $p"
    echo "$old"
    return 0
  fi
  fresh "$old"
  q "$old" "$(mode_sql "$(mode)" replica)" >/dev/null
  follow "$old" "$p"
  wait_until replicating "$p" "$old" || die "$old not replicating from $p: $(tail -n 3 "$NODE_DIR/$old.log")"
  echo "$old"
}

case ${1:-} in
  start) cmd_start "${2:-}" ;;
  stop | clean)
    signal_group KILL proxy
    for n in $NODES; do signal_node TERM "$n"; done
    if [[ $1 == clean ]]; then rm -rf "$NODE_DIR"; fi
    ;;
  status)
    for n in $NODES; do
      if ! running "$n"; then
        echo "$n down"
      elif serving "$n"; then
        if is_replica "$n"; then echo "$n replica 127.0.0.1:$(node_port "$n")"; else echo "$n primary 127.0.0.1:$(node_port "$n")"; fi
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
    running "$p" || die "$p is not running: nothing to kill"
    signal_node KILL "$p"
    echo "$p"
    ;;
  kill)
    is_node "${2:-}" || usage
    running "$2" || die "$2 is not running: nothing to kill"
    signal_node KILL "$2"
    echo "$2"
    ;;
  promote) cmd_promote ;;
  reattach) cmd_reattach ;;
  mode)
    [[ -n ${2:-} ]] || die "mode: give async or semisync"
    mode_sql "$2" primary >/dev/null
    echo "$2" >"$NODE_DIR/mode"
    p=$(primary) || die "no primary"
    q "$p" "$(mode_sql "$2" primary)" >/dev/null
    # A replica's semi-synchronous acknowledgement is set when its receiving thread starts.
    if r=$(replica); then q "$r" "$(mode_sql "$2" replica); STOP SLAVE IO_THREAD; START SLAVE IO_THREAD" >/dev/null; fi
    if r=$(replica); then wait_until replicating "$p" "$r" || die "$r not replicating"; fi
    ;;
  detach-replica)
    r=$(replica) || die "no replica"
    q "$r" 'STOP SLAVE IO_THREAD' >/dev/null
    echo "$r"
    ;;
  attach-replica)
    r=$(replica) || die "no replica"
    q "$r" 'START SLAVE IO_THREAD' >/dev/null
    p=$(primary) || die "no primary"
    wait_until replicating "$p" "$r" || die "$r not replicating"
    echo "$r"
    ;;
  *)
    echo "usage: $0 start [async|semisync] | stop | clean | status | url | primary | replica | kill-primary | kill <m1|m2> | promote | reattach | mode MODE | detach-replica | attach-replica" >&2
    exit 2
    ;;
esac
