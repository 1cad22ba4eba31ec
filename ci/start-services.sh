#!/usr/bin/env bash
# Starts the servers the lease test suites talk to, when they are not already up:
#   postgres  PostgreSQL     127.0.0.1:5432  trust auth, database `test`
#   mysql     MariaDB        127.0.0.1:3306  root, empty password, database `test`
#   redis     Redis          127.0.0.1:6379
#   nats      NATS + JetStream 127.0.0.1:4222
#   mongodb   the mongoeco MongoDB wire emulator with the project's adapters, 127.0.0.1:27017
#             (ci/mongo-emulator/: a Debian 13 chroot under /var/lib/lease-ci; another port
#             when 27017 is taken by something that is not MongoDB)
#   etcd      etcd v3 (Debian's etcd-server, 3.4) 127.0.0.1:2379, one member,
#             data in /var/lib/lease-etcd, log in /var/log/lease-etcd.log
#   memcached Debian's memcached 127.0.0.1:11211 with -M (never evicts), for the worked
#             example backend (examples/memcached-store), log in /var/log/lease-memcached.log
# and installs `faketime` and `protoc` (Debian's protobuf-compiler, which the
# etcd-client crate's build script runs) when they are missing.
#
# Idempotent: a server that already answers is left alone (never installed,
# restarted or reconfigured; only a missing `test` database is created). A
# server that is down is installed with apt-get if its binary is missing, then
# started and waited for (up to WAIT_SECS). One server failing does not stop
# the others. Service names follow the LEASE_TEST_<NAME>_URL variables.
#
# Output: progress on stderr; on stdout one line per service
# (`service postgres: up` or `service mysql: DOWN (why)`), then as the last line
# `LEASE_TEST_MONGODB_URL=mongodb://127.0.0.1:PORT` when mongodb is up, and as the last line
# `LEASE_SERVICES_UP=postgres,mysql,redis,nats,mongodb,etcd,memcached` (the ones that are up), which a
# caller can `eval` or grep. Exit status is 0 even when a service is down.
set -euo pipefail

WAIT_SECS=${WAIT_SECS:-30}
export DEBIAN_FRONTEND=noninteractive
# The clusters' ports are reserved from the kernel's ephemeral range before anything else opens
# connections (ci/cluster/lib.sh, reserve_ports): a connection given one of them as its local
# port would keep a cluster node from starting.
(source "$(dirname "${BASH_SOURCE[0]}")/cluster/lib.sh") || true
LOG_DIR=${LOG_DIR:-/tmp/lease-start-services}
mkdir -p "$LOG_DIR"

log() { echo "start-services: $*" >&2; }

# Why the last ensure_* failed, for the summary line.
WHY=""

APT_UPDATED=0
# apt_install PACKAGE... : installs Debian packages, running `apt-get update` once.
# Keeps package maintainer scripts from starting services themselves (we start
# them below, with this machine's commands) through a temporary policy-rc.d.
apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    WHY="apt-get not available to install $*"
    return 1
  fi
  if [[ $APT_UPDATED -eq 0 ]]; then
    log "apt-get update"
    if ! apt-get update -qq >"$LOG_DIR/apt-update.log" 2>&1; then
      WHY="apt-get update failed (see $LOG_DIR/apt-update.log)"
      return 1
    fi
    APT_UPDATED=1
  fi
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
  fi
  log "apt-get install $*"
  local rc=0
  apt-get install -y -qq --no-install-recommends "$@" >"$LOG_DIR/apt-install-$1.log" 2>&1 || rc=$?
  if [[ $made_policy -eq 1 ]]; then rm -f "$policy"; fi
  if [[ $rc -ne 0 ]]; then
    WHY="apt-get install $* failed (see $LOG_DIR/apt-install-$1.log)"
    return 1
  fi
}

# wait_for PROBE_FUNCTION : polls until the probe succeeds or WAIT_SECS pass.
wait_for() {
  local probe=$1 deadline=$((SECONDS + WAIT_SECS))
  while ((SECONDS < deadline)); do
    if "$probe"; then return 0; fi
    sleep 0.5
  done
  "$probe"
}

