//! Counted leases on NATS JetStream KV against a real server (`LEASE_TEST_NATS_URL`): a key
//! per permit beside the leases, terms that are create sequences, records that vanish on
//! release and expiry. The shared conformance cases (contention, history, lost answers) run in
//! `conformance.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use async_nats::jetstream;
use lease_conformance::env;
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::permits::PermitStore;
use lease_nats::{NatsConfig, NatsStore};

const TTL: Duration = Duration::from_millis(1000);

/// A store on a bucket of its own, and the raw JetStream context to drop it; `None` (skipped)
/// without a server.
async fn store(what: &str) -> Option<(NatsStore, jetstream::Context, String)> {
    let url = env::server_url("nats")?;
    let client = match async_nats::connect(&url).await {
        Ok(client) => client,
        Err(e) => {
            env::skip("nats", &format!("cannot connect to {url}: {e}"));
            return None;
        }
    };
    let bucket = format!("lease_test_{what}_{:08x}", rand::random::<u32>());
    let store = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
        .await
        .unwrap();
    Some((store, jetstream::new(client), bucket))
}

#[tokio::test]
async fn permits_keep_every_rule() {
    let Some((store, js, bucket)) = store("permits").await else {
        return;
    };
    let name = "import.a b";
    assert!(store.permits(name).await.unwrap().is_empty());
    let holders: Vec<HolderToken> = (0..4).map(|_| HolderToken::mint()).collect();
    let mut grants = Vec::new();
    for h in &holders[..3] {
        let g = store.claim_permit(name, 3, h, "a", TTL).await.unwrap();
        grants.push(g.unwrap());
    }
    assert_eq!(
        grants.iter().map(|g| g.permit).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert!(grants.windows(2).all(|w| w[1].grant.term > w[0].grant.term));
    // The term is the create's stream sequence.
    let kv = js.get_key_value(&bucket).await.unwrap();
    let entry = kv.entry("permit.import=2Ea=20b.1").await.unwrap().unwrap();
    assert_eq!(entry.revision, grants[1].grant.term);
    // Full, and no holder twice.
    assert!(
        store
            .claim_permit(name, 3, &holders[3], "b", TTL)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .claim_permit(name, 4, &holders[0], "a", TTL)
            .await
            .unwrap()
            .is_none()
    );
    // The plain lease of the name is apart from its permits.
    assert!(
        store
            .claim(name, &holders[3], "b", TTL)
            .await
            .unwrap()
            .is_some()
    );
    // Renew keeps the term; verify finds the permit by token.
    let r = store.renew_permit(name, 1, &holders[1], TTL).await.unwrap();
    assert_eq!(r.map(|r| r.term), Some(grants[1].grant.term));
    assert!(
        store
            .renew_permit(name, 1, &holders[0], TTL)
            .await
            .unwrap()
            .is_none()
    );
    let v = store
        .verify_permit(name, &holders[2])
        .await
        .unwrap()
        .unwrap();
    assert_eq!((v.permit, v.grant.term), (2, grants[2].grant.term));
    // Release frees the permit; the next claim takes it with a higher term.
    assert!(!store.release_permit(name, 1, &holders[0]).await.unwrap());
    assert!(store.release_permit(name, 1, &holders[1]).await.unwrap());
    assert!(!store.release_permit(name, 1, &holders[1]).await.unwrap());
    let g = store
        .claim_permit(name, 3, &holders[3], "b", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.permit, 1);
    assert!(g.grant.term > grants[2].grant.term);
    // Lowered to 2 with 3 live: nobody revoked, nobody admitted until fewer than 2 are live.
    let late = HolderToken::mint();
    assert!(
        store
            .claim_permit(name, 2, &late, "c", TTL)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release_permit(name, 0, &holders[0]).await.unwrap());
    assert!(
        store
            .claim_permit(name, 2, &late, "c", TTL)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release_permit(name, 2, &holders[2]).await.unwrap());
    let last = store
        .claim_permit(name, 2, &late, "c", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(last.permit, 0);
    assert!(last.grant.term > g.grant.term);
    let list = store.permits(name).await.unwrap();
    let seen: Vec<_> = list.iter().map(|p| (p.permit, p.term, p.live)).collect();
    assert_eq!(
        seen,
        [(0, last.grant.term, true), (1, g.grant.term, true)],
        "{list:?}"
    );
    // Expiry by the bucket's max age frees every permit; the terms go on.
    tokio::time::sleep(TTL + Duration::from_millis(300)).await;
    assert!(store.permits(name).await.unwrap().is_empty());
    assert!(
        store
            .renew_permit(name, 0, &late, TTL)
            .await
            .unwrap()
            .is_none()
    );
    let next = store
        .claim_permit(name, 3, &late, "c", TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(next.permit, 0);
    assert!(next.grant.term > last.grant.term);
    // Bad input is refused before any I/O.
    assert!(store.claim_permit(name, 0, &late, "c", TTL).await.is_err());
    assert!(
        store
            .claim_permit(name, 100_000, &late, "c", TTL)
            .await
            .is_err()
    );
    let _ = js.delete_stream(format!("KV_{bucket}")).await;
    let _ = js
        .delete_stream(format!("KV_{}", lease_nats::slot_bucket_for(&bucket)))
        .await;
}
