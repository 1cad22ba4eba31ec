//! SQLite's clock for expiries: the host's boot clock, read by the process, handed to each
//! statement, and recorded with the boot it was measured in.
//!
//! SQLite has no server, so whatever clock a statement reads is the clock of the process that
//! runs it. `unixepoch()` reads the wall clock, which differs between processes under
//! `faketime` and jumps for all of them when the host's clock is stepped: a contender would
//! then see a live lease as expired. `CLOCK_BOOTTIME` is one clock for every process of the
//! host: it is never stepped (NTP and `date -s` move only the wall clock), it counts through a
//! suspend (as the holders' local deadlines do), and it is read here through rustix, which
//! calls the kernel (its vDSO or the system call) directly: an `LD_PRELOAD` shim such as
//! libfaketime, which replaces libc's `clock_gettime`, cannot move it.
//!
//! The boot clock starts again at each boot, so every expiry is recorded with the boot it was
//! measured in (the kernel's boot id): a lease recorded under another boot has expired, since
//! its holder died with that boot.
//!
//! On other platforms than Linux, the wall clock stands in for it (and the boot id is a
//! constant): the behaviour of before, with its limits.

use lease_core::{Error, ErrorKind, Result};
use sqlx::Sqlite;

use crate::store::SqlStore;
use crate::wire::conns::LeaseDb;
use crate::wire::schema::Dialect;

/// The boot clock in milliseconds (Linux: `CLOCK_BOOTTIME`; elsewhere the wall clock since the
/// Unix epoch).
#[cfg(target_os = "linux")]
pub(crate) fn now_ms() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec
        .saturating_mul(1000)
        .saturating_add(ts.tv_nsec / 1_000_000)
}

