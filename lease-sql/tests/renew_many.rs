//! `renew_many` on PostgreSQL and MariaDB passes by a row a verified transaction has locked:
//! the other leases of the batch are renewed and answered without waiting for that
//! transaction. A batch of the most names one call takes is renewed whole in one request (or a
//! fixed few), well within the default attempt timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_core::backend::{HolderToken, RenewItem};
use lease_core::{ErrorKind, LeaseStore};
use lease_sql::Fence;

const TTL: Duration = Duration::from_secs(20);

/// `$name`: on the `$server` store, a batch with one lease whose row the holder's verified
/// transaction has locked answers the others at once and that one `Timeout` after the 1 s
/// the store waits for such rows.
macro_rules! a_batch_does_not_wait_for_a_verified_transaction {
    ($name:ident, $server:ident) => {
        #[tokio::test]
        async fn $name() {
            let Some((store, _)) = support::$server().await else {
                return;
            };
            assert!(
                store.capabilities().renew_many,
                "{}: renew_many is not one request",
                stringify!($server)
            );
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
            // The holder's verified transaction on a: its row is locked in share mode until
            // the commit, which comes only after the batch has answered.
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
            let answers =
                tokio::time::timeout(Duration::from_secs(15), store.renew_many(&items, TTL))
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
    };
}

a_batch_does_not_wait_for_a_verified_transaction!(
    postgres_a_batch_does_not_wait_for_a_verified_transaction,
    postgres
);
a_batch_does_not_wait_for_a_verified_transaction!(
    mysql_a_batch_does_not_wait_for_a_verified_transaction,
    mysql
);

/// Names in the batches below: the most one `renew_many` takes.
const MANY: usize = lease_core::backend::MAX_RENEWALS_PER_CALL;

/// Their TTL: long enough that the first is still held when the last is claimed.
const LONG_TTL: Duration = Duration::from_secs(300);

/// Claims `MANY` names under `holder`, 32 claims in flight; their terms in order.
async fn claim_many<S>(store: &Arc<S>, holder: &HolderToken, prefix: &str) -> Vec<(String, u64)>
where
    S: LeaseStore + 'static,
{
    let names: Vec<String> = (0..MANY).map(|i| format!("{prefix}-{i}")).collect();
    let mut tasks = tokio::task::JoinSet::new();
    for (k, chunk) in names.chunks(MANY.div_ceil(32)).enumerate() {
        let (store, holder, chunk) = (store.clone(), holder.clone(), chunk.to_vec());
        tasks.spawn(async move {
            let mut terms = Vec::new();
            for name in chunk {
                let grant = store
                    .claim(&name, &holder, "holder", LONG_TTL)
                    .await
                    .unwrap();
                terms.push((name, grant.expect("a fresh name is free").term));
            }
            (k, terms)
        });
    }
    let mut parts = tasks.join_all().await;
    parts.sort_by_key(|(k, _)| *k);
    parts.into_iter().flat_map(|(_, terms)| terms).collect()
}

/// One batch of `MANY` held names is renewed whole within the default attempt timeout (5 s),
/// each with its term. Before the statements were fixed, PostgreSQL joined two CTEs in a
/// nested loop (10^8 comparisons: 78 s) and SQLite re-read the holders' JSON array once per
/// name (21 s), so a coordinator holding 10,000 names lost most of them at their deadlines.
async fn a_full_batch_is_renewed_at_once<S>(store: S, backend: &str, prefix: &str)
where
    S: LeaseStore + 'static,
{
    assert!(
        store.capabilities().renew_many,
        "{backend}: renew_many is not one request"
    );
    let store = Arc::new(store);
    let holder = HolderToken::mint();
    let prefix = format!("{prefix}-{:x}", support::rand_u64());
    let terms = claim_many(&store, &holder, &prefix).await;
    let items: Vec<RenewItem<'_>> = terms
        .iter()
        .map(|(name, _)| RenewItem {
            name,
            holder: &holder,
        })
        .collect();
    for round in 0..2 {
        let started = Instant::now();
        let answers =
            tokio::time::timeout(Duration::from_secs(30), store.renew_many(&items, LONG_TTL))
                .await
                .unwrap_or_else(|_| panic!("{backend}: a batch of {MANY} took over 30 s"))
                .unwrap();
        let took = started.elapsed();
        eprintln!("{backend}: a batch of {MANY} names in {took:?} (round {round})");
        assert!(
            took < Duration::from_secs(5),
            "{backend}: a batch of {MANY} names took {took:?} (round {round}), more than the \
             default attempt timeout"
        );
        assert_eq!(answers.len(), MANY);
        for ((name, term), answer) in terms.iter().zip(&answers) {
            let grant = answer
                .as_ref()
                .unwrap_or_else(|e| panic!("{backend}: {name}: {e}"))
                .unwrap_or_else(|| panic!("{backend}: {name} answered as not held"));
            assert_eq!(grant.term, *term, "{backend}: {name}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_full_batch_is_renewed_at_once() {
    let Some((store, _)) = support::postgres().await else {
        return;
    };
    a_full_batch_is_renewed_at_once(store, "postgres", "renew-many-full").await;
}

/// The same with the plan PostgreSQL switches a prepared statement to after its fifth run on a
/// connection (a generic plan, which estimates `unnest($1)` at a handful of rows): forced here
/// from the first run, as a coordinator's renewer reaches it within seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_full_batch_is_renewed_at_once_on_a_generic_plan() {
    use std::str::FromStr;
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    let opts = sqlx::postgres::PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("plan_cache_mode", "force_generic_plan")]);
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_lazy_with(opts);
    let store = lease_sql::PostgresStore::with_client(pool, lease_sql::SqlConfig::default())
        .await
        .unwrap();
    a_full_batch_is_renewed_at_once(store, "postgres (generic plan)", "renew-many-full").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_full_batch_is_renewed_at_once() {
    a_full_batch_is_renewed_at_once(support::sqlite().await, "sqlite", "renew-many-full").await;
}

/// MariaDB's `Com_update`: the `UPDATE` statements the server has run, all sessions together.
async fn mysql_updates(url: &str) -> u64 {
    use sqlx::Connection;
    let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
    let (_, n): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_update'")
        .fetch_one(&mut c)
        .await
        .unwrap();
    n.parse().unwrap()
}

/// MariaDB: the full batch in a fixed few requests, names of 200 bytes (so the batch, 2.4 MB of
/// JSON, goes in three requests), each renewed with its term within the default attempt
/// timeout. The server counts far fewer `UPDATE`s than names (other tests may run beside
/// this one, hence the margin): one `renew` per name would be 20,000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_full_batch_is_renewed_at_once() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    let Some((store, _)) = support::mysql().await else {
        return;
    };
    let prefix = format!("renew-many-full-{}", "x".repeat(170));
    let before = mysql_updates(&url).await;
    a_full_batch_is_renewed_at_once(store, "mysql", &prefix).await;
    let updates = mysql_updates(&url).await - before;
    assert!(
        updates < MANY as u64 / 4,
        "mysql: two batches of {MANY} names ran {updates} UPDATE statements"
    );
}

