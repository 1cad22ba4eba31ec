//! Store hints on the real servers: a change by another store instance (another pool or
//! connection, as another process would make it) wakes a waiter; a renewal does not (SQLite);
//! PostgreSQL's listener reconnects after its backend is terminated, and a cut listener never
//! delays a claim; dropping the store ends the listener.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::str::FromStr;
use std::time::Duration;

use lease_conformance::hints::{self, connected};
use lease_conformance::{FaultMode, FaultProxy, env};
use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::notify::{Topic, Wakeups};
use lease_sql::{MySqlStore, PostgresStore, SqlConfig, SqliteStore};
use sqlx::Connection;
use sqlx::postgres::PgConnectOptions;

/// PostgreSQL's listener checks its connection this often (`postgres/hints.rs`)…
const PING_EVERY: Duration = Duration::from_secs(5);
/// …and gives the check this long to answer.
const PING_TIMEOUT: Duration = Duration::from_secs(5);

const TTL: Duration = Duration::from_secs(30);
/// The bound on a hint's latency these tests accept.
const WAKE: Duration = Duration::from_millis(250);

fn name(what: &str) -> String {
    format!("hint-{what}-{:016x}", support::rand_u64())
}

/// `true` when `w` is woken within `within`.
async fn woken(w: &mut Wakeups, within: Duration) -> bool {
    tokio::time::timeout(within, w.changed()).await.is_ok()
}

#[tokio::test]
async fn sqlite_a_release_by_another_connection_wakes_and_a_renewal_does_not() {
    let url = support::sqlite_url();
    let store = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    assert!(store.capabilities().watch);
    let n = name("sqlite");
    let holder = HolderToken::mint();
    store.claim(&n, &holder, "a", TTL).await.unwrap().unwrap();
    let mut w = store.changes(&Topic::lease(&n)).unwrap();
    assert!(w.is_connected());
    // The poller's first read of a topic subscribed before it had read anything wakes it (what
    // was committed before is unknown); then nothing until a change.
    while woken(&mut w, Duration::from_millis(100)).await {}
    let n2 = name("late");
    store
        .claim(&n2, &HolderToken::mint(), "a", TTL)
        .await
        .unwrap()
        .unwrap();
    while woken(&mut w, Duration::from_millis(100)).await {}
    let mut late = store.changes(&Topic::lease(&n2)).unwrap();
    assert!(
        !woken(&mut late, Duration::from_millis(100)).await,
        "a topic subscribed with nothing committed since was woken"
    );

    // A renewal (by this store: its write is seen by the poller as any commit) wakes nobody.
    store.renew(&n, &holder, TTL).await.unwrap().unwrap();
    assert!(
        !woken(&mut w, Duration::from_millis(150)).await,
        "a renewal woke the waiter"
    );

    // A release by a connection of its own, as another process would make it.
    let mut other = sqlx::SqliteConnection::connect(&url).await.unwrap();
    let started = tokio::time::Instant::now();
    sqlx::query("UPDATE leases SET expires_at_ms = 0 WHERE name = ?1")
        .bind(&n)
        .execute(&mut other)
        .await
        .unwrap();
    assert!(
        woken(&mut w, WAKE).await,
        "another connection's release woke nobody"
    );
    eprintln!("sqlite cross-connection hint after {:?}", started.elapsed());
}

#[tokio::test]
async fn sqlite_stores_of_one_process_on_one_file_wake_each_other() {
    let url = support::sqlite_url();
    let a = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    let b = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    hints::another_store_wakes_a_waiter(&a, &b, TTL, "sqlite").await;
    hints::another_store_wakes_a_permit_waiter(&a, &b, TTL, "sqlite").await;
    hints::partition_changes_wake_the_group(&a, &b, TTL, "sqlite").await;
    hints::slot_changes_wake_the_slots_topic(&a, &b, TTL, "sqlite").await;
    // No member check (`hints::member_changes_wake_the_group`): membership changes are not
    // hinted (README, *Hints*); it failed "sqlite: a member joining woke nobody within 250ms".
}

/// A PostgreSQL store on a table of its own (its own channel, its listener found by name).
async fn pg_store(url: &str, table: &str) -> PostgresStore {
    PostgresStore::connect(url, SqlConfig::default().table(table).unwrap())
        .await
        .unwrap()
}

