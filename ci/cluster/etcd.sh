#!/usr/bin/env bash
# A 3-member etcd cluster on loopback for the cluster runs of the lease suite and soak:
#   e1 client 127.0.0.1:23791 peer 23801
#   e2 client 127.0.0.1:23792 peer 23802
#   e3 client 127.0.0.1:23793 peer 23803
# Heartbeat 50 ms, election timeout 500 ms (a new leader within about a second of a kill; the
# shortest etcd lease is then 1 s). Data and logs under $CLUSTER_DIR/etcd (see lib.sh). Uses the
# etcd binary ci/start-services.sh installs (Debian's etcd-server; apt-get installs it, curl and jq when missing). The
# single-node etcd on 2379/2380 is never touched.
#
#   bash ci/cluster/etcd.sh start|stop|clean|status|kill <e1|e2|e3|leader>|restart <node>|leader|url
#
# `kill leader` asks every member's /v3/maintenance/status for the leader and SIGKILLs it.
set -euo pipefail
CLUSTER_NAME=etcd-cluster
# shellcheck source=ci/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_DIR=$CLUSTER_DIR/etcd
NODES="e1 e2 e3"
LEADER_WORD=leader

client_port() { echo $((23790 + ${1#e})); }
peer_port() { echo $((23800 + ${1#e})); }
initial_cluster() {
  local n out=""
  for n in $NODES; do out+="${out:+,}$n=http://127.0.0.1:$(peer_port "$n")"; done
  echo "$out"
}
url() {
  local n out=""
  for n in $NODES; do out+="${out:+,}127.0.0.1:$(client_port "$n")"; done
  echo "etcd://$out"
}

node_port() { client_port "$1"; }
NOT_SERVING="not healthy"
serving() {
  curl -fsS -m 2 "http://127.0.0.1:$(client_port "$1")/health" 2>/dev/null | grep -q '"health":"true"'
}

# status_json NODE : the member's maintenance status (member id, leader id), or nothing.
status_json() {
  curl -fsS -m 2 -X POST -d '{}' "http://127.0.0.1:$(client_port "$1")/v3/maintenance/status" 2>/dev/null || true
}

# leader : the name of the leader member, as the first member that answers sees it.
leader() {
  local n s leader_id
  for n in $NODES; do
    s=$(status_json "$n")
    [[ -n $s ]] || continue
    leader_id=$(jq -r '.leader // empty' <<<"$s")
    [[ -n $leader_id ]] || continue
    for m in $NODES; do
      if [[ $(jq -r '.header.member_id // empty' <<<"$(status_json "$m")") == "$leader_id" ]]; then
        echo "$m"
        return 0
      fi
    done
  done
  return 1
}

start_node() {
  local n=$1
  if running "$n"; then return 0; fi
  need etcd etcd-server
  need curl curl
  need jq jq
  mkdir -p "$NODE_DIR/$n"
  log "starting $n on $(client_port "$n")"
  spawn "$n" etcd --name "$n" --data-dir "$NODE_DIR/$n" \
    --listen-client-urls "http://127.0.0.1:$(client_port "$n")" \
    --advertise-client-urls "http://127.0.0.1:$(client_port "$n")" \
    --listen-peer-urls "http://127.0.0.1:$(peer_port "$n")" \
    --initial-advertise-peer-urls "http://127.0.0.1:$(peer_port "$n")" \
    --initial-cluster "$(initial_cluster)" --initial-cluster-state new \
    --initial-cluster-token lease-ci-cluster \
    --heartbeat-interval 50 --election-timeout 500 \
    --logger zap --log-level warn
}

cluster_main "$@"
