//! PostgreSQL: the store's constructors and start-up checks; its statements are in
//! `statements.rs`, its counted claim in `permits.rs`, its slot finish in `slots.rs`. Its
//! drivers ([`Driver`](crate::store::Driver)) are at the bottom and in those files; the writes
//! it shares with SQLite and the reads every database shares are in `shared.rs`.

mod hints;
mod permits;
mod slots;
mod statements;

use std::future::Future;
use std::str::FromStr;

use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::slots::SlotFinish;
use lease_core::{Error, ErrorKind, Result};
use sqlx::Postgres;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::config::SqlConfig;
use crate::partitions::group_conn;
use crate::shared::Returning;
use crate::slots::Finish;
use crate::store::Table;
use crate::store::{ColumnInfo, SqlStore, split_table, with_conn};
use crate::wire::schema::Dialect;

/// A lease store on PostgreSQL.
///
/// **Hints** ([`LeaseStore::changes`](lease_core::LeaseStore::changes), on unless
/// [`SqlConfig::hints`] is off): the claim, the release, the forced release, a permit claimed or
/// released, a partition acquired with a new epoch and a partition release send
/// `pg_notify('lease_sql.<schema>.<table>', 'lease:<name>' | 'group:<group>')` inside the
/// statement, so a hint goes out when the change commits, from whichever process made it. On the
/// first wait, the store opens one listening connection of its own (`LISTEN`, `application_name`
/// `lease-sql hints <channel>`; its address can differ from the pool's, see
/// [`with_listener_options`](crate::SqlStore::with_listener_options)), which checks every 5 s that
/// its connection answers (`SELECT 1`, 5 s to answer: a connection that died silently is found
/// within 10 s) and reconnects with backoff (0.1 s doubling to 5 s); while it is down the hints say
/// so ([`Wakeups::is_connected`](lease_core::backend::notify::Wakeups::is_connected) is `false`)
/// and waiters keep their polling pace; once it listens again every waiter is woken. It ends when
/// the store is dropped. A lost listener never delays a lease operation. Limits: behind PgBouncer
/// in transaction or statement mode `LISTEN` does not work — turn hints off there; PostgreSQL
/// serializes the commits of transactions that notify, which costs nothing for one client but cuts
/// the rate of many concurrent changes of hands (see [`SqlConfig::hints`]); a listener that stops
/// reading (its process frozen) holds back PostgreSQL's notification queue (8 GB), which at lease
/// rates takes days to fill.
///
/// Statements (`:now` is `clock_timestamp()` in milliseconds):
///
/// ```sql
/// -- claim: one statement whether the name is new, expired or held. The CTE takes the row's
/// -- lock without waiting: a row locked by a verified transaction fails it at once (55P03),
/// -- answered as held.
/// WITH busy AS (SELECT 1 FROM leases WHERE name = $1 FOR UPDATE NOWAIT)
/// INSERT INTO leases AS l (name, holder, instance, term, expires_at_ms)
/// SELECT $1, $2, $3, 1, :now + $4 FROM (SELECT count(*) FROM busy) AS b
/// ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, instance = excluded.instance,
///        term = l.term + 1, expires_at_ms = excluded.expires_at_ms
///  WHERE l.expires_at_ms <= :now
/// RETURNING term;                          -- no row: held
/// -- renew
/// UPDATE leases SET expires_at_ms = :now + $3
///  WHERE name = $1 AND holder = $2 AND expires_at_ms > :now RETURNING term;
/// -- renew_many ($1 names, $2 holders: text[]; the renewed rows with their terms, then every
/// -- live row with skipped = 1: one without a renewed row was passed by, as another
/// -- transaction had locked it, and is renewed alone afterwards, at most 1 s waited for all)
/// WITH n AS (SELECT :now AS now),
///      i AS (SELECT a.name, a.holder FROM unnest($1::text[], $2::text[]) AS a(name, holder)),
///      s AS (SELECT l.name FROM n, leases AS l JOIN i ON l.name = i.name AND l.holder = i.holder
///             WHERE l.expires_at_ms > n.now),
///      k AS (SELECT l.name FROM n, leases AS l JOIN i ON l.name = i.name AND l.holder = i.holder
///             WHERE l.expires_at_ms > n.now FOR UPDATE OF l SKIP LOCKED),
///      u AS (UPDATE leases AS l SET expires_at_ms = GREATEST(l.expires_at_ms, n.now + $3)
///             FROM n, k
///             WHERE l.name = k.name AND l.expires_at_ms > n.now RETURNING l.name, l.term)
/// SELECT u.name::text, u.term, 0::int8 FROM u
/// UNION ALL SELECT s.name::text, NULL::int8, 1::int8 FROM s;
/// -- release (keeps the row and its term)
/// UPDATE leases SET expires_at_ms = 0 WHERE name = $1 AND holder = $2 AND expires_at_ms > :now;
/// -- verify
/// SELECT term, expires_at_ms - :now FROM leases
///  WHERE name = $1 AND holder = $2 AND expires_at_ms > :now;
/// -- verify as the first statement of a transaction
/// SELECT term FROM leases WHERE name = $1 AND holder = $2 AND term = $3
///    AND expires_at_ms > :now FOR SHARE;
/// ```
///
/// Scheduler slots ([`SlotStore`](lease_core::backend::slots::SlotStore)), on the same row:
///
/// ```sql
/// -- claim_slot ($5: the instant): a read, then one write with the term read compared
/// SELECT n.now, l.term, l.expires_at_ms - n.now, l.slot_ms, l.unfinished_slot_ms
///   FROM (SELECT :now AS now) n LEFT JOIN leases l ON l.name = $1;
/// -- held (time left > 0), taken ($5 <= slot_ms) or early ($5 > now): no write. Otherwise:
/// INSERT INTO leases (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms)
/// VALUES ($1, $2, $3, 1, :now + $4, $5, $5)
/// ON CONFLICT (name) DO NOTHING RETURNING term;           -- no record was read
/// UPDATE leases SET holder = $2, instance = $3, term = term + 1, expires_at_ms = :now + $4,
///        slot_ms = $5, unfinished_slot_ms = $5
///  WHERE name = $1 AND term = $6 AND expires_at_ms <= :now
/// RETURNING term;                                          -- $6: the term read
/// -- no row: another replica's write matched first (held); superseded: unfinished_slot_ms read
///
/// -- finish_slot ($3: the instant, $4: passed): the row locked, the outcome computed from it
/// WITH o AS (SELECT name, holder = $2 AND expires_at_ms > :now AS held,
///                   COALESCE(slot_ms = $3, false) AS rec,
///                   COALESCE(unfinished_slot_ms = $3, false) AS fin,
///                   COALESCE($4 <= :now AND $4 > $3, false) AS due
///              FROM leases WHERE name = $1 FOR UPDATE),
///      f AS (SELECT name, held, rec, fin, held AND rec AND due AS took FROM o),
///      u AS (UPDATE leases l
///               SET slot_ms = CASE WHEN f.took THEN $4 ELSE l.slot_ms END,
///                   unfinished_slot_ms = CASE WHEN f.rec AND f.fin THEN NULL
///                                             ELSE l.unfinished_slot_ms END,
///                   expires_at_ms = CASE WHEN f.held THEN 0 ELSE l.expires_at_ms END
///              FROM f WHERE l.name = f.name AND (f.held OR (f.rec AND f.fin)))
/// SELECT rec, took, held FROM f;  -- recorded, passed taken, released (no row: none of them)
///
/// -- claim_rerun ($5: the unfinished instant)
/// UPDATE leases SET holder = $2, instance = $3, term = term + 1, expires_at_ms = :now + $4,
///        rerun_slot_ms = $5
///  WHERE name = $1 AND unfinished_slot_ms = $5 AND slot_ms = $5
///    AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> $5) AND expires_at_ms <= :now
/// RETURNING term;
/// -- unfinished: one statement for all the names ($1: text[])
/// SELECT name, unfinished_slot_ms FROM leases
///  WHERE name = ANY($1) AND slot_ms = unfinished_slot_ms
///    AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> unfinished_slot_ms)
///    AND expires_at_ms <= :now;
/// -- last_slot
/// SELECT slot_ms, unfinished_slot_ms, rerun_slot_ms FROM leases WHERE name = $1;
/// ```
///
/// `claim_slot` is two round trips; every other slot operation one.
///
/// Partitioned leases ([`PartitionStore`](lease_core::backend::partitions::PartitionStore)) and
/// membership ([`MembershipStore`](lease_core::backend::membership::MembershipStore)), on the
/// tables `leases_partitions` and `leases_members` (named after the lease table, see
/// [`partitions_schema_sql`](crate::partitions_schema_sql)). Every operation is one statement, one
/// round trip; `clock_timestamp()` moves during a statement, so each statement reads it once.
/// That read comes before the statement waits for the row's lock (a concurrent write, or one
/// whose commit waits for a synchronous standby), so an owner's acquire or renewal can land
/// seconds after a later one of the same owner: `GREATEST` keeps it from moving the expiry
/// back, which would end the lease before the deadline the later answer gave its holder.
///
/// ```sql
/// -- acquire_partition: a free lease or the owner's own; the epoch kept while the owner holds
/// -- it live, +1 otherwise (`excluded.expires_at_ms - $4` is the statement's one `:now`)
/// INSERT INTO leases_partitions AS p (group_name, partition_no, owner, epoch, expires_at_ms)
/// VALUES ($1, $2, $3, 1, :now + $4)
/// ON CONFLICT (group_name, partition_no) DO UPDATE SET owner = excluded.owner,
///        epoch = CASE WHEN p.owner = excluded.owner
///                      AND p.expires_at_ms > excluded.expires_at_ms - $4
///                     THEN p.epoch ELSE p.epoch + 1 END,
///        expires_at_ms = GREATEST(p.expires_at_ms, excluded.expires_at_ms)
///  WHERE p.owner = excluded.owner OR p.expires_at_ms <= excluded.expires_at_ms - $4
/// RETURNING p.epoch;                                   -- no row: another owner holds it
/// -- renew_partitions ($2: bigint[], one expiry for the whole batch)
/// WITH n AS (SELECT :now AS now)
/// UPDATE leases_partitions AS p SET expires_at_ms = GREATEST(p.expires_at_ms, n.now + $4) FROM n
///  WHERE p.group_name = $1 AND p.partition_no = ANY($2) AND p.owner = $3
///    AND p.expires_at_ms > n.now
/// RETURNING p.partition_no, p.epoch;
/// -- release_partitions: the row and its epoch stay; affected rows = leases ended
/// WITH n AS (SELECT :now AS now)
/// UPDATE leases_partitions AS p SET expires_at_ms = n.now FROM n
///  WHERE p.group_name = $1 AND p.partition_no = ANY($2) AND p.owner = $3
///    AND p.expires_at_ms > n.now;
/// -- owners
/// WITH n AS (SELECT :now AS now)
/// SELECT p.partition_no, p.owner, p.epoch, p.expires_at_ms - n.now FROM leases_partitions p, n
///  WHERE p.group_name = $1 AND p.expires_at_ms > n.now ORDER BY p.partition_no;
/// -- heartbeat ($4: the groups, one per line)
/// INSERT INTO leases_members (service, node, address, group_list, expires_at_ms)
/// VALUES ($1, $2, $3, $4, :now + $5)
/// ON CONFLICT (service, node) DO UPDATE SET address = excluded.address,
///        group_list = excluded.group_list, expires_at_ms = excluded.expires_at_ms;
/// -- members
/// WITH n AS (SELECT :now AS now)
/// SELECT m.node, m.address, m.group_list, m.expires_at_ms - n.now FROM leases_members m, n
///  WHERE m.service = $1 AND m.expires_at_ms > n.now ORDER BY m.node COLLATE "C";
/// -- leave: affected rows = 1 when the member was live
/// WITH n AS (SELECT :now AS now)
/// UPDATE leases_members AS m SET expires_at_ms = n.now FROM n
///  WHERE m.service = $1 AND m.node = $2 AND m.expires_at_ms > n.now;
/// ```
///
/// Counted leases
/// ([`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit) and the
/// other permit operations), on the table `leases_permits` (see
/// [`permits_schema_sql`](crate::permits_schema_sql)): one row per permit, and per name a counter
/// row (`permit_no = -1`) holding the greatest term the name ever issued. Every operation is one
/// statement, one round trip. The claim cannot simply count the name's rows: under READ COMMITTED a
/// statement reads the snapshot taken when it started, and a statement that waited for a lock sees
/// the latest version of the rows it locked, but not a row inserted since its snapshot. So it locks
/// every row of the name, and writes only when the counter it locked is the one its snapshot has:
/// then no claim of the name committed in between, and no new permit row is missing from what it
/// counted. Otherwise it writes nothing and answers stale, and the store sends it again (at most 16
/// times, each one after another claim of the name was granted; then it answers full):
///
/// ```sql
/// -- claim_permit ($1 name, $2 holder, $3 instance, $4 TTL, $5 the count N)
/// WITH n AS (SELECT :now AS now),
///   s AS (SELECT term FROM leases_permits WHERE name = $1 AND permit_no = -1), -- snapshot
///   k AS (SELECT permit_no, holder, term, expires_at_ms FROM leases_permits
///          WHERE name = $1 ORDER BY permit_no FOR UPDATE),                      -- latest
///   live AS (SELECT k.permit_no, k.holder FROM k, n
///             WHERE k.permit_no >= 0 AND k.expires_at_ms > n.now),
///   f AS (SELECT (SELECT term FROM k WHERE permit_no = -1)
///                  IS NOT DISTINCT FROM (SELECT term FROM s) AS fresh,
///                COALESCE((SELECT max(term) FROM k), 0) + 1 AS term),
///   ok AS (SELECT g.i, f.term FROM f, generate_series(0, $5 - 1) AS g(i)
///           WHERE f.fresh AND (SELECT count(*) FROM live) < $5
///             AND NOT EXISTS (SELECT 1 FROM live WHERE live.holder = $2)
///             AND g.i NOT IN (SELECT permit_no FROM live) ORDER BY g.i LIMIT 1),
///   c AS (INSERT INTO leases_permits AS c (name, permit_no, holder, instance, term,
///                                          expires_at_ms)
///         SELECT $1, -1, '', '', ok.term, 0 FROM ok
///         ON CONFLICT (name, permit_no) DO UPDATE SET term = excluded.term
///          WHERE c.term < excluded.term RETURNING term),   -- a concurrent first claim: no row
///   w AS (INSERT INTO leases_permits AS p (name, permit_no, holder, instance, term,
///                                          expires_at_ms)
///         SELECT $1, ok.i, $2, $3, c.term, n.now + $4 FROM ok, c, n
///         ON CONFLICT (name, permit_no) DO UPDATE SET holder = excluded.holder,
///                instance = excluded.instance, term = excluded.term,
///                expires_at_ms = excluded.expires_at_ms
///          WHERE p.expires_at_ms <= excluded.expires_at_ms - $4
///         RETURNING permit_no, term),
///   h AS (SELECT pg_notify(…, 'lease:' || $1) FROM w)       -- with hints; else SELECT 1
/// SELECT w.permit_no, w.term,                                -- NULL, NULL: not granted
///        NOT f.fresh OR (EXISTS (SELECT 1 FROM ok) AND w.term IS NULL)       -- stale
///   FROM f LEFT JOIN w ON true, (SELECT count(*) FROM h) AS hk;
/// -- renew_permit
/// UPDATE leases_permits SET expires_at_ms = :now + $4
///  WHERE name = $1 AND permit_no = $2 AND holder = $3 AND expires_at_ms > :now RETURNING term;
/// -- release_permit (keeps the row and its term; with hints, the pg_notify of a release)
/// UPDATE leases_permits SET expires_at_ms = 0
///  WHERE name = $1 AND permit_no = $2 AND holder = $3 AND expires_at_ms > :now;
/// -- verify_permit: found by the holder token alone
/// SELECT permit_no, term, expires_at_ms - :now FROM leases_permits
///  WHERE name = $1 AND holder = $2 AND permit_no >= 0 AND expires_at_ms > :now
///  ORDER BY permit_no LIMIT 1;
/// -- permits: every record of the name
/// SELECT permit_no, instance, term, expires_at_ms - :now FROM leases_permits
///  WHERE name = $1 AND permit_no >= 0 ORDER BY permit_no;
/// ```
pub type PostgresStore = SqlStore<Postgres>;

