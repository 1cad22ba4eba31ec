//! The tables a store creates and the ones it refuses, on every dialect: a table of the lease
//! table's name that is someone else's is refused for what it is (`ErrorKind::Schema`, its
//! columns named, how to choose another name); the partition and member tables are created on
//! their first use only, by several processes at once, and PostgreSQL logs no notice for a
//! table that exists. Then business code under a lease: the fencing token bound as it is, and
//! sqlx errors converted with the store's verdict.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_conformance::GroupStore;
use lease_conformance::env::server_url;
use lease_core::backend::LeaseStoreExt;
use lease_core::{Coordinator, ErrorKind};
use lease_sql::{MySqlStore, PostgresStore, SqlConfig, SqlResultExt, SqliteStore, Token};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

const TTL: Duration = Duration::from_secs(30);

/// A pool of the test's own on one SQL backend.
#[derive(Clone)]
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    MySql(MySqlPool),
}

/// Runs `$body` with `$p` bound to the pool, whichever backend it is on.
macro_rules! on_pool {
    ($db:expr, |$p:ident| $body:expr) => {
        match $db {
            Db::Sqlite($p) => $body,
            Db::Postgres($p) => $body,
            Db::MySql($p) => $body,
        }
    };
}

impl Db {
    /// Every SQL backend of this run: SQLite on a fresh file, and each server whose
    /// `LEASE_TEST_*` URL is set.
    async fn all() -> Vec<Db> {
        let opts = SqliteConnectOptions::from_str(&support::sqlite_url())
            .unwrap()
            .create_if_missing(true);
        let mut all = vec![Db::Sqlite(
            SqlitePoolOptions::new().connect_with(opts).await.unwrap(),
        )];
        if let Some(url) = server_url("postgres") {
            all.push(Db::Postgres(
                PgPoolOptions::new().connect(&url).await.unwrap(),
            ));
        }
        if let Some(url) = server_url("mysql") {
            all.push(Db::MySql(
                MySqlPoolOptions::new().connect(&url).await.unwrap(),
            ));
        }
        all
    }

    fn name(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
            Db::MySql(_) => "mysql",
        }
    }

    async fn run(&self, sql: &str) {
        on_pool!(self, |p| {
            sqlx::query(sql).execute(p).await.unwrap();
        })
    }

    /// A store on this pool with `config`.
    async fn store(&self, config: SqlConfig) -> lease_core::Result<Arc<dyn GroupStore>> {
        Ok(match self {
            Db::Sqlite(p) => Arc::new(SqliteStore::with_client(p.clone(), config).await?),
            Db::Postgres(p) => Arc::new(PostgresStore::with_client(p.clone(), config).await?),
            Db::MySql(p) => Arc::new(MySqlStore::with_client(p.clone(), config).await?),
        })
    }

    /// Whether the table `table` exists.
    async fn exists(&self, table: &str) -> bool {
        match self {
            Db::Sqlite(p) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1",
                )
                .bind(table)
                .fetch_one(p)
                .await
                .unwrap()
                    > 0
            }
            Db::Postgres(p) => sqlx::query_scalar::<_, bool>("SELECT to_regclass($1) IS NOT NULL")
                .bind(table)
                .fetch_one(p)
                .await
                .unwrap(),
            Db::MySql(p) => {
                sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM information_schema.TABLES \
                     WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
                )
                .bind(table)
                .fetch_one(p)
                .await
                .unwrap()
                    > 0
            }
        }
    }

    /// SQLite: how many triggers the table `table` has.
    async fn triggers(&self, table: &str) -> i64 {
        match self {
            Db::Sqlite(p) => sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ?1",
            )
            .bind(table)
            .fetch_one(p)
            .await
            .unwrap(),
            _ => 0,
        }
    }

    /// Drops the lease table `table` and the tables named after it.
    async fn drop_all(&self, table: &str) {
        for suffix in ["_partitions", "_members", "_permits", "_clock", ""] {
            self.run(&format!("DROP TABLE IF EXISTS {table}{suffix}"))
                .await;
        }
    }
}

/// A table name no other test uses.
fn fresh(tag: &str) -> String {
    format!("lease_{tag}_{:x}", support::rand_u64() >> 24)
}

fn config(table: &str) -> SqlConfig {
    SqlConfig::default().table(table).unwrap()
}

