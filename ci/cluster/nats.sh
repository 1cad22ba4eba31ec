#!/usr/bin/env bash
# A 3-node NATS JetStream cluster on loopback for the cluster runs of the lease soak:
#   n1 client 127.0.0.1:42221 route 42231 monitor 42241
#   n2 client 127.0.0.1:42222 route 42232 monitor 42242
#   n3 client 127.0.0.1:42223 route 42233 monitor 42243
# JetStream file storage per node under $CLUSTER_DIR/nats (see lib.sh). The lease store creates
# its bucket with 3 replicas when asked to (lease-nats: NatsConfig::replicas, or `replicas=3`
# in the URL). The single NATS on 4222 is never touched.
#
# The server: $NATS_SERVER, by default Debian's nats-server from the first suite of
# $NATS_SUITES (forky, then sid) that has one of at least $NATS_MIN_VERSION, which this script
# installs when missing or too old, without a chroot and without touching the host's apt state or
# its nats-server: `apt-get download nats-server` with a source list, lists and cache of its own
# (the archive this machine's apt sources name, as ci/mongo-emulator/start.sh finds it; the
# signatures checked with the host's keyrings), then `dpkg-deb -x` into
# $LEASE_CI_ROOT/nats-server-<version>/ (LEASE_CI_ROOT=/var/lib/lease-ci as root, else
# $TMPDIR/lease-ci), with the link $LEASE_CI_ROOT/nats-server to its binary (a Go binary that
# needs only libc 2.34: it runs on Debian 12 as it is). Idempotent: a link to a new enough
# server is kept.
#
# Why not Debian 12's nats-server 2.9.10 or Debian 13's 2.10.27: up to 2.11, a follower checks
# a message's Nats-Expected-Last-Subject-Sequence again when it applies it, against its own
# store. Max age is enforced by each node's own timer, so a follower that still holds a key's
# expired message (one replaying the messages it missed while down always does) refuses a claim
# (expected sequence 0) that the leader accepted: its stream is one message short from then on,
# and once it leads it hands out stream sequences — lease-nats's terms — that were already
# handed out. ci/cluster/nats-replica-check.py shows it: on 2.10.27 a follower restarted across
# an expiry and a claim ends one sequence behind, and as leader gave the next claim sequence 4
# after 6; on 2.15.1 the replicas stay in step (followers apply what the leader accepted since
# nats-server#7119, 2.12.0). The cluster refuses to start on a server older than
# $NATS_MIN_VERSION.
#
#   bash ci/cluster/nats.sh start|stop|clean|status|kill <n1|n2|n3|leader>|restart <node>|leader|url|server
#
#   server   install the server if missing or too old; print its path and version
#
# `kill leader` SIGKILLs the leader of the first KV stream that a node's /jsz reports, a lease
# bucket's before a slot bucket's (`*_slots`), else the JetStream meta leader.
set -euo pipefail
CLUSTER_NAME=nats-cluster
# shellcheck source=ci/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_DIR=$CLUSTER_DIR/nats
NODES="n1 n2 n3"
LEADER_WORD=leader

# The oldest nats-server the cluster runs on (see above; set NATS_MIN_VERSION lower, with
# NATS_SERVER, only to show the hazard on an older server), and the Debian suites tried for one.
NATS_MIN_VERSION=${NATS_MIN_VERSION:-2.12.0}
NATS_SUITES=${NATS_SUITES:-forky sid}
if [[ -z ${LEASE_CI_ROOT:-} ]]; then
  if [[ $(id -u) -eq 0 ]]; then LEASE_CI_ROOT=/var/lib/lease-ci; else LEASE_CI_ROOT=${TMPDIR:-/tmp}/lease-ci; fi
fi
NATS_LINK=$LEASE_CI_ROOT/nats-server
NATS_SERVER=${NATS_SERVER:-$NATS_LINK}

# server_version BINARY : the version BINARY reports (2.10.27), or nothing.
server_version() {
  "$1" --version 2>/dev/null | sed -n 's/^nats-server: v\{0,1\}\([0-9][0-9.]*\).*/\1/p' | head -n 1
}

# new_enough VERSION : VERSION is at least NATS_MIN_VERSION.
new_enough() {
  [[ -n $1 && $(printf '%s\n%s\n' "$NATS_MIN_VERSION" "$1" | sort -V | head -n 1) == "$NATS_MIN_VERSION" ]]
}

# debian_mirror: the Debian archive this machine's apt sources name.
# shellcheck source=ci/debian-mirror.sh
source "$(dirname "$0")/../debian-mirror.sh"

# download_from SUITE TMP : downloads SUITE's nats-server package into TMP and unpacks it into
# TMP/unpacked; answers its version, or fails (the reason in TMP/apt.log). apt-get runs with a
# source list, lists and cache of its own in TMP (the host's apt state and sources are not
# touched); the archive's signature is checked with the host's keyrings.
download_from() {
  local suite=$1 tmp=$2 deb
  rm -rf "$tmp/lists" "$tmp/cache" "$tmp/unpacked" "$tmp"/nats-server_*.deb
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/unpacked"
  echo "deb $(debian_mirror) $suite main" >"$tmp/sources.list"
  local apt=(apt-get -q -o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o Dir::Etc::Preferences=/dev/null
    -o Dir::Etc::PreferencesParts=/dev/null -o APT::Sandbox::User=root)
  { "${apt[@]}" update && (cd "$tmp" && "${apt[@]}" download nats-server); } >"$tmp/apt.log" 2>&1 || return 1
  deb=$(find "$tmp" -maxdepth 1 -name 'nats-server_*.deb' | head -n 1)
  [[ -n $deb ]] && dpkg-deb -x "$deb" "$tmp/unpacked" >>"$tmp/apt.log" 2>&1 || return 1
  server_version "$tmp/unpacked/usr/sbin/nats-server"
}