impl SqlStore<Postgres> {
    /// A store on the application's pool. Creates the lease table when missing (unless
    /// [`Ddl::None`](crate::Ddl::None)) and fails fast when the database cannot carry leases: no
    /// clock, a read-only connection, a missing table with DDL off, a table of that name with
    /// other columns (another application's: [`ErrorKind::Schema`], naming its columns), a
    /// `name` column narrower than `max_name_bytes`. The partition and member tables get the
    /// same checks (and are created) on their first use.
    ///
    /// The pool serves `begin_verified` only. Lease operations run on connections of the
    /// store's own, up to [`SqlConfig::lease_connections`] (default 2), opened with the pool's
    /// connect options so that a busy pool never delays a renewal: count them with the pool
    /// against the server's `max_connections`, and behind PgBouncer against its pool size.
    pub async fn with_client(pool: PgPool, config: SqlConfig) -> Result<Self> {
        let server = {
            let o = pool.connect_options();
            format!(
                "postgres {}:{}/{}",
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            )
        };
        let stmts = if config.hints {
            // The channel names the table as PostgreSQL resolves it, so `leases` and
            // `public.leases` (the same table) share one.
            let (schema, table) = split_table(&config.table);
            let schema = match schema {
                Some(s) => s.to_owned(),
                None => sqlx::query_scalar::<Postgres, Option<String>>("SELECT current_schema()")
                    .fetch_one(&pool)
                    .await
                    .map_err(|e| crate::error::map(e, "start-up check".into(), &server))?
                    .unwrap_or_else(|| "public".to_owned()),
            };
            let channel = hints::channel(&schema, table);
            let notify = statements::Notify {
                channel: &channel,
                long_names: config.max_name_bytes > statements::MAX_PAYLOAD_NAME_BYTES,
            };
            statements::statements(&config.table, Some(&notify))
        } else {
            statements::statements(&config.table, None)
        };
        // With hints on, the listener hears the store's own writes too: disconnected until it
        // listens. Off, the store's own writes only, never connected.
        let hints = std::sync::Arc::new(crate::hints::Hints::one(false, !config.hints));
        let watch = config.hints;
        Self::assemble(
            pool,
            config,
            server,
            Dialect::Postgres,
            stmts,
            (hints, watch),
        )
        .started()
        .await
    }

