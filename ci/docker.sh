#!/usr/bin/env bash
# A Docker engine of the project's own, and the test servers' images built from Debian's
# packages, for lease-conformance's `docker` feature (testcontainers) in CI:
#
#   bash ci/docker.sh [up]     install Debian's docker.io when dockerd is missing, start the
#                              project's dockerd when its socket does not answer, build each
#                              image that is absent; then print, on stdout, lines to `eval`:
#                                DOCKER_HOST=unix:///run/lease-ci-docker/docker.sock
#                                LEASE_TEST_<BACKEND>_IMAGE=lease-ci/<server>:<tag>  (one per image)
#   bash ci/docker.sh clean    wait (up to CLEAN_WAIT_SECS, 15) for the test processes' reapers to
#                              remove their containers, then remove any container still labelled
#                              org.lease.conformance.session; exit 3 when one was left
#   bash ci/docker.sh down     clean, then stop the project's dockerd (its images are kept)
#   bash ci/docker.sh images   build only the images named after it (default: all), e.g.
#                              `bash ci/docker.sh images redis postgres`
#   bash ci/docker.sh engine   only what needs apt (docker.io, debootstrap) and the engine:
#                              after it, `images` installs nothing, so it can run in the
#                              background while other scripts use apt (.ci/run does)
#
# The engine never touches a system Docker a developer may have: its own socket, --data-root,
# --exec-root, pid file, config file and cgroup parent, all under $LEASE_CI_ROOT/docker (default
# /var/lib/lease-ci/docker) and /run/lease-ci-docker; no iptables rules (ports are published
# by docker-proxy, which listens on every host address); overlay2; cgroupfs; the bridge address
# $LEASE_CI_DOCKER_BIP (default 172.31.240.1/24).
#
# The images (no registry is needed or reachable: each is a Debian root file system made by
# `debootstrap --variant=minbase --include=<packages>` from the archive this machine's apt
# sources name, configured, and `docker import`ed), named lease-ci/<server>:<tag>, never the
# name of a Docker Hub image. The tag ends in a hash of the recipe below, so an image is rebuilt
# exactly when its recipe changes, and kept otherwise:
#   postgres        PostgreSQL 15 (bookworm), port 5432, trust auth, runs as user postgres
#   mariadb         MariaDB 10.11 (bookworm), port 3306, root with an empty password, db `test`
#   redis           Redis 7.0 (bookworm), port 6379, AOF on (lease-redis refuses a server
#                   without it)
#   nats            NATS 2.9 (bookworm) with JetStream, port 4222
#   etcd            etcd 3.4 (bookworm), port 2379, a 50 ms heartbeat and 500 ms election
#                   timeout (1 s minimum lease), as ci/start-services.sh runs it
#   mongo-emulator  the mongoeco wire emulator's Debian 13 chroot (ci/mongo-emulator/start.sh
#                   builds it), with the current launcher.py, port 27017
#   memcached       memcached 1.6 (bookworm), port 11211, -M (never evicts), for the worked
#                   example backend (examples/memcached-store)
# Each image's CMD starts its server directly, which says once that it is ready with the line
# lease-conformance waits for (lease-conformance/src/docker.rs; the emulator's gets MongoDB's).
#
# Idempotent; progress and how long each step took on stderr. Exit status 1 when the engine
# cannot be started; an image that cannot be built is reported (`image X: FAILED (why)`) and
# left out of the stdout lines, and the others are still built.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LEASE_CI_ROOT=${LEASE_CI_ROOT:-/var/lib/lease-ci}
ROOT=$LEASE_CI_ROOT/docker
RUN_DIR=${LEASE_CI_DOCKER_RUN:-/run/lease-ci-docker}
SOCK=$RUN_DIR/docker.sock
BIP=${LEASE_CI_DOCKER_BIP:-172.31.240.1/24}
LOG_DIR=${LOG_DIR:-/tmp/lease-ci-docker}
WAIT_SECS=${WAIT_SECS:-30}
SUITE=bookworm
# The label lease-conformance puts on every container it starts (lease-conformance/src/docker.rs).
SESSION_LABEL=org.lease.conformance.session
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$LOG_DIR"