/// The boot clock in milliseconds (Linux: `CLOCK_BOOTTIME`; elsewhere the wall clock since the
/// Unix epoch).
#[cfg(not(target_os = "linux"))]
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// The kernel's boot id, which changes at every boot.
#[cfg(target_os = "linux")]
pub(crate) async fn boot_id() -> std::io::Result<String> {
    const PATH: &str = "/proc/sys/kernel/random/boot_id";
    let read = tokio::task::spawn_blocking(|| std::fs::read_to_string(PATH)).await;
    match read {
        Ok(r) => r.map(|s| s.trim().to_owned()),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// A constant: the wall clock stands in for the boot clock.
#[cfg(not(target_os = "linux"))]
pub(crate) async fn boot_id() -> std::io::Result<String> {
    Ok("wall-clock".to_owned())
}

/// SQLite reads no clock of a server: each operation is told the boot clock (above) through a
/// one-row temporary table of its connection, which the statements read as `:now`, set right
/// before the operation's statement runs.
///
/// A write waits for the file's write lock (up to the busy timeout) when another connection
/// holds it, and a clock read before that wait would be old by the time the write lands: a
/// claim that waited 300 ms would be granted its TTL less 300 ms. So every write is one
/// `BEGIN IMMEDIATE` transaction, and its clock is read once `BEGIN IMMEDIATE` returned, with
/// the write lock held ([`LeaseDb::begin_write`]); nothing can write the file between that
/// reading and the commit. This is the one place the rule is kept: every operation that
/// changes rows runs through it (`raw_conn!(write …)` and the macros over it).
impl LeaseDb for Sqlite {
    async fn on_connect(conn: &mut Self::Connection) -> std::result::Result<(), sqlx::Error> {
        sqlx::query(
            "CREATE TEMP TABLE IF NOT EXISTS lease_sql_clock \
             (id INTEGER PRIMARY KEY CHECK (id = 1), boot_ms INTEGER NOT NULL)",
        )
        .execute(&mut *conn)
        .await?;
        sqlx::query("INSERT OR REPLACE INTO temp.lease_sql_clock (id, boot_ms) VALUES (1, 0)")
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    async fn before_op(conn: &mut Self::Connection) -> std::result::Result<(), sqlx::Error> {
        sqlx::query("UPDATE temp.lease_sql_clock SET boot_ms = ?1")
            .bind(now_ms())
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    async fn begin_write(conn: &mut Self::Connection) -> std::result::Result<(), sqlx::Error> {
        // Waits for the write lock; from here on no other connection writes the file.
        sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await?;
        // Read now, not before the wait. (A failure leaves the transaction open: the
        // connection is then closed, which rolls it back.)
        Self::before_op(conn).await
    }

    async fn end_write(
        conn: &mut Self::Connection,
        commit: bool,
    ) -> std::result::Result<(), sqlx::Error> {
        let end = if commit { "COMMIT" } else { "ROLLBACK" };
        sqlx::query(end).execute(&mut *conn).await?;
        Ok(())
    }

    fn verify_now() -> Option<i64> {
        Some(now_ms())
    }
}

impl SqlStore<Sqlite> {
    /// Puts the file's expiries on this boot's clock: creates the clock table and the triggers
    /// (unless DDL is off), then, in one `BEGIN IMMEDIATE` transaction, converts a file of a
    /// lease-sql from before (wall-clock expiries; live leases keep the time they had left) or
    /// ends every lease recorded under another boot (its holders died with it).
    pub(super) async fn check_boot_clock(&self) -> Result<()> {
        let table = self.inner.config.table.clone();
        let clock_table = format!("{table}{}", crate::wire::schema::CLOCK_SUFFIX);
        let ddl = crate::wire::schema::sqlite_boot_clock_statements(&table);
        if self.inner.config.ddl == crate::Ddl::Auto {
            // The partition and member tables' triggers come with those tables, on their first
            // use (`group_boot_clock`).
            let mut own = vec![crate::wire::schema::sqlite_clock_table(&table)];
            own.extend(crate::wire::schema::sqlite_boot_clock_triggers(&table, ""));
            for stmt in &own {
                crate::store::with_conn!(self, "create the boot clock table", |c| {
                    sqlx::query(stmt).execute(c)
                })?;
            }
        }
        let boot_id = boot_id().await.map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                "cannot read the kernel's boot id (/proc/sys/kernel/random/boot_id), which SQLite \
                 leases are measured against; is /proc mounted?",
            )
            .with_temporary(false)
            .with_source(e)
        })?;
        let tables = [
            table.clone(),
            self.inner.config.partitions_table_name(),
            self.inner.config.members_table_name(),
            self.inner.config.permits_table_name(),
        ];
        let wall = Dialect::Sqlite.now_ms();
        let now = Dialect::Sqlite.expiry_ms();
        let read = format!("SELECT boot_id FROM {clock_table} WHERE id = 1");
        // A write (`BEGIN IMMEDIATE`, the boot clock read once it holds the lock): a
        // conversion that waited for the lock keeps each live lease's time left whole.
        let outcome = crate::store::raw_conn!(write self, "start-up check", |c| async {
            let recorded: Option<(String,)> =
                sqlx::query_as(&read).fetch_optional(&mut *c).await?;
            let rebase = match &recorded {
                Some((id,)) if *id == boot_id => None,
                // Another boot: every holder of a lease recorded then is gone.
                Some(_) => Some("0".to_owned()),
                // A file from before: wall-clock expiries; the live ones keep their time left.
                None => Some(format!(
                    "CASE WHEN expires_at_ms > {wall} THEN {now} + (expires_at_ms - {wall}) \
                     ELSE 0 END"
                )),
            };
            if let Some(expiry) = &rebase {
                for (i, t) in tables.iter().enumerate() {
                    let rebased = sqlx::query(&format!(
                        "UPDATE {t} SET expires_at_ms = {expiry} WHERE expires_at_ms <> 0"
                    ))
                    .execute(&mut *c)
                    .await;
                    match rebased {
                        Ok(_) => {}
                        // The partition and member tables exist only once used (and a table
                        // of that name without the columns is refused then, for what it is);
                        // a failed statement leaves SQLite's transaction open.
                        Err(sqlx::Error::Database(d))
                            if i > 0
                                && (d.message().contains("no such table")
                                    || d.message().contains("no such column")) => {}
                        Err(e) => return Err(e),
                    }
                }
                sqlx::query(&format!(
                    "INSERT OR REPLACE INTO {clock_table} (id, boot_id) VALUES (1, ?1)"
                ))
                .bind(&boot_id)
                .execute(&mut *c)
                .await?;
            }
            Ok::<_, sqlx::Error>(recorded.map(|(id,)| id))
        });
        match outcome {
            Ok(Some(id)) if id != boot_id => {
                tracing::info!(
                    server = %self.inner.server,
                    "the SQLite lease file was last used under another boot; every lease \
                     recorded then has expired"
                );
                Ok(())
            }
            Ok(Some(_)) => Ok(()),
            Ok(None) => {
                tracing::info!(
                    server = %self.inner.server,
                    "the SQLite lease file moved from wall-clock to boot-clock expiries"
                );
                Ok(())
            }
            Err(e) if crate::error::is_missing_table(&e) => {
                Err(
                    crate::error::missing_table(&clock_table, &ddl.join(";\n"), &self.inner.server)
                        .with_source(e),
                )
            }
            Err(e) => Err(self.err(e, "start-up check")),
        }
    }
}

impl SqlStore<Sqlite> {
    /// Puts the partition or member table `table`, just checked on its first use, on the boot
    /// clock (DDL on only): its triggers, then, should a process of a lease-sql from before the
    /// boot clock have written it before they existed, its wall-clock expiries converted (live
    /// leases keep the time they had left). Both are idempotent: two processes may run them at
    /// once.
    pub(super) async fn group_boot_clock(&self, table: crate::store::Table) -> Result<()> {
        let suffix = match table {
            crate::store::Table::Partitions => crate::config::PARTITIONS_SUFFIX,
            crate::store::Table::Members => crate::config::MEMBERS_SUFFIX,
            // No lease-sql from before the boot clock knows the permit table: no process can
            // write it a wall-clock expiry, so it needs neither triggers nor a conversion.
            crate::store::Table::Permits => return Ok(()),
        };
        if self.inner.config.ddl != crate::Ddl::Auto {
            return Ok(());
        }
        let name = self.table_of(table).0;
        let (wall, now) = (Dialect::Sqlite.now_ms(), Dialect::Sqlite.expiry_ms());
        let floor = crate::config::WALL_CLOCK_FLOOR_MS;
        let mut ddl = Vec::from(crate::wire::schema::sqlite_boot_clock_triggers(
            &self.inner.config.table,
            suffix,
        ));
        ddl.push(format!(
            "UPDATE {name} SET expires_at_ms = CASE WHEN expires_at_ms > {wall} \
             THEN {now} + (expires_at_ms - {wall}) ELSE 0 END WHERE expires_at_ms >= {floor}"
        ));
        // Writes: the conversion's boot clock is read once it holds the write lock.
        for stmt in &ddl {
            crate::partitions::group_conn!(
                write self,
                "create the boot clock triggers",
                table,
                |c| { sqlx::query(stmt).execute(c) }
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_clock_moves_and_stays_below_the_wall_clock_floor() {
        let a = now_ms();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = now_ms();
        assert!(b - a >= 19 && b - a < 5000, "{a} {b}");
        if cfg!(target_os = "linux") {
            assert!(b < crate::config::WALL_CLOCK_FLOOR_MS, "{b}");
        }
    }
}
