//! The exact documents the store sends, and how it reads the replies: pure functions, so they
//! are tested against expected BSON without a server. One file per thing they serve:
//! `leases.rs`, `slots.rs`, `partitions.rs`, `membership.rs`, and `schema.rs` (the start-up
//! check's commands and the indexes); the fields, expressions and reply readers they share are
//! here.
//!
//! One document per lease name in the lease collection:
//!
//! ```text
//! { _id: <name: string>, holder: <token: 32 hex digits>, instance: <label: string>,
//!   epoch: <term: int64>, expires_at: <date, by the server's $$NOW>,
//!   claim_id: <random id of the claim that won it: 32 hex digits>,
//!   // Scheduler slots, once a slot was claimed (numbers: ms since the Unix epoch):
//!   slot_ms: <int64>, unfinished_ms: <int64 | null>, rerun_ms: <int64>,
//!   last_finish: { id: <random id of the finish>, recorded: <bool>, passed_taken: <bool>,
//!                  released: <bool> } }
//! ```
//!
//! Slot operations: claim slot = [`slot_read_pipeline`] (`aggregate`), [`slot_plan`], then
//! `findAndModify` [`slot_claim_filter`] / [`slot_claim_update`] returning the document before
//! the update ([`slot_claim_projection`], [`slot_claimed`]); finish = `findAndModify`
//! [`name_filter`] / [`finish_update`] ([`finish_from_reply`]); claim rerun = `findAndModify`
//! [`rerun_filter`] / [`rerun_update`]; unfinished = `aggregate` [`unfinished_pipeline`];
//! last slot = `find` [`name_filter`] / [`last_slot_projection`].
//!
//! Partition leases, one document per `(group, partition)` in the partition collection, and
//! membership records, one per `(service, node)` in the membership collection:
//!
//! ```text
//! { _id: { g: <group: string>, p: <partition: int64> }, owner: <owner id: string>,
//!   epoch: <int64>, expires_at: <date, by $$NOW>,
//!   renewal_id: <random id of the last batch renewal that extended it: 32 hex digits> }
//! { _id: { s: <service: string>, n: <node id: string> }, address: <string>,
//!   groups: [<group: string>, …], expires_at: <date, by $$NOW> }
//! ```
//!
//! Partition operations: acquire = `findAndModify` upsert [`acquire_filter`] /
//! [`acquire_update`] ([`partition_from_acquire`]); renew = `update` (multi) [`owned_filter`] /
//! [`partition_renew_update`], then `aggregate` [`renewed_pipeline`] in the same causally
//! consistent session ([`partitions_from_replies`]); release = `update` (multi)
//! [`owned_filter`] / [`release_update`]; owners = `aggregate` [`owners_pipeline`].
//! Membership: heartbeat = `findAndModify` upsert [`member_filter`] / [`heartbeat_update`]
//! ([`member_from_heartbeat`]); members = `aggregate` [`members_pipeline`]
//! ([`members_from_replies`]); leave = `update` [`leave_filter`] / [`release_update`].
//!
//! Counted leases: one document per counted name in the lease collection, `_id: {c: <name>}`,
//! holding the name's greatest term and an array of its permits (see `permits.rs`).
//!
//! Every "now" is the server's `$$NOW`, which is one value for the whole command. In a filter
//! it needs `$expr`; in an update it needs an aggregation pipeline (both MongoDB 4.2+).

use std::time::Duration;

use lease_core::{Error, Result};
use mongodb::bson::{Bson, DateTime, Document, doc};

mod leases;
mod membership;
mod names;
mod partitions;
mod permits;
mod schema;
mod slots;
#[cfg(test)]
mod tests;

pub(crate) use leases::*;
pub(crate) use membership::*;
pub(crate) use names::*;
pub(crate) use partitions::*;
pub(crate) use permits::*;
pub(crate) use schema::*;
pub(crate) use slots::*;

/// The field holding the holder token (hex).
pub(crate) const HOLDER: &str = "holder";
/// The field holding the instance label.
pub(crate) const INSTANCE: &str = "instance";
/// The field holding the term.
pub(crate) const EPOCH: &str = "epoch";
/// The field holding the expiry, a BSON date by the server's clock.
pub(crate) const EXPIRES_AT: &str = "expires_at";
/// The computed field a read returns: milliseconds left by the server's clock.
pub(crate) const REMAINING_MS: &str = "remaining_ms";

/// `{$lte: ["$expires_at", "$$NOW"]}`: expired, released or never set, by the server's clock
/// (a missing field sorts below every date). In a pipeline stage every field expression sees
/// the document as it was before the stage, so each use reads the same old expiry.
fn expired() -> Bson {
    Bson::Document(doc! { "$lte": ["$expires_at", "$$NOW"] })
}

/// `{$gt: ["$expires_at", "$$NOW"]}`: live by the server's clock.
fn live() -> Bson {
    Bson::Document(doc! { "$gt": ["$expires_at", "$$NOW"] })
}

/// `{$cond: [expired, then, "$field"]}`: the new value when the lease is free, else the
/// stored one unchanged.
fn if_free(then: Bson, field: &str) -> Bson {
    Bson::Document(doc! { "$cond": [expired(), then, format!("${field}")] })
}

/// Release's and force release's update: expiry at the epoch (1970), which is past by any
/// clock. Holder, instance and term stay, so the next claim adds one to the term.
pub(crate) fn release_update() -> Document {
    doc! { "$set": { EXPIRES_AT: DateTime::from_millis(0) } }
}

/// A whole number of any BSON numeric type.
fn number(b: &Bson) -> Option<i64> {
    match b {
        Bson::Int32(v) => Some(i64::from(*v)),
        Bson::Int64(v) => Some(*v),
        Bson::Double(v) if v.fract() == 0.0 && v.abs() < 9.0e18 => Some(*v as i64),
        _ => None,
    }
}

fn malformed(what: &str, reply: &Document) -> Error {
    Error::new(
        lease_core::ErrorKind::Backend,
        format!("the lease document has no valid {what}: {reply}"),
    )
    .with_temporary(false)
}

fn term_of(reply: &Document) -> Result<u64> {
    reply
        .get(EPOCH)
        .and_then(number)
        .and_then(|t| u64::try_from(t).ok())
        .filter(|t| *t > 0)
        .ok_or_else(|| malformed("epoch", reply))
}

fn remaining_of(reply: &Document) -> Result<Duration> {
    let ms = reply
        .get(REMAINING_MS)
        .and_then(number)
        .ok_or_else(|| malformed(REMAINING_MS, reply))?;
    Ok(Duration::from_millis(u64::try_from(ms).unwrap_or(0)))
}
