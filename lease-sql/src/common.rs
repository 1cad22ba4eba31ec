//! Pieces shared by the dialects, as macros where sqlx's types differ per database.

use lease_core::Capabilities;

use crate::config::SqlConfig;

pub(crate) fn capabilities(config: &SqlConfig) -> Capabilities {
    Capabilities {
        verify_in_transaction: true,
        force_release: true,
        slots: true,
        partitions: true,
        membership: true,
        max_name_bytes: config.max_name_bytes,
        ..Capabilities::default()
    }
}

/// Runs `$body` (a sqlx future using the connection `$c`) on one of the store's own
/// connections and returns sqlx's result; a failed transport closes the connection.
macro_rules! raw_conn {
    ($self:expr, $op:expr, |$c:ident| $body:expr) => {{
        match $self.inner.leases.get().await {
            Ok(mut slot) => {
                let $c = &mut *slot;
                let r = $body.await;
                slot.done(&r);
                r
            }
            Err(e) => Err(e),
        }
    }};
}

/// As [`raw_conn`], with the error mapped to a lease error of operation `$op`.
macro_rules! with_conn {
    ($self:expr, $op:expr, |$c:ident| $body:expr) => {{ $crate::common::raw_conn!($self, $op, |$c| $body).map_err(|e| $self.err(e, $op)) }};
}

/// Start-up checks every dialect runs on its lease pool: the clock, the DDL, the table, a write
/// probe. `$db` is the database type.
macro_rules! check_common {
    ($self:expr, $db:ty) => {{
        let inner = &$self.inner;
        let now: std::result::Result<i64, sqlx::Error> = $crate::common::raw_conn!(
            $self,
            "start-up check",
            |c| sqlx::query_scalar::<$db, i64>(&inner.stmts.now).fetch_one(c)
        );
        match now {
            Ok(_) => {}
            Err(e @ sqlx::Error::Database(_)) => {
                return Err(lease_core::Error::new(
                    lease_core::ErrorKind::Unavailable,
                    format!(
                        "the database at {} cannot tell its clock with `{}`; it cannot carry \
                         leases (SQLite needs 3.42 or later for unixepoch('subsec'))",
                        inner.server, inner.stmts.now
                    ),
                )
                .with_temporary(false)
                .with_source(e));
            }
            Err(e) => return Err($self.err(e, "start-up check")),
        }
        if inner.config.ddl == $crate::Ddl::Auto {
            let created = $crate::common::raw_conn!($self, "create the lease table", |c| {
                sqlx::query::<$db>(&inner.stmts.create).execute(c)
            });
            match created {
                Ok(_) => {}
                // Another process created it at the same moment (PostgreSQL reports the race on
                // its catalog as a unique violation).
                Err(e) if $crate::error::is_create_race(&e) => {}
                Err(e) => return Err($self.err(e, "create the lease table")),
            }
        }
        let probe = format!("UPDATE {} SET term = term WHERE 1 = 0", inner.config.table);
        let probed = $crate::common::raw_conn!($self, "start-up check", |c| {
            sqlx::query::<$db>(&probe).execute(c)
        });
        if let Err(e) = probed {
            if $crate::error::is_missing_table(&e) {
                return Err($self.err(e, "start-up check"));
            }
            if matches!(e, sqlx::Error::Database(_)) {
                return Err(lease_core::Error::new(
                    lease_core::ErrorKind::Unavailable,
                    format!(
                        "cannot write the lease table `{}` on {}: is the connection read-only?",
                        inner.config.table, inner.server
                    ),
                )
                .with_temporary(false)
                .with_source(e));
            }
            return Err($self.err(e, "start-up check"));
        }
    }};
}

