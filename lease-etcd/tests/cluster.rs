//! The shared conformance suite on a 3-member etcd cluster: `LEASE_TEST_ETCD_CLUSTER_URL`, the
//! comma-separated client endpoints (`bash ci/cluster/etcd.sh start` starts one on loopback and
//! `bash ci/cluster/etcd.sh url` prints its URL). Skips loudly without it;
//! `LEASE_TEST_REQUIRE=etcd-cluster` makes that a failure. The direct store talks to every
//! member (the client balances over them and follows the leader's answers); the fault path
//! reaches the first member only, through the proxy. The set-up is `common/mod.rs`, the same as
//! the one-member run's.

mod common;

async fn setup() -> Option<lease_conformance::Harness> {
    common::setup("etcd-cluster").await
}

lease_conformance::conformance_suite!(setup);
