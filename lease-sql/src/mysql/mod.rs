//! MySQL and MariaDB: the store's constructors and start-up checks; its statements are in
//! `statements.rs`, and its drivers ([`Driver`](crate::store::Driver)), whose writes read the
//! term back through `LAST_INSERT_ID` rather than `RETURNING`, in `leases.rs`,
//! `partitions.rs`, `membership.rs`, `permits.rs` and `slots.rs`; the reads every database
//! shares are in `shared.rs`.

mod leases;
mod membership;
mod partitions;
mod permits;
mod slots;
mod statements;

use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lease_core::{Error, ErrorKind, Result};
use sqlx::MySql;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};

use crate::config::SqlConfig;
use crate::partitions::group_conn;
use crate::store::Table;
use crate::store::{ColumnInfo, SqlStore, split_table, with_conn};
use crate::wire::schema::Dialect;

/// The `name` column as information_schema describes it: type, width in characters, width in
/// bytes, collation.
type NameColumn = (String, Option<i64>, Option<i64>, Option<String>);

/// A column as MySQL's information_schema describes it: name, data type, full column
/// type, width in characters, width in bytes, collation.
type MySqlColumn = (
    String,
    String,
    String,
    Option<i64>,
    Option<i64>,
    Option<String>,
);

/// A lease store on MySQL or MariaDB.
///
/// **Hints** ([`LeaseStore::changes`](lease_core::LeaseStore::changes)): only the changes made
/// through this same store object (and its clones) wake its waiters. MySQL and MariaDB have no
/// push that does not poll the table, so a release by another process or another store object
/// is found at the waiter's next attempt; the hints always say so
/// ([`Wakeups::is_connected`](lease_core::backend::notify::Wakeups::is_connected) is `false`), and
/// waiters keep their (expiry-aware) polling pace. `capabilities().watch` is `false`.
///
/// `:now` is `UNIX_TIMESTAMP()` plus the milliseconds of `NOW(3)`, never a conversion through the
/// session time zone. There is no `RETURNING` on `UPDATE`: the term comes back in the OK packet
/// through `LAST_INSERT_ID(expr)`, 0 when no row matched — affected-row counts, which depend on
/// the client's found-rows flag, are never used.
///
/// ```sql
/// -- claim: never INSERT IGNORE, which turns a too-long name into a truncating warning
/// INSERT INTO leases (name, holder, instance, term, expires_at_ms)
/// VALUES (?, ?, ?, LAST_INSERT_ID(1), :now + ?)
/// ON DUPLICATE KEY UPDATE
///   holder = IF(expires_at_ms <= :now, ?, holder),
///   instance = IF(expires_at_ms <= :now, ?, instance),
///   term = IF(expires_at_ms <= :now, LAST_INSERT_ID(term + 1), term + LAST_INSERT_ID(0)),
///   expires_at_ms = IF(expires_at_ms <= :now, :now + ?, expires_at_ms);  -- assigned last
/// -- LAST_INSERT_ID() = 0: held; otherwise the new term. On MariaDB 10.3 or later the claim
/// -- runs as `SET STATEMENT innodb_lock_wait_timeout = 0 FOR INSERT …`: a row locked by a
/// -- verified transaction fails it at once (1205), answered as held.
/// UPDATE leases SET expires_at_ms = GREATEST(expires_at_ms, :now + ?), term = LAST_INSERT_ID(term)
///  WHERE name = ? AND holder = ? AND expires_at_ms > :now;               -- renew
/// -- (:now is fixed when the statement starts: a renewal that waited for the row's lock and
/// -- lands after a later one of the same holder never moves the expiry back)
/// UPDATE leases SET expires_at_ms = 0, term = LAST_INSERT_ID(term)
///  WHERE name = ? AND holder = ? AND expires_at_ms > :now;               -- release
/// SELECT term, expires_at_ms - :now FROM leases
///  WHERE name = ? AND holder = ? AND expires_at_ms > :now;               -- verify
/// SELECT term FROM leases WHERE name = ? AND holder = ? AND term = ?
///    AND expires_at_ms > :now LOCK IN SHARE MODE;                       -- verify in a transaction
/// ```
///
/// `renew_many` on MariaDB 10.6 or later: one text-protocol request (one per MiB of batch:
/// one for 10,000 names of up to about 50 bytes), the batch a JSON array of `[name, holder]`
/// pairs sent as a hex literal, each statement committed on its own. The batch is read as a
/// table (`JSON_TABLE`), each name looked up by the primary key (`STRAIGHT_JOIN`: the batch
/// first, so the work grows with the batch and the `UPDATE` touches no other row), and a row
/// another transaction holds locked is passed by (`SKIP LOCKED`), then renewed alone by the
/// `renew` above (all such renewals together waiting at most 1 s; one still waiting is
/// answered `Timeout`). On MySQL and older MariaDB, `renew_many` renews one lease after the
/// other (`capabilities().renew_many` is `false`); MySQL 8 has what the request needs, but it
/// has not been run against a MySQL server.
///
/// ```sql
/// SET @lease_sql_batch = CONVERT(:batch USING utf8mb4);  -- [["name","holder"],…]
/// SET @lease_sql_renewal_ms = :now + :ttl;                -- one expiry for the batch
/// UPDATE (SELECT k.name
///           FROM JSON_TABLE(@lease_sql_batch, '$[*]' COLUMNS (item FOR ORDINALITY,
///                  name VARBINARY(:max_name_bytes) PATH '$[0]',
///                  holder VARBINARY(64) PATH '$[1]')) AS i
///           STRAIGHT_JOIN leases AS k ON k.name = i.name AND k.holder = i.holder
///          WHERE k.expires_at_ms > :now
///          FOR UPDATE SKIP LOCKED) AS s                   -- locked here, or passed by
///   STRAIGHT_JOIN leases AS l ON l.name = s.name
///    SET l.expires_at_ms = GREATEST(l.expires_at_ms, @lease_sql_renewal_ms)
///  WHERE l.expires_at_ms > :now AND @lease_sql_renewal_ms > :now;
/// SELECT i.item, l.term, l.expires_at_ms >= @lease_sql_renewal_ms  -- 0: passed by
///   FROM JSON_TABLE(…) AS i STRAIGHT_JOIN leases AS l
///     ON l.name = i.name AND l.holder = i.holder
///  WHERE l.expires_at_ms > :now;                          -- no row: not live under holder
/// SET @lease_sql_batch = NULL;
/// ```
///
/// Scheduler slots ([`SlotStore`](lease_core::backend::slots::SlotStore)), on the same row. In the
/// finish, `held`, `rec` and `took` stand for the conditions below, written out in the statement
/// (one `?` per use); an `UPDATE` assigns left to right, so each assignment reads only columns
/// assigned after it.
///
/// ```sql
/// -- claim_slot: a read, then one write with the term read compared
/// SELECT n.now, l.term, l.expires_at_ms - n.now, l.slot_ms, l.unfinished_slot_ms
///   FROM (SELECT :now AS now) n LEFT JOIN leases l ON l.name = ?;
/// -- held (time left > 0), taken (instant <= slot_ms) or early (instant > now): no write.
/// -- Otherwise, for a new record (a duplicate key leaves the row be: LAST_INSERT_ID() = 0):
/// INSERT INTO leases (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms)
/// VALUES (?, ?, ?, LAST_INSERT_ID(1), :now + ?, :instant, :instant)
/// ON DUPLICATE KEY UPDATE term = term + LAST_INSERT_ID(0);
/// -- or over the record read:
/// UPDATE leases SET holder = ?, instance = ?, term = LAST_INSERT_ID(term + 1),
///        expires_at_ms = :now + ?, slot_ms = :instant, unfinished_slot_ms = :instant
///  WHERE name = ? AND term = :term_read AND expires_at_ms <= :now;
/// -- LAST_INSERT_ID() = 0: another replica's write matched first (held); else the new term
///
/// -- finish_slot, with
/// --   held = (holder = ? AND expires_at_ms > :now)
/// --   rec  = (slot_ms <=> :instant)
/// --   took = (held AND rec AND COALESCE(:passed <= :now AND :passed > :instant, 0))
/// UPDATE leases SET
///        term = term + 0 * LAST_INSERT_ID(1 + 2 * rec + 4 * took + 8 * held),  -- first
///        unfinished_slot_ms = IF(rec AND unfinished_slot_ms <=> :instant, NULL,
///                                unfinished_slot_ms),
///        slot_ms = IF(took, :passed, slot_ms),
///        expires_at_ms = IF(held, 0, expires_at_ms)                            -- last
///  WHERE name = ? AND (rec OR held);
/// -- LAST_INSERT_ID() bits: 2 recorded, 4 passed taken, 8 released (0: no row matched)
///
/// -- claim_rerun: LAST_INSERT_ID() = the new term, 0 when not eligible
/// UPDATE leases SET holder = ?, instance = ?, term = LAST_INSERT_ID(term + 1),
///        expires_at_ms = :now + ?, rerun_slot_ms = :instant
///  WHERE name = ? AND unfinished_slot_ms = :instant AND slot_ms = :instant
///    AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> :instant) AND expires_at_ms <= :now;
/// -- unfinished: one statement for all the names (one ? each; 4096 names a statement at most)
/// SELECT name, unfinished_slot_ms FROM leases
///  WHERE name IN (?, ?, …) AND slot_ms = unfinished_slot_ms
///    AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> unfinished_slot_ms)
///    AND expires_at_ms <= :now;
/// -- last_slot
/// SELECT slot_ms, unfinished_slot_ms, rerun_slot_ms FROM leases WHERE name = ?;
/// ```
///
/// `claim_slot` is two round trips; every other slot operation one. The slot writes are
/// retried at once after a deadlock, as the claim is.
///
/// Partitioned leases ([`PartitionStore`](lease_core::backend::partitions::PartitionStore)) and
/// membership ([`MembershipStore`](lease_core::backend::membership::MembershipStore)), on the
/// tables `leases_partitions` and `leases_members` (named after the lease table, see
/// [`partitions_schema_sql`](crate::partitions_schema_sql)). Every operation is one round trip:
///
/// ```sql
/// -- acquire_partition: LAST_INSERT_ID() = the epoch when acquired or kept, 0 when another
/// -- owner holds it. Assigned left to right: the epoch first, from the old owner and expiry;
/// -- expires_at_ms last, its condition true whether it reads the old owner or the new one.
/// INSERT INTO leases_partitions (group_name, partition_no, owner, epoch, expires_at_ms)
/// VALUES (?, ?, :owner, LAST_INSERT_ID(1), :now + :ttl)
/// ON DUPLICATE KEY UPDATE
///   epoch = IF(expires_at_ms <= :now, LAST_INSERT_ID(epoch + 1),
///              IF(owner = :owner, LAST_INSERT_ID(epoch), epoch + LAST_INSERT_ID(0))),
///   owner = IF(expires_at_ms <= :now, :owner, owner),
///   expires_at_ms = IF(expires_at_ms <= :now OR owner = :owner,
///                      GREATEST(expires_at_ms, :now + :ttl), expires_at_ms);
/// -- (:now is fixed at the statement's start, before it waits for the row's lock: an owner's
/// -- acquire or renewal that waited may land after a later one, and never moves the expiry back)
///
/// -- renew_partitions: one text-protocol request of three statements (one round trip, no
/// -- prepare whatever the batch's size): :group and :owner as hex literals (X'…'),
/// -- :partitions and :ttl as decimal integers — nothing else is interpolated.
/// SET @lease_sql_renewal_ms = :now + :ttl;                 -- one expiry for the batch
/// UPDATE leases_partitions SET expires_at_ms = GREATEST(expires_at_ms, @lease_sql_renewal_ms)
///  WHERE group_name = :group AND partition_no IN (:partitions) AND owner = :owner
///    AND expires_at_ms > :now                              -- never revives an expired lease
///    AND @lease_sql_renewal_ms > :now;                     -- never an expiry already past
/// SELECT partition_no, epoch, expires_at_ms - :now FROM leases_partitions
///  WHERE group_name = :group AND partition_no IN (:partitions) AND owner = :owner
///    AND expires_at_ms >= @lease_sql_renewal_ms AND expires_at_ms > :now;  -- those it renewed
///
/// -- release_partitions (text protocol, as the renewal): the row and its epoch stay
/// UPDATE leases_partitions SET expires_at_ms = :now
///  WHERE group_name = :group AND partition_no IN (:partitions) AND owner = :owner
///    AND expires_at_ms > :now;
/// -- owners
/// SELECT partition_no, owner, epoch, expires_at_ms - :now FROM leases_partitions
///  WHERE group_name = ? AND expires_at_ms > :now ORDER BY partition_no;
/// -- heartbeat (the groups one per line)
/// INSERT INTO leases_members (service, node, address, group_list, expires_at_ms)
/// VALUES (?, ?, ?, ?, :now + ?)
/// ON DUPLICATE KEY UPDATE address = ?, group_list = ?, expires_at_ms = :now + ?;
/// -- members (VARBINARY node: byte order)
/// SELECT node, address, group_list, expires_at_ms - :now FROM leases_members
///  WHERE service = ? AND expires_at_ms > :now ORDER BY node;
/// -- leave
/// UPDATE leases_members SET expires_at_ms = :now
///  WHERE service = ? AND node = ? AND expires_at_ms > :now;
/// ```
///
/// Release and leave count affected rows, which here mean the same with or without the
/// client's found-rows flag: they match live records only and always change them (the expiry
/// moves back to now). The heartbeat's answer is what it wrote, its `expires_in` the TTL from
/// the statement's own clock reading: one round trip, no read-back. The writes are retried at
/// once after a deadlock, as the claim is.
///
/// Counted leases
/// ([`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit) and the
/// other permit operations), on the table `leases_permits` (see
/// [`permits_schema_sql`](crate::permits_schema_sql)): one row per permit, and per name a counter
/// row (`permit_no = -1`) holding the greatest term the name ever issued. Every operation is one
/// round trip. The claim is one transaction sent as one text-protocol request (the name, holder and
/// instance as hex literals, the count and TTL as decimal integers — nothing else is interpolated),
/// so no client round trip falls inside it and a claimant that stalls or loses its network holds no
/// lock. The counter row's exclusive lock queues the claims of a name, and the locking read sees
/// the latest committed rows, so each claim decides on every live permit (the permits below a
/// name's greatest are always rows: a new one is taken only when every lower one is live):
///
/// ```sql
/// -- claim_permit (:n the permit count)
/// START TRANSACTION;
/// INSERT INTO leases_permits (name, permit_no, holder, instance, term, expires_at_ms)
/// VALUES (:name, -1, '', '', 0, 0) ON DUPLICATE KEY UPDATE term = term;  -- counter, locked
/// SELECT MAX(term) + 1, SUM(live), SUM(live AND holder = :holder), MAX(permit_no),
///        MIN(IF(permit_no >= 0 AND permit_no < :n AND expires_at_ms <= :now, permit_no, NULL))
///   INTO @term, @live, @mine, @max, @free
///   FROM leases_permits WHERE name = :name FOR UPDATE;  -- live: permit_no >= 0 AND unexpired
/// SET @pick = LEAST(COALESCE(@free, @max + 1), @max + 1);
/// SET @ok = @live < :n AND @mine = 0 AND @pick < :n;
/// UPDATE leases_permits SET holder = :holder, instance = CONVERT(:instance USING utf8mb4),
///        term = @term, expires_at_ms = :now + :ttl
///  WHERE @ok AND name = :name AND permit_no = @pick AND expires_at_ms <= :now;
/// INSERT INTO leases_permits (name, permit_no, holder, instance, term, expires_at_ms)
/// SELECT :name, @pick, :holder, CONVERT(:instance USING utf8mb4), @term, :now + :ttl
///   FROM DUAL WHERE @ok AND @pick > @max;                              -- a permit never used
/// UPDATE leases_permits SET term = @term WHERE @ok AND name = :name AND permit_no = -1;
/// COMMIT;
/// SELECT IF(@ok, @pick, NULL), IF(@ok, @term, NULL);                    -- NULL: full
/// -- (the variables are named @lease_sql_…)
/// -- renew_permit, release_permit: the term through LAST_INSERT_ID (0: not live under holder)
/// UPDATE leases_permits SET expires_at_ms = GREATEST(expires_at_ms, :now + ?),
///   term = LAST_INSERT_ID(term)
///  WHERE name = ? AND permit_no = ? AND holder = ? AND expires_at_ms > :now;
/// UPDATE leases_permits SET expires_at_ms = 0, term = LAST_INSERT_ID(term)
///  WHERE name = ? AND permit_no = ? AND holder = ? AND expires_at_ms > :now;
/// -- verify_permit, permits
/// SELECT permit_no, term, expires_at_ms - :now FROM leases_permits
///  WHERE name = ? AND holder = ? AND permit_no >= 0 AND expires_at_ms > :now
///  ORDER BY permit_no LIMIT 1;
/// SELECT permit_no, CAST(instance AS CHAR CHARACTER SET utf8mb4), term, expires_at_ms - :now
///   FROM leases_permits WHERE name = ? AND permit_no >= 0 ORDER BY permit_no;
/// ```
///
/// A claim whose request failed part-way is rolled back before its connection is used again
/// (or the connection is closed); a deadlock is retried at once.
///
/// The `name` column must compare bytes exactly: `VARBINARY`, or a `_nopad_bin`/`_0900_bin`
/// collation. Under a case-insensitive or PAD SPACE collation (including MariaDB's
/// `utf8mb4_bin`) "Job", "job" and "job " would share one row; the store refuses such a table at
/// start-up. The same goes for the `group_name`, `owner`, `service` and `node` columns, and
/// `partition_no` must hold every `u32` (`INT UNSIGNED`).
pub type MySqlStore = SqlStore<MySql>;
impl SqlStore<MySql> {
    /// A store on the application's pool; checks at once that the database can carry leases
    /// (see [`PostgresStore::with_client`](crate::PostgresStore::with_client)), and on MySQL
    /// also that every compared column compares bytes exactly.
    pub async fn with_client(pool: MySqlPool, config: SqlConfig) -> Result<Self> {
        let server = {
            let o = pool.connect_options();
            format!(
                "mysql {}:{}/{}",
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            )
        };
        let stmts = statements::statements(&config.table);
        // No push across processes (see the type's docs): the store's own writes only.
        let hints = std::sync::Arc::new(crate::hints::Hints::one(false, true));
        Self::assemble(pool, config, server, Dialect::MySql, stmts, (hints, false))
            .started()
            .await
    }

