//! `renew_many` on PostgreSQL passes by a row a verified transaction has locked: the other
//! leases of the batch are renewed and answered without waiting for that transaction.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use lease_core::backend::{HolderToken, RenewItem};
use lease_core::{ErrorKind, LeaseStore};
use lease_sql::Fence;

const TTL: Duration = Duration::from_secs(20);

#[tokio::test]
async fn postgres_a_batch_does_not_wait_for_a_verified_transaction() {
    let Some((store, _)) = support::postgres().await else {
        return;
    };
    let id = support::rand_u64();
    let holder = HolderToken::mint();
    let names = ["a", "b", "c"].map(|n| format!("renew-many-{id:x}-{n}"));
    let mut terms = Vec::new();
    for n in &names {
        terms.push(
            store
                .claim(n, &holder, "holder", TTL)
                .await
                .unwrap()
                .unwrap()
                .term,
        );
    }
    // The holder's verified transaction on a: its row is locked in share mode until the
    // commit, which comes only after the batch has answered.
    let tx = store
        .begin_verified(Fence {
            name: &names[0],
            holder: &holder,
            term: terms[0],
            permit: None,
        })
        .await
        .unwrap();
    let items: Vec<RenewItem<'_>> = names
        .iter()
        .map(|name| RenewItem {
            name,
            holder: &holder,
        })
        .collect();
    let started = Instant::now();
    let answers = tokio::time::timeout(Duration::from_secs(15), store.renew_many(&items, TTL))
        .await
        .expect("the batch waited for the verified transaction on a")
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "the batch took {took:?} with a row locked"
    );
    let err = answers[0]
        .as_ref()
        .expect_err("a is locked until the commit");
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    for (i, answer) in answers.iter().enumerate().skip(1) {
        let grant = answer.as_ref().unwrap().expect("b and c are renewed");
        assert_eq!(grant.term, terms[i]);
    }
    tx.commit().await.unwrap();
    let answers = store.renew_many(&items, TTL).await.unwrap();
    for (i, answer) in answers.iter().enumerate() {
        assert_eq!(answer.as_ref().unwrap().map(|g| g.term), Some(terms[i]));
    }
}
