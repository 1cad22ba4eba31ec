//! Counted leases on the three dialects, before and besides the conformance cases: the rules of
//! `lease_core::backend::permits` one by one, and 20 claimers on 3 permits that never see 4 held.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lease_conformance::{FaultProxy, env};
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::LeaseStoreExt;
use lease_core::backend::notify::{Topic, Wakeups};
use lease_sql::{MySqlStore, PostgresStore, SqlConfig, SqliteStore};
use sqlx::Connection;

const LONG: Duration = Duration::from_secs(30);

fn name(what: &str) -> String {
    format!("permits-{what}-{:016x}", support::rand_u64())
}

async fn postgres() -> Option<PostgresStore> {
    let url = env::server_url("postgres")?;
    Some(
        PostgresStore::connect(&url, SqlConfig::default())
            .await
            .unwrap(),
    )
}

async fn mysql() -> Option<MySqlStore> {
    let url = env::server_url("mysql")?;
    Some(
        MySqlStore::connect(&url, SqlConfig::default())
            .await
            .unwrap(),
    )
}

/// Claims, the count, no holder twice, renew, verify, release, the list.
async fn rules(store: &dyn LeaseStore) {
    assert!(store.capabilities().permits);
    let n = name("rules");
    assert!(store.permits(&n).await.unwrap().is_empty());
    let holders: Vec<HolderToken> = (0..4).map(|_| HolderToken::mint()).collect();
    let mut terms = Vec::new();
    for (i, h) in holders.iter().take(3).enumerate() {
        let g = store
            .claim_permit(&n, 3, h, &format!("i{i}"), LONG)
            .await
            .unwrap()
            .expect("a free permit");
        assert_eq!(g.permit, u32::try_from(i).unwrap());
        terms.push(g.grant.term);
    }
    assert!(terms.windows(2).all(|w| w[1] > w[0]), "{terms:?}");
    // Full; and a holder that holds one is refused a second, even with room.
    assert!(
        store
            .claim_permit(&n, 3, &holders[3], "i3", LONG)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .claim_permit(&n, 5, &holders[0], "i0", LONG)
            .await
            .unwrap()
            .is_none()
    );
    // Verify by token alone; renewal keeps the term.
    let v = store.verify_permit(&n, &holders[1]).await.unwrap().unwrap();
    assert_eq!((v.permit, v.grant.term), (1, terms[1]));
    assert!(
        store
            .verify_permit(&n, &holders[3])
            .await
            .unwrap()
            .is_none()
    );
    let r = store
        .renew_permit(&n, 1, &holders[1], LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.term, terms[1]);
    assert!(
        store
            .renew_permit(&n, 2, &holders[1], LONG)
            .await
            .unwrap()
            .is_none()
    );
    // Release frees the permit; the next grant takes it with a greater term than any before.
    assert!(!store.release_permit(&n, 1, &holders[0]).await.unwrap());
    assert!(store.release_permit(&n, 1, &holders[1]).await.unwrap());
    assert!(!store.release_permit(&n, 1, &holders[1]).await.unwrap());
    assert!(
        store
            .verify_permit(&n, &holders[1])
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store
            .renew_permit(&n, 1, &holders[1], LONG)
            .await
            .unwrap()
            .is_none()
    );
    let g = store
        .claim_permit(&n, 3, &holders[3], "i3", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.permit, 1);
    assert_eq!(g.grant.term, terms[2] + 1);
    let list = store.permits(&n).await.unwrap();
    let seen: Vec<(u32, &str, u64, bool)> = list
        .iter()
        .map(|p| (p.permit, p.instance.as_str(), p.term, p.live))
        .collect();
    assert_eq!(
        seen,
        vec![
            (0, "i0", terms[0], true),
            (1, "i3", terms[2] + 1, true),
            (2, "i2", terms[2], true),
        ]
    );
    assert!(list.iter().all(|p| p.expires_in > Duration::from_secs(20)));
    // A plain lease of the name is another thing.
    let plain = HolderToken::mint();
    assert!(
        store
            .claim(&n, &plain, "plain", LONG)
            .await
            .unwrap()
            .is_some()
    );
}