    /// The hints of `topic`, the listener started on the first call (see the type's docs).
    fn watch(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> lease_core::backend::notify::Wakeups {
        let wakeups = self.inner.hints.subscribe(topic);
        if self.inner.watch {
            self.inner.hints.ensure_listener(|hub| {
                let options = self
                    .inner
                    .listen_options
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
                    .unwrap_or_else(|| (*self.inner.app.connect_options()).clone());
                hints::start(
                    options,
                    self.inner.stmts.hint_channel.clone(),
                    &self.inner.server,
                    hub,
                )
            });
        }
        wakeups
    }

    /// Opens the store's listening connection (its hints, see the type's docs) with `options`
    /// instead of the application pool's connect options: e.g. straight to the server while
    /// the store's other connections go through a pooler in transaction mode, where `LISTEN`
    /// does not work (the statements' `pg_notify` does). `options` must reach the same
    /// database. Replaces a running listener of this store and of its clones (the new one
    /// starts on the next wait; until it listens the hints say they are disconnected). With
    /// [`SqlConfig::hints`] off there is no listener, and this changes nothing.
    pub fn with_listener_options(self, options: PgConnectOptions) -> Self {
        *self
            .inner
            .listen_options
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(options);
        if self.inner.watch {
            self.inner.hints.stop_listener();
        }
        self
    }

    /// Connects to `url` (`postgres://user:password@host:port/database`) with a pool of its own
    /// and builds the store (see [`with_client`](Self::with_client) for the checks). A bad URL
    /// or an unreachable server gives `Unavailable`, naming the host (never the password).
    pub async fn connect(url: &str, config: SqlConfig) -> Result<Self> {
        let opts = PgConnectOptions::from_str(url).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "bad PostgreSQL URL; expected postgres://user:password@host:port/database",
            )
            .with_temporary(false)
            .with_source(e)
        })?;
        let server = format!("postgres {}:{}", opts.get_host(), opts.get_port());
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(|e| crate::error::map(e, "connect".into(), &server))?;
        Self::with_client(pool, config).await
    }

    async fn check_available(&self) -> Result<()> {
        self.check_lease_table().await?;
        let table = self.inner.config.table.to_lowercase();
        let (schema, name) = split_table(&table);
        let width: Option<(String, Option<i32>)> =
            with_conn!(self, "start-up check", |c| sqlx::query_as(
                "SELECT data_type::text, character_maximum_length::int \
             FROM information_schema.columns \
             WHERE column_name = 'name' AND table_name = $1 \
               AND table_schema = COALESCE($2, current_schema())",
            )
            .bind(name)
            .bind(schema)
            .fetch_optional(c))?;
        crate::store::name_width(self, width.map(|(t, w)| (t, w.map(i64::from))))?;
        self.check_replication().await
    }

    /// Whether a failover can lose a commit this server acknowledged (see
    /// [`SqlConfig::allow_async_replication`]): a replica streams from it (a row of
    /// `pg_stat_replication`) while commits do not wait for a synchronous standby
    /// (`synchronous_standby_names` empty, or `synchronous_commit` `local`/`off` for this
    /// connection: a role's, a database's or the server's setting), or a `statement_timeout`
    /// can cancel that wait (PostgreSQL then answers the commit as done, with a warning, though
    /// the standby may not have it). A server in recovery is a
    /// replica itself and refused by the lease table's write check before this.
    async fn check_replication(&self) -> Result<()> {
        let (replicas, names, commit, timeout): (i64, String, String, String) =
            with_conn!(self, "start-up check", |c| sqlx::query_as(
                "SELECT (SELECT count(*) FROM pg_stat_replication), \
                 current_setting('synchronous_standby_names'), \
                 current_setting('synchronous_commit'), current_setting('statement_timeout')",
            )
            .fetch_one(c))?;
        let risk = replication_risk(replicas, &names, &commit).or_else(|| {
            (replicas > 0 && timeout.trim() != "0").then(|| {
                format!(
                    "statement_timeout is {timeout} for this connection: a commit whose wait \
                     for the synchronous standby it cancels is answered as committed (with a \
                     warning) before the standby has it; set statement_timeout = 0 for the \
                     store's role or database (ALTER ROLE ... SET statement_timeout = 0)"
                )
            })
        });
        self.replication_verdict(risk)
    }

    /// The check of the partition or member table, on its first use.
    async fn check_group_table(&self, table: Table) -> Result<()> {
        let full = self.table_of(table).0.to_lowercase();
        let (schema, name) = split_table(&full);
        let rows: Vec<(String, String, Option<i32>)> =
            group_conn!(self, "start-up check", table, |c| sqlx::query_as(
                "SELECT column_name::text, data_type::text, \
                 character_maximum_length::int FROM information_schema.columns \
                 WHERE table_name = $1 AND table_schema = COALESCE($2, current_schema())"
            )
            .bind(name)
            .bind(schema)
            .fetch_all(c))?;
        let have: Vec<ColumnInfo> = rows
            .into_iter()
            .map(|(name, data_type, width)| ColumnInfo {
                name,
                data_type,
                width: width.map(i64::from),
                inexact: None,
            })
            .collect();
        self.check_group_columns(table, &have).await?;
        Ok(())
    }
}