# install_server : installs the nats-server of the first suite of $NATS_SUITES that has one of at
# least $NATS_MIN_VERSION into $LEASE_CI_ROOT/nats-server-<version>/, points $NATS_LINK at its
# binary, and removes the other versions this script installed there.
install_server() {
  local tmp suite version="" found="" tried=() dest old
  command -v apt-get >/dev/null 2>&1 || die "no nats-server >= $NATS_MIN_VERSION at $NATS_SERVER, and no apt-get to download one (set NATS_SERVER)"
  command -v dpkg-deb >/dev/null 2>&1 || die "no dpkg-deb to unpack nats-server (set NATS_SERVER to a nats-server >= $NATS_MIN_VERSION)"
  mkdir -p "$LEASE_CI_ROOT"
  tmp=$(mktemp -d "$LEASE_CI_ROOT/.nats-download.XXXXXX")
  for suite in $NATS_SUITES; do
    log "downloading nats-server from $(debian_mirror) $suite (into $LEASE_CI_ROOT)"
    if ! version=$(download_from "$suite" "$tmp"); then
      tried+=("$suite: download failed: $(tail -n 1 "$tmp/apt.log")")
    elif ! new_enough "$version"; then
      tried+=("$suite: ${version:-of no known version}")
    else
      found=$suite
      break
    fi
  done
  if [[ -z $found ]]; then
    rm -rf "$tmp"
    die "no Debian nats-server >= $NATS_MIN_VERSION (${tried[*]}); set NATS_SERVER to one"
  fi
  dest=$LEASE_CI_ROOT/nats-server-$version
  rm -rf "$dest"
  mv "$tmp/unpacked" "$dest"
  rm -rf "$tmp"
  ln -sfn "nats-server-$version/usr/sbin/nats-server" "$NATS_LINK"
  for old in "$LEASE_CI_ROOT"/nats-server-*; do
    if [[ $old != "$dest" && -d $old ]]; then rm -rf "$old"; fi
  done
  log "installed $found's nats-server $version: $NATS_LINK -> $dest/usr/sbin/nats-server"
}

# ensure_server : NATS_SERVER runs and is at least NATS_MIN_VERSION; installs the default one
# when it is missing or older. Dies with the reason otherwise.
ensure_server() {
  local version
  if [[ $NATS_SERVER == "$NATS_LINK" ]] && ! new_enough "$(server_version "$NATS_LINK")"; then
    install_server
  fi
  [[ -x $NATS_SERVER ]] || command -v "$NATS_SERVER" >/dev/null 2>&1 || die "no nats-server at $NATS_SERVER"
  version=$(server_version "$NATS_SERVER")
  new_enough "$version" || die "$NATS_SERVER is nats-server ${version:-of no known version}; the cluster needs $NATS_MIN_VERSION or newer: on older servers a follower can refuse a claim its leader accepted, and terms go back once it leads (see ci/cluster/nats.sh). Unset NATS_SERVER to use Debian's, which this script installs"
}

client_port() { echo $((42220 + ${1#n})); }
route_port() { echo $((42230 + ${1#n})); }
monitor_port() { echo $((42240 + ${1#n})); }
url() {
  local n out=""
  for n in $NODES; do out+="${out:+,}127.0.0.1:$(client_port "$n")"; done
  echo "nats://$out"
}

jsz() { curl -fsS -m 2 "http://127.0.0.1:$(monitor_port "$1")/jsz?$2" 2>/dev/null || true; }

node_port() { client_port "$1"; }
# serving NODE : the node serves clients and JetStream has a meta leader.
NOT_SERVING="has no JetStream meta leader"
serving() {
  [[ -n $(jq -r '.meta_cluster.leader // empty' <<<"$(jsz "$1" "")" 2>/dev/null) ]]
}

# leader : the node leading the first KV stream a node reports (a lease bucket's before a slot
# bucket's, `*_slots`), else the meta leader.
leader() {
  local n j name
  for n in $NODES; do
    j=$(jsz "$n" "accounts=true&streams=true")
    [[ -n $j ]] || continue
    name=$(jq -r '[.account_details[]?.stream_detail[]? | select(.name | startswith("KV_"))]
                  | sort_by(.name | endswith("_slots")) | [.[].cluster.leader // empty][0] // empty' \
      <<<"$j" 2>/dev/null || true)
    if [[ -z $name ]]; then name=$(jq -r '.meta_cluster.leader // empty' <<<"$j" 2>/dev/null || true); fi
    if [[ -n $name ]] && is_node "$name"; then
      echo "$name"
      return 0
    fi
  done
  return 1
}

write_config() {
  local n=$1 m routes=""
  for m in $NODES; do routes+="    nats-route://127.0.0.1:$(route_port "$m")"$'\n'; done
  cat >"$NODE_DIR/$n.conf" <<CONF
server_name: $n
listen: 127.0.0.1:$(client_port "$n")
http: 127.0.0.1:$(monitor_port "$n")
jetstream {
  store_dir: "$NODE_DIR/$n"
}
cluster {
  name: lease-ci
  listen: 127.0.0.1:$(route_port "$n")
  routes: [
$routes  ]
}
CONF
}

start_node() {
  local n=$1
  if running "$n"; then return 0; fi
  ensure_server
  need curl curl
  need jq jq
  mkdir -p "$NODE_DIR/$n"
  write_config "$n"
  log "starting $n on $(client_port "$n")"
  spawn "$n" "$NATS_SERVER" -c "$NODE_DIR/$n.conf"
}

if [[ ${1:-} == server ]]; then
  ensure_server
  echo "$NATS_SERVER $(server_version "$NATS_SERVER")"
  exit 0
fi
cluster_main "$@"
