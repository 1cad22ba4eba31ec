#!/usr/bin/env bash
# The test command: starts the servers the backend suites need when they are down
# (ci/start-services.sh, idempotent), points each suite at its server, and runs
# every test in the workspace. Extra arguments go to `cargo test`.
#
# A backend whose server is absent prints one `SKIPPED <backend>: <why>` line;
# LEASE_TEST_REQUIRE=postgres,mysql,... turns that into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

summary=$(bash ci/start-services.sh)
echo "$summary" | grep -v '^LEASE_SERVICES_UP=\|^LEASE_TEST_MONGODB_URL=' >&2 || true
up=$(echo "$summary" | sed -n 's/^LEASE_SERVICES_UP=//p' | tail -n 1)
has() { [[ ",$up," == *",$1,"* ]]; }

if has postgres; then export LEASE_TEST_POSTGRES_URL=${LEASE_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}; fi
if has mysql; then export LEASE_TEST_MYSQL_URL=${LEASE_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}; fi
if has redis; then export LEASE_TEST_REDIS_URL=${LEASE_TEST_REDIS_URL:-redis://127.0.0.1:6379}; fi
if has nats; then export LEASE_TEST_NATS_URL=${LEASE_TEST_NATS_URL:-nats://127.0.0.1:4222}; fi
# MongoDB: the wire emulator (ci/mongo-emulator/), on the port start-services.sh reports.
mongodb_url=$(echo "$summary" | sed -n 's/^LEASE_TEST_MONGODB_URL=//p' | tail -n 1)
if has mongodb; then export LEASE_TEST_MONGODB_URL=${LEASE_TEST_MONGODB_URL:-${mongodb_url:-mongodb://127.0.0.1:27017}}; fi
if has etcd; then export LEASE_TEST_ETCD_URL=${LEASE_TEST_ETCD_URL:-etcd://127.0.0.1:2379}; fi
if has memcached; then export LEASE_TEST_MEMCACHED_URL=${LEASE_TEST_MEMCACHED_URL:-memcached://127.0.0.1:11211}; fi

# The 3-node clusters (ci/cluster/, idempotent: a cluster already up is left alone): the etcd
# suite's cluster run (lease-etcd/tests/cluster.rs) and the Redis failover case under Sentinel
# (lease-redis/tests/failover.rs). A cluster that does not come up leaves its variable unset:
# its tests then skip loudly, or fail when LEASE_TEST_REQUIRE names them (as .ci/run does).
if bash ci/cluster/etcd.sh start; then
  export LEASE_TEST_ETCD_CLUSTER_URL=${LEASE_TEST_ETCD_CLUSTER_URL:-$(bash ci/cluster/etcd.sh url)}
  up+=",etcd-cluster"
fi
if bash ci/cluster/redis-sentinel.sh start; then
  export LEASE_TEST_REDIS_SENTINEL_URL=${LEASE_TEST_REDIS_SENTINEL_URL:-$(bash ci/cluster/redis-sentinel.sh url)}
  up+=",redis-sentinel"
fi

# The SQL primary + replica clusters (lease-sql/tests/failover_postgres.rs, failover_mysql.rs),
# in their safe modes: synchronous (PostgreSQL) and semi-synchronous AFTER_SYNC (MariaDB). The
# tests kill, promote and reattach their primaries.
if bash ci/cluster/postgres.sh start sync; then
  export LEASE_TEST_POSTGRES_CLUSTER_URL=${LEASE_TEST_POSTGRES_CLUSTER_URL:-$(bash ci/cluster/postgres.sh url)}
  up+=",postgres-cluster"
fi
if bash ci/cluster/mariadb.sh start semisync; then
  export LEASE_TEST_MARIADB_CLUSTER_URL=${LEASE_TEST_MARIADB_CLUSTER_URL:-$(bash ci/cluster/mariadb.sh url)}
  up+=",mariadb-cluster"
fi

echo "test.sh: servers up: ${up:-none}; LEASE_TEST_REQUIRE=${LEASE_TEST_REQUIRE:-}" >&2
# lease-redis's `sentinel` feature: the Sentinel failover case (lease-soak turns it on too).
# lease-conformance's `docker` feature: a backend whose server is absent here, where a Docker
# engine answers (its default socket or DOCKER_HOST), runs its suite in a container instead of
# skipping (README, "The tests with Docker"); a server that is up always wins. It is also the
# build ci/containers.sh reuses, so the container step compiles (almost) nothing again.
exec cargo test --workspace --features lease-redis/sentinel,lease-conformance/docker "$@"