/// What can make a failover lose an acknowledged commit, given the replicas streaming from the
/// server and its `synchronous_standby_names` and `synchronous_commit`; `None` when nothing can.
fn replication_risk(replicas: i64, names: &str, commit: &str) -> Option<String> {
    if replicas == 0 {
        return None;
    }
    if names.trim().is_empty() {
        return Some(format!(
            "{replicas} replica(s) stream from this primary asynchronously \
             (synchronous_standby_names is empty), so a commit is acknowledged before any \
             replica has it and promoting one loses it; set synchronous_standby_names (e.g. \
             'FIRST 1 (replica1, replica2)' or 'ANY 1 (*)') with synchronous_commit = on or \
             remote_apply, and promote only a synchronous standby"
        ));
    }
    match commit.trim().to_ascii_lowercase().as_str() {
        "local" | "off" => Some(format!(
            "synchronous_commit is {commit} for this connection, so a commit is acknowledged \
             before the synchronous standby ({names}) has it; set synchronous_commit = on or \
             remote_apply (server, database or role: ALTER ROLE ... SET synchronous_commit)"
        )),
        _ => None,
    }
}

/// PostgreSQL reads its own clock in every statement: nothing to do besides the operation.
impl crate::wire::conns::LeaseDb for Postgres {}

/// A batch as PostgreSQL's `bigint[]`, for `partition_no = ANY($2)`.
fn parts(partitions: &[u32]) -> Vec<i64> {
    partitions.iter().map(|p| i64::from(*p)).collect()
}

