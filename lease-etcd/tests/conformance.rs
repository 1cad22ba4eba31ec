//! The shared conformance suite on one etcd member (`LEASE_TEST_ETCD_URL`; skips loudly without
//! it). The set-up is in `common/mod.rs`, shared with the cluster run (`cluster.rs`).

mod common;

async fn setup() -> Option<lease_conformance::Harness> {
    common::setup("etcd").await
}

lease_conformance::conformance_suite!(setup);
