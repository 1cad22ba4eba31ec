//! Verified transactions: verify runs first, and when the lease is lost not one business
//! statement runs. On every dialect.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lease_core::{Coordinator, ErrorKind, LeaseStore, Timings, backend::HolderToken};
use lease_sql::Fence;

fn timings() -> Timings {
    Timings::from_lease(Duration::from_secs(3)).unwrap()
}

macro_rules! guard_tests {
    ($dialect:ident, $setup:expr, $claim_waits:expr) => {
        mod $dialect {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn business_statements_run_under_a_live_lease_and_never_after_a_loss() {
                let Some(store) = $setup else { return };
                let table = format!("biz_{:x}", support::rand_u64() >> 8);
                sqlx::query(&format!(
                    "CREATE TABLE {table} (fence BIGINT NOT NULL, what VARCHAR(20) NOT NULL)"
                ))
                .execute(store.app_pool())
                .await
                .unwrap();
                let name = format!("guard-{table}");
                let c = Coordinator::builder(store.clone())
                    .instance("a")
                    .timings(timings())
                    .build()
                    .unwrap();
                let term = c.try_acquire(&name).await.unwrap();

                // First transaction: the lease is live, its statements run and commit.
                let mut tx = store.begin_verified(&term).await.unwrap();
                sqlx::query(&format!(
                    "INSERT INTO {table} (fence, what) VALUES ({}, 'first')",
                    term.token()
                ))
                .execute(&mut *tx)
                .await
                .unwrap();
                tx.commit().await.unwrap();

                // The lease is lost between the two transactions (an administrator breaks it).
                assert!(store.force_release(&name).await.unwrap());

                // Second transaction: verify fails first, so its statements never run.
                let err = store.begin_verified(&term).await.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::Lost, "{err}");
                assert!(err.to_string().contains("no statement ran"), "{err}");

                let n: (i64,) = sqlx::query_as(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(store.app_pool())
                    .await
                    .unwrap();
                assert_eq!(n.0, 1, "only the first transaction's row");

                // A new holder's term verifies; the old term never does again.
                let other = Coordinator::builder(store.clone())
                    .instance("b")
                    .timings(timings())
                    .build()
                    .unwrap();
                let t2 = other.try_acquire(&name).await.unwrap();
                assert!(t2.token() > term.token());
                store
                    .begin_verified(&t2)
                    .await
                    .unwrap()
                    .rollback()
                    .await
                    .unwrap();
                let stale = Fence {
                    name: &name,
                    holder: t2.holder(),
                    term: term.token(),
                    permit: None,
                };
                assert_eq!(
                    store.begin_verified(stale).await.unwrap_err().kind(),
                    ErrorKind::Lost,
                    "right holder, wrong term"
                );
                c.close().await.unwrap();
                other.close().await.unwrap();
                sqlx::query(&format!("DROP TABLE {table}"))
                    .execute(store.app_pool())
                    .await
                    .unwrap();
            }

            /// A term of a counted name is refused with a typed error naming what to do
            /// instead, never a `Lost` that would end its run as if the permit were gone.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_verified_transaction_under_a_permit_is_refused_as_unsupported() {
                let Some(store) = $setup else { return };
                let name = format!("guard-permit-{:x}", support::rand_u64());
                let c = Coordinator::builder(store.clone())
                    .instance("a")
                    .timings(timings())
                    .build()
                    .unwrap();
                let term = c
                    .try_acquire(lease_core::Permits::new(&name, 2).unwrap())
                    .await
                    .unwrap();
                assert_eq!(term.permit(), Some(0));
                let err = store.begin_verified(&term).await.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
                assert!(err.to_string().contains("Term::verify"), "{err}");
                assert!(term.is_live(), "the refusal ends nothing");
                term.resign().await.unwrap();
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_verified_transaction_holds_off_the_next_claim_until_it_ends() {
                let Some(store) = $setup else { return };
                let name = format!("hold-off-{:x}", support::rand_u64());
                let a = HolderToken::mint();
                let g = store
                    .claim(&name, &a, "a", Duration::from_millis(300))
                    .await
                    .unwrap()
                    .unwrap();
                let tx = store
                    .begin_verified(Fence {
                        name: &name,
                        holder: &a,
                        term: g.term,
                        permit: None,
                    })
                    .await
                    .unwrap();
                // The lease expires by the database clock while the transaction is open…
                tokio::time::sleep(Duration::from_millis(450)).await;
                let s2 = store.clone();
                let n2 = name.clone();
                let contender = tokio::spawn(async move {
                    s2.claim(&n2, &HolderToken::mint(), "b", Duration::from_secs(5))
                        .await
                });
                // …but the next claim never takes effect before the transaction ends: on
                // PostgreSQL and MariaDB it answers held at once (the row is locked), on SQLite
                // it waits for the file's write lock.
                tokio::time::sleep(Duration::from_millis(400)).await;
                let waits: bool = $claim_waits;
                if waits {
                    assert!(
                        !contender.is_finished(),
                        "a claim took effect while a verified transaction was open"
                    );
                } else {
                    assert!(contender.is_finished(), "the claim waited on the row lock");
                }
                tx.commit().await.unwrap();
                let g2 = if waits {
                    contender.await.unwrap().unwrap()
                } else {
                    assert!(
                        contender.await.unwrap().unwrap().is_none(),
                        "a claim took effect while a verified transaction was open"
                    );
                    store
                        .claim(&name, &HolderToken::mint(), "b", Duration::from_secs(5))
                        .await
                        .unwrap()
                };
                let g2 = g2.expect("claim after the transaction");
                assert_eq!(g2.term, g.term + 1);
            }
        }
    };
}

guard_tests!(postgres, support::postgres().await.map(|(s, _)| s), false);
// MariaDB (the CI server): the claim runs with a zero lock wait timeout. Stock MySQL has none
// per statement, and its claim waits as SQLite's does.
guard_tests!(mysql, support::mysql().await.map(|(s, _)| s), false);
guard_tests!(sqlite, Some(support::sqlite().await), true);