log() { echo "docker.sh: $*" >&2; }
die() {
  log "$*"
  exit 1
}
last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 || true; }

# timed LABEL COMMAND... : runs COMMAND, then logs how long it took.
timed() {
  local label=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  log "$label: $((SECONDS - start)) s$( ((rc == 0)) || echo " (failed, status $rc)")"
  return "$rc"
}

dk() { docker -H "unix://$SOCK" "$@"; }

# apt_install PACKAGE... : as ci/start-services.sh does (a temporary policy-rc.d keeps the
# packages' maintainer scripts from starting their services).
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "no apt-get to install $*"
  local policy=/usr/sbin/policy-rc.d made=0 rc=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made=1; fi
  log "apt-get install $*"
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@"; } \
    >"$LOG_DIR/apt-install-$1.log" 2>&1 || rc=$?
  if ((made)); then rm -f "$policy"; fi
  ((rc == 0)) || die "apt-get install $* failed (see $LOG_DIR/apt-install-$1.log)"
}

# ------------------------------------------------------------------- engine
engine_answers() { timeout 5 docker -H "unix://$SOCK" version --format '{{.Server.Version}}' >/dev/null 2>&1; }

dockerd_pid() {
  local pid
  pid=$(cat "$ROOT/dockerd.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

ensure_engine() {
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
    timed "install docker.io" apt_install docker.io
  fi
  if engine_answers; then return 0; fi
  if pid=$(dockerd_pid); then
    log "dockerd (pid $pid) runs but does not answer on $SOCK: stopping it"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  mkdir -p "$ROOT/data" "$RUN_DIR/exec"
  echo '{}' >"$ROOT/daemon.json"
  log "starting dockerd on $SOCK (data $ROOT/data, log $LOG_DIR/dockerd.log)"
  echo "=== $(date -u +%FT%TZ) start" >>"$LOG_DIR/dockerd.log"
  # Started from a subshell that exits at once, so dockerd is not a child of this script: the
  # `wait` for the image builds below would otherwise wait for dockerd, for ever.
  (setsid dockerd \
    --host "unix://$SOCK" \
    --config-file "$ROOT/daemon.json" \
    --data-root "$ROOT/data" \
    --exec-root "$RUN_DIR/exec" \
    --pidfile "$ROOT/dockerd.pid" \
    --storage-driver overlay2 \
    --iptables=false \
    --ip-masq=false \
    --exec-opt native.cgroupdriver=cgroupfs \
    --cgroup-parent lease-ci-docker \
    --bip "$BIP" \
    </dev/null >>"$LOG_DIR/dockerd.log" 2>&1 &)
  local deadline=$((SECONDS + WAIT_SECS))
  until engine_answers; do
    ((SECONDS < deadline)) || die "dockerd not answering on $SOCK after ${WAIT_SECS}s: $(last_line "$LOG_DIR/dockerd.log")"
    sleep 0.2
  done
  log "dockerd $(dk version --format '{{.Server.Version}}') up"
}

# ------------------------------------------------------------------- images
# Each recipe_<server> is run in the root file system's directory after debootstrap; its body
# (with PACKAGES_<server>, CMD_<server> and EXPOSE_<server>) is hashed into the image's tag.
# shellcheck disable=SC2034 # read through ${!name}
{
  PACKAGES_postgres=postgresql-15
  EXPOSE_postgres=5432
  CMD_postgres='["/usr/lib/postgresql/15/bin/postgres", "-D", "/var/lib/postgresql/15/main", "-c", "config_file=/etc/postgresql/15/main/postgresql.conf"]'
  USER_postgres=postgres
  VERSION_postgres=15

  PACKAGES_mariadb=mariadb-server
  EXPOSE_mariadb=3306
  CMD_mariadb='["/usr/sbin/mariadbd", "--user=mysql", "--bind-address=0.0.0.0", "--skip-name-resolve"]'
  USER_mariadb=root
  VERSION_mariadb=10.11

  PACKAGES_redis=redis-server
  EXPOSE_redis=6379
  CMD_redis='["/usr/bin/redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--appendonly", "yes", "--dir", "/var/lib/redis", "--save", ""]'
  USER_redis=redis
  VERSION_redis=7.0

  PACKAGES_nats=nats-server
  EXPOSE_nats=4222
  CMD_nats='["/usr/sbin/nats-server", "-a", "0.0.0.0", "-p", "4222", "-js", "-sd", "/var/lib/nats"]'
  USER_nats=root
  VERSION_nats=2.9

  PACKAGES_etcd=etcd-server
  EXPOSE_etcd=2379
  CMD_etcd='["/usr/bin/etcd", "--name", "lease-ci", "--data-dir", "/var/lib/etcd/lease-ci", "--listen-client-urls", "http://0.0.0.0:2379", "--advertise-client-urls", "http://127.0.0.1:2379", "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap"]'
  USER_etcd=root
  VERSION_etcd=3.4

  # The worked example backend (examples/memcached-store). -M: refuse to evict (an evicted
  # lease frees its name while its holder works), as ci/start-services.sh runs it; -vv makes it
  # say `server listening`, the line lease-conformance waits for.
  PACKAGES_memcached=memcached
  EXPOSE_memcached=11211
  CMD_memcached='["/usr/bin/memcached", "-l", "0.0.0.0", "-p", "11211", "-U", "0", "-M", "-m", "64", "-c", "1024", "-vv"]'
  USER_memcached=memcache
  VERSION_memcached=1.6

  EXPOSE_mongo_emulator=27017
  # The emulator says `lease-ci: mongoeco listening on …`; lease-conformance waits for MongoDB's
  # own `Waiting for connections` on stdout, which sed adds to that line.
  CMD_mongo_emulator='["/bin/sh", "-c", "/opt/mongoeco/bin/python /opt/lease-ci/launcher.py --host 0.0.0.0 --port 27017 2>&1 | sed -u \"s/mongoeco listening on .*/& (Waiting for connections)/\""]'
  USER_mongo_emulator=root
  VERSION_mongo_emulator=mongoeco
}

recipe_postgres() {
  local conf=etc/postgresql/15/main
  [[ -f $conf/postgresql.conf ]] || { echo "no $conf/postgresql.conf"; return 1; }
  # debootstrap's postinst saw the host's 5432 taken and may have chosen another port.
  sed -i -e 's/^#\?port = .*/port = 5432/' -e "s/^#\?listen_addresses = .*/listen_addresses = '*'/" \
    -e 's/^#\?ssl = .*/ssl = off/' "$conf/postgresql.conf"
  grep -q '^port = 5432' "$conf/postgresql.conf" || { echo "port not set to 5432"; return 1; }
  # A test server: anyone who reaches the published port (through the bridge) is trusted.
  printf 'local all all trust\nhost all all 0.0.0.0/0 trust\nhost all all ::/0 trust\n' >"$conf/pg_hba.conf"
  mkdir -p var/run/postgresql
  chroot . chown -R postgres:postgres /var/run/postgresql /var/lib/postgresql
}

recipe_mariadb() {
  mkdir -p run/mysqld
  chroot . chown mysql:mysql /run/mysqld
  if [[ ! -d var/lib/mysql/mysql ]]; then
    chroot . mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
  fi
  # root from anywhere with an empty password, and the database `test` the suites use.
  chroot . /usr/sbin/mariadbd --user=mysql --bootstrap --skip-grant-tables=0 <<'SQL'
USE mysql;
FLUSH PRIVILEGES;
CREATE DATABASE IF NOT EXISTS test;
CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;
ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
SQL
}

recipe_redis() {
  mkdir -p var/lib/redis
  chroot . chown redis:redis /var/lib/redis
}

recipe_nats() { mkdir -p var/lib/nats; }

recipe_etcd() { mkdir -p var/lib/etcd; }

recipe_memcached() { :; }

# image_ref SERVER : lease-ci/<server>:<version>-<hash of its recipe>.
image_ref() {
  local s=${1//-/_} hash
  hash=$({
    declare -f "recipe_$s" 2>/dev/null || true
    for v in PACKAGES EXPOSE CMD USER VERSION; do
      n=${v}_$s
      echo "$v=${!n:-}"
    done
    echo "suite=$SUITE"
    if [[ $1 == mongo-emulator ]]; then cat "$HERE/mongo-emulator/launcher.py" "$HERE/mongo-emulator/requirements.txt"; fi
  } | sha256sum | cut -c1-10)
  local version=VERSION_$s
  echo "lease-ci/$1:${!version}-$hash"
}

# import_rootfs SERVER DIR : docker import DIR as SERVER's image.
import_rootfs() {
  local s=${1//-/_} dir=$2 ref
  ref=$(image_ref "$1")
  local cmd=CMD_$s expose=EXPOSE_$s user=USER_$s
  tar -C "$dir" --exclude=./proc/* --exclude=./sys/* --exclude=./dev/* -c . |
    dk import -c "CMD ${!cmd}" -c "EXPOSE ${!expose}" -c "USER ${!user}" \
      -c "LABEL org.lease.ci.image=$1" - "$ref" >/dev/null
}

# debootstrap_rootfs SERVER DIR : a minbase bookworm with SERVER's packages in DIR.
debootstrap_rootfs() {
  local packages=PACKAGES_${1//-/_}
  rm -rf "$2"
  mkdir -p "$2/usr/sbin"
  # Keep the packages' maintainer scripts from starting services inside the chroot.
  printf '#!/bin/sh\nexit 101\n' >"$2/usr/sbin/policy-rc.d"
  chmod +x "$2/usr/sbin/policy-rc.d"
  debootstrap --variant=minbase --include="${!packages}" "$SUITE" "$2" "$(debian_mirror)" \
    >"$LOG_DIR/debootstrap-$1.log" 2>&1 ||
    { echo "debootstrap failed: $(last_line "$LOG_DIR/debootstrap-$1.log") (see $LOG_DIR/debootstrap-$1.log)"; return 1; }
}

# build_image SERVER : builds SERVER's image when absent. Prints `image SERVER: ...` on stderr.
build_image() {
  local server=$1 ref dir start=$SECONDS why
  ref=$(image_ref "$server")
  if dk image inspect "$ref" >/dev/null 2>&1; then
    log "image $server: $ref present"
    return 0
  fi
  if [[ $server == mongo-emulator ]]; then
    # The emulator's chroot, made (and kept up to date) by ci/mongo-emulator/start.sh.
    local chroot=$LEASE_CI_ROOT/trixie
    if [[ ! -x $chroot/opt/mongoeco/bin/python ]] || ! cmp -s "$HERE/mongo-emulator/requirements.txt" "$chroot/opt/mongoeco/.lease-ci-requirements"; then
      log "image $server: the emulator's chroot is missing or stale: ci/mongo-emulator/start.sh"
      if ! why=$(LOG_DIR=$LOG_DIR bash "$HERE/mongo-emulator/start.sh" | tail -n 1) ||
        [[ ! -x $chroot/opt/mongoeco/bin/python ]]; then
        log "image $server: FAILED (ci/mongo-emulator/start.sh: $why)"
        return 1
      fi
    fi
    mkdir -p "$chroot/opt/lease-ci"
    cp "$HERE/mongo-emulator/launcher.py" "$chroot/opt/lease-ci/launcher.py"
    if ! why=$(import_rootfs "$server" "$chroot" 2>&1); then
      log "image $server: FAILED (docker import: $why)"
      return 1
    fi
  else
    dir=$LEASE_CI_ROOT/rootfs/$server
    if ! why=$(debootstrap_rootfs "$server" "$dir"); then
      log "image $server: FAILED ($why)"
      rm -rf "$dir"
      return 1
    fi
    log "image $server: debootstrap $((SECONDS - start)) s"
    rm -f "$dir/usr/sbin/policy-rc.d"
    local s=${server//-/_}
    if ! why=$(cd "$dir" && "recipe_$s" 2>&1); then
      log "image $server: FAILED (configuring: ${why: -300})"
      rm -rf "$dir"
      return 1
    fi
    # Package caches are not needed at run time.
    rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"*
    if ! why=$(import_rootfs "$server" "$dir" 2>&1); then
      log "image $server: FAILED (docker import: $why)"
      rm -rf "$dir"
      return 1
    fi
    rm -rf "$dir"
  fi
  log "image $server: built $ref in $((SECONDS - start)) s ($(dk image inspect -f '{{.Size}}' "$ref" | awk '{printf "%d MB", $1/1e6}'))"
}

# The environment variable lease-conformance reads each server's image from.
image_var() {
  case $1 in
    postgres) echo LEASE_TEST_POSTGRES_IMAGE ;;
    mariadb) echo LEASE_TEST_MYSQL_IMAGE ;;
    redis) echo LEASE_TEST_REDIS_IMAGE ;;
    nats) echo LEASE_TEST_NATS_IMAGE ;;
    etcd) echo LEASE_TEST_ETCD_IMAGE ;;
    mongo-emulator) echo LEASE_TEST_MONGODB_IMAGE ;;
    memcached) echo LEASE_TEST_MEMCACHED_IMAGE ;;
  esac
}

ALL_SERVERS="redis postgres nats etcd mariadb mongo-emulator memcached"

# build_images SERVER... : builds the absent ones, LEASE_CI_DOCKER_JOBS (default 3) at a time
# (debootstrap mostly waits on the mirror), and records the ones present afterwards in BUILT.
build_images() {
  if ! command -v debootstrap >/dev/null 2>&1; then timed "install debootstrap" apt_install debootstrap; fi
  # shellcheck source=ci/debian-mirror.sh
  source "$HERE/debian-mirror.sh"
  local server results running=0 jobs=${LEASE_CI_DOCKER_JOBS:-3} start=$SECONDS
  results=$(mktemp "$LOG_DIR/built.XXXXXX")
  for server in "$@"; do
    (timed "image $server" build_image "$server" && echo "$server=$(image_ref "$server")" >>"$results") &
    running=$((running + 1))
    if ((running >= jobs)); then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait || true
  log "images: $((SECONDS - start)) s"
  for server in "$@"; do
    if grep -q "^$server=" "$results"; then BUILT+=("$(grep "^$server=" "$results" | head -n 1)"); fi
  done
  rm -f "$results"
}

# ------------------------------------------------------------------- clean
# Waits up to CLEAN_WAIT_SECS (default 15) for the test processes' reapers or watchers to remove
# their containers, then removes any container still carrying the label. Status 0 when none was
# left, 3 when some had to be removed here.
clean() {
  engine_answers || return 0
  local deadline=$((SECONDS + ${CLEAN_WAIT_SECS:-15})) ids id
  while ids=$(dk ps -aq --filter "label=$SESSION_LABEL") && [[ -n $ids ]] && ((SECONDS < deadline)); do
    sleep 0.5
  done
  if [[ -z $ids ]]; then
    log "no test container left"
    return 0
  fi
  for id in $ids; do
    log "removing container $id, left behind ($(dk inspect -f '{{.Config.Image}} {{index .Config.Labels "'"$SESSION_LABEL"'"}}' "$id" 2>/dev/null || true))"
    dk rm -f -v "$id" >/dev/null 2>&1 || true
  done
  return 3
}

# -------------------------------------------------------------------- main
BUILT=()
cmd=${1:-up}
case $cmd in
  up)
    total=$SECONDS
    timed "engine" ensure_engine
    # shellcheck disable=SC2086
    build_images $ALL_SERVERS
    log "up in $((SECONDS - total)) s"
    ;;
  engine)
    timed "engine" ensure_engine
    if ! command -v debootstrap >/dev/null 2>&1; then timed "install debootstrap" apt_install debootstrap; fi
    exit 0
    ;;
  images)
    shift
    ensure_engine
    # shellcheck disable=SC2086
    build_images ${*:-$ALL_SERVERS}
    ;;
  clean)
    clean
    exit
    ;;
  down)
    clean || true
    if pid=$(dockerd_pid); then
      log "stopping dockerd (pid $pid)"
      kill "$pid"
      for _ in $(seq 1 80); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
    exit 0
    ;;
  *)
    echo "usage: $0 [up | engine | images [SERVER...] | clean | down]" >&2
    exit 2
    ;;
esac

echo "DOCKER_HOST=unix://$SOCK"
for entry in "${BUILT[@]}"; do
  echo "$(image_var "${entry%%=*}")=${entry#*=}"
done
