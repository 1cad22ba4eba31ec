//! A partition acquire or renewal, or a plain lease's renewal, that waited for the row's lock
//! never moves the lease's expiry back.
//!
//! PostgreSQL's statements read the clock once, when they start (a CTE, or the `VALUES` row of
//! the acquire); MySQL's `NOW()` is fixed at the statement's start. A statement that then
//! waits for the row's lock — behind a concurrent write, or behind a commit waiting for a
//! synchronous standby during a failover — writes an expiry computed from a "now" that can be
//! seconds old. When a later acquire or renewal of the same owner got the row first, the late
//! one must not shorten the lease: the holder counts on the deadline the later answer gave it,
//! and another owner could take the partition before that deadline. `lease-soak --cluster
//! postgres` saw exactly that (two workers publishing partition 0 at once, epochs 44 and 46):
//! acquires queued behind a synchronous commit during a failover landed once the standby was
//! back, each setting the expiry of a lease its owner had just renewed to a moment already past.
//!
//! A plain lease's renewal can wait the same way (behind a fenced transaction's share lock, a
//! claim, or a synchronous commit) after its holder gave up on it and renewed again.
//!
//! Here a raw transaction locks the row, the store's late operation starts and
//! waits for it, and after [`STALE`] the transaction renews the lease itself (the later
//! renewal that got the row first) and commits; the late operation then lands. The expiry must
//! still be at least the one the later renewal wrote. Without `GREATEST` in the statements it
//! comes out about [`STALE`] earlier, and the test fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lease_core::LeaseStore;
use lease_core::backend::HolderToken;
use lease_core::backend::partitions::PartitionStore;
use sqlx::{Connection, MySqlConnection, PgConnection};

/// How long the late operation waits for the lock: how old its "now" is when it lands.
const STALE: Duration = Duration::from_millis(2000);
const TTL: Duration = Duration::from_secs(30);

/// The row a late operation waits for: partition 0 of a group, or a plain lease.
#[derive(Clone)]
enum Row {
    Partition(String),
    Lease(String),
}

impl Row {
    fn table(&self) -> &'static str {
        match self {
            Row::Partition(_) => "leases_partitions",
            Row::Lease(_) => "leases",
        }
    }

    /// The row's condition, its key bound as the dialect's first placeholder `p`.
    fn condition(&self, p: &str) -> String {
        match self {
            Row::Partition(_) => format!("group_name = {p} AND partition_no = 0"),
            Row::Lease(_) => format!("name = {p}"),
        }
    }

    fn key(&self) -> &str {
        match self {
            Row::Partition(group) | Row::Lease(group) => group,
        }
    }
}

/// A raw connection to the same server, in a transaction that holds the partition's row.
enum Raw {
    Pg(PgConnection),
    My(MySqlConnection),
}

impl Raw {
    async fn open(backend: &str, url: &str) -> Raw {
        match backend {
            "postgres" => Raw::Pg(PgConnection::connect(url).await.unwrap()),
            _ => Raw::My(MySqlConnection::connect(url).await.unwrap()),
        }
    }

    /// Begins the transaction and locks `row`.
    async fn lock(&mut self, row: &Row) {
        let table = row.table();
        match self {
            Raw::Pg(c) => {
                sqlx::query("BEGIN").execute(&mut *c).await.unwrap();
                sqlx::query(&format!(
                    "SELECT 1 FROM {table} WHERE {} FOR UPDATE",
                    row.condition("$1")
                ))
                .bind(row.key())
                .fetch_one(&mut *c)
                .await
                .unwrap();
            }
            Raw::My(c) => {
                sqlx::query("BEGIN").execute(&mut *c).await.unwrap();
                sqlx::query(&format!(
                    "SELECT 1 FROM {table} WHERE {} FOR UPDATE",
                    row.condition("?")
                ))
                .bind(row.key())
                .fetch_one(&mut *c)
                .await
                .unwrap();
            }
        }
    }

    /// Inside the transaction: the owner's later renewal (the server's now + [`TTL`]); commits
    /// and answers the expiry written.
    async fn renew_and_commit(&mut self, row: &Row) -> i64 {
        let ttl = i64::try_from(TTL.as_millis()).unwrap();
        let table = row.table();
        match self {
            Raw::Pg(c) => {
                let (expiry,): (i64,) = sqlx::query_as(&format!(
                    "UPDATE {table} SET expires_at_ms = \
                     FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT + $2 \
                     WHERE {} RETURNING expires_at_ms",
                    row.condition("$1")
                ))
                .bind(row.key())
                .bind(ttl)
                .fetch_one(&mut *c)
                .await
                .unwrap();
                sqlx::query("COMMIT").execute(&mut *c).await.unwrap();
                expiry
            }
            Raw::My(c) => {
                sqlx::query(&format!(
                    "UPDATE {table} SET expires_at_ms = \
                     CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ? \
                     WHERE {}",
                    row.condition("?")
                ))
                .bind(ttl)
                .bind(row.key())
                .execute(&mut *c)
                .await
                .unwrap();
                let expiry = self.expiry(row).await;
                if let Raw::My(c) = self {
                    sqlx::query("COMMIT").execute(&mut *c).await.unwrap();
                }
                expiry
            }
        }
    }

