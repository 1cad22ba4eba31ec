//! The shared conformance suite on NATS JetStream KV: one store connected directly, a second
//! through a fault-injecting proxy. Needs `LEASE_TEST_NATS_URL`; skips loudly without it.
//!
//! The harness takes the store's fixed TTL (the bucket's max age, 1.5 s here) for both the
//! store-level cases and the coordinator timings. Scheduler slots, partitions and membership run
//! on the same store (slots in the bucket's slot bucket, which has no max age); the fault
//! path's store counts the round trips of a batch renewal. Each case first checks that the
//! fault path reaches the same server (`Harness::checked_fault_path`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lease_conformance::{FaultProxy, Harness, env};
use lease_nats::{NatsConfig, NatsStore, bucket_for_ttl};

/// The lease duration of the conformance bucket.
const TTL: Duration = Duration::from_millis(1500);

async fn setup() -> Option<Harness> {
    let url = env::server_url("nats")?;
    let config = NatsConfig::new(TTL).bucket(bucket_for_ttl("lease_conformance", TTL));
    let store = match NatsStore::connect(&url, config.clone()).await {
        Ok(store) => store,
        Err(e) => {
            env::skip("nats", &format!("cannot open a lease store at {url}: {e}"));
            return None;
        }
    };
    let proxy = FaultProxy::start(store.server().to_owned())
        .await
        .expect("fault proxy starts");
    let proxied = NatsStore::connect(&format!("nats://{}", proxy.local_addr()), config)
        .await
        .expect("a store connects through the fault proxy");
    Some(
        Harness::new(Arc::new(store.clone()))
            .with_slots(Arc::new(store.clone()))
            .with_faults(Arc::new(proxied.clone()), Arc::new(proxy))
            .with_groups(Arc::new(store), Some(Arc::new(proxied)))
            .checked_fault_path()
            .await,
    )
}

lease_conformance::conformance_suite!(setup);
