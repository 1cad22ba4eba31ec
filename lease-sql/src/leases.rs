//! [`LeaseStore`](lease_core::LeaseStore) for every dialect, and verified transactions
//! (`begin_verified`, `verify_in`).
//!
//! One impl, written once as a macro (sqlx's types differ per database): the argument checks,
//! the grants and the reads (`verify`, `get`, the same statement shape on every dialect) are
//! here; the four writes call the dialect's own primitives, `claim_row`, `renew_row`,
//! `release_row` and `force_release_row` — PostgreSQL's and SQLite's from
//! [`returning_writes`] (the term comes back with `RETURNING`), MySQL's in `mysql/leases.rs`
//! (through `LAST_INSERT_ID`).

/// `impl LeaseStore` for `SqlStore<$db>`. The dialect brings `check_available` and the write
/// primitives (`claim_row` → the new term or `None` when held, `renew_row` → the term or
/// `None`, `release_row` and `force_release_row` → whether a live lease ended).
macro_rules! lease_store {
    ($db:ty) => {
        #[lease_core::backend::async_trait]
        impl lease_core::LeaseStore for $crate::SqlStore<$db> {
            fn backend(&self) -> &'static str {
                self.inner.dialect.as_str()
            }

            /// Every SQL store verifies inside a transaction, can force a release and keeps
            /// counted leases (see `permits.rs`); the store traits it implements (all of them)
            /// are derived.
            fn capabilities(&self) -> lease_core::Capabilities {
                lease_core::Capabilities {
                    verify_in_transaction: true,
                    force_release: true,
                    permits: true,
                    watch: self.inner.watch,
                    max_name_bytes: self.inner.config.max_name_bytes,
                    ..lease_core::derived_capabilities!(Self)
                }
            }

            async fn available(&self) -> lease_core::Result<()> {
                self.check_available().await.map_err(|e| {
                    self.at_server(e)
                        .during(lease_core::layer::Operation::Available, "")
                })
            }

            async fn claim(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                instance: &str,
                ttl: std::time::Duration,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::backend::check::claim(self, name, instance, ttl)?;
                let ms = $crate::store::ttl_ms(ttl);
                let term = self
                    .claim_row(name, &holder.to_hex(), instance, ms)
                    .await
                    .map_err(|e| e.during(lease_core::layer::Operation::Claim, name))?;
                if term.is_some() {
                    self.inner
                        .hints
                        .wrote(&lease_core::notify::Topic::lease(name));
                }
                Ok(term.map(|term| lease_core::backend::Grant {
                    term,
                    expires_in: $crate::store::remaining(ms),
                }))
            }

            async fn renew(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
                ttl: std::time::Duration,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::backend::check::renew(self, name, ttl)?;
                let ms = $crate::store::ttl_ms(ttl);
                let term = self
                    .renew_row(name, &holder.to_hex(), ms)
                    .await
                    .map_err(|e| e.during(lease_core::layer::Operation::Renew, name))?;
                Ok(term.map(|term| lease_core::backend::Grant {
                    term,
                    expires_in: $crate::store::remaining(ms),
                }))
            }

            async fn release(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
            ) -> lease_core::Result<bool> {
                lease_core::backend::check::name(self, name)?;
                let ended = self
                    .release_row(name, &holder.to_hex())
                    .await
                    .map_err(|e| e.during(lease_core::layer::Operation::Release, name))?;
                if ended {
                    self.inner
                        .hints
                        .wrote(&lease_core::notify::Topic::lease(name));
                }
                Ok(ended)
            }

            async fn verify(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                lease_core::backend::check::name(self, name)?;
                let during =
                    |e: lease_core::Error| e.during(lease_core::layer::Operation::Verify, name);
                let row: Option<(i64, i64)> =
                    $crate::store::with_conn!(self, lease_core::layer::Operation::Verify, |c| {
                        sqlx::query_as(&self.inner.stmts.verify)
                            .bind(name)
                            .bind(holder.to_hex())
                            .fetch_optional(c)
                    })
                    .map_err(during)?;
                row.map(|(t, left)| {
                    Ok(lease_core::backend::Grant {
                        term: self.term_from(t).map_err(during)?,
                        expires_in: $crate::store::remaining(left),
                    })
                })
                .transpose()
            }

            async fn get(&self, name: &str) -> lease_core::Result<Option<lease_core::LeaseInfo>> {
                lease_core::backend::check::name(self, name)?;
                let during =
                    |e: lease_core::Error| e.during(lease_core::layer::Operation::Get, name);
                let row: Option<(String, i64, i64)> =
                    $crate::store::with_conn!(self, lease_core::layer::Operation::Get, |c| {
                        sqlx::query_as(&self.inner.stmts.get)
                            .bind(name)
                            .fetch_optional(c)
                    })
                    .map_err(during)?;
                row.map(|(instance, t, left)| {
                    Ok(lease_core::LeaseInfo {
                        name: name.to_owned(),
                        instance,
                        term: self.term_from(t).map_err(during)?,
                        live: left > 0,
                        expires_in: $crate::store::remaining(left),
                    })
                })
                .transpose()
            }

            async fn force_release(&self, name: &str) -> lease_core::Result<bool> {
                lease_core::backend::check::name(self, name)?;
                let ended = self
                    .force_release_row(name)
                    .await
                    .map_err(|e| e.during(lease_core::layer::Operation::ForceRelease, name))?;
                if ended {
                    self.inner
                        .hints
                        .wrote(&lease_core::notify::Topic::lease(name));
                }
                Ok(ended)
            }

            async fn claim_permit(
                &self,
                name: &str,
                permits: u32,
                holder: &lease_core::backend::HolderToken,
                instance: &str,
                ttl: std::time::Duration,
            ) -> lease_core::Result<Option<lease_core::PermitGrant>> {
                self.claim_permit_op(name, permits, holder, instance, ttl)
                    .await
            }

            async fn renew_permit(
                &self,
                name: &str,
                permit: u32,
                holder: &lease_core::backend::HolderToken,
                ttl: std::time::Duration,
            ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
                self.renew_permit_op(name, permit, holder, ttl).await
            }

            async fn release_permit(
                &self,
                name: &str,
                permit: u32,
                holder: &lease_core::backend::HolderToken,
            ) -> lease_core::Result<bool> {
                self.release_permit_op(name, permit, holder).await
            }

            async fn verify_permit(
                &self,
                name: &str,
                holder: &lease_core::backend::HolderToken,
            ) -> lease_core::Result<Option<lease_core::PermitGrant>> {
                self.verify_permit_op(name, holder).await
            }

            async fn permits(&self, name: &str) -> lease_core::Result<Vec<lease_core::PermitInfo>> {
                self.list_permits_op(name).await
            }

            /// Always `Some`: what the hints cover is in each dialect's docs (PostgreSQL:
            /// every process, through `LISTEN`; SQLite: every process on the file; MySQL: the
            /// store itself only, never connected).
            fn changes(
                &self,
                topic: &lease_core::notify::Topic,
            ) -> Option<lease_core::notify::Wakeups> {
                Some(self.watch(topic))
            }
        }
    };
}