    /// Connects to `url` (`mysql://user:password@host:port/database`) and builds the store. A
    /// bad URL or an unreachable server gives `Unavailable`, naming the host (never the
    /// password).
    pub async fn connect(url: &str, config: SqlConfig) -> Result<Self> {
        let opts = MySqlConnectOptions::from_str(url).map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "bad MySQL URL; expected mysql://user:password@host:port/database",
            )
            .with_temporary(false)
            .with_source(e)
        })?;
        let server = format!("mysql {}:{}", opts.get_host(), opts.get_port());
        let pool = MySqlPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(Duration::from_secs(5))
            .connect_with(opts)
            .await
            .map_err(|e| crate::error::map(e, "connect".into(), &server))?;
        Self::with_client(pool, config).await
    }

    async fn check_available(&self) -> Result<()> {
        self.check_lease_table().await?;
        let version: String = with_conn!(self, "start-up check", |c| {
            sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)").fetch_one(c)
        })?;
        self.inner
            .nowait_claims
            .store(takes_nowait_claims(&version), Ordering::Relaxed);
        self.inner
            .batch_renewals
            .store(renews_in_batches(&version), Ordering::Relaxed);
        let table = &self.inner.config.table;
        let (schema, name) = split_table(table);
        let column: Option<NameColumn> = with_conn!(self, "start-up check", |c| sqlx::query_as(
            "SELECT CAST(DATA_TYPE AS CHAR), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), \
                    CAST(CHARACTER_OCTET_LENGTH AS SIGNED), CAST(COLLATION_NAME AS CHAR) \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
               AND COLUMN_NAME = 'name'",
        )
        .bind(schema)
        .bind(name)
        .fetch_optional(c))?;
        if let Some((data_type, _, _, collation)) = &column {
            let exact = match data_type.to_ascii_lowercase().as_str() {
                "varbinary" => true,
                "varchar" | "char" => collation
                    .as_deref()
                    .is_some_and(|c| c.ends_with("_nopad_bin") || c.ends_with("_0900_bin")),
                _ => false,
            };
            if !exact {
                return Err(Error::schema(format!(
                    "the `name` column of `{table}` is {data_type} with collation {}, under \
                     which \"Job\", \"job\" and \"job \" could share one row; make it \
                     VARBINARY(255) as in:\n{}",
                    collation.as_deref().unwrap_or("(binary)"),
                    self.inner.stmts.create
                )));
            }
        }
        // VARBINARY is limited in bytes, VARCHAR in characters.
        crate::store::name_width(
            self,
            column.map(|(t, chars, octets, _)| {
                let w = if t.eq_ignore_ascii_case("varbinary") {
                    octets
                } else {
                    chars
                };
                (t, w)
            }),
        )?;
        self.check_replication().await
    }

    /// Whether a failover can lose a commit this server acknowledged (see
    /// [`SqlConfig::allow_async_replication`](crate::SqlConfig::allow_async_replication)): a
    /// replica connected (MariaDB's `Slaves_connected`) while commits do not wait for a
    /// replica's acknowledgement before they are visible (semi-synchronous replication off, not
    /// active now, or waiting `AFTER_COMMIT`). Reads MariaDB's names and MySQL 8's
    /// (`rpl_semi_sync_source_*`); MySQL has no `Slaves_connected`, so there the check sees no
    /// replica and accepts.
    async fn check_replication(&self) -> Result<()> {
        let status: Vec<(String, String)> =
            with_conn!(self, "start-up check", |c| sqlx::query_as(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ('Slaves_connected', \
             'Rpl_semi_sync_master_status', 'Rpl_semi_sync_source_status')"
            )
            .fetch_all(c))?;
        let vars: Vec<(String, String)> = with_conn!(self, "start-up check", |c| sqlx::query_as(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('rpl_semi_sync_master_enabled', \
             'rpl_semi_sync_master_wait_point', 'rpl_semi_sync_source_enabled', \
             'rpl_semi_sync_source_wait_point')"
        )
        .fetch_all(c))?;
        let get = |rows: &[(String, String)], names: [&str; 2]| {
            rows.iter()
                .find(|(n, _)| names.iter().any(|m| n.eq_ignore_ascii_case(m)))
                .map(|(_, v)| v.trim().to_ascii_uppercase())
        };
        let replicas = get(&status, ["Slaves_connected", "Slaves_connected"])
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0);
        let semi = Semi {
            enabled: get(
                &vars,
                [
                    "rpl_semi_sync_master_enabled",
                    "rpl_semi_sync_source_enabled",
                ],
            ),
            active: get(
                &status,
                ["Rpl_semi_sync_master_status", "Rpl_semi_sync_source_status"],
            ),
            wait_point: get(
                &vars,
                [
                    "rpl_semi_sync_master_wait_point",
                    "rpl_semi_sync_source_wait_point",
                ],
            ),
        };
        self.replication_verdict(replication_risk(replicas, &semi))
    }

    /// The check of the partition or member table, on its first use: widths (VARBINARY and
    /// TEXT in bytes, VARCHAR in characters), byte-wise comparison of every compared column,
    /// and `partition_no` able to hold every `u32`.
    async fn check_group_table(&self, table: Table) -> Result<()> {
        let full = self.table_of(table).0.to_owned();
        let (schema, name) = split_table(&full);
        let rows: Vec<MySqlColumn> =
            group_conn!(self, "start-up check", table, |c| sqlx::query_as(
                "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR), \
                 CAST(COLUMN_TYPE AS CHAR), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), \
                 CAST(CHARACTER_OCTET_LENGTH AS SIGNED), CAST(COLLATION_NAME AS CHAR) \
                 FROM information_schema.COLUMNS \
                 WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?"
            )
            .bind(schema)
            .bind(name)
            .fetch_all(c))?;
        let mut have = Vec::new();
        for (name, data_type, column_type, chars, octets, collation) in rows {
            let t = data_type.to_ascii_lowercase();
            let exact_collation = collation
                .as_deref()
                .is_some_and(|c| c.ends_with("_nopad_bin") || c.ends_with("_0900_bin"));
            let inexact = match t.as_str() {
                "varbinary" | "blob" | "tinyblob" | "mediumblob" | "longblob" => None,
                "varchar" | "text" | "tinytext" | "mediumtext" | "longtext" if exact_collation => {
                    None
                }
                "int" | "bigint" | "smallint" | "mediumint" | "tinyint" => None,
                _ => Some(
                    collation
                        .clone()
                        .unwrap_or_else(|| format!("{data_type} (pads values to its width)")),
                ),
            };
            if name.eq_ignore_ascii_case("partition_no")
                && !(t == "bigint"
                    || (t == "int" && column_type.to_ascii_lowercase().contains("unsigned")))
            {
                return Err(Error::schema(format!(
                    "the `partition_no` column of `{full}` is {column_type}, which cannot \
                     hold every partition number (0 to 4294967295); make it INT UNSIGNED \
                     as in:\n{}",
                    self.table_of(table).1
                )));
            }
            let width = if matches!(t.as_str(), "varchar" | "char") {
                chars
            } else {
                octets
            };
            have.push(ColumnInfo {
                name,
                data_type,
                width,
                inexact,
            });
        }
        self.check_group_columns(table, &have).await?;
        Ok(())
    }
}