# last_line FILE : the last non-empty line of a log, for a DOWN reason.
last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 || true; }

# ---------------------------------------------------------------- PostgreSQL
pg_version() { { ls /etc/postgresql 2>/dev/null || true; } | sort -V | tail -n 1; }
probe_postgres() { pg_isready -q -h 127.0.0.1 -p 5432 -t 2 >/dev/null 2>&1; }
pg_sql() { psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -w -X -Atqc "$1" 2>>"$LOG_DIR/postgres.log"; }

ensure_postgres() {
  if ! probe_postgres; then
    if ! command -v pg_ctlcluster >/dev/null 2>&1 || [[ -z $(pg_version) ]]; then
      apt_install postgresql || return 1
    fi
    if ! probe_postgres; then
      local ver
      ver=$(pg_version)
      if [[ -z $ver ]]; then WHY="no cluster under /etc/postgresql"; return 1; fi
      if [[ ! -d /etc/postgresql/$ver/main ]]; then
        log "creating PostgreSQL cluster $ver/main"
        pg_createcluster "$ver" main >>"$LOG_DIR/postgres.log" 2>&1 || true
      fi
      log "starting PostgreSQL $ver"
      if ! pg_ctlcluster --skip-systemctl-redirect "$ver" main start >>"$LOG_DIR/postgres.log" 2>&1; then
        log "pg_ctlcluster start failed: $(last_line "$LOG_DIR/postgres.log")"
      fi
      if ! wait_for probe_postgres; then
        WHY="not answering on 127.0.0.1:5432 after ${WAIT_SECS}s: $(last_line "$LOG_DIR/postgres.log")"
        return 1
      fi
    fi
  fi
  # The suites log in over TCP as postgres without a password. A fresh Debian
  # cluster asks for one; only then, trust loopback and reload.
  if [[ $(pg_sql 'SELECT 1') != 1 ]]; then
    local ver hba
    ver=$(pg_version)
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    if [[ -n $ver && -f $hba ]] && ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
      log "PostgreSQL refuses passwordless login: trusting loopback in $hba"
      sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
      pg_ctlcluster --skip-systemctl-redirect "$ver" main reload >>"$LOG_DIR/postgres.log" 2>&1 || true
      sleep 1
    fi
    if [[ $(pg_sql 'SELECT 1') != 1 ]]; then
      WHY="answers but refuses user postgres over TCP: $(last_line "$LOG_DIR/postgres.log")"
      return 1
    fi
  fi
  if [[ $(pg_sql "SELECT 1 FROM pg_database WHERE datname = 'test'") != 1 ]]; then
    log "creating PostgreSQL database test"
    if ! createdb -h 127.0.0.1 -p 5432 -U postgres -w test >>"$LOG_DIR/postgres.log" 2>&1; then
      WHY="createdb test failed: $(last_line "$LOG_DIR/postgres.log")"
      return 1
    fi
  fi
}

# ------------------------------------------------------------------- MariaDB
mysql_admin() {
  if command -v mariadb-admin >/dev/null 2>&1; then mariadb-admin "$@"; else mysqladmin "$@"; fi
}
mysql_client() {
  if command -v mariadb >/dev/null 2>&1; then mariadb "$@"; else mysql "$@"; fi
}
# `mysqladmin ping` succeeds whenever the server answers, even if login fails.
probe_mysql() { mysql_admin -h127.0.0.1 -P3306 -uroot --connect-timeout=2 ping >/dev/null 2>&1; }
mysql_tcp() { mysql_client -h127.0.0.1 -P3306 -uroot --connect-timeout=5 -N -B -e "$1" 2>>"$LOG_DIR/mysql.log"; }