/// The `LeaseStore` impl of the dialects with `RETURNING` (PostgreSQL, SQLite).
macro_rules! returning_store {
    ($db:ty) => {
        #[lease_core::backend::async_trait]
        impl lease_core::LeaseStore for $crate::SqlStore<$db> {
            fn backend(&self) -> &'static str {
                self.inner.dialect.as_str()
            }

            fn capabilities(&self) -> lease_core::Capabilities {
                $crate::common::capabilities(&self.inner.config)
            }

            async fn available(&self) -> lease_core::Result<()> {
                self.check_available().await
            }

            async fn claim(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                instance: &str,
                ttl: std::time::Duration,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                lease_core::LeaseStoreExt::validate_ttl(self, ttl)?;
                lease_core::backend::validate_instance(instance)?;
                let ms = $crate::store::ttl_ms(ttl);
                let row: Option<(i64,)> =
                    match crate::common::raw_conn!(self, "claim", |c| sqlx::query_as(
                        &self.inner.stmts.claim
                    )
                    .bind(name)
                    .bind(holder.to_hex())
                    .bind(instance)
                    .bind(ms)
                    .fetch_optional(c))
                    {
                        Ok(row) => row,
                        // The row is locked by a transaction (a verified one of the holder's):
                        // live, so held — answered at once, never waited out.
                        Err(e) if $crate::error::is_lock_busy(&e) => None,
                        Err(e) => return Err(self.err(e, "claim")),
                    };
                row.map(|(t,)| {
                    Ok(lease_core::backend::Grant {
                        term: self.term_from(t)?,
                        expires_in: $crate::store::remaining(ms),
                    })
                })
                .transpose()
            }

            async fn renew(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                ttl: std::time::Duration,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                lease_core::LeaseStoreExt::validate_ttl(self, ttl)?;
                let ms = $crate::store::ttl_ms(ttl);
                let row: Option<(i64,)> =
                    crate::common::with_conn!(self, "renew", |c| sqlx::query_as(
                        &self.inner.stmts.renew
                    )
                    .bind(name)
                    .bind(holder.to_hex())
                    .bind(ms)
                    .fetch_optional(c))?;
                row.map(|(t,)| {
                    Ok(lease_core::backend::Grant {
                        term: self.term_from(t)?,
                        expires_in: $crate::store::remaining(ms),
                    })
                })
                .transpose()
            }

            async fn release(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
            ) -> lease_core::Result<bool> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                let done = crate::common::with_conn!(self, "release", |c| sqlx::query(
                    &self.inner.stmts.release
                )
                .bind(name)
                .bind(holder.to_hex())
                .execute(c))?;
                Ok(done.rows_affected() > 0)
            }

            async fn verify(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                let row: Option<(i64, i64)> =
                    crate::common::with_conn!(self, "verify", |c| sqlx::query_as(
                        &self.inner.stmts.verify
                    )
                    .bind(name)
                    .bind(holder.to_hex())
                    .fetch_optional(c))?;
                row.map(|(t, left)| {
                    Ok(lease_core::backend::Grant {
                        term: self.term_from(t)?,
                        expires_in: $crate::store::remaining(left),
                    })
                })
                .transpose()
            }

            async fn get(&self, name: &str) -> lease_core::Result<Option<lease_core::LeaseInfo>> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                let row: Option<(String, i64, i64)> =
                    crate::common::with_conn!(self, "get", |c| sqlx::query_as(
                        &self.inner.stmts.get
                    )
                    .bind(name)
                    .fetch_optional(c))?;
                row.map(|(instance, t, left)| {
                    Ok(lease_core::LeaseInfo {
                        name: name.to_owned(),
                        instance,
                        term: self.term_from(t)?,
                        live: left > 0,
                        expires_in: $crate::store::remaining(left),
                    })
                })
                .transpose()
            }

            async fn force_release(&self, name: &str) -> lease_core::Result<bool> {
                lease_core::LeaseStoreExt::validate_name(self, name)?;
                let done = crate::common::with_conn!(self, "force release", |c| sqlx::query(
                    &self.inner.stmts.force_release
                )
                .bind(name)
                .execute(c))?;
                Ok(done.rows_affected() > 0)
            }
        }
    };
}

/// `begin_verified` and `verify_in` for a dialect: `$begin` opens the transaction on a pool.
macro_rules! verify_guard {
    ($db:ty, $conn:ty, $begin:ident $(, $stmt:literal)?) => {
        impl $crate::SqlStore<$db> {
            /// Opens a transaction on the application's pool and verifies, as its first
            /// statement, that `fence` (a [`Term`](lease_core::Term) or a
            /// [`Fence`](crate::Fence)) still holds the lease. The row is locked in share mode
            /// until the transaction ends, so no other holder's claim can take effect before it
            /// commits.
            ///
            /// When the lease is lost, the transaction is rolled back and `Lost` is returned:
            /// not one business statement runs. A contender's claim that meets the lock answers
            /// held at once on PostgreSQL and MariaDB (on MySQL it waits for the lock). Keep
            /// such transactions short: the holder's own renewal of the name waits for the lock,
            /// and on SQLite every write to the file does.
            pub async fn begin_verified<'f>(
                &self,
                fence: impl Into<$crate::Fence<'f>>,
            ) -> lease_core::Result<sqlx::Transaction<'static, $db>> {
                let fence = fence.into();
                let mut tx = self
                    .inner
                    .app
                    .$begin($($stmt)?)
                    .await
                    .map_err(|e| self.err(e, "begin a verified transaction"))?;
                match self.verify_in(&mut tx, fence).await {
                    Ok(()) => Ok(tx),
                    Err(e) => {
                        let _ = tx.rollback().await;
                        Err(e)
                    }
                }
            }

            /// Verifies `fence` inside a transaction the caller opened; run it as the
            /// transaction's first statement. `Lost` when the lease is no longer held under that
            /// term.
            pub async fn verify_in<'f>(
                &self,
                conn: &mut $conn,
                fence: impl Into<$crate::Fence<'f>>,
            ) -> lease_core::Result<()> {
                let fence = fence.into();
                lease_core::LeaseStoreExt::validate_name(self, fence.name)?;
                let q = sqlx::query_as(&self.inner.stmts.verify_locking)
                    .bind(fence.name)
                    .bind(fence.holder.to_hex())
                    .bind($crate::store::term_i64(fence.term));
                let q = match <$db as $crate::conns::LeaseDb>::verify_now() {
                    Some(now) => q.bind(now),
                    None => q,
                };
                let row: Option<(i64,)> = q
                    .fetch_optional(&mut *conn)
                    .await
                    .map_err(|e| self.err(e, "verify in transaction"))?;
                match row {
                    Some(_) => Ok(()),
                    None => Err($crate::store::lost_in_transaction(&fence)),
                }
            }
        }
    };
}

pub(crate) use check_common;
pub(crate) use raw_conn;
pub(crate) use returning_store;
pub(crate) use verify_guard;
pub(crate) use with_conn;