/// `true` for MariaDB 10.3 or later (`VERSION()` like `10.11.19-MariaDB-…`), which takes
/// `SET STATEMENT innodb_lock_wait_timeout = 0 FOR …`. MySQL has no per-statement lock timeout
/// for InnoDB (its `innodb_lock_wait_timeout` is 1 s at least and no `SET_VAR` hint): a claim
/// there waits for a verified transaction's lock as long as `innodb_lock_wait_timeout`.
fn takes_nowait_claims(version: &str) -> bool {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return false;
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (10, 3)
}

/// `true` for MariaDB 10.6 or later, which renews many leases in one request (`JSON_TABLE`,
/// and `FOR UPDATE SKIP LOCKED` in a derived table: see `Statements::renew_many`). MySQL 8 has
/// both too, but the request has not been run against a MySQL server: there, as on older
/// MariaDB, `renew_many` renews one lease after the other.
fn renews_in_batches(version: &str) -> bool {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return false;
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    (major, minor) >= (10, 6)
}

/// MySQL reads its own clock in every statement: nothing to do besides the operation.
impl crate::wire::conns::LeaseDb for MySql {}

impl SqlStore<MySql> {
    /// The hints of the changes made through this store (see the type's docs): never connected.
    fn watch(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> lease_core::backend::notify::Wakeups {
        self.inner.hints.subscribe(topic)
    }
}

#[cfg(test)]
mod tests {
    use super::{renews_in_batches, takes_nowait_claims};