/// An application's own `leases` table is not a lease table: the store says so, names the
/// columns it has and those it lacks, and how to give the store another table — never that the
/// connection is read-only. With the default name on SQLite's fresh file; on the servers,
/// which other tests share, under a name of its own.
#[tokio::test]
async fn an_unrelated_table_of_the_lease_tables_name_is_refused_for_what_it_is() {
    for db in Db::all().await {
        let table = match db {
            Db::Sqlite(_) => lease_sql::DEFAULT_TABLE.to_owned(),
            _ => fresh("unrelated"),
        };
        db.run(&format!(
            "CREATE TABLE {table} (id INTEGER PRIMARY KEY, title VARCHAR(100))"
        ))
        .await;
        for ddl in [lease_sql::Ddl::Auto, lease_sql::Ddl::None] {
            let e = db.store(config(&table).ddl(ddl)).await.unwrap_err();
            let msg = e.to_string();
            let at = format!("{} {ddl:?}: {msg}", db.name());
            assert_eq!(e.kind(), ErrorKind::Schema, "{at}");
            assert!(!e.is_temporary(), "{at}");
            for needle in [
                format!("a table `{table}` exists but is not a lease table"),
                "the columns `id`, `title`".to_owned(),
                "lacks `name`, `holder`, `instance`, `term`".to_owned(),
                "SqlConfig::table".to_owned(),
                "LEASE_SQL_TABLE".to_owned(),
                "?table=NAME".to_owned(),
            ] {
                assert!(msg.contains(&needle), "{needle:?} in {at}");
            }
            assert!(!msg.contains("read-only"), "{at}");
            // Prose, not source indentation: no run of spaces before the DDL it quotes.
            let prose = msg.split("make it as in:").next().unwrap_or_default();
            assert!(!prose.contains("  "), "a run of spaces in {at}");
        }
        db.drop_all(&table).await;
    }
}

/// The same for the partition and member tables, found on their first use: the store starts
/// (elections need neither), and the first partition operation names the table and that it is
/// named after the lease table.
#[tokio::test]
async fn an_unrelated_partition_table_is_refused_on_first_use() {
    for db in Db::all().await {
        let table = fresh("unrelatedparts");
        db.run(&format!(
            "CREATE TABLE {table}_partitions (id INTEGER PRIMARY KEY, title VARCHAR(100))"
        ))
        .await;
        let store = db.store(config(&table)).await.unwrap();
        let e = store
            .acquire_partition("g", 0, "owner@1", TTL)
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.kind(), ErrorKind::Schema, "{}: {msg}", db.name());
        assert!(
            msg.contains(&format!(
                "a table `{table}_partitions` exists but is not a partition table"
            )),
            "{msg}"
        );
        assert!(msg.contains("named after the lease table"), "{msg}");
        assert!(msg.contains("`id`, `title`"), "{msg}");
        // The member table is the store's own, created on its first use.
        store
            .heartbeat("svc", "n@1", "addr", TTL, &[])
            .await
            .unwrap();
        drop(store);
        db.drop_all(&table).await;
    }
}

/// The permit table is checked and created on its first use, as the partition table is: an
/// unrelated table of its name is refused for what it is; with DDL off a missing one is
/// reported with its DDL; created, it is found by a second store.
#[tokio::test]
async fn the_permit_table_is_checked_and_created_on_first_use() {
    for db in Db::all().await {
        let at = db.name();
        let h = lease_core::backend::HolderToken::mint();
        let table = fresh("unrelatedpermits");
        db.run(&format!(
            "CREATE TABLE {table}_permits (id INTEGER PRIMARY KEY, title VARCHAR(100))"
        ))
        .await;
        let store = db.store(config(&table)).await.unwrap();
        let e = store.claim_permit("p", 2, &h, "w", TTL).await.unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.kind(), ErrorKind::Schema, "{at}: {msg}");
        assert!(
            msg.contains(&format!(
                "a table `{table}_permits` exists but is not a permit table"
            )),
            "{at}: {msg}"
        );
        assert!(msg.contains("`id`, `title`"), "{at}: {msg}");
        drop(store);
        db.drop_all(&table).await;

        let table = fresh("permits");
        let permits = format!("{table}_permits");
        db.store(config(&table)).await.unwrap();
        let off = db
            .store(config(&table).ddl(lease_sql::Ddl::None))
            .await
            .unwrap();
        let e = off.permits("p").await.unwrap_err();
        let msg = e.to_string();
        assert_eq!(e.kind(), ErrorKind::Schema, "{at}: {msg}");
        assert!(
            msg.contains(&format!("the permit table `{permits}` does not exist")),
            "{msg}"
        );
        assert!(msg.contains("CREATE TABLE IF NOT EXISTS"), "{msg}");
        assert!(!db.exists(&permits).await, "{at}");
        let store = db.store(config(&table)).await.unwrap();
        let g = store.claim_permit("p", 2, &h, "w", TTL).await.unwrap();
        assert_eq!(g.unwrap().permit, 0, "{at}");
        assert!(db.exists(&permits).await, "{at}");
        assert_eq!(off.permits("p").await.unwrap().len(), 1, "{at}");
        drop((store, off));
        db.drop_all(&table).await;
    }
}

