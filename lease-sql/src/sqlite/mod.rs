//! SQLite: the store's constructors and start-up checks; its statements are in
//! `statements.rs`, its boot clock in `clock.rs`, its counted claim in `permits.rs`, its slot
//! finish in `slots.rs`. Its drivers ([`Driver`](crate::store::Driver)) are at the bottom and in
//! those files; the writes it shares with PostgreSQL and the reads every database shares are in
//! `shared.rs`.

mod clock;
mod hints;
mod permits;
mod slots;
mod statements;

use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::slots::SlotFinish;
use lease_core::{Error, ErrorKind, Result};
use sqlx::Sqlite;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

use crate::config::SqlConfig;
use crate::partitions::group_conn;
use crate::shared::Returning;
use crate::slots::Finish;
use crate::store::Table;
use crate::store::{ColumnInfo, SqlStore, split_table, with_conn};
use crate::wire::schema::Dialect;

/// A lease store on SQLite: leases among the processes of one host that share a database file.
///
/// **Hints** ([`LeaseStore::changes`](lease_core::LeaseStore::changes)): every store of this
/// process on the same file and table shares them, and its claims, releases, forced releases,
/// permit claims and releases, partition acquires and releases notify them at once. Changes by
/// other processes are found by a poller on a connection of its own, running while anybody waits
/// (and 1 s after): it reads `PRAGMA data_version` every 15 ms (no table read) and, when another
/// connection committed, the rows of the names (with their permits) and groups waited on, and
/// notifies only those whose holder, term or liveness changed — a renewal wakes nobody. Membership
/// changes are not hinted. With [`SqlConfig::hints`] off there is no poller and the hints cover
/// this process only.
///
/// The statements are PostgreSQL's (see [`PostgresStore`](crate::PostgresStore)) with `?N`
/// parameters and `:now` = `(SELECT boot_ms FROM temp.lease_sql_clock)`, the host's boot clock
/// (below), but for the claim, which takes no row lock first (SQLite has none: verified
/// transactions hold the file's write lock). Every operation that changes rows (claims,
/// renewals, releases, partition, member, permit and slot writes) runs as one `BEGIN
/// IMMEDIATE` transaction, and its `:now` is read once `BEGIN IMMEDIATE` holds the file's
/// write lock: a write that waited for the lock (another process's write, a verified
/// transaction) still grants its whole TTL from the moment it can take effect, not the TTL less
/// the wait. Verified transactions start with `BEGIN IMMEDIATE`, so they
/// hold the write lock from their first statement and no claim can slip in before they commit.
///
/// Scheduler slots ([`SlotStore`](lease_core::backend::slots::SlotStore)) use PostgreSQL's
/// statements too, but for two. `unfinished` takes the names as one JSON array: `… WHERE name IN
/// (SELECT value FROM json_each(?1)) AND …`. And the finish must read its outcome from the row as
/// it was, which SQLite's `RETURNING` (the new row only) cannot give, so it is one `BEGIN
/// IMMEDIATE` transaction of a read and a write (calls into the embedded database, not round trips
/// to a server):
///
/// ```sql
/// BEGIN IMMEDIATE;
/// SELECT holder = ?2 AND expires_at_ms > :now,                 -- held → released
///        COALESCE(slot_ms = ?3, 0),                            -- recorded
///        COALESCE(unfinished_slot_ms = ?3, 0),                 -- cleared when recorded
///        COALESCE(?4 <= :wall AND ?4 > ?3, 0)                  -- passed taken (wall clock)
///   FROM leases WHERE name = ?1;                               -- ?3: instant, ?4: passed
/// UPDATE leases SET slot_ms = CASE WHEN ?2 THEN ?3 ELSE slot_ms END,  -- ?2: passed taken
///        unfinished_slot_ms = CASE WHEN ?4 THEN NULL ELSE unfinished_slot_ms END,
///        expires_at_ms = CASE WHEN ?5 THEN 0 ELSE expires_at_ms END   -- ?5: released
///  WHERE name = ?1;                                            -- only when something changes
/// COMMIT;
/// ```
///
/// Partitioned leases and membership use PostgreSQL's statements too (see
/// [`PostgresStore`](crate::PostgresStore)), each one statement, with three differences:
/// SQLite reads its clock once per step of a statement, and an `UPDATE … RETURNING` makes all
/// its changes in its first step, so `:now` is written out where PostgreSQL reads it through a
/// CTE (a batch still gets one expiry); a batch of partitions is one JSON array of integers,
/// `… partition_no IN (SELECT value FROM json_each(?2)) …`, one bound parameter however many
/// (well clear of SQLite's limit of 32,766 parameters a statement); and members are ordered
/// `ORDER BY node COLLATE BINARY` (byte order).
///
/// Counted leases use PostgreSQL's renew, release, verify and list statements (see
/// [`PostgresStore`](crate::PostgresStore)) on `leases_permits`; the claim is one
/// `BEGIN IMMEDIATE` transaction, which holds the file's write lock from its first statement,
/// so no other write comes between its read and its writes (calls into the embedded database,
/// not round trips to a server):
///
/// ```sql
/// BEGIN IMMEDIATE;
/// INSERT INTO leases_permits (name, permit_no, holder, instance, term, expires_at_ms)
/// VALUES (?1, -1, '', '', 0, 0) ON CONFLICT (name, permit_no) DO NOTHING;  -- the counter row
/// SELECT permit_no, holder = ?1, term, expires_at_ms - :now FROM leases_permits
///  WHERE name = ?2 ORDER BY permit_no;
/// -- full, or the claimant holds a live permit: COMMIT (at most the counter row was written).
/// -- Otherwise the lowest free permit below N, with the term one more than the greatest read:
/// INSERT INTO leases_permits (name, permit_no, holder, instance, term, expires_at_ms)
/// VALUES (?1, ?2, ?3, ?4, ?5, :now + ?6);        -- or an UPDATE of the permit's row
/// UPDATE leases_permits SET term = ?1 WHERE name = ?2 AND permit_no = -1;
/// COMMIT;
/// ```
///
/// The permit table needs no boot-clock triggers (no lease-sql from before the boot clock
/// writes it); its permits end, as every lease does, when the file is opened under another
/// boot.
///
/// **The clock is the host's boot clock, not its wall clock.** SQLite has no server: whatever
/// clock a statement reads is the clock of the process running it, and a wall clock differs
/// between processes (`faketime`, a container's clock) and jumps for all of them when the host's
/// clock is stepped (NTP correcting a large error, `date -s`) — a contender would see a live
/// lease as expired and take it. So `:now` is `CLOCK_BOOTTIME` in milliseconds since boot, read
/// by the process right before each operation's statement, for a write once it holds the write
/// lock (through rustix, from the kernel
/// directly: an `LD_PRELOAD` shim such as libfaketime cannot move it) and handed to the
/// statement through a one-row temporary table of the store's connection (for `verify_in` on
/// the application's connection, as a bound parameter). It is one clock for every process of
/// the host, never stepped, and it counts through a suspend, as the holders' local deadlines do.
///
/// The boot clock starts again at each boot, so the file records, in `<table>_clock`, the
/// kernel's boot id its expiries were measured under. At start-up, a file last used under
/// another boot has every lease, partition lease and member ended (their holders died with that
/// boot); a file of a lease-sql from before (wall-clock expiries, no clock row) is converted,
/// every live lease keeping the time it had left. Triggers then refuse wall-clock expiries
/// (from September 2001 on, in milliseconds), so a process of an older lease-sql still running on
/// the file fails its writes rather than take a live lease: stop or upgrade every process on the
/// file. The DDL is [`sqlite_boot_clock_sql`](crate::sqlite_boot_clock_sql) (migration
/// `0003`).
///
/// Limits: the file is safe among the processes of **one host** only (one boot clock and one
/// boot id; processes in different Linux time namespaces do not share a boot clock). The
/// scheduler's instants are wall-clock times, read with `unixepoch('subsec')`: a skewed process
/// may find an instant due early, never take a live lease. On platforms other than Linux the
/// wall clock stands in for the boot clock, with the old limits: keep the host clock slewed,
/// not stepped.
///
/// While a verified transaction is open (`BEGIN IMMEDIATE`), every write to the file waits for
/// it, up to the 5 s busy timeout: any name's renewal, any claim. Keep them far shorter than
/// the renew interval.
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlStore<Sqlite> {
    /// A store on the application's pool; checks at once that the database can carry leases
    /// (see [`PostgresStore::with_client`](crate::PostgresStore::with_client)) and puts the
    /// file on this boot's clock. Lease operations get connections of their own on the same
    /// file. (For `sqlite::memory:`, those connections share the pool's in-memory database,
    /// which lives while any connection to it is open.)
    pub async fn with_client(pool: SqlitePool, config: SqlConfig) -> Result<Self> {
        let server = format!(
            "sqlite {}",
            pool.connect_options().get_filename().to_string_lossy()
        );
        let stmts = statements::statements(&config.table);
        let hints = hints::shared(&pool.connect_options(), &config.table, config.hints).await;
        let watch = config.hints;
        Self::assemble(pool, config, server, Dialect::Sqlite, stmts, (hints, watch))
            .started()
            .await
    }

    /// The hints of `topic`, the poller started on the first call (see the type's docs).
    fn watch(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> lease_core::backend::notify::Wakeups {
        let wakeups = self.inner.hints.subscribe(topic);
        if self.inner.watch {
            let weak = std::sync::Arc::downgrade(&self.inner.hints);
            self.inner.hints.ensure_watcher(|| {
                hints::start(
                    (*self.inner.app.connect_options()).clone(),
                    hints::Tables {
                        leases: self.inner.config.table.clone(),
                        partitions: self.inner.stmts.groups.partitions_table.clone(),
                        permits: self.inner.stmts.permits.table.clone(),
                    },
                    weak,
                )
            });
        }
        wakeups
    }

    /// Opens (creating when missing) the database file named by `url` (`sqlite:///path/to.db`
    /// or `sqlite://relative.db`), in WAL mode with a 5 s busy timeout, and builds the store
    /// (see [`with_client`](Self::with_client)).
    pub async fn connect(url: &str, config: SqlConfig) -> Result<Self> {
        let opts = SqliteConnectOptions::from_str(url)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    "bad SQLite URL; expected sqlite:///absolute/path.db or sqlite://relative.db",
                )
                .with_temporary(false)
                .with_source(e)
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(5));
        let server = format!("sqlite {}", opts.get_filename().display());
        // Two processes creating the same new file at once: the loser finds it locked while the
        // winner switches it to WAL. That passes; wait for it as the busy timeout would.
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        let pool = loop {
            let opened = SqlitePoolOptions::new()
                .max_connections(4)
                .acquire_timeout(Duration::from_secs(5))
                .connect_with(opts.clone())
                .await;
            match opened {
                Ok(pool) => break pool,
                Err(e) if is_busy(&e) && tokio::time::Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                Err(e) if is_busy(&e) => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "the database file stays locked by another process",
                    )
                    .at_server(server.as_str())
                    .with_source(e));
                }
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        "cannot open the database file; check the path and its permissions",
                    )
                    .with_temporary(false)
                    .at_server(server.as_str())
                    .with_source(e));
                }
            }
        };
        Self::with_client(pool, config).await
    }

    async fn check_available(&self) -> Result<()> {
        self.check_lease_table().await?;
        let (schema, name) = split_table(&self.inner.config.table);
        let schema = schema.unwrap_or("main");
        let column: Option<(String,)> = with_conn!(self, "start-up check", |c| sqlx::query_as(
            "SELECT type FROM pragma_table_info(?1, ?2) WHERE name = 'name'"
        )
        .bind(name)
        .bind(schema)
        .fetch_optional(c))?;
        crate::store::name_width(self, column.map(|(t,)| (t, None)))?;
        self.check_boot_clock().await
    }

    /// The check of the partition or member table, on its first use (SQLite does not enforce
    /// widths: only the columns' presence is checked), then its boot-clock triggers.
    async fn check_group_table(&self, table: Table) -> Result<()> {
        let full = self.table_of(table).0.to_owned();
        let (schema, name) = split_table(&full);
        let schema = schema.unwrap_or("main");
        let rows: Vec<(String, String)> =
            group_conn!(self, "start-up check", table, |c| sqlx::query_as(
                "SELECT name, type FROM pragma_table_info(?1, ?2)"
            )
            .bind(name)
            .bind(schema)
            .fetch_all(c))?;
        let have: Vec<ColumnInfo> = rows
            .into_iter()
            .map(|(name, data_type)| ColumnInfo {
                name,
                data_type,
                width: None,
                inexact: None,
            })
            .collect();
        self.check_group_columns(table, &have).await?;
        self.group_boot_clock(table).await
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED.
fn is_busy(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d)
        if matches!(crate::error::code_of(d.as_ref()), crate::error::Code::Sqlite(5 | 6)))
}

