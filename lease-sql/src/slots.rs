//! Scheduler slots ([`lease_core::backend::slots::SlotStore`]) on the lease table's `slot_ms`,
//! `unfinished_slot_ms` and `rerun_slot_ms` columns.
//!
//! One impl for every database: the argument checks, the claim's decision, the answers; each
//! database's [`SlotDriver`] runs the statements (the claim's read and `last_slot`, the same on
//! every database, and PostgreSQL's and SQLite's claim writes in `shared.rs`; the rest in each
//! database's `slots.rs`).
//!
//! Every statement runs on the store's own connections, one round trip each on a warm
//! connection; the statements themselves are in each dialect's `statements.rs` and written out
//! in the docs of
//! [`PostgresStore`](crate::PostgresStore), [`MySqlStore`](crate::MySqlStore) and
//! [`SqliteStore`](crate::SqliteStore).
//!
//! - `claim_slot`: one read (the server's clock and the record), the decision in Rust (held,
//!   taken, early), then one write with the term read compared — an `INSERT` that does nothing
//!   on a duplicate key for a new record, an `UPDATE … WHERE term = <read>` otherwise — so among
//!   replicas that read the same record only one write matches; the others get `Held`. Two
//!   round trips. The write also asks for the lease to be expired still (a server clock stepped
//!   back could otherwise revive it under the term read). `superseded_ms` is the unfinished
//!   instant as read: when a late finish by the holder that lost the lease lands between the
//!   read and the write, the finish reports that instant's end recorded and the claim reports
//!   it superseded (the record itself ends the same either way).
//! - `finish_slot`, `claim_rerun`, `last_slot`: one statement each (SQLite's finish: one
//!   `BEGIN IMMEDIATE` transaction of a read and a write, on the embedded database).
//! - `unfinished`: one `SELECT` for all the names.

use std::collections::HashMap;

use std::time::Duration;

use std::future::Future;

use lease_core::LeaseStore;
use lease_core::Result;
use lease_core::backend::slots::{SlotClaim, SlotFinish, SlotRecord};

use crate::leases::LeaseDriver;
use crate::store::{SqlStore, remaining, ttl_ms};

/// The claim's read: the server's clock, then the record's term, the time left on its lease,
/// `slot_ms` and `unfinished_slot_ms` (all `None` when there is no record).
pub(crate) type ClaimRead = (i64, Option<i64>, Option<i64>, Option<i64>, Option<i64>);

/// A record's `slot_ms`, `unfinished_slot_ms` and `rerun_slot_ms`, as `last_slot` reads them.
pub(crate) type SlotRow = (Option<i64>, Option<i64>, Option<i64>);

/// The record a claim writes over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Previous {
    pub(crate) term: i64,
    pub(crate) unfinished_ms: Option<i64>,
}

/// What a claim does after its read.
pub(crate) enum Next {
    /// Answer without writing.
    Answer(SlotClaim),
    /// Write: a new record (`None`) or over the one read, with its term compared.
    Write(Option<Previous>),
}

/// The claim's rules, on the record as read: held, then taken, then early.
pub(crate) fn decide(read: ClaimRead, instant_ms: i64) -> Next {
    let (now_ms, term, left, last, unfinished_ms) = read;
    let previous = match term {
        Some(_) if left.unwrap_or(0) > 0 => return Next::Answer(SlotClaim::Held),
        Some(term) => Some(Previous {
            term,
            unfinished_ms,
        }),
        None => None,
    };
    if let Some(last_ms) = last.filter(|last| instant_ms <= *last) {
        return Next::Answer(SlotClaim::Taken { last_ms });
    }
    if instant_ms > now_ms {
        return Next::Answer(SlotClaim::Early { now_ms });
    }
    Next::Write(previous)
}

/// A slot write through this store changed `name`'s slots and its lease: both topics hinted.
pub(crate) fn wrote(hints: &crate::hints::Hints, name: &str) {
    hints.wrote(&lease_core::backend::notify::Topic::slots(name));
    hints.wrote(&lease_core::backend::notify::Topic::lease(name));
}

pub(crate) fn claimed(term: u64, ttl_ms: i64, previous: Option<Previous>) -> SlotClaim {
    SlotClaim::Claimed {
        grant: lease_core::backend::Grant {
            term,
            expires_in: remaining(ttl_ms),
        },
        superseded_ms: previous.and_then(|p| p.unfinished_ms),
    }
}

pub(crate) fn record(row: SlotRow) -> SlotRecord {
    SlotRecord {
        last_ms: row.0,
        unfinished_ms: row.1,
        rerun_ms: row.2,
    }
}

/// The rows of `unfinished`, in the order of the names asked for (as the memory store answers).
pub(crate) fn in_order(
    names: &[String],
    rows: impl IntoIterator<Item = (Vec<u8>, i64)>,
) -> Vec<(String, i64)> {
    let found: HashMap<Vec<u8>, i64> = rows.into_iter().collect();
    names
        .iter()
        .filter_map(|n| found.get(n.as_bytes()).map(|at| (n.clone(), *at)))
        .collect()
}

/// What a slot claim's write binds (the claim after its read, and the rerun claim).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) name: &'a str,
    /// The holder token, in hex.
    pub(crate) hex: &'a str,
    pub(crate) instance: &'a str,
    pub(crate) ttl_ms: i64,
    pub(crate) instant_ms: i64,
}