/// MariaDB: names that JSON must escape or that a collation could fold (quotes, backslashes,
/// non-ASCII, case, trailing spaces, the longest name) are each renewed as their own lease:
/// the held ones with their terms, one held by another holder and one never claimed answered
/// `None`, and the other holder's lease not extended.
#[tokio::test]
async fn mysql_a_batch_matches_names_byte_for_byte() {
    let Some((store, _)) = support::mysql().await else {
        return;
    };
    let id = format!("{:x}", support::rand_u64());
    let longest = format!("{id}{}", "é".repeat((255 - id.len()) / 2));
    let names = [
        format!("{id}-Job"),
        format!("{id}-job "),
        format!("{id}-\"quoted\" \\back\\slash"),
        format!("{id}-ünïcödé-🦀"),
        format!("{id}-[\"a\",\"b\"]"),
        longest,
    ];
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let mut terms = Vec::new();
    for n in &names {
        terms.push(store.claim(n, &a, "a", TTL).await.unwrap().unwrap().term);
    }
    // Under another holder: `job` (another case), and one never claimed: `Job ` (a trailing
    // space).
    let other = format!("{id}-job");
    store.claim(&other, &b, "b", TTL).await.unwrap().unwrap();
    let never = format!("{id}-Job ");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = store.get(&other).await.unwrap().unwrap().expires_in;
    let mut items: Vec<RenewItem<'_>> = names
        .iter()
        .map(|name| RenewItem { name, holder: &a })
        .collect();
    items.push(RenewItem {
        name: &other,
        holder: &a,
    });
    items.push(RenewItem {
        name: &never,
        holder: &a,
    });
    let answers = store.renew_many(&items, TTL).await.unwrap();
    assert_eq!(answers.len(), items.len());
    for (i, name) in names.iter().enumerate() {
        let grant = answers[i]
            .as_ref()
            .unwrap()
            .unwrap_or_else(|| panic!("{name:?} was not renewed"));
        assert_eq!(grant.term, terms[i], "{name:?}");
        let left = store.verify(name, &a).await.unwrap().unwrap().expires_in;
        assert!(
            left + Duration::from_millis(500) >= TTL,
            "{name:?}: {left:?}"
        );
    }
    assert_eq!(answers[names.len()].as_ref().unwrap(), &None, "{other:?}");
    assert_eq!(
        answers[names.len() + 1].as_ref().unwrap(),
        &None,
        "{never:?}"
    );
    let after = store.get(&other).await.unwrap().unwrap().expires_in;
    assert!(
        after <= before,
        "{other:?} was extended: {before:?} -> {after:?}"
    );
    assert_eq!(store.get(&never).await.unwrap(), None);
}