/// A batch as one JSON array of integers, for `partition_no IN (SELECT value FROM
/// json_each(?2))`: one bound parameter however many partitions.
fn parts(partitions: &[u32]) -> String {
    let list: Vec<String> = partitions.iter().map(u32::to_string).collect();
    format!("[{}]", list.join(","))
}

/// Texts as one JSON array of strings, for `json_each(?1)`.
fn json_texts(items: &[&str]) -> String {
    let mut out = String::with_capacity(items.iter().map(|s| s.len() + 3).sum::<usize>() + 2);
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

impl Returning for Sqlite {
    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");

    type Parts = String;

    fn parts(partitions: &[u32]) -> String {
        parts(partitions)
    }

    type Texts = String;

    fn texts(items: &[&str]) -> String {
        json_texts(items)
    }

    fn check_available(store: &SqliteStore) -> impl Future<Output = Result<()>> + Send {
        store.check_available()
    }

    fn check_group_table(
        store: &SqliteStore,
        table: Table,
    ) -> impl Future<Output = Result<()>> + Send {
        store.check_group_table(table)
    }

    fn watch(store: &SqliteStore, topic: &Topic) -> Wakeups {
        store.watch(topic)
    }

    fn claim_permit_row(
        store: &SqliteStore,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send {
        permits::claim_permit_row(store, name, count, hex, instance, ms)
    }

    fn finish_in(
        store: &SqliteStore,
        f: Finish<'_>,
    ) -> impl Future<Output = Result<SlotFinish>> + Send {
        slots::finish_in(store, f)
    }

    fn unfinished_rows(
        store: &SqliteStore,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, i64)>>> + Send {
        slots::unfinished_rows(store, names)
    }
}
