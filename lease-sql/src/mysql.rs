//! MySQL and MariaDB.

use std::str::FromStr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lease_core::LeaseStoreExt;
use lease_core::{
    Capabilities, Error, ErrorKind, LeaseInfo, LeaseStore, Result,
    backend::{Grant, HolderToken, async_trait, validate_instance},
};
use sqlx::MySql;
use sqlx::mysql::{
    MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions, MySqlQueryResult,
};

use crate::common::{check_common, verify_guard};
use crate::config::SqlConfig;
use crate::schema::Dialect;
use crate::store::{SqlStore, remaining, ttl_ms};

/// The `name` column as information_schema describes it: type, width in characters, width in
/// bytes, collation.
type NameColumn = (String, Option<i64>, Option<i64>, Option<String>);

/// How often a claim is retried at once after InnoDB picked it as a deadlock victim (the
/// statement was rolled back whole, so retrying is safe).
pub(crate) const DEADLOCK_RETRIES: usize = 3;

/// A lease store on MySQL or MariaDB.
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
/// UPDATE leases SET expires_at_ms = :now + ?, term = LAST_INSERT_ID(term)
///  WHERE name = ? AND holder = ? AND expires_at_ms > :now;               -- renew
/// UPDATE leases SET expires_at_ms = 0, term = LAST_INSERT_ID(term)
///  WHERE name = ? AND holder = ? AND expires_at_ms > :now;               -- release
/// SELECT term, expires_at_ms - :now FROM leases
///  WHERE name = ? AND holder = ? AND expires_at_ms > :now;               -- verify
/// SELECT term FROM leases WHERE name = ? AND holder = ? AND term = ?
///    AND expires_at_ms > :now LOCK IN SHARE MODE;                       -- verify in a transaction
/// ```
///
/// Scheduler slots ([`SlotStore`](lease_core::SlotStore)), on the same row. In the finish,
/// `held`, `rec` and `took` stand for the conditions below, written out in the statement (one
/// `?` per use); an `UPDATE` assigns left to right, so each assignment reads only columns
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
/// Partitioned leases ([`PartitionStore`](lease_core::PartitionStore)) and membership
/// ([`MembershipStore`](lease_core::MembershipStore)), on the tables `leases_partitions` and
/// `leases_members` (named after the lease table, see
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
///   expires_at_ms = IF(expires_at_ms <= :now OR owner = :owner, :now + :ttl, expires_at_ms);
///
/// -- renew_partitions: one text-protocol request of three statements (one round trip, no
/// -- prepare whatever the batch's size): :group and :owner as hex literals (X'…'),
/// -- :partitions and :ttl as decimal integers — nothing else is interpolated.
/// SET @lease_sql_renewal_ms = :now + :ttl;                 -- one expiry for the batch
/// UPDATE leases_partitions SET expires_at_ms = @lease_sql_renewal_ms
///  WHERE group_name = :group AND partition_no IN (:partitions) AND owner = :owner
///    AND expires_at_ms > :now                              -- never revives an expired lease
///    AND @lease_sql_renewal_ms > :now;                     -- never an expiry already past
/// SELECT partition_no, epoch, expires_at_ms - :now FROM leases_partitions
///  WHERE group_name = :group AND partition_no IN (:partitions) AND owner = :owner
///    AND expires_at_ms = @lease_sql_renewal_ms AND expires_at_ms > :now;  -- those it renewed
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
/// The `name` column must compare bytes exactly: `VARBINARY`, or a `_nopad_bin`/`_0900_bin`
/// collation. Under a case-insensitive or PAD SPACE collation (including MariaDB's
/// `utf8mb4_bin`) "Job", "job" and "job " would share one row; the store refuses such a table at
/// start-up. The same goes for the `group_name`, `owner`, `service` and `node` columns, and
/// `partition_no` must hold every `u32` (`INT UNSIGNED`).
pub type MySqlStore = SqlStore<MySql>;

impl SqlStore<MySql> {
    /// A store on the application's pool with the default options; checks at once that the
    /// database can carry leases.
    pub async fn new(pool: MySqlPool) -> Result<Self> {
        Self::with_config(pool, SqlConfig::default()).await
    }

    /// A store on the application's pool; see
    /// [`PostgresStore::with_config`](crate::PostgresStore::with_config) for the checks.
    pub async fn with_config(pool: MySqlPool, config: SqlConfig) -> Result<Self> {
        let server = {
            let o = pool.connect_options();
            format!(
                "mysql {}:{}/{}",
                o.get_host(),
                o.get_port(),
                o.get_database().unwrap_or_default()
            )
        };
        let leases = Self::lease_conns(&pool, &config);
        let store = Self::assemble(pool, leases, config, server, Dialect::MySql);
        store.check_available().await?;
        Ok(store)
    }

