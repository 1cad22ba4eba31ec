//! What needs every part of a database's code: the [`Driver`] that sums the parts, the
//! [`LeaseStore`](lease_core::LeaseStore) impl for every database (its capabilities are derived
//! from the store traits the parts give; its permit operations are `permits.rs`'s) and
//! verified transactions (`begin_verified`, `verify_in`).
//!
//! One impl for every database: the argument checks, the grants, the hints and the answers are
//! here; each database's [`LeaseDriver`] runs the statements — PostgreSQL's and SQLite's writes
//! (the term comes back with `RETURNING`) and every database's reads through `shared.rs`,
//! MySQL's writes in `mysql/leases.rs` (through `LAST_INSERT_ID`).

use std::collections::HashMap;
use std::time::Duration;

use lease_core::backend::RenewItem;
use lease_core::backend::check::Batch;

use lease_core::backend::notify::{Topic, Wakeups};
use lease_core::backend::{Grant, HolderToken};
use lease_core::layer::Operation;
use lease_core::{
    Result,
    backend::{Capabilities, LeaseInfo},
};
use sqlx::Transaction;

use crate::leases::LeaseDriver;
use crate::membership::MemberDriver;
use crate::partitions::PartitionDriver;
use crate::permits::PermitDriver;
use crate::slots::SlotDriver;
use crate::store::{
    Fence, SqlStore, Token, lost_in_transaction, permit_not_verifiable, remaining, ttl_ms,
};

/// How long the leases of a [`renew_many`](lease_core::LeaseStore::renew_many) whose rows were
/// locked by another transaction are waited for, all together, once the others are renewed.
pub(crate) const SKIPPED_WAIT: Duration = Duration::from_secs(1);

/// What one database brings to the store, in one part per store trait ([`LeaseDriver`] for the
/// lease table, its start-up checks, hints and verified transactions; [`PartitionDriver`],
/// [`MemberDriver`], [`PermitDriver`], [`SlotDriver`] for partitioned leases, membership, counted
/// leases and scheduler slots): its statements run on its connections, its rows read, and the
/// writes it does its own way (MySQL's through `LAST_INSERT_ID`, PostgreSQL's and SQLite's with
/// `RETURNING`). MySQL implements the parts in `mysql/` for its sqlx database type; PostgreSQL and
/// SQLite, which share their statements, implement `Returning` (in `shared.rs`) in their folders
/// and get the parts from the impls written once over it. One generic impl of each store trait on
/// [`SqlStore`] holds what every database shares: argument checks, answers, hints.
///
/// Named after sqlx's drivers, whose database types implement it, and not after the
/// [`Dialect`](crate::Dialect), the public enum that names the database: this holds the code that
/// talks to it. Its methods return futures that are `Send` by their signatures, so the generic
/// store impls need no sqlx bounds.
pub(crate) trait Driver:
    LeaseDriver + PartitionDriver + MemberDriver + PermitDriver + SlotDriver
{
}

impl<DB> Driver for DB where
    DB: LeaseDriver + PartitionDriver + MemberDriver + PermitDriver + SlotDriver
{
}