impl Returning for Postgres {
    type Parts = Vec<i64>;

    fn parts(partitions: &[u32]) -> Vec<i64> {
        parts(partitions)
    }

    type Texts = Vec<String>;

    fn texts(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    fn check_available(store: &PostgresStore) -> impl Future<Output = Result<()>> + Send {
        store.check_available()
    }

    fn check_group_table(
        store: &PostgresStore,
        table: Table,
    ) -> impl Future<Output = Result<()>> + Send {
        store.check_group_table(table)
    }

    fn watch(store: &PostgresStore, topic: &Topic) -> Wakeups {
        store.watch(topic)
    }

    fn claim_permit_row(
        store: &PostgresStore,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send {
        permits::claim_permit_row(store, name, count, hex, instance, ms)
    }

    fn finish_in(
        store: &PostgresStore,
        f: Finish<'_>,
    ) -> impl Future<Output = Result<SlotFinish>> + Send {
        slots::finish_in(store, f)
    }

    fn unfinished_rows(
        store: &PostgresStore,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, i64)>>> + Send {
        slots::unfinished_rows(store, names)
    }
}

#[cfg(test)]
mod tests {
    use super::replication_risk;

    #[test]
    fn replication_risks() {
        assert_eq!(replication_risk(0, "", "on"), None);
        assert_eq!(replication_risk(1, "FIRST 1 (pg2)", "on"), None);
        assert_eq!(replication_risk(2, "ANY 1 (*)", "remote_apply"), None);
        assert_eq!(replication_risk(1, "*", "remote_write"), None);
        let risk = replication_risk(1, "", "on").unwrap_or_default();
        assert!(
            risk.contains("synchronous_standby_names is empty"),
            "{risk}"
        );
        let risk = replication_risk(1, "*", "local").unwrap_or_default();
        assert!(risk.contains("synchronous_commit is local"), "{risk}");
        assert!(replication_risk(1, "*", "OFF").is_some());
    }
}