async fn drop_tables(url: &str, table: &str) {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    for suffix in ["", "_partitions", "_permits"] {
        let t = format!("{table}{suffix}");
        sqlx::query(&format!("DROP TABLE IF EXISTS {t}"))
            .execute(&mut c)
            .await
            .unwrap();
    }
}

/// The backends of the listener on `table`'s channel.
async fn listener_pids(url: &str, table: &str) -> Vec<i32> {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
    )
    .bind(format!("lease-sql hints lease_sql.public.{table}"))
    .fetch_all(&mut c)
    .await
    .unwrap()
}

#[tokio::test]
async fn postgres_a_release_by_another_store_wakes_a_waiter() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    let table = format!("hints_{:012x}", support::rand_u64() >> 16);
    let a = pg_store(&url, &table).await;
    let b = pg_store(&url, &table).await;
    hints::another_store_wakes_a_waiter(&a, &b, TTL, "postgres").await;
    hints::another_store_wakes_a_permit_waiter(&a, &b, TTL, "postgres").await;
    hints::partition_changes_wake_the_group(&a, &b, TTL, "postgres").await;
    // No member check: membership changes are not hinted (README, *Hints*); it failed
    // "postgres: a member joining woke nobody within 250ms". No slot check either: no slot
    // statement sends a `pg_notify` (only the claim, release, permit and partition statements
    // do, `postgres/statements.rs`), so a slot claim or finish by another store wakes no slots
    // waiter — it failed "postgres: a slot claim (on the slots topic) woke nobody within 250ms"
    // (SQLite's poller, above, does hint them).
    drop((a, b));
    drop_tables(&url, &table).await;
}