#[lease_core::backend::async_trait]
impl<DB: Driver> lease_core::LeaseStore for SqlStore<DB> {
    fn backend(&self) -> &'static str {
        self.inner.dialect.as_str()
    }

    /// Every SQL store verifies inside a transaction and can force a release; its counted
    /// leases (see `permits.rs`), partitions, membership and slots are derived from its
    /// accessors (it has all of them).
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            verify_in_transaction: true,
            consecutive_terms: true,
            keeps_ended_records: true,
            // Expiries by the database's clock, in milliseconds or finer: the default
            // granularity.
            force_release: true,
            list_names: true,
            renew_many: DB::renews_many(self),
            watch: self.inner.watch,
            max_name_bytes: self.inner.config.max_name_bytes,
            ..lease_core::backend::derived_capabilities(self)
        }
    }

    fn permit_store(&self) -> Option<&dyn lease_core::backend::permits::PermitStore> {
        Some(self)
    }

    fn partition_store(&self) -> Option<&dyn lease_core::backend::partitions::PartitionStore> {
        Some(self)
    }

    fn membership_store(&self) -> Option<&dyn lease_core::backend::membership::MembershipStore> {
        Some(self)
    }

    fn slot_store(&self) -> Option<&dyn lease_core::backend::slots::SlotStore> {
        Some(self)
    }

    async fn available(&self) -> Result<()> {
        DB::check_available(self)
            .await
            .map_err(|e| self.at_server(e).during(Operation::Available, ""))
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        lease_core::backend::check::claim(self, name, instance, ttl)?;
        let ms = ttl_ms(ttl);
        let term = DB::claim_row(self, name, &holder.to_hex(), instance, ms)
            .await
            .map_err(|e| e.during(Operation::Claim, name))?;
        if term.is_some() {
            self.inner.hints.wrote(&Topic::lease(name));
        }
        Ok(term.map(|term| Grant {
            term,
            expires_in: remaining(ms),
        }))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        lease_core::backend::check::renew(self, name, ttl)?;
        let ms = ttl_ms(ttl);
        let term = DB::renew_row(self, name, &holder.to_hex(), ms)
            .await
            .map_err(|e| e.during(Operation::Renew, name))?;
        Ok(term.map(|term| Grant {
            term,
            expires_in: remaining(ms),
        }))
    }

    /// PostgreSQL and SQLite: one statement (see the stores' docs), whose time grows with the
    /// number of names, not with its square; MariaDB 10.6 or later: one request (a few for
    /// long names, one per MiB of batch), as linear; MySQL and older MariaDB: one `renew`
    /// after the other. On PostgreSQL and MariaDB a lease whose row another transaction has
    /// locked (a verified transaction of its holder, a concurrent renewal) is passed by, not
    /// waited for, and then renewed alone, all such renewals together waiting at most 1 s;
    /// one still waiting then is answered `Timeout` (its outcome unknown, retried like any
    /// renewal), never "not held": only a lease the statement did not find live under its
    /// holder, or that its renewal alone found so, is answered `None`.
    async fn renew_many(
        &self,
        items: &[RenewItem<'_>],
        ttl: Duration,
    ) -> Result<Vec<Result<Option<Grant>>>> {
        if lease_core::backend::check::renew_many(self, items, ttl)? == Batch::Empty {
            return Ok(Vec::new());
        }
        let mut answers = Vec::with_capacity(items.len());
        if !DB::renews_many(self) {
            for item in items {
                answers.push(self.renew(item.name, item.holder, ttl).await);
            }
            return Ok(answers);
        }
        let ms = ttl_ms(ttl);
        let names: Vec<&str> = items.iter().map(|i| i.name).collect();
        let hexes: Vec<String> = items.iter().map(|i| i.holder.to_hex()).collect();
        let hex_refs: Vec<&str> = hexes.iter().map(String::as_str).collect();
        let first = names.first().copied().unwrap_or_default();
        let rows = DB::renew_many_rows(self, &names, &hex_refs, ms)
            .await
            .map_err(|e| e.during(Operation::RenewMany, first))?;
        // A name may come twice (PostgreSQL: renewed, and live in the snapshot): its term wins.
        let mut found: HashMap<String, (Option<i64>, bool)> = HashMap::with_capacity(rows.len());
        for (name, term, skipped) in rows {
            let row = (term, term.is_none() && skipped != 0);
            found
                .entry(name)
                .and_modify(|seen| {
                    if term.is_some() {
                        *seen = row;
                    }
                })
                .or_insert(row);
        }
        let skipped_until = tokio::time::Instant::now() + SKIPPED_WAIT;
        for item in items {
            let answer = match found.remove(item.name) {
                Some((Some(term), _)) => self.term_from(term).map(|term| {
                    Some(Grant {
                        term,
                        expires_in: remaining(ms),
                    })
                }),
                Some((None, true)) => {
                    match tokio::time::timeout_at(
                        skipped_until,
                        self.renew(item.name, item.holder, ttl),
                    )
                    .await
                    {
                        Ok(answer) => answer,
                        Err(_) => Err(lease_core::Error::timeout(
                            "the renewal of a lease whose row another transaction locked",
                            SKIPPED_WAIT,
                        )
                        .during(Operation::RenewMany, item.name)),
                    }
                }
                _ => Ok(None),
            };
            answers.push(answer);
        }
        Ok(answers)
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        lease_core::backend::check::name(self, name)?;
        let ended = DB::release_row(self, name, &holder.to_hex())
            .await
            .map_err(|e| e.during(Operation::Release, name))?;
        if ended {
            self.inner.hints.wrote(&Topic::lease(name));
        }
        Ok(ended)
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        lease_core::backend::check::name(self, name)?;
        let during = |e: lease_core::Error| e.during(Operation::Verify, name);
        let row = DB::verify_row(self, name, &holder.to_hex())
            .await
            .map_err(during)?;
        row.map(|(t, left)| {
            Ok(Grant {
                term: self.term_from(t).map_err(during)?,
                expires_in: remaining(left),
            })
        })
        .transpose()
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        lease_core::backend::check::name(self, name)?;
        let during = |e: lease_core::Error| e.during(Operation::Get, name);
        let row = DB::get_row(self, name).await.map_err(during)?;
        row.map(|(instance, t, left)| {
            Ok(LeaseInfo {
                name: name.to_owned(),
                instance,
                term: self.term_from(t).map_err(during)?,
                live: left > 0,
                expires_in: remaining(left),
            })
        })
        .transpose()
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        lease_core::backend::check::name(self, name)?;
        let ended = DB::force_release_row(self, name)
            .await
            .map_err(|e| e.during(Operation::ForceRelease, name))?;
        if ended {
            self.inner.hints.wrote(&Topic::lease(name));
        }
        Ok(ended)
    }

    /// One statement over the lease table and the permit table (made ready first, as for
    /// `permits`): a range of the primary key of each, `prefix <= name < end` (see
    /// [`prefix_end`](lease_core::backend::names::prefix_end)), never a `LIKE`, so no character
    /// of the prefix is special; every lease row shows, held, released or expired.
    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease_core::backend::names::NamePage> {
        use lease_core::backend::names::{NamePage, counted_name, lease_name, prefix_end};
        lease_core::backend::check::names(self, prefix, after, limit)?;
        let during = |e: lease_core::Error| e.during(Operation::Names, prefix);
        self.group_table_ready(crate::store::Table::Permits)
            .await
            .map_err(during)?;
        // Above every name the table can hold: longer than the longest, of the greatest
        // character.
        let top = || "\u{10FFFF}".repeat(self.inner.config.max_name_bytes / 4 + 1);
        let end = prefix_end(prefix).unwrap_or_else(top);
        let bounds = crate::leases::NameBounds {
            lower: prefix,
            after: after.unwrap_or(""),
            end: &end,
            limit: i64::try_from(limit).unwrap_or(i64::MAX),
        };
        let rows = DB::name_rows(self, bounds).await.map_err(during)?;
        let found = rows.into_iter().map(|(name, kind)| {
            if kind == 0 {
                lease_name(name)
            } else {
                counted_name(name)
            }
        });
        Ok(NamePage::from_found(found, limit))
    }

    /// Always `Some`: what the hints cover is in each dialect's docs (PostgreSQL:
    /// every process, through `LISTEN`; SQLite: every process on the file; MySQL: the
    /// store itself only, never connected).
    fn changes(&self, topic: &Topic) -> Option<Wakeups> {
        Some(DB::watch(self, topic))
    }
}

// `Driver` is crate-private: a store exists for the three databases of this crate only, each of
// which implements it.
#[allow(private_bounds)]
impl<DB: Driver> SqlStore<DB> {
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
        fence: impl Into<Fence<'f>>,
    ) -> lease_core::Result<Transaction<'static, DB>> {
        let fence = fence.into();
        let begun = match DB::BEGIN {
            Some(statement) => self.inner.app.begin_with(statement).await,
            None => self.inner.app.begin().await,
        };
        let mut tx = begun.map_err(|e| self.err(e, "begin a verified transaction"))?;
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
        conn: &mut DB::Connection,
        fence: impl Into<Fence<'f>>,
    ) -> lease_core::Result<()> {
        let fence = fence.into();
        lease_core::backend::check::name(self, fence.name)?;
        if let Some(permit) = fence.permit {
            return Err(permit_not_verifiable(&fence, permit));
        }
        let hex = fence.holder.to_hex();
        let held = DB::verify_locked(self, conn, fence.name, &hex, Token::new(fence.term)?)
            .await
            .map_err(|e| self.err(e, "verify in transaction"))?;
        if held {
            Ok(())
        } else {
            Err(lost_in_transaction(&fence))
        }
    }
}