    #[test]
    fn batch_renewals_on_mariadb_10_6_and_later() {
        assert!(renews_in_batches("10.11.19-MariaDB-0+deb12u1"));
        assert!(renews_in_batches("10.6.0-MariaDB"));
        assert!(renews_in_batches("11.4.2-MariaDB-log"));
        assert!(!renews_in_batches("10.5.27-MariaDB"));
        assert!(!renews_in_batches("8.0.36"));
        assert!(!renews_in_batches("8.4.0-commercial"));
    }

    #[test]
    fn nowait_claims_on_mariadb_10_3_and_later() {
        assert!(takes_nowait_claims("10.11.19-MariaDB-0+deb12u1"));
        assert!(takes_nowait_claims("10.3.0-MariaDB"));
        assert!(takes_nowait_claims("11.4.2-MariaDB-log"));
        assert!(!takes_nowait_claims("10.2.44-MariaDB"));
        assert!(!takes_nowait_claims("8.0.36"));
        assert!(!takes_nowait_claims("8.4.0-commercial"));
    }
}

/// MariaDB's (or MySQL's) semi-synchronous replication settings, upper-cased; `None` when the
/// server has no such variable.
struct Semi {
    enabled: Option<String>,
    active: Option<String>,
    wait_point: Option<String>,
}

/// What can make a failover lose an acknowledged commit, given the replicas connected and the
/// semi-synchronous settings; `None` when nothing can.
fn replication_risk(replicas: i64, semi: &Semi) -> Option<String> {
    if replicas <= 0 {
        return None;
    }
    let fix = "turn on semi-synchronous replication on the primary \
               (rpl_semi_sync_master_enabled = ON, rpl_semi_sync_master_wait_point = AFTER_SYNC, \
               a long rpl_semi_sync_master_timeout) and rpl_semi_sync_slave_enabled = ON on the \
               replicas, and promote only a replica that acknowledged";
    if semi.enabled.as_deref() != Some("ON") {
        return Some(format!(
            "{replicas} replica(s) replicate from this primary asynchronously \
             (rpl_semi_sync_master_enabled is {}), so a commit is acknowledged before any \
             replica has it and promoting one loses it; {fix}",
            semi.enabled.as_deref().unwrap_or("absent")
        ));
    }
    if semi.active.as_deref() != Some("ON") {
        return Some(format!(
            "semi-synchronous replication is enabled but not active \
             (Rpl_semi_sync_master_status is {}: no replica acknowledges, or it fell back to \
             asynchronous after rpl_semi_sync_master_timeout), so commits are acknowledged \
             before a replica has them; {fix}",
            semi.active.as_deref().unwrap_or("absent")
        ));
    }
    if semi.wait_point.as_deref() != Some("AFTER_SYNC") {
        return Some(format!(
            "rpl_semi_sync_master_wait_point is {}, so a commit is visible to other clients \
             before a replica has it (a lease read or verified there can vanish in a \
             failover); {fix}",
            semi.wait_point.as_deref().unwrap_or("absent")
        ));
    }
    None
}

#[cfg(test)]
mod replication_tests {
    use super::{Semi, replication_risk};

    fn semi(enabled: &str, active: &str, wait_point: &str) -> Semi {
        let v = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        Semi {
            enabled: v(enabled),
            active: v(active),
            wait_point: v(wait_point),
        }
    }

    #[test]
    fn replication_risks() {
        assert!(replication_risk(0, &semi("OFF", "OFF", "AFTER_COMMIT")).is_none());
        assert!(replication_risk(1, &semi("ON", "ON", "AFTER_SYNC")).is_none());
        let risk = replication_risk(1, &semi("OFF", "OFF", "AFTER_SYNC")).unwrap_or_default();
        assert!(
            risk.contains("rpl_semi_sync_master_enabled is OFF"),
            "{risk}"
        );
        let risk = replication_risk(1, &semi("ON", "OFF", "AFTER_SYNC")).unwrap_or_default();
        assert!(
            risk.contains("Rpl_semi_sync_master_status is OFF"),
            "{risk}"
        );
        let risk = replication_risk(2, &semi("ON", "ON", "AFTER_COMMIT")).unwrap_or_default();
        assert!(risk.contains("wait_point is AFTER_COMMIT"), "{risk}");
        assert!(replication_risk(1, &semi("", "", "")).is_some());
    }
}