/// A store that serves leases only creates the lease table (on SQLite with its clock table and
/// triggers); the partition table comes with the first partition operation, the member table
/// with the first membership operation.
#[tokio::test]
async fn the_partition_and_member_tables_are_created_on_first_use_only() {
    for db in Db::all().await {
        let table = fresh("lazy");
        let (parts, members) = (format!("{table}_partitions"), format!("{table}_members"));
        let store = db.store(config(&table)).await.unwrap();
        let at = db.name();
        assert!(db.exists(&table).await, "{at}");
        assert!(!db.exists(&parts).await, "{at}: no partition table yet");
        assert!(!db.exists(&members).await, "{at}: no member table yet");
        let h = lease_core::backend::HolderToken::mint();
        assert!(store.claim("job", &h, "w", TTL).await.unwrap().is_some());
        assert!(!db.exists(&parts).await, "{at}");

        let lease = store
            .acquire_partition("g", 3, "owner@1", TTL)
            .await
            .unwrap();
        assert_eq!(lease.unwrap().epoch, 1);
        assert!(db.exists(&parts).await, "{at}");
        assert!(!db.exists(&members).await, "{at}");
        store
            .heartbeat("svc", "n@1", "addr", TTL, &[])
            .await
            .unwrap();
        assert!(db.exists(&members).await, "{at}");
        if let Db::Sqlite(_) = db {
            // Each on the boot clock, as the lease table is.
            for t in [&table, &parts, &members] {
                assert_eq!(db.triggers(t).await, 2, "{t}");
            }
        }
        // A second store finds them and uses them.
        let again = db.store(config(&table)).await.unwrap();
        assert_eq!(again.owners("g").await.unwrap().len(), 1, "{at}");
        assert_eq!(again.members("svc").await.unwrap().len(), 1, "{at}");
        drop((store, again));
        db.drop_all(&table).await;
    }
}

/// Stores starting at once on fresh tables, then using the partition and member tables at
/// once: every one of them succeeds (the creation races are harmless).
#[tokio::test]
async fn stores_creating_the_tables_at_once_all_succeed() {
    for db in Db::all().await {
        for _ in 0..3 {
            let table = fresh("race");
            let c = config(&table);
            let (a, b, c2, d) = tokio::join!(
                db.store(c.clone()),
                db.store(c.clone()),
                db.store(c.clone()),
                db.store(c),
            );
            let stores = [a.unwrap(), b.unwrap(), c2.unwrap(), d.unwrap()];
            let first_use = |i: u32| {
                let s = stores[i as usize].clone();
                async move {
                    s.acquire_partition("g", i, &format!("owner{i}@1"), TTL)
                        .await?;
                    s.heartbeat("svc", &format!("n{i}@1"), "addr", TTL, &[])
                        .await
                        .map(drop)
                }
            };
            let (r0, r1, r2, r3) =
                tokio::join!(first_use(0), first_use(1), first_use(2), first_use(3));
            for r in [r0, r1, r2, r3] {
                r.unwrap_or_else(|e| panic!("{}: {e}", db.name()));
            }
            assert_eq!(stores[0].owners("g").await.unwrap().len(), 4);
            drop(stores);
            db.drop_all(&table).await;
        }
    }
}

/// The events of target `sqlx::postgres::notice` (a server NOTICE, which sqlx logs at info).
#[derive(Clone, Default)]
struct Notices(Arc<Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Notices {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event
            .metadata()
            .target()
            .starts_with("sqlx::postgres::notice")
        {
            self.0.lock().unwrap().push(format!("{event:?}"));
        }
    }
}