ensure_mysql() {
  if ! probe_mysql; then
    if [[ ! -x /usr/sbin/mariadbd ]]; then
      apt_install mariadb-server || return 1
    fi
    if ! probe_mysql; then
      mkdir -p /run/mysqld /var/log/mysql
      chown mysql:mysql /run/mysqld /var/log/mysql 2>/dev/null || true
      if [[ ! -d /var/lib/mysql/mysql ]]; then
        log "initialising MariaDB data directory"
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql >>"$LOG_DIR/mysql.log" 2>&1 || true
      fi
      log "starting MariaDB"
      if ! start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd \
        -- --user=mysql >>"$LOG_DIR/mysql.log" 2>&1; then
        log "start-stop-daemon mariadbd failed: $(last_line "$LOG_DIR/mysql.log")"
      fi
      if ! wait_for probe_mysql; then
        WHY="not answering on 127.0.0.1:3306 after ${WAIT_SECS}s: $(last_line "$LOG_DIR/mysql.log") $(last_line /var/log/mysql/error.log)"
        return 1
      fi
    fi
  fi
  # A fresh Debian install lets root in only through the unix socket (as OS
  # root); only when TCP login fails, allow root with an empty password.
  if [[ $(mysql_tcp 'SELECT 1') != 1 ]]; then
    log "MariaDB refuses root over TCP: allowing root with an empty password"
    mysql_client --protocol=socket -uroot -e "
      ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
      CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
      GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
      FLUSH PRIVILEGES;" >>"$LOG_DIR/mysql.log" 2>&1 || true
    if [[ $(mysql_tcp 'SELECT 1') != 1 ]]; then
      WHY="answers but refuses root over TCP: $(last_line "$LOG_DIR/mysql.log")"
      return 1
    fi
  fi
  if ! mysql_tcp 'CREATE DATABASE IF NOT EXISTS test' >/dev/null; then
    WHY="CREATE DATABASE test failed: $(last_line "$LOG_DIR/mysql.log")"
    return 1
  fi
}

