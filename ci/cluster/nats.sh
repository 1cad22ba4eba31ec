#!/usr/bin/env bash
# A 3-node NATS JetStream cluster on loopback for the cluster runs of the lease soak:
#   n1 client 127.0.0.1:42221 route 42231 monitor 42241
#   n2 client 127.0.0.1:42222 route 42232 monitor 42242
#   n3 client 127.0.0.1:42223 route 42233 monitor 42243
# JetStream file storage per node under $CLUSTER_DIR/nats (see lib.sh). The lease store creates
# its bucket with 3 replicas when asked to (lease-nats: NatsConfig::replicas, or `replicas=3`
# in the URL). Uses the machine's nats-server (apt-get installs it, curl and jq when
# missing). The single NATS on 4222 is never touched.
#
#   bash ci/cluster/nats.sh start|stop|clean|status|kill <n1|n2|n3|leader>|restart <node>|leader|url
#
# `kill leader` SIGKILLs the leader of the first KV stream (the lease bucket's stream) that a
# node's /jsz reports, else the JetStream meta leader.
set -euo pipefail
CLUSTER_NAME=nats-cluster
# shellcheck source=ci/cluster/lib.sh
source "$(dirname "$0")/lib.sh"
NODE_DIR=$CLUSTER_DIR/nats
NODES="n1 n2 n3"
LEADER_WORD=leader

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

# leader : the node leading the first KV stream a node reports, else the meta leader.
leader() {
  local n j name
  for n in $NODES; do
    j=$(jsz "$n" "accounts=true&streams=true")
    [[ -n $j ]] || continue
    name=$(jq -r '[.account_details[]?.stream_detail[]? | select(.name | startswith("KV_"))
                   | .cluster.leader // empty][0] // empty' <<<"$j" 2>/dev/null || true)
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
  need nats-server nats-server
  need curl curl
  need jq jq
  mkdir -p "$NODE_DIR/$n"
  write_config "$n"
  log "starting $n on $(client_port "$n")"
  spawn "$n" nats-server -c "$NODE_DIR/$n.conf"
}

cluster_main "$@"