/// Starting again on tables that exist sends no `CREATE TABLE IF NOT EXISTS`, so PostgreSQL
/// answers with no "relation already exists, skipping" notice for sqlx to log at info.
#[tokio::test]
async fn no_notice_is_logged_for_tables_that_exist() {
    use tracing_subscriber::layer::SubscriberExt;
    let Some(url) = server_url("postgres") else {
        return;
    };
    // A process-wide subscriber, not a thread-local one: sqlx may log a notice from wherever its
    // connection is polled, and a callsite's cached interest must not depend on which thread
    // met it first. Other tests of this binary run beside this one, so only the notices that
    // name this test's tables are counted.
    let notices = Notices::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(notices.clone()))
        .expect("no other test of this binary sets a global subscriber");
    let db = Db::Postgres(PgPoolOptions::new().connect(&url).await.unwrap());
    let table = fresh("quiet");
    for _ in 0..3 {
        let store = db.store(config(&table)).await.unwrap();
        store
            .acquire_partition("g", 0, "owner@1", TTL)
            .await
            .unwrap();
        store
            .heartbeat("svc", "n@1", "addr", TTL, &[])
            .await
            .unwrap();
    }
    // The check can see a notice: one is logged for a statement that provokes it.
    db.run(&format!("CREATE TABLE IF NOT EXISTS {table} (x INT)"))
        .await;
    let seen: Vec<String> = notices
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|n| n.contains(&table))
        .cloned()
        .collect();
    db.drop_all(&table).await;
    assert_eq!(seen.len(), 1, "only the test's own statement: {seen:#?}");
    assert!(seen[0].contains("already exists"), "{seen:#?}");
}

/// Claims a term on `$store`, writes account 1 under it in a verified transaction with the
/// statement `$update` (the token bound as [`Token`], twice when `$twice`: MySQL's `?` are
/// positional), then again under the token before it; returns the rows each write changed and
/// the fence read back with `$read`, checked to be the term's token.
macro_rules! fenced_write {
    ($store:expr, $pool:expr, $update:expr, $twice:expr, $read:expr) => {{
        let store = $store;
        let coordinator = Coordinator::builder(store.clone())
            .instance("writer")
            .build()
            .unwrap();
        let term = coordinator.try_acquire("fenced-job").await.unwrap();
        let update: String = $update;
        let write = async |token: Token| -> lease_core::Result<u64> {
            let mut tx = store.begin_verified(&term).await?;
            let q = sqlx::query(&update).bind(token).bind(1_i64);
            let q = if $twice { q.bind(token) } else { q };
            let done = q.execute(&mut *tx).await.lease_err("fenced write")?;
            tx.commit().await.lease_err("commit")?;
            Ok(done.rows_affected())
        };
        let written = write(Token::of(&term).unwrap()).await.unwrap();
        let stale = write(Token::new(term.token() - 1).unwrap()).await.unwrap();
        let read: String = $read;
        let fence: i64 = sqlx::query_scalar(&read).fetch_one($pool).await.unwrap();
        assert_eq!(fence, i64::try_from(term.token()).unwrap());
        term.resign().await.unwrap();
        coordinator.close().await.unwrap();
        (written, stale, fence)
    }};
}

/// A fenced business write binds the term's token with no cast, on every dialect (and on
/// MySQL into a `BIGINT UNSIGNED` column too); a write under an older token matches no row.
#[tokio::test]
async fn a_fenced_write_binds_the_token_as_it_is() {
    for db in Db::all().await {
        let table = fresh("fenced");
        let accounts = format!("{table}_accounts");
        let columns: &[&str] = match db {
            Db::MySql(_) => &["BIGINT", "BIGINT UNSIGNED"],
            _ => &["BIGINT"],
        };
        for column in columns {
            db.run(&format!(
                "CREATE TABLE {accounts} (id BIGINT PRIMARY KEY, fence {column} NOT NULL)"
            ))
            .await;
            db.run(&format!("INSERT INTO {accounts} (id, fence) VALUES (1, 0)"))
                .await;
            let (written, stale, fence) = match &db {
                Db::Sqlite(p) => {
                    let store = SqliteStore::with_client(p.clone(), config(&table))
                        .await
                        .unwrap();
                    fenced_write!(
                        store,
                        p,
                        format!("UPDATE {accounts} SET fence = ?1 WHERE id = ?2 AND fence <= ?1"),
                        false,
                        format!("SELECT fence FROM {accounts} WHERE id = 1")
                    )
                }
                Db::Postgres(p) => {
                    let store = PostgresStore::with_client(p.clone(), config(&table))
                        .await
                        .unwrap();
                    fenced_write!(
                        store,
                        p,
                        format!("UPDATE {accounts} SET fence = $1 WHERE id = $2 AND fence <= $1"),
                        false,
                        format!("SELECT fence FROM {accounts} WHERE id = 1")
                    )
                }
                Db::MySql(p) => {
                    let store = MySqlStore::with_client(p.clone(), config(&table))
                        .await
                        .unwrap();
                    fenced_write!(
                        store,
                        p,
                        format!("UPDATE {accounts} SET fence = ? WHERE id = ? AND fence <= ?"),
                        true,
                        // BIGINT UNSIGNED does not decode as i64.
                        format!("SELECT CAST(fence AS SIGNED) FROM {accounts} WHERE id = 1")
                    )
                }
            };
            let at = format!("{} {column}", db.name());
            assert_eq!(written, 1, "{at}: the holder's write");
            assert_eq!(stale, 0, "{at}: a write under an older token");
            assert!(fence >= 1, "{at}");
            db.run(&format!("DROP TABLE {accounts}")).await;
        }
        db.drop_all(&table).await;
    }
}