    /// The row's expiry as the server has it now.
    async fn expiry(&mut self, row: &Row) -> i64 {
        let table = row.table();
        match self {
            Raw::Pg(c) => {
                sqlx::query_as::<_, (i64,)>(&format!(
                    "SELECT expires_at_ms FROM {table} WHERE {}",
                    row.condition("$1")
                ))
                .bind(row.key())
                .fetch_one(&mut *c)
                .await
                .unwrap()
                .0
            }
            Raw::My(c) => {
                sqlx::query_as::<_, (i64,)>(&format!(
                    "SELECT expires_at_ms FROM {table} WHERE {}",
                    row.condition("?")
                ))
                .bind(row.key())
                .fetch_one(&mut *c)
                .await
                .unwrap()
                .0
            }
        }
    }
}

/// The scenario: `late` is the store's operation for the holder of `row` (whose claim answered
/// `first`, an epoch or a term), started while the row is locked. Answers what went wrong, if
/// anything.
async fn late_write_keeps_the_expiry<Fut>(
    backend: &str,
    url: &str,
    row: Row,
    first: u64,
    late: Fut,
) -> Result<(), String>
where
    Fut: Future<Output = lease_core::Result<Option<u64>>> + Send + 'static,
{
    let mut raw = Raw::open(backend, url).await;
    raw.lock(&row).await;
    let waiting = tokio::spawn(late);
    tokio::time::sleep(STALE).await;
    if waiting.is_finished() {
        return Err(format!(
            "{backend}: the late operation did not wait for the row's lock"
        ));
    }
    let later = raw.renew_and_commit(&row).await;
    let answer = waiting.await.unwrap().unwrap();
    if answer != Some(first) {
        return Err(format!(
            "{backend}: the late operation answered {answer:?}, not the holder's {first}"
        ));
    }
    let now = raw.expiry(&row).await;
    if now < later {
        return Err(format!(
            "{backend}: the late operation moved the expiry back by {} ms (from the later \
             renewal's {later} to {now}): the lease ends before the deadline its holder counts on",
            later - now
        ));
    }
    Ok(())
}

/// Partition 0 of a fresh group, acquired by owner "a"; then `late` for "a" waits for its row.
async fn partition_case<S, F, Fut>(
    backend: &str,
    url: &str,
    store: Arc<S>,
    late: F,
) -> Result<(), String>
where
    S: PartitionStore + Send + Sync + 'static,
    F: FnOnce(Arc<S>, String) -> Fut,
    Fut: Future<Output = lease_core::Result<Option<u64>>> + Send + 'static,
{
    let group = format!("late-write-{:x}", support::rand_u64());
    let epoch = store
        .acquire_partition(&group, 0, "a", TTL)
        .await
        .unwrap()
        .expect("a acquires a free partition")
        .epoch;
    let late = late(Arc::clone(&store), group.clone());
    late_write_keeps_the_expiry(backend, url, Row::Partition(group), epoch, late).await
}

/// A plain lease claimed by a holder; then its renewal waits for the lease's row.
async fn lease_case<S: LeaseStore>(backend: &str, url: &str, store: Arc<S>) -> Result<(), String> {
    let name = format!("late-write-{:x}", support::rand_u64());
    let holder = HolderToken::mint();
    let term = store
        .claim(&name, &holder, "a", TTL)
        .await
        .unwrap()
        .expect("a claims a free name")
        .term;
    let late = {
        let name = name.clone();
        async move {
            let renewed = store.renew(&name, &holder, TTL).await?;
            Ok(renewed.map(|g| g.term))
        }
    };
    late_write_keeps_the_expiry(backend, url, Row::Lease(name), term, late).await
}

async fn renewal<S: PartitionStore>(
    store: Arc<S>,
    group: String,
) -> lease_core::Result<Option<u64>> {
    let renewed = store.renew_partitions(&group, &[0], "a", TTL).await?;
    Ok(renewed.first().map(|l| l.epoch))
}

async fn acquire<S: PartitionStore>(
    store: Arc<S>,
    group: String,
) -> lease_core::Result<Option<u64>> {
    Ok(store
        .acquire_partition(&group, 0, "a", TTL)
        .await?
        .map(|l| l.epoch))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_late_renewal_never_moves_the_expiry_back() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    if let Some((store, _)) = support::postgres().await {
        partition_case("postgres", &url, Arc::new(store), renewal)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_late_acquire_never_moves_the_expiry_back() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    if let Some((store, _)) = support::postgres().await {
        partition_case("postgres", &url, Arc::new(store), acquire)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_late_renewal_never_moves_the_expiry_back() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    if let Some((store, _)) = support::mysql().await {
        partition_case("mysql", &url, Arc::new(store), renewal)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_late_acquire_never_moves_the_expiry_back() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    if let Some((store, _)) = support::mysql().await {
        partition_case("mysql", &url, Arc::new(store), acquire)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_late_lease_renewal_never_moves_the_expiry_back() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    if let Some((store, _)) = support::postgres().await {
        lease_case("postgres", &url, Arc::new(store)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_late_lease_renewal_never_moves_the_expiry_back() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    if let Some((store, _)) = support::mysql().await {
        lease_case("mysql", &url, Arc::new(store)).await.unwrap();
    }
}