#[tokio::test]
async fn postgres_listener_comes_back_after_its_backend_is_terminated_and_ends_with_the_store() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    let table = format!("hints_{:012x}", support::rand_u64() >> 16);
    let a = pg_store(&url, &table).await;
    let b = pg_store(&url, &table).await;
    let n = name("reconnect");
    let mut w = a.changes(&Topic::lease(&n)).unwrap();
    connected(&mut w).await;
    let pids = listener_pids(&url, &table).await;
    assert_eq!(pids.len(), 1, "one listener: {pids:?}");

    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let _: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pids[0])
        .fetch_one(&mut admin)
        .await
        .unwrap();
    // The cut listener delays no claim.
    let holder = HolderToken::mint();
    let started = tokio::time::Instant::now();
    b.claim(&n, &holder, "b", TTL).await.unwrap().unwrap();
    a.claim(&name("other"), &HolderToken::mint(), "a", TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut went_down = false;
    while !(went_down && w.is_connected()) {
        assert!(
            tokio::time::Instant::now() < until,
            "the listener did not go down and come back (down seen: {went_down})"
        );
        let _ = tokio::time::timeout(Duration::from_millis(20), w.changed()).await;
        went_down |= !w.is_connected();
    }
    while woken(&mut w, Duration::from_millis(50)).await {}
    let again = listener_pids(&url, &table).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_ne!(again[0], pids[0]);
    assert!(b.release(&n, &holder).await.unwrap());
    assert!(woken(&mut w, WAKE).await, "no hint after the reconnect");

    drop(a);
    let until = tokio::time::Instant::now() + Duration::from_secs(5);
    while !listener_pids(&url, &table).await.is_empty() {
        assert!(
            tokio::time::Instant::now() < until,
            "the listener outlived its store"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(b);
    drop_tables(&url, &table).await;
}

/// A silenced listener connection (its packets held, its socket open: no reset, no end of
/// file) is found by the listener's check, `SELECT 1` every 5 s with 5 s to answer: the hints
/// say they are disconnected within 10 s (waiters then poll), while the store's own
/// connections, straight to the server, go on; once the link passes again the listener is back
/// and hints flow.
#[tokio::test]
async fn postgres_a_silenced_listener_is_found_and_reported_disconnected() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    let table = format!("hints_{:012x}", support::rand_u64() >> 16);
    let opts = PgConnectOptions::from_str(&url).unwrap();
    let proxy = FaultProxy::start((opts.get_host().to_owned(), opts.get_port()))
        .await
        .unwrap();
    // Only the listener goes through the proxy.
    let a = pg_store(&url, &table)
        .await
        .with_listener_options(opts.host("127.0.0.1").port(proxy.local_addr().port()));
    let b = pg_store(&url, &table).await;
    let n = name("silenced");
    let mut w = a.changes(&Topic::lease(&n)).unwrap();
    connected(&mut w).await;
    while woken(&mut w, Duration::from_millis(50)).await {}
    let holder = HolderToken::mint();
    b.claim(&n, &holder, "b", TTL).await.unwrap().unwrap();
    assert!(
        woken(&mut w, WAKE).await,
        "no hint through the proxy before the fault"
    );

    proxy.set_mode(FaultMode::Stall);
    let stalled = tokio::time::Instant::now();
    // The store's own connections do not go through the proxy: a claim is answered at once.
    a.claim(&name("direct"), &HolderToken::mint(), "a", TTL)
        .await
        .unwrap()
        .unwrap();
    // Found at the next check (at most 5 s away) once it had 5 s to answer: 10 s, plus what a
    // busy machine adds to the timers; the outer bound only ends a test that would wait forever.
    let found = PING_EVERY + PING_TIMEOUT;
    let down = tokio::time::timeout(3 * found, async {
        while w.is_connected() {
            w.changed().await;
        }
    })
    .await;
    assert!(
        down.is_ok(),
        "the silenced listener still says connected {:?} after the stall",
        stalled.elapsed()
    );
    let took = stalled.elapsed();
    eprintln!("a silenced PostgreSQL listener was reported disconnected after {took:?}");
    assert!(
        took <= found + Duration::from_secs(5),
        "{took:?} to find a silenced listener: more than {found:?} and 5 s of slack"
    );

    proxy.set_mode(FaultMode::Pass);
    let back = tokio::time::timeout(Duration::from_secs(30), async {
        while !w.is_connected() {
            w.changed().await;
        }
    })
    .await;
    assert!(back.is_ok(), "the listener did not come back");
    while woken(&mut w, Duration::from_millis(50)).await {}
    assert!(b.release(&n, &holder).await.unwrap());
    assert!(
        woken(&mut w, WAKE).await,
        "no hint after the link came back"
    );
    drop((a, b));
    drop_tables(&url, &table).await;
}

#[tokio::test]
async fn postgres_hints_off_send_no_notify_and_say_so() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    let table = format!("hints_{:012x}", support::rand_u64() >> 16);
    let a = PostgresStore::connect(
        &url,
        SqlConfig::default().table(&table).unwrap().hints(false),
    )
    .await
    .unwrap();
    assert!(!a.capabilities().watch);
    let n = name("off");
    let mut w = a.changes(&Topic::lease(&n)).unwrap();
    assert!(!w.is_connected());
    let holder = HolderToken::mint();
    a.claim(&n, &holder, "a", TTL).await.unwrap().unwrap();
    assert!(woken(&mut w, WAKE).await, "its own claim woke nobody");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(listener_pids(&url, &table).await.is_empty());
    drop(a);
    drop_tables(&url, &table).await;
}

#[tokio::test]
async fn mysql_hints_cover_the_store_itself_and_say_so() {
    let Some(url) = env::server_url("mysql") else {
        return;
    };
    let store = match MySqlStore::connect(&url, SqlConfig::default()).await {
        Ok(s) => s,
        Err(e) => {
            env::skip("mysql", &format!("cannot connect: {e}"));
            return;
        }
    };
    assert!(!store.capabilities().watch);
    let n = name("mysql");
    let mut w = store.changes(&Topic::lease(&n)).unwrap();
    assert!(!w.is_connected());
    let holder = HolderToken::mint();
    store.claim(&n, &holder, "a", TTL).await.unwrap().unwrap();
    assert!(woken(&mut w, WAKE).await);
    store.renew(&n, &holder, TTL).await.unwrap().unwrap();
    assert!(!woken(&mut w, Duration::from_millis(100)).await);
    assert!(store.release(&n, &holder).await.unwrap());
    assert!(woken(&mut w, WAKE).await);
}