/// A token above `i64::MAX` is refused, never wrapped: no SQL integer holds it.
#[test]
fn a_token_above_the_largest_bigint_is_refused() {
    let top = u64::try_from(i64::MAX).unwrap();
    assert_eq!(Token::new(top).unwrap().get(), i64::MAX);
    for too_big in [top + 1, u64::MAX] {
        let e = Token::new(too_big).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains(&too_big.to_string()), "{e}");
        assert!(e.to_string().contains("BIGINT"), "{e}");
    }
    assert_eq!(u64::from(Token::new(42).unwrap()), 42);
    assert_eq!(i64::from(Token::try_from(7_u64).unwrap()), 7);
}

/// The application's own statements' errors convert with the store's verdict: a row lock
/// another transaction holds (`NOWAIT`; on SQLite a busy file) is temporary, a syntax error or
/// a constraint is not; `doing` heads the message and the sqlx error is the source.
#[tokio::test]
async fn business_errors_convert_with_the_stores_verdict() {
    for db in Db::all().await {
        let table = fresh("verdicts");
        db.run(&format!(
            "CREATE TABLE {table} (id BIGINT PRIMARY KEY, v BIGINT NOT NULL)"
        ))
        .await;
        db.run(&format!("INSERT INTO {table} (id, v) VALUES (1, 0)"))
            .await;
        let at = db.name();
        let e = on_pool!(&db, |p| sqlx::query("SELEKT 1")
            .execute(p)
            .await
            .lease_err("count the reports")
            .unwrap_err());
        assert_eq!(e.kind(), ErrorKind::Backend, "{at}: {e}");
        assert!(!e.is_temporary(), "{at}: {e}");
        assert!(e.message().starts_with("count the reports: "), "{at}: {e}");
        assert!(std::error::Error::source(&e).is_some(), "{at}");
        let e = on_pool!(&db, |p| sqlx::query(&format!(
            "INSERT INTO {table} (id, v) VALUES (1, 1)"
        ))
        .execute(p)
        .await
        .lease_err("insert")
        .unwrap_err());
        assert!(!e.is_temporary(), "{at}: a duplicate key: {e}");

        let busy = match &db {
            Db::Sqlite(p) => {
                // A second connection that does not wait for the write lock.
                let opts = (*p.connect_options()).clone().busy_timeout(Duration::ZERO);
                let other = SqlitePoolOptions::new().connect_with(opts).await.unwrap();
                let mut holder = p.begin_with("BEGIN IMMEDIATE").await.unwrap();
                sqlx::query(&format!("UPDATE {table} SET v = 1"))
                    .execute(&mut *holder)
                    .await
                    .unwrap();
                let e = sqlx::query(&format!("UPDATE {table} SET v = 2"))
                    .execute(&other)
                    .await
                    .lease_err("bump")
                    .unwrap_err();
                holder.rollback().await.unwrap();
                e
            }
            Db::Postgres(p) => {
                let mut holder = p.begin().await.unwrap();
                let lock = format!("SELECT v FROM {table} WHERE id = 1 FOR UPDATE");
                sqlx::query(&lock).execute(&mut *holder).await.unwrap();
                let e = sqlx::query(&format!("{lock} NOWAIT"))
                    .execute(p)
                    .await
                    .lease_err("bump")
                    .unwrap_err();
                holder.rollback().await.unwrap();
                e
            }
            Db::MySql(p) => {
                let mut holder = p.begin().await.unwrap();
                let lock = format!("SELECT v FROM {table} WHERE id = 1 FOR UPDATE");
                sqlx::query(&lock).execute(&mut *holder).await.unwrap();
                let e = sqlx::query(&format!("{lock} NOWAIT"))
                    .execute(p)
                    .await
                    .lease_err("bump")
                    .unwrap_err();
                holder.rollback().await.unwrap();
                e
            }
        };
        assert_eq!(busy.kind(), ErrorKind::Backend, "{at}: {busy}");
        assert!(busy.is_temporary(), "{at}: a locked row: {busy}");
        assert!(busy.message().starts_with("bump: "), "{at}: {busy}");
        db.run(&format!("DROP TABLE {table}")).await;
    }
}
