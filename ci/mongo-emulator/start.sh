#!/usr/bin/env bash
# Installs (when missing) and starts (when down) the MongoDB wire emulator the lease-mongo suite
# runs against in CI: mongoeco (PyPI, pinned in requirements.txt) with the project's wire
# adapters (launcher.py), on 127.0.0.1.
#
# mongoeco needs CPython >= 3.13, which Debian 12 lacks, so it runs in a Debian 13 (trixie)
# chroot built with debootstrap from the Debian archive this machine's apt sources use:
#   $LEASE_CI_ROOT/trixie              the chroot (about 450 MB; default LEASE_CI_ROOT=/var/lib/lease-ci)
#   .../trixie/opt/mongoeco            the virtualenv with the pinned packages
#   .../trixie/opt/lease-ci            launcher.py and requirements.txt, copied at every start
#   $LEASE_CI_ROOT/mongoeco.{pid,port,fingerprint}   the running emulator
#   $LOG_DIR/mongoeco.log              its output (default LOG_DIR=/tmp/lease-start-services)
#
# Idempotent: each step is skipped when its result is already there. A MongoDB server that
# already answers on the port is left alone, unless it is an emulator this script started from
# a different launcher.py/requirements.txt (then it is restarted, so adapters never go stale).
# When the port (MONGO_PORT, default 27017) is held by something that is not MongoDB, the next
# free port up to +10 is used.
#
# Output: on success, one stdout line: the URL (mongodb://127.0.0.1:PORT); exit 0. On failure,
# one stdout line saying why; exit 1. Progress goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
LEASE_CI_ROOT=${LEASE_CI_ROOT:-/var/lib/lease-ci}
CHROOT=$LEASE_CI_ROOT/trixie
VENV=/opt/mongoeco
LOG_DIR=${LOG_DIR:-/tmp/lease-start-services}
LOG=$LOG_DIR/mongoeco.log
WAIT_SECS=${WAIT_SECS:-30}
MONGO_PORT=${MONGO_PORT:-27017}
# Debian 13's suite name; debootstrap's variant and the packages the chroot needs.
SUITE=trixie
export DEBIAN_FRONTEND=noninteractive
mkdir -p "$LOG_DIR" "$LEASE_CI_ROOT"

log() { echo "mongo-emulator: $*" >&2; }
fail() {
  echo "$*"
  exit 1
}
last_line() { grep -v '^[[:space:]]*$' "$1" 2>/dev/null | tail -n 1 || true; }