# --------------------------------------------------------------------- Redis
probe_redis() { [[ $(timeout 3 redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; }

ensure_redis() {
  if probe_redis; then return 0; fi
  if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    apt_install redis-server || return 1
    if probe_redis; then return 0; fi
  fi
  mkdir -p /var/lib/redis /var/log/redis
  log "starting Redis"
  if ! redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log >>"$LOG_DIR/redis.log" 2>&1; then
    log "redis-server failed: $(last_line "$LOG_DIR/redis.log")"
  fi
  if ! wait_for probe_redis; then
    WHY="not answering on 127.0.0.1:6379 after ${WAIT_SECS}s: $(last_line /var/log/redis/ci.log)"
    return 1
  fi
}

# ---------------------------------------------------------------------- NATS
# NATS greets every client with an INFO line.
probe_nats() {
  # shellcheck disable=SC2016 # $line expands in the inner shell
  timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/4222 && IFS= read -r -t 2 line <&3 && [[ $line == INFO* ]]' \
    >/dev/null 2>&1
}

ensure_nats() {
  if probe_nats; then return 0; fi
  if [[ ! -x /usr/sbin/nats-server ]]; then
    apt_install nats-server || return 1
    if probe_nats; then return 0; fi
  fi
  mkdir -p /var/lib/nats-server
  log "starting NATS"
  if ! start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server \
    -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log \
    >>"$LOG_DIR/nats.log" 2>&1; then
    log "start-stop-daemon nats-server failed: $(last_line "$LOG_DIR/nats.log")"
  fi
  if ! wait_for probe_nats; then
    WHY="not answering on 127.0.0.1:4222 after ${WAIT_SECS}s: $(last_line /var/log/nats-server.log)"
    return 1
  fi
}

# ------------------------------------------------------------------- MongoDB
# No MongoDB server can be installed on this machine kind: ci/mongo-emulator/start.sh installs
# and starts the wire emulator (idempotent; see that script), printing its URL or why not.
MONGODB_URL=""
ensure_mongodb() {
  local out rc=0
  out=$(LOG_DIR=$LOG_DIR WAIT_SECS=$WAIT_SECS bash "$(dirname "$0")/mongo-emulator/start.sh") || rc=$?
  out=$(echo "$out" | tail -n 1)
  if [[ $rc -ne 0 ]]; then
    WHY="emulator: ${out:-ci/mongo-emulator/start.sh failed with status $rc}"
    return 1
  fi
  MONGODB_URL=$out
}

# ---------------------------------------------------------------------- etcd
# /health answers {"health":"true"} once the member has a leader and serves.
probe_etcd() {
  timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/2379 \
    && printf "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3 \
    && grep -q "\"health\":\"true\"" <&3' >/dev/null 2>&1
}

ensure_etcd() {
  if probe_etcd; then return 0; fi
  if ! command -v etcd >/dev/null 2>&1; then
    apt_install etcd-server || return 1
    if probe_etcd; then return 0; fi
  fi
  mkdir -p /var/lib/lease-etcd
  log "starting etcd"
  # A 50 ms heartbeat and a 500 ms election timeout make etcd's shortest lease
  # 1 s (its minimum TTL is 1.5 election timeouts, rounded up to whole seconds;
  # 2 s with the defaults), so the conformance suite's leases stay short.
  if ! start-stop-daemon --start --oknodo --background --exec "$(command -v etcd)" \
    -- --name lease-ci --data-dir /var/lib/lease-etcd \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster lease-ci=http://127.0.0.1:2380 \
    --heartbeat-interval 50 --election-timeout 500 \
    --log-outputs /var/log/lease-etcd.log --logger zap \
    >>"$LOG_DIR/etcd.log" 2>&1; then
    log "start-stop-daemon etcd failed: $(last_line "$LOG_DIR/etcd.log")"
  fi
  if ! wait_for probe_etcd; then
    WHY="not healthy on 127.0.0.1:2379 after ${WAIT_SECS}s: $(last_line /var/log/lease-etcd.log)"
    return 1
  fi
}

# ---------------------------------------------------------------------- memcached
# `version` answered on 127.0.0.1:11211 (bash's /dev/tcp: no client package needed).
probe_memcached() {
  timeout 3 bash -c 'exec 3<>/dev/tcp/127.0.0.1/11211 && printf "version\r\n" >&3 &&
    IFS= read -r line <&3 && [[ $line == VERSION* ]]' 2>/dev/null
}

ensure_memcached() {
  if probe_memcached; then return 0; fi
  if ! command -v memcached >/dev/null 2>&1; then
    apt_install memcached || return 1
    if probe_memcached; then return 0; fi
  fi
  # -M: refuse to evict (an evicted lease would free its name while its holder works);
  # -U 0: no UDP.
  if ! memcached -d -u memcache -l 127.0.0.1 -p 11211 -U 0 -M -m 64 -c 1024 \
    -P /run/lease-memcached.pid >>/var/log/lease-memcached.log 2>&1; then
    log "memcached failed: $(last_line /var/log/lease-memcached.log)"
  fi
  if ! wait_for probe_memcached; then
    WHY="not answering on 127.0.0.1:11211 after ${WAIT_SECS}s: $(last_line /var/log/lease-memcached.log)"
    return 1
  fi
}

# ---------------------------------------------------------------------- main
declare -a up=() summary=()
for service in postgres mysql redis nats mongodb etcd memcached; do
  WHY=""
  if "ensure_$service"; then
    up+=("$service")
    summary+=("service $service: up")
  else
    WHY=${WHY:-unknown reason}
    summary+=("service $service: DOWN (${WHY:0:300})")
  fi
done

if ! command -v faketime >/dev/null 2>&1; then
  WHY=""
  if apt_install faketime && command -v faketime >/dev/null 2>&1; then
    log "installed faketime"
  else
    log "faketime could not be installed: ${WHY:-not on PATH after install}"
  fi
fi

if ! command -v protoc >/dev/null 2>&1; then
  WHY=""
  if apt_install protobuf-compiler && command -v protoc >/dev/null 2>&1; then
    log "installed protoc"
  else
    log "protoc could not be installed (lease-etcd will not build): ${WHY:-not on PATH after install}"
  fi
fi

printf '%s\n' "${summary[@]}"
if [[ -n $MONGODB_URL ]]; then echo "LEASE_TEST_MONGODB_URL=$MONGODB_URL"; fi
(
  IFS=,
  echo "LEASE_SERVICES_UP=${up[*]}"
)
