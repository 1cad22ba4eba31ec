//! The shared conformance suite on etcd: one store connected directly, a second through a
//! fault-injecting proxy. Needs `LEASE_TEST_ETCD_URL`; skips loudly without it.
//!
//! etcd keeps lease TTLs in whole seconds (rounded up), and expires them in a sweep every
//! 500 ms: the store-level TTL is 2 s (etcd's minimum with its default settings) and the slack
//! 700 ms, so "expired by now" is asked only after the sweep, and "still live" only before the
//! TTL. Partitions and membership run on the same store; the fault path's store counts the round
//! trips of a batch renewal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_conformance::{FaultProxy, Harness, env};
use lease_etcd::{EtcdConfig, EtcdStore};

async fn setup() -> Option<Harness> {
    let url = env::server_url("etcd")?;
    let config = EtcdConfig::new().prefix("lease-conformance/");
    let store = match EtcdStore::connect(&url, config.clone()).await {
        Ok(store) => store,
        Err(e) => {
            env::skip("etcd", &format!("cannot open a lease store at {url}: {e}"));
            return None;
        }
    };
    let first = store
        .server()
        .split(',')
        .next()
        .unwrap_or_default()
        .to_owned();
    let proxy = FaultProxy::start(first).await.expect("fault proxy starts");
    let proxied = EtcdStore::connect(&format!("etcd://{}", proxy.local_addr()), config)
        .await
        .expect("a store connects through the fault proxy");
    Some(
        Harness::new(Arc::new(store.clone()))
            .with_ttl(Duration::from_secs(2))
            .with_slack(Duration::from_millis(700))
            .with_faults(Arc::new(proxied.clone()), Arc::new(proxy))
            .with_groups(Arc::new(store), Some(Arc::new(proxied))),
    )
}

lease_conformance::conformance_suite!(setup);