/// A dead holder's permit frees itself at its TTL (the store's clock), and the term moves on.
async fn expiry(store: &dyn LeaseStore) {
    let n = name("expiry");
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let first = store
        .claim_permit(&n, 1, &a, "a", Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    assert!(
        store
            .claim_permit(&n, 1, &b, "b", LONG)
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(store.verify_permit(&n, &a).await.unwrap().is_none());
    let list = store.permits(&n).await.unwrap();
    assert!(!list[0].live && list[0].expires_in.is_zero(), "{list:?}");
    let second = store
        .claim_permit(&n, 1, &b, "b", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.permit, 0);
    assert_eq!(second.grant.term, first.grant.term + 1);
    assert!(store.renew_permit(&n, 0, &a, LONG).await.unwrap().is_none());
}

/// Lowered from 3 to 2 with 3 holders: nobody is revoked, and no claim is granted until fewer
/// than 2 are live. Raised, the free permits up to the new count are taken.
async fn count_changes(store: &dyn LeaseStore) {
    let n = name("count");
    let hs: Vec<HolderToken> = (0..5).map(|_| HolderToken::mint()).collect();
    for h in &hs[..3] {
        store
            .claim_permit(&n, 3, h, "x", LONG)
            .await
            .unwrap()
            .unwrap();
    }
    assert!(
        store
            .claim_permit(&n, 2, &hs[3], "x", LONG)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release_permit(&n, 0, &hs[0]).await.unwrap());
    assert!(
        store
            .claim_permit(&n, 2, &hs[3], "x", LONG)
            .await
            .unwrap()
            .is_none()
    );
    for h in &hs[1..3] {
        assert!(store.verify_permit(&n, h).await.unwrap().is_some());
    }
    assert!(store.release_permit(&n, 2, &hs[2]).await.unwrap());
    let g = store
        .claim_permit(&n, 2, &hs[3], "x", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.permit, 0);
    let g = store
        .claim_permit(&n, 5, &hs[4], "x", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g.permit, 2);
}

/// `claimers` tasks claim one permit each of a name with `count` permits, hold it a moment
/// and release it, `rounds` times: the most that held at once, and every term granted.
async fn contend(
    store: Arc<dyn LeaseStore>,
    count: u32,
    claimers: usize,
    rounds: usize,
) -> (usize, Vec<u64>) {
    let n = Arc::new(name("contend"));
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..claimers {
        let (store, n, held, most) = (store.clone(), n.clone(), held.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            let mut terms = Vec::new();
            let mut done = 0;
            while done < rounds {
                let h = HolderToken::mint();
                let Some(g) = store
                    .claim_permit(&n, count, &h, &format!("c{i}"), LONG)
                    .await
                    .unwrap()
                else {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                };
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                let live = store.permits(&n).await.unwrap();
                most.fetch_max(live.iter().filter(|p| p.live).count(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                held.fetch_sub(1, Ordering::SeqCst);
                assert!(store.release_permit(&n, g.permit, &h).await.unwrap());
                terms.push(g.grant.term);
                done += 1;
            }
            terms
        }));
    }
    let mut terms = Vec::new();
    for t in tasks {
        terms.extend(t.await.unwrap());
    }
    (most.load(Ordering::SeqCst), terms)
}

async fn never_more_than_three(store: Arc<dyn LeaseStore>) {
    let (most, mut terms) = contend(store.clone(), 3, 20, 5).await;
    assert!(most <= 3, "{most} held at once with 3 permits");
    assert_eq!(most, 3, "20 claimers never filled 3 permits");
    let all = terms.len();
    terms.sort_unstable();
    terms.dedup();
    assert_eq!(terms.len(), all, "a term was granted twice");
    // The checker sees more than 3 when more may hold: it can fail.
    let (most, _) = contend(store, 5, 20, 3).await;
    assert!(most > 3, "the checker saw at most {most} with 5 permits");
}

macro_rules! dialect {
    ($m:ident, $store:expr) => {
        mod $m {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn permit_rules() {
                let Some(store) = $store else { return };
                rules(&store).await;
                expiry(&store).await;
                count_changes(&store).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn twenty_claimers_on_three_permits() {
                let Some(store) = $store else { return };
                never_more_than_three(Arc::new(store)).await;
            }
        }
    };
}

dialect!(on_postgres, postgres().await);
dialect!(on_mysql, mysql().await);
dialect!(on_sqlite, Some(support::sqlite().await));

/// The bound on a hint's latency these tests accept.
const WAKE: Duration = Duration::from_millis(250);

async fn woken(w: &mut Wakeups, within: Duration) -> bool {
    tokio::time::timeout(within, w.changed()).await.is_ok()
}

/// Drains what subscribing (and connecting) woke.
async fn settle(w: &mut Wakeups) {
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while !w.is_connected() && tokio::time::Instant::now() < until {
        let _ = tokio::time::timeout(Duration::from_millis(50), w.changed()).await;
    }
    while woken(w, Duration::from_millis(100)).await {}
}

/// `waiter` watches the name's lease topic while `writer` claims, renews and releases one of
/// its permits: the claim and the release wake it, the renewal and a release that ended
/// nothing do not.
async fn hints_of(waiter: &dyn LeaseStore, writer: &dyn LeaseStore) {
    let n = name("hints");
    let h = HolderToken::mint();
    let mut w = waiter.changes(&Topic::lease(&n)).unwrap();
    settle(&mut w).await;
    let g = writer
        .claim_permit(&n, 2, &h, "w", LONG)
        .await
        .unwrap()
        .unwrap();
    assert!(woken(&mut w, WAKE).await, "the claim woke nobody");
    // A change may wake twice (SQLite: the store's own hint, then its poller's).
    while woken(&mut w, Duration::from_millis(100)).await {}
    writer
        .renew_permit(&n, g.permit, &h, LONG)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !woken(&mut w, Duration::from_millis(150)).await,
        "a renewal woke the waiter"
    );
    assert!(writer.release_permit(&n, g.permit, &h).await.unwrap());
    assert!(woken(&mut w, WAKE).await, "the release woke nobody");
    while woken(&mut w, Duration::from_millis(100)).await {}
    assert!(!writer.release_permit(&n, g.permit, &h).await.unwrap());
    assert!(
        !woken(&mut w, Duration::from_millis(150)).await,
        "a release that ended nothing woke"
    );
}

#[tokio::test]
async fn postgres_permit_hints_reach_another_store() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    // A table of its own: its own channel.
    let table = format!("permit_hints_{:012x}", support::rand_u64() >> 16);
    let config = || SqlConfig::default().table(&table).unwrap();
    let a = PostgresStore::connect(&url, config()).await.unwrap();
    let b = PostgresStore::connect(&url, config()).await.unwrap();
    hints_of(&a, &b).await;
    drop((a, b));
    let mut c = sqlx::PgConnection::connect(&url).await.unwrap();
    for t in [table.clone(), format!("{table}_permits")] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {t}"))
            .execute(&mut c)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn mysql_permit_hints_cover_the_store_itself() {
    let Some(store) = mysql().await else { return };
    hints_of(&store, &store).await;
}

#[tokio::test]
async fn sqlite_permit_hints_reach_stores_of_the_process_and_other_connections() {
    let url = support::sqlite_url();
    let a = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    let b = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    hints_of(&a, &b).await;
    // A permit ended by a connection of its own, as another process would end it: the poller
    // reads the permit table.
    let n = name("poller");
    let h = HolderToken::mint();
    a.claim_permit(&n, 1, &h, "a", LONG).await.unwrap().unwrap();
    let mut w = a.changes(&Topic::lease(&n)).unwrap();
    settle(&mut w).await;
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE leases_permits SET expires_at_ms = 0 WHERE name = ?1 AND permit_no = 0")
        .bind(&n)
        .execute(&mut other)
        .await
        .unwrap();
    assert!(
        woken(&mut w, WAKE).await,
        "another connection's release of a permit woke nobody"
    );
}

/// Each permit operation's round trips through the proxy, on a warm connection.
async fn round_trips(store: &dyn LeaseStore, proxy: &FaultProxy) -> Vec<(&'static str, u64)> {
    let n = name("rt");
    let ttl = Duration::from_secs(5);
    // Warm up: the permit table checked, every statement prepared once on the one connection.
    let warm = HolderToken::mint();
    let g = store
        .claim_permit(&n, 1, &warm, "w", ttl)
        .await
        .unwrap()
        .unwrap();
    store
        .renew_permit(&n, g.permit, &warm, ttl)
        .await
        .unwrap()
        .unwrap();
    store.verify_permit(&n, &warm).await.unwrap().unwrap();
    store.permits(&n).await.unwrap();
    assert!(
        store
            .claim_permit(&n, 1, &HolderToken::mint(), "w", ttl)
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.release_permit(&n, g.permit, &warm).await.unwrap());

    let h = HolderToken::mint();
    let mut counts = Vec::new();
    let mut step = |what, ok: bool| {
        assert!(ok, "{what}");
        counts.push((what, proxy.stats().round_trips));
        proxy.reset_stats();
    };
    proxy.reset_stats();
    let g = store.claim_permit(&n, 1, &h, "a", ttl).await.unwrap();
    step("claim_permit", g.is_some());
    let r = store.renew_permit(&n, 0, &h, ttl).await.unwrap();
    step("renew_permit", r.is_some());
    let v = store.verify_permit(&n, &h).await.unwrap();
    step("verify_permit", v.is_some());
    let l = store.permits(&n).await.unwrap();
    step("permits", l.len() == 1);
    let full = store
        .claim_permit(&n, 1, &HolderToken::mint(), "b", ttl)
        .await
        .unwrap();
    step("claim_permit of a full name", full.is_none());
    let ended = store.release_permit(&n, 0, &h).await.unwrap();
    step("release_permit", ended);
    let bad = store.claim_permit(&n, 0, &h, "a", ttl).await;
    step("permit count 0", bad.is_err());
    counts
}

/// Every permit operation is one round trip (MySQL's claim: its whole transaction in one
/// text-protocol request); bad input none.
fn assert_round_trips(backend: &str, counts: &[(&str, u64)]) {
    eprintln!("{backend} permit round trips: {counts:?}");
    let expected = [
        ("claim_permit", 1),
        ("renew_permit", 1),
        ("verify_permit", 1),
        ("permits", 1),
        ("claim_permit of a full name", 1),
        ("release_permit", 1),
        ("permit count 0", 0),
    ];
    assert_eq!(counts, expected, "{backend}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_permit_round_trips() {
    let Some((_, p)) = support::postgres_with(SqlConfig::default().lease_connections(1)).await
    else {
        return;
    };
    assert_round_trips("postgres", &round_trips(&p.store, &p.proxy).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_permit_round_trips() {
    let Some((_, p)) = support::mysql_with(SqlConfig::default().lease_connections(1)).await else {
        return;
    };
    assert_round_trips("mysql", &round_trips(&p.store, &p.proxy).await);
}

/// PostgreSQL's one-statement claim decides on its snapshot, taken when the statement starts,
/// and on the latest versions of the rows it locks. A permit row another claim inserted after
/// that snapshot is in neither; the counter row tells. Here a transaction holds the name's rows
/// while a claim of 2 waits on them, then inserts a new live permit (as a claim of 5 would),
/// ends permit 0 and moves the counter: live are permits 1 and 2, so the claim of 2 must be
/// refused. Without the counter's check it would take permit 0, a third holder of 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_claim_never_decides_on_a_snapshot_missing_a_new_permit() {
    let Some(store) = postgres().await else {
        return;
    };
    let url = env::server_url("postgres").unwrap();
    let n = name("snapshot");
    let (x, y) = (HolderToken::mint(), HolderToken::mint());
    store
        .claim_permit(&n, 5, &x, "x", LONG)
        .await
        .unwrap()
        .unwrap();
    store
        .claim_permit(&n, 5, &y, "y", LONG)
        .await
        .unwrap()
        .unwrap();
    let mut locker = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = locker.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM leases_permits WHERE name = $1 FOR UPDATE")
        .bind(&n)
        .execute(&mut *tx)
        .await
        .unwrap();
    let claim = {
        let (store, n) = (store.clone(), n.clone());
        tokio::spawn(async move {
            store
                .claim_permit(&n, 2, &HolderToken::mint(), "late", LONG)
                .await
                .unwrap()
        })
    };
    // The claim's statement has started (its snapshot taken) and waits for the rows' locks.
    let mut watch = sqlx::PgConnection::connect(&url).await.unwrap();
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%leases_permits%'",
        )
        .fetch_one(&mut watch)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the claim never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let now = "FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";
    for sql in [
        format!(
            "INSERT INTO leases_permits (name, permit_no, holder, instance, term, expires_at_ms) \
             VALUES ($1, 2, 'ffffffffffffffffffffffffffffffff', 'z', 3, {now} + 30000)"
        ),
        "UPDATE leases_permits SET term = 3 WHERE name = $1 AND permit_no = -1".to_owned(),
        "UPDATE leases_permits SET expires_at_ms = 0 WHERE name = $1 AND permit_no = 0".to_owned(),
    ] {
        sqlx::query(&sql).bind(&n).execute(&mut *tx).await.unwrap();
    }
    tx.commit().await.unwrap();
    let granted = claim.await.unwrap();
    let live: Vec<u32> = store
        .permits(&n)
        .await
        .unwrap()
        .iter()
        .filter(|p| p.live)
        .map(|p| p.permit)
        .collect();
    assert!(
        granted.is_none(),
        "a claim of 2 was granted {granted:?} with permits {live:?} live"
    );
    assert_eq!(live, vec![1, 2]);
}

/// A MySQL claim whose request fails part-way — here a trigger refuses the counter's move,
/// after the permit row was written — is rolled back before its connection serves again: the
/// next operation on the store's one connection must not commit the half-done claim (a
/// `START TRANSACTION` would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_claim_failing_part_way_leaves_nothing_behind() {
    let Some(url) = env::server_url("mysql") else {
        return;
    };
    let table = format!("permit_fail_{:012x}", support::rand_u64() >> 16);
    let store = MySqlStore::connect(
        &url,
        SqlConfig::default()
            .table(&table)
            .unwrap()
            .lease_connections(1),
    )
    .await
    .unwrap();
    let n = name("fail");
    // The permit table, created by its first use.
    assert!(store.permits(&n).await.unwrap().is_empty());
    let mut c = sqlx::MySqlConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE TRIGGER {table}_boom BEFORE UPDATE ON {table}_permits FOR EACH ROW \
         BEGIN IF NEW.permit_no = -1 AND NEW.term > 0 \
         AND EXISTS (SELECT 1 FROM {table}_permits WHERE name = NEW.name AND instance = 'boom') \
         THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'; END IF; END"
    ))
    .execute(&mut c)
    .await
    .unwrap();
    let e = store
        .claim_permit(&n, 2, &HolderToken::mint(), "boom", LONG)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("boom"), "{e}");
    // The same connection serves the next claim, which must find nothing of the failed one.
    let g = store
        .claim_permit(&n, 2, &HolderToken::mint(), "next", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!((g.permit, g.grant.term), (0, 1));
    let list = store.permits(&n).await.unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0].instance, "next");
    drop(store);
    for t in [format!("{table}_permits"), table.clone()] {
        sqlx::query(&format!("DROP TABLE IF EXISTS {t}"))
            .execute(&mut c)
            .await
            .unwrap();
    }
}