# probe PORT : true when a MongoDB wire server answers an OP_MSG `hello` on 127.0.0.1:PORT
# (the reply's opcode is OP_MSG, 2013). Needs no client library.
probe() {
  # shellcheck disable=SC2016 # the inner shell expands $1
  timeout 3 bash -c '
    exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
    # OP_MSG {hello: 1, $db: "admin"}: 16-byte header, flags, section 0, a 31-byte document.
    printf "\x34\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\xdd\x07\x00\x00"\
"\x00\x00\x00\x00\x00\x1f\x00\x00\x00\x10hello\x00\x01\x00\x00\x00"\
"\x02\$db\x00\x06\x00\x00\x00admin\x00\x00" >&3
    head -c 16 <&3 | od -An -tx1 | tr -d " \n"
  ' _ "$1" 2>/dev/null | grep -q 'dd070000$'
}
# listening PORT : true when anything accepts a TCP connection on 127.0.0.1:PORT.
listening() { timeout 2 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$1" >/dev/null 2>&1; }

# The fingerprint of what the emulator runs: a running one started from other files is stale.
fingerprint() { cat "$HERE/launcher.py" "$HERE/requirements.txt" | sha256sum | cut -d' ' -f1; }

our_pid() {
  local pid
  pid=$(cat "$LEASE_CI_ROOT/mongoeco.pid" 2>/dev/null) || return 1
  [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# ------------------------------------------------------------ already running?
if pid=$(our_pid); then
  port=$(cat "$LEASE_CI_ROOT/mongoeco.port" 2>/dev/null || echo "$MONGO_PORT")
  if [[ $(cat "$LEASE_CI_ROOT/mongoeco.fingerprint" 2>/dev/null) == "$(fingerprint)" ]] && probe "$port"; then
    echo "mongodb://127.0.0.1:$port"
    exit 0
  fi
  log "restarting the emulator (pid $pid): its launcher/requirements changed or it does not answer"
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$LEASE_CI_ROOT/mongoeco.pid"
fi
if probe "$MONGO_PORT"; then
  # Someone else's MongoDB server (or emulator): use it as it is.
  log "a MongoDB server already answers on 127.0.0.1:$MONGO_PORT; leaving it alone"
  echo "mongodb://127.0.0.1:$MONGO_PORT"
  exit 0
fi

# ------------------------------------------------------------------ install
# debian_mirror: the Debian archive this machine's apt sources name.
# shellcheck source=ci/debian-mirror.sh
source "$HERE/../debian-mirror.sh"

if [[ ! -f $CHROOT/.lease-ci-base ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    log "apt-get install debootstrap"
    apt-get update -qq >"$LOG_DIR/apt-update-debootstrap.log" 2>&1 ||
      fail "apt-get update failed (see $LOG_DIR/apt-update-debootstrap.log)"
    apt-get install -y -qq --no-install-recommends debootstrap >"$LOG_DIR/apt-install-debootstrap.log" 2>&1 ||
      fail "apt-get install debootstrap failed (see $LOG_DIR/apt-install-debootstrap.log)"
  fi
  mirror=$(debian_mirror)
  log "debootstrap $SUITE from $mirror into $CHROOT (about 2 minutes, 450 MB)"
  rm -rf "$CHROOT.partial"
  if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    "$SUITE" "$CHROOT.partial" "$mirror" >"$LOG_DIR/debootstrap.log" 2>&1; then
    fail "debootstrap $SUITE failed: $(last_line "$LOG_DIR/debootstrap.log") (see $LOG_DIR/debootstrap.log)"
  fi
  rm -rf "$CHROOT"
  mv "$CHROOT.partial" "$CHROOT"
  touch "$CHROOT/.lease-ci-base"
fi
# For pip: the host's resolver and CA bundle (this machine's TLS may pass a proxy whose CA only
# the host's bundle holds), at every start, since either may change between runs.
mkdir -p "$CHROOT/opt/lease-ci"
cp -L /etc/resolv.conf "$CHROOT/etc/resolv.conf" 2>/dev/null || true
cp -L "${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}" "$CHROOT/opt/lease-ci/host-ca.crt" 2>/dev/null ||
  cp -L /etc/ssl/certs/ca-certificates.crt "$CHROOT/opt/lease-ci/host-ca.crt" 2>/dev/null || true
# Commands in the chroot get a clean environment: nothing of the host's Python set-up leaks in.
in_chroot() {
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    chroot "$CHROOT" "$@"
}

if ! in_chroot python3 -c 'import sys; sys.exit(sys.version_info < (3, 13))' 2>/dev/null; then
  fail "the $SUITE chroot's python3 is not CPython >= 3.13 (mongoeco needs it): $(in_chroot python3 --version 2>&1)"
fi

if ! cmp -s "$HERE/requirements.txt" "$CHROOT$VENV/.lease-ci-requirements"; then
  log "creating the mongoeco virtualenv ($(in_chroot python3 --version 2>&1)) with requirements.txt"
  rm -rf "${CHROOT:?}$VENV"
  cp "$HERE/requirements.txt" "$CHROOT/opt/lease-ci/requirements.txt"
  {
    in_chroot python3 -m venv "$VENV" &&
      in_chroot "$VENV/bin/pip" install --cert /opt/lease-ci/host-ca.crt --no-cache-dir --disable-pip-version-check -q \
        --no-deps --only-binary=:all: -r /opt/lease-ci/requirements.txt &&
      in_chroot "$VENV/bin/pip" check
  } >"$LOG_DIR/pip.log" 2>&1 ||
    fail "installing mongoeco failed: $(last_line "$LOG_DIR/pip.log") (see $LOG_DIR/pip.log)"
  cp "$HERE/requirements.txt" "$CHROOT$VENV/.lease-ci-requirements"
fi

# -------------------------------------------------------------------- start
port=$MONGO_PORT
while listening "$port"; do
  log "127.0.0.1:$port is taken by something that is not MongoDB"
  port=$((port + 1))
  if ((port > MONGO_PORT + 10)); then
    fail "no free port in 127.0.0.1:$MONGO_PORT-$((MONGO_PORT + 10)) (each is taken by a non-MongoDB listener)"
  fi
done

cp "$HERE/launcher.py" "$CHROOT/opt/lease-ci/launcher.py"
log "starting mongoeco on 127.0.0.1:$port (log: $LOG)"
echo "=== $(date -u +%FT%TZ) start on 127.0.0.1:$port" >>"$LOG"
setsid env -i PATH=/usr/bin:/bin LANG=C.UTF-8 "$(command -v chroot)" "$CHROOT" "$VENV/bin/python" /opt/lease-ci/launcher.py --host 127.0.0.1 --port "$port" \
  </dev/null >>"$LOG" 2>&1 &
pid=$!
echo "$pid" >"$LEASE_CI_ROOT/mongoeco.pid"
echo "$port" >"$LEASE_CI_ROOT/mongoeco.port"
fingerprint >"$LEASE_CI_ROOT/mongoeco.fingerprint"

deadline=$((SECONDS + WAIT_SECS))
until probe "$port"; do
  if ! kill -0 "$pid" 2>/dev/null; then
    rm -f "$LEASE_CI_ROOT/mongoeco.pid"
    fail "mongoeco exited at start: $(last_line "$LOG") (see $LOG)"
  fi
  if ((SECONDS >= deadline)); then
    fail "mongoeco not answering on 127.0.0.1:$port after ${WAIT_SECS}s: $(last_line "$LOG") (see $LOG)"
  fi
  sleep 0.5
done
echo "mongodb://127.0.0.1:$port"