impl<'a> Claim<'a> {
    /// Checks a slot claim's arguments before any I/O (the name, the TTL, the instance), then
    /// gathers what its write binds.
    pub(crate) fn checked(
        store: &impl LeaseStore,
        name: &'a str,
        hex: &'a str,
        instance: &'a str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Self> {
        lease_core::backend::check::claim(store, name, instance, ttl)?;
        Ok(Claim {
            name,
            hex,
            instance,
            ttl_ms: ttl_ms(ttl),
            instant_ms,
        })
    }
}

/// What the finish binds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Finish<'a> {
    pub(crate) name: &'a str,
    /// The holder token, in hex.
    pub(crate) hex: &'a str,
    pub(crate) instant_ms: i64,
    pub(crate) passed_ms: Option<i64>,
}

/// The slot columns' part of the `Driver` (`driver.rs`): what a database runs for the
/// scheduler's slot operations (see [`LeaseDriver`] for what each returns).
pub(crate) trait SlotDriver: LeaseDriver {
    /// The claim's read: the server's clock, then the record of `name`.
    fn claim_read(
        store: &SqlStore<Self>,
        name: &str,
    ) -> impl Future<Output = Result<ClaimRead>> + Send;

    /// The claim's write after its read: the new term, `None` when another replica's write
    /// matched first.
    fn claim_slot_row(
        store: &SqlStore<Self>,
        w: Claim<'_>,
        previous: Option<Previous>,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// The finish.
    fn finish_in(
        store: &SqlStore<Self>,
        f: Finish<'_>,
    ) -> impl Future<Output = Result<SlotFinish>> + Send;

    /// The names (as bytes) and unfinished instants of those of `names` whose instant may be
    /// rerun, in any order.
    fn unfinished_rows(
        store: &SqlStore<Self>,
        names: &[String],
    ) -> impl Future<Output = Result<Vec<(Vec<u8>, i64)>>> + Send;

    /// The rerun claim: the new term, `None` when not eligible.
    fn rerun_row(
        store: &SqlStore<Self>,
        w: Claim<'_>,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// The record of `name`: `slot_ms`, `unfinished_slot_ms`, `rerun_slot_ms`.
    fn last_slot_row(
        store: &SqlStore<Self>,
        name: &str,
    ) -> impl Future<Output = Result<Option<SlotRow>>> + Send;
}

#[lease_core::backend::async_trait]
impl<DB: SlotDriver> lease_core::backend::slots::SlotStore for SqlStore<DB>
where
    Self: lease_core::LeaseStore,
{
    async fn claim_slot(
        &self,
        name: &str,
        holder: &lease_core::backend::HolderToken,
        instance: &str,
        ttl: std::time::Duration,
        instant_ms: i64,
    ) -> lease_core::Result<lease_core::backend::slots::SlotClaim> {
        let hex = holder.to_hex();
        let claim = crate::slots::Claim::checked(self, name, &hex, instance, ttl, instant_ms)?;
        let read = DB::claim_read(self, name)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::ClaimSlot, name))?;
        let previous = match crate::slots::decide(read, instant_ms) {
            crate::slots::Next::Answer(answer) => return Ok(answer),
            crate::slots::Next::Write(previous) => previous,
        };
        let term = DB::claim_slot_row(self, claim, previous)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::ClaimSlot, name))?;
        Ok(match term {
            // Another replica's write matched first.
            None => lease_core::backend::slots::SlotClaim::Held,
            Some(term) => {
                crate::slots::wrote(&self.inner.hints, name);
                crate::slots::claimed(term, claim.ttl_ms, previous)
            }
        })
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &lease_core::backend::HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> lease_core::Result<lease_core::backend::slots::SlotFinish> {
        lease_core::backend::check::name(self, name)?;
        let hex = holder.to_hex();
        let finish = DB::finish_in(
            self,
            crate::slots::Finish {
                name,
                hex: &hex,
                instant_ms,
                passed_ms,
            },
        )
        .await
        .map_err(|e| e.during(lease_core::layer::Operation::FinishSlot, name))?;
        if finish.released || finish.recorded || finish.passed_taken {
            crate::slots::wrote(&self.inner.hints, name);
        }
        Ok(finish)
    }

    async fn unfinished(&self, names: &[String]) -> lease_core::Result<Vec<(String, i64)>> {
        if lease_core::backend::check::unfinished(self, names)?
            == lease_core::backend::check::Batch::Empty
        {
            return Ok(Vec::new());
        }
        let rows = DB::unfinished_rows(self, names)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::Unfinished, ""))?;
        Ok(crate::slots::in_order(names, rows))
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &lease_core::backend::HolderToken,
        instance: &str,
        ttl: std::time::Duration,
        instant_ms: i64,
    ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
        let hex = holder.to_hex();
        let claim = crate::slots::Claim::checked(self, name, &hex, instance, ttl, instant_ms)?;
        let term = DB::rerun_row(self, claim)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::ClaimRerun, name))?;
        if term.is_some() {
            crate::slots::wrote(&self.inner.hints, name);
        }
        Ok(term.map(|term| lease_core::backend::Grant {
            term,
            expires_in: crate::store::remaining(claim.ttl_ms),
        }))
    }

    async fn last_slot(
        &self,
        name: &str,
    ) -> lease_core::Result<Option<lease_core::backend::slots::SlotRecord>> {
        lease_core::backend::check::name(self, name)?;
        let row = DB::last_slot_row(self, name)
            .await
            .map_err(|e| e.during(lease_core::layer::Operation::LastSlot, name))?;
        Ok(row.map(crate::slots::record))
    }
}