/// The write primitives of the dialects with `RETURNING` (PostgreSQL, SQLite), for
/// [`lease_store`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! returning_writes {
    ($db:ty) => {
        impl $crate::SqlStore<$db> {
            /// The claim: the new term, `None` when held.
            async fn claim_row(
                &self,
                name: &str,
                hex: &str,
                instance: &str,
                ms: i64,
            ) -> lease_core::Result<Option<u64>> {
                let row: Option<(i64,)> =
                    match $crate::store::raw_conn!(write self, lease_core::layer::Operation::Claim, |c| {
                        sqlx::query_as(&self.inner.stmts.claim)
                            .bind(name)
                            .bind(hex)
                            .bind(instance)
                            .bind(ms)
                            .fetch_optional(c)
                    }) {
                        Ok(row) => row,
                        // The row is locked by a transaction (a verified one of the holder's):
                        // live, so held — answered at once, never waited out.
                        Err(e) if $crate::error::is_lock_busy(&e) => None,
                        Err(e) => return Err(self.err(e, lease_core::layer::Operation::Claim)),
                    };
                row.map(|(t,)| self.term_from(t)).transpose()
            }

            /// The renewal: the term, `None` when the lease is not the holder's live.
            async fn renew_row(
                &self,
                name: &str,
                hex: &str,
                ms: i64,
            ) -> lease_core::Result<Option<u64>> {
                let row: Option<(i64,)> =
                    $crate::store::with_conn!(write self, lease_core::layer::Operation::Renew, |c| {
                        sqlx::query_as(&self.inner.stmts.renew)
                            .bind(name)
                            .bind(hex)
                            .bind(ms)
                            .fetch_optional(c)
                    })?;
                row.map(|(t,)| self.term_from(t)).transpose()
            }

            /// The release: whether the holder's live lease ended.
            async fn release_row(&self, name: &str, hex: &str) -> lease_core::Result<bool> {
                let done =
                    $crate::store::with_conn!(write self, lease_core::layer::Operation::Release, |c| {
                        sqlx::query(&self.inner.stmts.release)
                            .bind(name)
                            .bind(hex)
                            .execute(c)
                    })?;
                Ok(done.rows_affected() > 0)
            }

            /// The forced release: whether a live lease ended.
            async fn force_release_row(&self, name: &str) -> lease_core::Result<bool> {
                let done = $crate::store::with_conn!(
                    write self,
                    lease_core::layer::Operation::ForceRelease,
                    |c| sqlx::query(&self.inner.stmts.force_release)
                        .bind(name)
                        .execute(c)
                )?;
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
            /// term; `Unsupported` for a term of a counted name (a permit), which this check
            /// cannot see.
            pub async fn verify_in<'f>(
                &self,
                conn: &mut $conn,
                fence: impl Into<$crate::Fence<'f>>,
            ) -> lease_core::Result<()> {
                let fence = fence.into();
                lease_core::backend::check::name(self, fence.name)?;
                if let Some(permit) = fence.permit {
                    return Err($crate::store::permit_not_verifiable(&fence, permit));
                }
                let q = sqlx::query_as(&self.inner.stmts.verify_locking)
                    .bind(fence.name)
                    .bind(fence.holder.to_hex())
                    .bind($crate::Token::new(fence.term)?);
                let q = match <$db as $crate::wire::conns::LeaseDb>::verify_now() {
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

pub(crate) use lease_store;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use returning_writes;
pub(crate) use verify_guard;