    /// Connects to `url` (`mysql://user:password@host:port/database`) and builds the store. A
    /// bad URL or an unreachable server gives `Unavailable`, naming the host.
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
            .map_err(|e| crate::error::map(e, "connect", &server))?;
        Self::with_config(pool, config).await
    }

    async fn check_available(&self) -> Result<()> {
        check_common!(self, MySql);
        let version: String = crate::common::with_conn!(self, "start-up check", |c| {
            sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)").fetch_one(c)
        })?;
        self.inner
            .nowait_claims
            .store(takes_nowait_claims(&version), Ordering::Relaxed);
        let table = &self.inner.config.table;
        let (schema, name) = match table.split_once('.') {
            Some((s, n)) => (Some(s.to_owned()), n.to_owned()),
            None => (None, table.clone()),
        };
        let column: Option<NameColumn> =
            crate::common::with_conn!(self, "start-up check", |c| sqlx::query_as(
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
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the `name` column of `{table}` on {} is {data_type} with collation {}, \
                         under which \"Job\", \"job\" and \"job \" could share one row; make it \
                         VARBINARY(255) as in:\n{}",
                        self.inner.server,
                        collation.as_deref().unwrap_or("(binary)"),
                        self.inner.stmts.create
                    ),
                )
                .with_temporary(false));
            }
        }
        // VARBINARY is limited in bytes, VARCHAR in characters.
        crate::common_checks::name_width(
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
        self.check_group_tables().await
    }

    async fn exec(
        &self,
        op: &str,
        q: sqlx::query::Query<'_, MySql, sqlx::mysql::MySqlArguments>,
    ) -> Result<MySqlQueryResult> {
        crate::common::with_conn!(self, op, |c| q.execute(c))
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

#[async_trait]
impl LeaseStore for SqlStore<MySql> {
    fn backend(&self) -> &'static str {
        "mysql"
    }

    fn capabilities(&self) -> Capabilities {
        crate::common::capabilities(&self.inner.config)
    }

    async fn available(&self) -> Result<()> {
        self.check_available().await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
        let ms = ttl_ms(ttl);
        let hex = holder.to_hex();
        let stmt = if self.inner.nowait_claims.load(Ordering::Relaxed) {
            &self.inner.stmts.claim_nowait
        } else {
            &self.inner.stmts.claim
        };
        let mut attempt = 0;
        let done = loop {
            let r = crate::common::raw_conn!(self, "claim", |c| {
                sqlx::query(stmt)
                    .bind(name)
                    .bind(&hex)
                    .bind(instance)
                    .bind(ms)
                    .bind(&hex)
                    .bind(instance)
                    .bind(ms)
                    .execute(c)
            });
            match r {
                Err(e) if crate::error::is_deadlock(&e) && attempt < DEADLOCK_RETRIES => {
                    attempt += 1;
                }
                // The row is locked by a transaction (a verified one of the holder's): live, so
                // held. The statement was rolled back whole.
                Err(e) if crate::error::is_lock_busy(&e) => return Ok(None),
                r => break r.map_err(|e| self.err(e, "claim"))?,
            }
        };
        match done.last_insert_id() {
            0 => Ok(None),
            t => Ok(Some(Grant {
                term: t,
                expires_in: remaining(ms),
            })),
        }
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        let ms = ttl_ms(ttl);
        let q = sqlx::query(&self.inner.stmts.renew)
            .bind(ms)
            .bind(name)
            .bind(holder.to_hex());
        let done = self.exec("renew", q).await?;
        Ok(match done.last_insert_id() {
            0 => None,
            t => Some(Grant {
                term: t,
                expires_in: remaining(ms),
            }),
        })
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.validate_name(name)?;
        let q = sqlx::query(&self.inner.stmts.release)
            .bind(name)
            .bind(holder.to_hex());
        Ok(self.exec("release", q).await?.last_insert_id() > 0)
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        let row: Option<(i64, i64)> =
            crate::common::with_conn!(self, "verify", |c| sqlx::query_as(
                &self.inner.stmts.verify
            )
            .bind(name)
            .bind(holder.to_hex())
            .fetch_optional(c))?;
        row.map(|(t, left)| {
            Ok(Grant {
                term: self.term_from(t)?,
                expires_in: remaining(left),
            })
        })
        .transpose()
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.validate_name(name)?;
        let row: Option<(String, i64, i64)> =
            crate::common::with_conn!(self, "get", |c| sqlx::query_as(&self.inner.stmts.get)
                .bind(name)
                .fetch_optional(c))?;
        row.map(|(instance, t, left)| {
            Ok(LeaseInfo {
                name: name.to_owned(),
                instance,
                term: self.term_from(t)?,
                live: left > 0,
                expires_in: remaining(left),
            })
        })
        .transpose()
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.validate_name(name)?;
        let q = sqlx::query(&self.inner.stmts.force_release).bind(name);
        Ok(self.exec("force release", q).await?.last_insert_id() > 0)
    }
}

verify_guard!(MySql, MySqlConnection, begin);

#[cfg(test)]
mod tests {
    use super::takes_nowait_claims;

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
