//! What more than one database runs the same way, written once over sqlx's generic types: the
//! start-up checks of the tables every database shares.
//!
//! sqlx's bounds are stated once, on the impl below, and only each database's own code calls
//! these methods, on its concrete type.

use lease_core::{Error, ErrorKind, Result};
use sqlx::{ColumnIndex, Decode, Encode, Executor, IntoArguments, Type};

use crate::partitions::Table;
use crate::store::{SqlStore, lease_table_columns, raw_conn, split_table, with_conn};
use crate::wire::conns::LeaseDb;

// The methods are crate-private; the lint looks at the impl, whose type is public.
#[allow(private_bounds)]
impl<DB> SqlStore<DB>
where
    DB: LeaseDb,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> DB::Arguments<'q>: IntoArguments<'q, DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB>,
    for<'q> i64: Encode<'q, DB> + Decode<'q, DB> + Type<DB>,
    for<'r> String: Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    /// Start-up checks every dialect runs first on its lease connections: the clock, the DDL,
    /// the lease table, a write probe.
    pub(crate) async fn check_lease_table(&self) -> Result<()> {
        let inner = &self.inner;
        let now: std::result::Result<i64, sqlx::Error> = raw_conn!(self, "start-up check", |c| {
            sqlx::query_scalar::<DB, i64>(&inner.stmts.now).fetch_one(c)
        });
        match now {
            Ok(_) => {}
            Err(e @ sqlx::Error::Database(_)) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "the database cannot tell its clock with `{}`; it cannot carry \
                         leases (SQLite needs 3.42 or later for unixepoch('subsec'))",
                        inner.stmts.now
                    ),
                )
                .with_temporary(false)
                .with_source(e));
            }
            Err(e) => return Err(self.err(e, "start-up check")),
        }
        // The catalog first: an existing table is never sent a `CREATE TABLE IF NOT EXISTS`
        // (PostgreSQL would answer it with a NOTICE, logged at info by sqlx, on every start),
        // and one of the name that is not a lease table is refused for what it is.
        let (schema, bare) = split_table(&inner.config.table);
        let have: Vec<String> = with_conn!(self, "start-up check", |c| {
            sqlx::query_scalar::<DB, String>(inner.dialect.columns_sql())
                .bind(bare)
                .bind(schema)
                .fetch_all(c)
        })?;
        if !have.is_empty() {
            lease_table_columns(self, &have)?;
        } else if inner.config.ddl == crate::Ddl::None {
            return Err(crate::error::missing_table(
                &inner.config.table,
                &inner.stmts.create,
                &inner.server,
            ));
        } else {
            let created = raw_conn!(self, "create the lease table", |c| {
                sqlx::query::<DB>(&inner.stmts.create).execute(c)
            });
            match created {
                Ok(_) => {}
                // Another process created it at the same moment (PostgreSQL reports the race on
                // its catalog as a unique violation).
                Err(e) if crate::error::is_create_race(&e) => {}
                Err(e) => return Err(self.err(e, "create the lease table")),
            }
        }
        let probe = format!("UPDATE {} SET term = term WHERE 1 = 0", inner.config.table);
        let probed = raw_conn!(self, "start-up check", |c| {
            sqlx::query::<DB>(&probe).execute(c)
        });
        if let Err(e) = probed {
            if crate::error::is_missing_table(&e) {
                return Err(self.err(e, "start-up check"));
            }
            if matches!(e, sqlx::Error::Database(_)) {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!(
                        "cannot write the lease table `{}`: is the connection read-only?",
                        inner.config.table
                    ),
                )
                .with_temporary(false)
                .with_source(e));
            }
            return Err(self.err(e, "start-up check"));
        }
        Ok(())
    }

    /// The check of the partition, member or permit table `table` on its first use, once its
    /// columns `have` were read from the catalog (none: the table does not exist). An absent
    /// table is created when DDL is on (and only then: an existing one is never sent a `CREATE
    /// TABLE`, which PostgreSQL would answer with a NOTICE), reported with its DDL when it is
    /// off; an existing one must have the columns the store needs. Then a write probe.
    pub(crate) async fn check_group_columns(
        &self,
        table: Table,
        have: &[crate::store::ColumnInfo],
    ) -> Result<()> {
        let (name, create) = self.table_of(table);
        if !have.is_empty() {
            self.check_columns(table, have)?;
        } else if self.inner.config.ddl == crate::Ddl::None {
            return Err(self.missing_group_table(table));
        } else {
            let op = format!("create the {}", table.what());
            let created = raw_conn!(self, &op, |c| sqlx::query::<DB>(create).execute(c));
            match created {
                Ok(_) => {}
                // Another process created it at the same moment.
                Err(e) if crate::error::is_create_race(&e) => {}
                Err(e) => return Err(self.group_err(e, op.as_str(), table)),
            }
        }
        let probe = format!("UPDATE {name} SET expires_at_ms = expires_at_ms WHERE 1 = 0");
        let probed = raw_conn!(self, "start-up check", |c| {
            sqlx::query::<DB>(&probe).execute(c)
        });
        match probed {
            Ok(_) => Ok(()),
            Err(e) if crate::error::is_missing_table(&e) => {
                Err(self.missing_group_table(table).with_source(e))
            }
            Err(e @ sqlx::Error::Database(_)) => Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "cannot write the {} `{name}`: does the user lack the \
                     privilege, or is the connection read-only?",
                    table.what(),
                ),
            )
            .with_temporary(false)
            .with_source(e)),
            Err(e) => Err(self.group_err(e, "start-up check", table)),
        }
    }
}
