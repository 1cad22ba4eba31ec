//! Counted leases on Redis: the permit scripts against the real server, in a sequence that
//! walks every rule with this store's exact terms (1, 2, 3, … under `TermScheme::Counter`) and
//! kept records. The shared conformance cases (contention, history, lost answers) run in
//! `conformance.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::permits::PermitStore;

#[tokio::test]
async fn permits_keep_every_rule() {
    let Some(url) = common::url() else { return };
    let Some(store) = common::direct(&url, common::config()).await else {
        return;
    };
    let name = format!("{}import", common::unique("permits"));
    let ttl = Duration::from_secs(5);
    assert!(store.permits(&name).await.unwrap().is_empty());
    let holders: Vec<HolderToken> = (0..4).map(|_| HolderToken::mint()).collect();
    let mut grants = Vec::new();
    for h in &holders[..3] {
        grants.push(
            store
                .claim_permit(&name, 3, h, "a", ttl)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(
        grants.iter().map(|g| g.permit).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(
        grants.iter().map(|g| g.grant.term).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    // Full, and no holder twice.
    assert!(
        store
            .claim_permit(&name, 3, &holders[3], "b", ttl)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .claim_permit(&name, 4, &holders[0], "a", ttl)
            .await
            .unwrap()
            .is_none()
    );
    // The plain lease of the name is apart from its permits.
    let plain = store
        .claim(&name, &holders[3], "b", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(plain.term, 1);
    // Renew keeps the term; verify finds the permit by token.
    let r = store
        .renew_permit(&name, 1, &holders[1], ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.term, 2);
    assert!(
        store
            .renew_permit(&name, 1, &holders[0], ttl)
            .await
            .unwrap()
            .is_none()
    );
    let v = store
        .verify_permit(&name, &holders[2])
        .await
        .unwrap()
        .unwrap();
    assert_eq!((v.permit, v.grant.term), (2, 3));
    // Release frees the permit; the next claim takes it with a new term.
    assert!(!store.release_permit(&name, 1, &holders[0]).await.unwrap());
    assert!(store.release_permit(&name, 1, &holders[1]).await.unwrap());
    assert!(!store.release_permit(&name, 1, &holders[1]).await.unwrap());
    assert!(
        store
            .verify_permit(&name, &holders[1])
            .await
            .unwrap()
            .is_none()
    );
    let g = store
        .claim_permit(&name, 3, &holders[3], "b", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((g.permit, g.grant.term), (1, 4));
    // Lowered to 2 with 3 live: nobody revoked, nobody admitted until fewer than 2 are live.
    let late = HolderToken::mint();
    assert!(
        store
            .claim_permit(&name, 2, &late, "c", ttl)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release_permit(&name, 0, &holders[0]).await.unwrap());
    assert!(
        store
            .claim_permit(&name, 2, &late, "c", ttl)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release_permit(&name, 2, &holders[2]).await.unwrap());
    let g = store
        .claim_permit(&name, 2, &late, "c", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((g.permit, g.grant.term), (0, 5));
    let list = store.permits(&name).await.unwrap();
    let seen: Vec<_> = list.iter().map(|p| (p.permit, p.term, p.live)).collect();
    assert_eq!(
        seen,
        [(0, 5, true), (1, 4, true), (2, 3, false)],
        "{list:?}"
    );
    assert_eq!(list[0].instance, "c");
    // Expiry by the server's clock frees a permit; the term sequence goes on.
    let short = Duration::from_millis(300);
    let quick = HolderToken::mint();
    let q = store
        .claim_permit(&name, 3, &quick, "d", short)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((q.permit, q.grant.term), (2, 6));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        store
            .renew_permit(&name, 2, &quick, ttl)
            .await
            .unwrap()
            .is_none()
    );
    let again = HolderToken::mint();
    let g = store
        .claim_permit(&name, 3, &again, "e", ttl)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((g.permit, g.grant.term), (2, 7));
    // Bad input is refused before any I/O.
    assert!(
        store
            .claim_permit(&name, 0, &again, "e", ttl)
            .await
            .is_err()
    );
    assert!(
        store
            .claim_permit(&name, 100_000, &again, "e", ttl)
            .await
            .is_err()
    );
}
