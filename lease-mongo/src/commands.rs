//! The exact documents the store sends, and how it reads the replies: pure functions, so they
//! are tested against expected BSON without a server.
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
//! Every "now" is the server's `$$NOW`, which is one value for the whole command. In a filter
//! it needs `$expr`; in an update it needs an aggregation pipeline (both MongoDB 4.2+).

use std::time::Duration;

use lease_core::{Error, LeaseInfo, Result, backend::Grant};
use mongodb::bson::{Bson, DateTime, Document, doc};

/// The field holding the holder token (hex).
pub const HOLDER: &str = "holder";
/// The field holding the instance label.
pub const INSTANCE: &str = "instance";
/// The field holding the term.
pub const EPOCH: &str = "epoch";
/// The field holding the expiry, a BSON date by the server's clock.
pub const EXPIRES_AT: &str = "expires_at";
/// The computed field a read returns: milliseconds left by the server's clock.
pub const REMAINING_MS: &str = "remaining_ms";

/// The oldest server the store works with: pipeline updates and `$$NOW` came in 4.2.
pub const MIN_SERVER_VERSION: (i32, i32) = (4, 2);

/// The field holding the random id of the claim that last won the name: how a claim tells
/// that its own update took the lease.
pub const CLAIM_ID: &str = "claim_id";

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

/// The claim's filter: the name's document, whatever its state. With `upsert`, a missing
/// document is inserted with `_id` = `name`.
///
/// The condition "free by the server's clock" cannot be in this filter: MongoDB refuses
/// `$expr` in the query of an upsert (error 224, "$expr is not allowed in the query predicate
/// for an upsert"; SERVER-59704). It is in the update pipeline instead ([`claim_update`]).
pub fn claim_filter(name: &str) -> Document {
    doc! { "_id": name }
}

/// The claim's update pipeline: when the document is free by `$$NOW` (expired, released, or
/// just inserted), the new holder, instance, claim id, the term one above the stored one (1
/// for a new document) and the expiry `ttl_ms` after `$$NOW`; otherwise every field keeps its
/// value, so the document is left as it was (an update that changes nothing is a no-op for
/// the server).
///
/// The claim won exactly when the document after the update carries `claim_id` (a fresh random
/// id per call, so the same holder token claiming its own live lease is told apart).
/// Labels and tokens are wrapped in `$literal`, so a label such as `"$epoch"` is stored as text
/// and never read as a field path.
pub fn claim_update(
    holder_hex: &str,
    instance: &str,
    ttl_ms: i64,
    claim_id: &str,
) -> Vec<Document> {
    vec![doc! {
        "$set": {
            HOLDER: if_free(Bson::Document(doc! { "$literal": holder_hex }), HOLDER),
            INSTANCE: if_free(Bson::Document(doc! { "$literal": instance }), INSTANCE),
            EPOCH: if_free(
                Bson::Document(doc! { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] }),
                EPOCH,
            ),
            EXPIRES_AT: if_free(Bson::Document(doc! { "$add": ["$$NOW", ttl_ms] }), EXPIRES_AT),
            CLAIM_ID: if_free(Bson::Document(doc! { "$literal": claim_id }), CLAIM_ID),
        }
    }]
}

/// What a claim returns of the document after the update: the term and the winning claim id.
pub fn claim_projection() -> Document {
    doc! { "_id": 0, EPOCH: 1, CLAIM_ID: 1 }
}

/// What renew returns of the document after the update: the term alone.
pub fn grant_projection() -> Document {
    doc! { "_id": 0, EPOCH: 1 }
}

/// Renew's and release's filter: the name's document, live, under this holder token.
pub fn held_filter(name: &str, holder_hex: &str) -> Document {
    doc! { "_id": name, HOLDER: holder_hex, "$expr": live() }
}

/// Renew's update pipeline: the expiry `ttl_ms` after the server's `$$NOW`; nothing else
/// changes.
pub fn renew_update(ttl_ms: i64) -> Vec<Document> {
    vec![doc! { "$set": { EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] } } }]
}

/// Force release's filter: the name's document while live, whoever holds it.
pub fn live_filter(name: &str) -> Document {
    doc! { "_id": name, "$expr": live() }
}

/// Release's and force release's update: expiry at the epoch (1970), which is past by any
/// clock. Holder, instance and term stay, so the next claim adds one to the term.
pub fn release_update() -> Document {
    doc! { "$set": { EXPIRES_AT: DateTime::from_millis(0) } }
}

/// What release returns of the matched document: only that there was one.
pub fn release_projection() -> Document {
    doc! { "_id": 1 }
}

/// Verify's aggregation: the name's document when live under this holder token, with the
/// term and the milliseconds left, both computed by the server.
pub fn verify_pipeline(name: &str, holder_hex: &str) -> Vec<Document> {
    vec![
        doc! { "$match": held_filter(name, holder_hex) },
        doc! { "$project": {
            "_id": 0,
            EPOCH: 1,
            REMAINING_MS: { "$subtract": ["$expires_at", "$$NOW"] },
        } },
    ]
}

/// Get's aggregation: the name's document with the milliseconds left by the server's clock
/// (zero when expired or released). The holder token is not returned.
pub fn get_pipeline(name: &str) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id": name } },
        doc! { "$project": {
            "_id": 1,
            INSTANCE: 1,
            EPOCH: 1,
            REMAINING_MS: { "$max": [{ "$subtract": ["$expires_at", "$$NOW"] }, 0_i64] },
        } },
    ]
}

// ---- Scheduler slots -------------------------------------------------------------------------

/// The field holding the last instant claimed (or taken along by a finish), in milliseconds
/// since the Unix epoch.
pub const SLOT_MS: &str = "slot_ms";
/// The field holding the instant whose round is running or was cut short (ms since the epoch).
pub const UNFINISHED_MS: &str = "unfinished_ms";
/// The field holding the unfinished instant claimed a second time (ms since the epoch).
pub const RERUN_MS: &str = "rerun_ms";
/// The field holding the outcome of the last finish that changed the document:
/// `{id, recorded, passed_taken, released}`, `id` being that finish's fresh random id.
pub const LAST_FINISH: &str = "last_finish";
/// The computed field the slot claim's read returns: the server's `$$NOW` in milliseconds.
pub const NOW_MS: &str = "now_ms";
/// The computed field the slot claim's read returns: the lease is live by `$$NOW`.
pub const LIVE: &str = "live";
/// The field of the slot claim's read holding the record, absent when there is none.
pub const RECORD: &str = "rec";

/// `{$toLong: "$$NOW"}`: the server's clock in milliseconds since the Unix epoch, to compare
/// with the instants (a number compared with a date is always smaller, whatever its value).
fn now_ms() -> Bson {
    Bson::Document(doc! { "$toLong": "$$NOW" })
}

/// The name's document, whatever its state: the filter of finish and last slot.
pub fn name_filter(name: &str) -> Document {
    doc! { "_id": name }
}

/// The slot claim's read (`aggregate`): one document whether or not the name has a record,
/// `{now_ms: <$$NOW in ms>, rec: {epoch, slot_ms, unfinished_ms, live}}` with `rec` absent
/// when there is no record. `$facet` turns "no document" into one document with an empty
/// array, so the server's clock comes back either way; `$$NOW` is used outside the facet's
/// sub-pipeline only.
pub fn slot_read_pipeline(name: &str) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id": name } },
        doc! { "$project": {
            "_id": 0,
            EPOCH: 1,
            SLOT_MS: 1,
            UNFINISHED_MS: 1,
            LIVE: live(),
        } },
        doc! { "$facet": { RECORD: [{ "$limit": 1_i32 }] } },
        doc! { "$project": {
            NOW_MS: now_ms(),
            RECORD: { "$arrayElemAt": ["$rec", 0_i32] },
        } },
    ]
}

/// What a slot claim does after its read ([`slot_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotPlan {
    /// The claim is refused: held, taken or early, as the read says.
    Refuse(lease_core::backend::SlotClaim),
    /// The claim writes, with the term compared: `Some(term)` read on the record, `None` when
    /// the name has no record yet (or one no claim ever wrote: no `epoch`).
    Write {
        /// The term the write must still find.
        term: Option<u64>,
    },
}

/// Decides a slot claim from its read ([`slot_read_pipeline`]), in the contract's order: held
/// when the lease is live, taken when `instant_ms` is not after the last instant, early when
/// it is after the server's clock; otherwise write.
pub fn slot_plan(reply: &Document, instant_ms: i64) -> Result<SlotPlan> {
    use lease_core::backend::SlotClaim;
    let now = reply
        .get(NOW_MS)
        .and_then(number)
        .ok_or_else(|| malformed(NOW_MS, reply))?;
    let (term, last) = match reply.get(RECORD) {
        None | Some(Bson::Null) => (None, None),
        Some(Bson::Document(rec)) => {
            if rec.get_bool(LIVE).unwrap_or(false) {
                return Ok(SlotPlan::Refuse(SlotClaim::Held));
            }
            let term = match rec.get(EPOCH) {
                None | Some(Bson::Null) => None,
                Some(_) => Some(term_of(rec)?),
            };
            (term, opt_ms(rec, SLOT_MS)?)
        }
        Some(_) => return Err(malformed(RECORD, reply)),
    };
    if let Some(last_ms) = last.filter(|last| instant_ms <= *last) {
        return Ok(SlotPlan::Refuse(SlotClaim::Taken { last_ms }));
    }
    if instant_ms > now {
        return Ok(SlotPlan::Refuse(SlotClaim::Early { now_ms: now }));
    }
    Ok(SlotPlan::Write { term })
}

/// The slot claim's write filter.
///
/// - `Some(term)`: the name's document still at the term read, free by `$$NOW`, its last
///   instant (if any) before `instant_ms`, and `instant_ms` not after `$$NOW`. The term is the
///   compare of the contract (every claim and rerun adds one); the other conditions are the
///   read's, checked again by the server that writes. No upsert, so `$expr` is allowed.
/// - `None`: the name's document with no `epoch`, for an upsert: when a competitor inserted
///   the document meanwhile, the filter does not match it and the insert collides on `_id`
///   (E11000, held). The server does not retry such an upsert as an update, since the filter
///   names a field besides `_id`.
pub fn slot_claim_filter(name: &str, term: Option<u64>, instant_ms: i64) -> Document {
    match term {
        Some(term) => doc! {
            "_id": name,
            EPOCH: i64::try_from(term).unwrap_or(i64::MAX),
            "$expr": { "$and": [
                expired(),
                { "$lt": [{ "$ifNull": ["$slot_ms", Bson::Null] }, instant_ms] },
                { "$lte": [instant_ms, now_ms()] },
            ] },
        },
        None => doc! { "_id": name, EPOCH: { "$exists": false } },
    }
}

/// The slot claim's update pipeline: the holder, the instance, the term one above the stored
/// one (1 for a new document), the expiry `ttl_ms` after `$$NOW`, and `instant_ms` as both the
/// last and the unfinished instant. `rerun_ms` and `claim_id` keep their values. Constants
/// are wrapped in `$literal`, so no text is read as a field path and no number or boolean as
/// a projection flag.
pub fn slot_claim_update(
    holder_hex: &str,
    instance: &str,
    ttl_ms: i64,
    instant_ms: i64,
) -> Vec<Document> {
    vec![doc! {
        "$set": {
            HOLDER: { "$literal": holder_hex },
            INSTANCE: { "$literal": instance },
            EPOCH: { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
            EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
            SLOT_MS: { "$literal": instant_ms },
            UNFINISHED_MS: { "$literal": instant_ms },
        }
    }]
}

/// What the slot claim's write returns of the document *before* the update (the filter says
/// whether it applied): the term and the unfinished instant it supersedes.
pub fn slot_claim_projection() -> Document {
    doc! { "_id": 0, EPOCH: 1, UNFINISHED_MS: 1 }
}

/// The claim a slot claim reports once its write applied, from the document before the update
/// (`None` when the upsert inserted it): the term one above the old one, `ttl` left, and the
/// old unfinished instant as superseded.
pub fn slot_claimed(
    before: Option<&Document>,
    ttl: Duration,
) -> Result<lease_core::backend::SlotClaim> {
    let (old_term, superseded_ms) = match before {
        None => (0, None),
        Some(d) => {
            let old_term = match d.get(EPOCH) {
                None | Some(Bson::Null) => 0,
                Some(_) => term_of(d)?,
            };
            (old_term, opt_ms(d, UNFINISHED_MS)?)
        }
    };
    Ok(lease_core::backend::SlotClaim::Claimed {
        grant: Grant {
            term: old_term.saturating_add(1),
            expires_in: ttl,
        },
        superseded_ms,
    })
}

/// `{$and: [{$eq: ["$holder", holder]}, live]}`: the caller holds the lease, by `$$NOW`.
fn held_by(holder_hex: &str) -> Bson {
    Bson::Document(doc! { "$and": [
        { "$eq": ["$holder", { "$literal": holder_hex }] },
        live(),
    ] })
}

/// `{$eq: ["$slot_ms", instant]}`: the instant is still the last one on record.
fn is_last(instant_ms: i64) -> Bson {
    Bson::Document(doc! { "$eq": ["$slot_ms", instant_ms] })
}

/// Finish's update pipeline (filter [`name_filter`], no upsert), one `$set` stage, so every
/// condition reads the document as it was:
///
/// - *held* = the holder matches and the lease is live by `$$NOW`;
/// - *recorded* = `slot_ms` is `instant_ms`;
/// - *taken* = held, recorded, `passed_ms` given, after `instant_ms` and not after `$$NOW`.
///
/// When recorded and `unfinished_ms` is `instant_ms`, it becomes null; when taken, `slot_ms`
/// becomes `passed_ms`; when held, `expires_at` goes to 1970 (released). When held or recorded,
/// `last_finish` becomes `{id: finish_id, recorded, passed_taken, released}`, which tells the
/// caller what applied (`finish_id` is fresh and random per call); when neither, the document
/// is left as it was.
pub fn finish_update(
    holder_hex: &str,
    instant_ms: i64,
    passed_ms: Option<i64>,
    finish_id: &str,
) -> Vec<Document> {
    let held = || held_by(holder_hex);
    let recorded = || is_last(instant_ms);
    let passed = passed_ms.filter(|p| *p > instant_ms);
    let taken = || match passed {
        Some(p) => Bson::Document(doc! { "$and": [
            held(),
            recorded(),
            { "$lte": [p, now_ms()] },
        ] }),
        None => Bson::Document(doc! { "$literal": false }),
    };
    let mut set = Document::new();
    if let Some(p) = passed {
        set.insert(SLOT_MS, doc! { "$cond": [taken(), p, "$slot_ms"] });
    }
    set.insert(
        UNFINISHED_MS,
        doc! { "$cond": [
            { "$and": [recorded(), { "$eq": ["$unfinished_ms", instant_ms] }] },
            Bson::Null,
            "$unfinished_ms",
        ] },
    );
    set.insert(
        EXPIRES_AT,
        doc! { "$cond": [held(), DateTime::from_millis(0), "$expires_at"] },
    );
    set.insert(
        LAST_FINISH,
        doc! { "$cond": [
            { "$or": [held(), recorded()] },
            {
                "id": { "$literal": finish_id },
                "recorded": recorded(),
                "passed_taken": taken(),
                "released": held(),
            },
            "$last_finish",
        ] },
    );
    vec![doc! { "$set": set }]
}

/// What finish returns of the document after its update: the outcome of the last finish.
pub fn finish_projection() -> Document {
    doc! { "_id": 0, LAST_FINISH: 1 }
}

/// What a finish reports from the document after its update (`None`: no document): the
/// outcome it wrote when `last_finish.id` is its own `finish_id`, nothing applied otherwise.
pub fn finish_from_reply(
    reply: Option<&Document>,
    finish_id: &str,
) -> lease_core::backend::SlotFinish {
    let Some(outcome) = reply.and_then(|r| r.get_document(LAST_FINISH).ok()) else {
        return lease_core::backend::SlotFinish::default();
    };
    if outcome.get_str("id").ok() != Some(finish_id) {
        return lease_core::backend::SlotFinish::default();
    }
    let flag = |k: &str| outcome.get_bool(k).unwrap_or(false);
    lease_core::backend::SlotFinish {
        recorded: flag("recorded"),
        passed_taken: flag("passed_taken"),
        released: flag("released"),
    }
}

/// Claim again's filter (no upsert): the name's document with `instant_ms` unfinished and
/// still the last instant, not rerun yet, and the lease free by `$$NOW`.
pub fn rerun_filter(name: &str, instant_ms: i64) -> Document {
    doc! {
        "_id": name,
        UNFINISHED_MS: instant_ms,
        SLOT_MS: instant_ms,
        RERUN_MS: { "$ne": instant_ms },
        "$expr": expired(),
    }
}

/// Claim again's update pipeline: the holder, the instance, the term plus one, the expiry
/// `ttl_ms` after `$$NOW`, and `instant_ms` as the rerun instant. It reports like renew
/// ([`grant_projection`], [`grant_from_update`]).
pub fn rerun_update(
    holder_hex: &str,
    instance: &str,
    ttl_ms: i64,
    instant_ms: i64,
) -> Vec<Document> {
    vec![doc! {
        "$set": {
            HOLDER: { "$literal": holder_hex },
            INSTANCE: { "$literal": instance },
            EPOCH: { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
            EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
            RERUN_MS: { "$literal": instant_ms },
        }
    }]
}

/// Unfinished's aggregation over many names: the documents among `names` whose unfinished
/// instant is set, still the last instant, not rerun, and whose lease is free by `$$NOW`;
/// `{_id, unfinished_ms}` of each.
pub fn unfinished_pipeline(names: &[String]) -> Vec<Document> {
    vec![
        doc! { "$match": {
            "_id": { "$in": names },
            UNFINISHED_MS: { "$ne": Bson::Null },
            "$expr": { "$and": [
                { "$eq": ["$slot_ms", "$unfinished_ms"] },
                { "$ne": ["$rerun_ms", "$unfinished_ms"] },
                expired(),
            ] },
        } },
        doc! { "$project": { "_id": 1, UNFINISHED_MS: 1 } },
    ]
}

/// What unfinished reports from its aggregation's documents: `(name, instant)` in the order of
/// `names` (a name given twice is reported twice, as by the memory store).
pub fn unfinished_from_replies(
    names: &[String],
    replies: &[Document],
) -> Result<Vec<(String, i64)>> {
    let mut due = std::collections::HashMap::with_capacity(replies.len());
    for r in replies {
        let name = r.get_str("_id").map_err(|_| malformed("_id", r))?;
        let at = opt_ms(r, UNFINISHED_MS)?.ok_or_else(|| malformed(UNFINISHED_MS, r))?;
        due.insert(name, at);
    }
    Ok(names
        .iter()
        .filter_map(|n| due.get(n.as_str()).map(|at| (n.clone(), *at)))
        .collect())
}

/// What last slot's `find` (filter [`name_filter`]) returns of the document: the instants.
pub fn last_slot_projection() -> Document {
    doc! { "_id": 0, SLOT_MS: 1, UNFINISHED_MS: 1, RERUN_MS: 1 }
}

/// The instants on record, from last slot's `find`: a missing or null field is `None`.
pub fn slot_record_from(reply: &Document) -> Result<lease_core::backend::SlotRecord> {
    Ok(lease_core::backend::SlotRecord {
        last_ms: opt_ms(reply, SLOT_MS)?,
        unfinished_ms: opt_ms(reply, UNFINISHED_MS)?,
        rerun_ms: opt_ms(reply, RERUN_MS)?,
    })
}

/// An optional instant: `None` when missing or null, an error when not a whole number.
fn opt_ms(reply: &Document, field: &str) -> Result<Option<i64>> {
    match reply.get(field) {
        None | Some(Bson::Null) => Ok(None),
        Some(b) => number(b).map(Some).ok_or_else(|| malformed(field, reply)),
    }
}

// ---- Partition leases and membership ---------------------------------------------------------

/// The field of a partition lease holding its owner (one process incarnation, as given).
pub const OWNER: &str = "owner";
/// The field of a partition lease holding the random id of the last renewal that extended it:
/// how a batch renewal reads back exactly the leases it extended.
pub const RENEWAL_ID: &str = "renewal_id";
/// The computed field partition reads return: the partition number (from `_id.p`).
pub const PARTITION: &str = "partition";
/// The field of a membership record holding the node's address.
pub const ADDRESS: &str = "address";
/// The field of a membership record holding the groups the node serves (an array of strings).
pub const GROUPS: &str = "groups";
/// The computed field membership reads return: the node id (from `_id.n`).
pub const NODE: &str = "node";
/// The index on the partition collection that [`owners_pipeline`] uses:
/// `{"_id.g": 1, "_id.p": 1}`.
pub const PARTITION_INDEX: &str = "group_partition";
/// The index on the membership collection that [`members_pipeline`] uses:
/// `{"_id.s": 1, "_id.n": 1}`.
pub const MEMBER_INDEX: &str = "service_node";

/// The keys of [`PARTITION_INDEX`].
pub fn partition_index_keys() -> Document {
    doc! { "_id.g": 1_i32, "_id.p": 1_i32 }
}

/// The keys of [`MEMBER_INDEX`].
pub fn member_index_keys() -> Document {
    doc! { "_id.s": 1_i32, "_id.n": 1_i32 }
}

/// A partition lease's `_id`: `{g: group, p: partition}`, the partition as an int64 (a `u32`
/// does not fit an int32). The field order is fixed: `_id` equality compares whole documents.
pub fn partition_id(group: &str, partition: u32) -> Document {
    doc! { "g": group, "p": i64::from(partition) }
}

/// Acquire's filter: the partition's document, whatever its state. With `upsert`, a missing
/// document is inserted with this `_id`.
///
/// As for the lease claim ([`claim_filter`]), the condition "expired or the acquirer's own" is
/// not in the filter: MongoDB refuses `$expr` in the query of an upsert (error 224). It is in
/// the update pipeline ([`acquire_update`]), which leaves a document it does not admit as it
/// was.
pub fn acquire_filter(group: &str, partition: u32) -> Document {
    doc! { "_id": partition_id(group, partition) }
}

/// `{$eq: ["$owner", {$literal: owner}]}`: the stored owner is `owner`.
fn owned_by(owner: &str) -> Bson {
    Bson::Document(doc! { "$eq": ["$owner", { "$literal": owner }] })
}

/// Acquire's update pipeline, one `$set` stage, so every condition reads the document as it
/// was:
///
/// - *admitted* = expired by `$$NOW` (or released, or just inserted: no expiry) **or** owned by
///   `owner`;
/// - when admitted: `owner` = `owner`, `expires_at` = `$$NOW` + `ttl_ms`, and `epoch` kept when
///   `owner` holds the lease live by `$$NOW`, the stored epoch + 1 otherwise (1 for a new
///   document);
/// - when not admitted (another owner holds it live): every field keeps its value, so the
///   document is left as it was.
///
/// The acquire took effect exactly when the document after the update names `owner`: an
/// admitted update always writes it, and a document left alone names the live holder, who is
/// someone else. The owner is wrapped in `$literal`, so an owner such as `"$epoch"` is text.
pub fn acquire_update(owner: &str, ttl_ms: i64) -> Vec<Document> {
    let admitted = || Bson::Document(doc! { "$or": [expired(), owned_by(owner)] });
    let own_live = Bson::Document(doc! { "$and": [owned_by(owner), live()] });
    vec![doc! {
        "$set": {
            OWNER: { "$cond": [admitted(), { "$literal": owner }, "$owner"] },
            EPOCH: { "$cond": [
                admitted(),
                { "$cond": [
                    own_live,
                    "$epoch",
                    { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
                ] },
                "$epoch",
            ] },
            EXPIRES_AT: { "$cond": [
                admitted(),
                { "$add": ["$$NOW", ttl_ms] },
                "$expires_at",
            ] },
        }
    }]
}

/// What acquire returns of the document after its update: the owner and the epoch.
pub fn acquire_projection() -> Document {
    doc! { "_id": 0, OWNER: 1, EPOCH: 1 }
}

/// The lease an acquire reports from the document after its update: `Some` with the epoch and
/// `ttl` left (the expiry was just set to `$$NOW` + `ttl`) when the document names `owner`,
/// `None` when another owner holds the partition live.
pub fn partition_from_acquire(
    reply: &Document,
    partition: u32,
    owner: &str,
    ttl: Duration,
) -> Result<Option<lease_core::PartitionLease>> {
    if reply.get_str(OWNER).ok() != Some(owner) {
        return Ok(None);
    }
    Ok(Some(lease_core::PartitionLease {
        partition,
        owner: owner.to_owned(),
        epoch: term_of(reply)?,
        expires_in: ttl,
    }))
}

/// The `_id`s of `partitions` of `group`, each once, in ascending order.
fn partition_ids(group: &str, partitions: &[u32]) -> Vec<Document> {
    partitions
        .iter()
        .copied()
        .collect::<std::collections::BTreeSet<u32>>()
        .into_iter()
        .map(|p| partition_id(group, p))
        .collect()
}

/// Renew's and release's filter (`update` with `multi`, no upsert, so `$expr` is allowed):
/// the documents of `partitions` of `group` (each once, through the `_id` index) that `owner`
/// holds live by `$$NOW`.
pub fn owned_filter(group: &str, partitions: &[u32], owner: &str) -> Document {
    doc! {
        "_id": { "$in": partition_ids(group, partitions) },
        OWNER: owner,
        "$expr": live(),
    }
}

/// Renew's update pipeline: the expiry `ttl_ms` after `$$NOW` (one value for the whole
/// command, so one expiry for the batch) and this call's `renewal_id` (fresh and random per
/// call). Owner and epoch stay.
pub fn partition_renew_update(ttl_ms: i64, renewal_id: &str) -> Vec<Document> {
    vec![doc! {
        "$set": {
            EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
            RENEWAL_ID: { "$literal": renewal_id },
        }
    }]
}

/// `$project` of a partition read: number, owner, epoch and the milliseconds left by `$$NOW`.
fn partition_projection() -> Document {
    doc! { "$project": {
        "_id": 0,
        PARTITION: "$_id.p",
        OWNER: 1,
        EPOCH: 1,
        REMAINING_MS: { "$subtract": ["$expires_at", "$$NOW"] },
    } }
}

/// Renew's read-back (`aggregate`, second round trip): the documents of `partitions` of
/// `group` that carry this call's `renewal_id`, still under `owner` and live by `$$NOW`, with
/// the time left computed by the server. The renewal id, not an expiry, tells which documents
/// the update extended: the client cannot know the expiry the server set.
pub fn renewed_pipeline(
    group: &str,
    partitions: &[u32],
    owner: &str,
    renewal_id: &str,
) -> Vec<Document> {
    vec![
        doc! { "$match": {
            "_id": { "$in": partition_ids(group, partitions) },
            OWNER: owner,
            RENEWAL_ID: renewal_id,
            "$expr": live(),
        } },
        partition_projection(),
    ]
}

/// Owners' aggregation: the live leases of `group` by `$$NOW` (through [`PARTITION_INDEX`]),
/// with the time left computed by the server.
pub fn owners_pipeline(group: &str) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id.g": group, "$expr": live() } },
        partition_projection(),
    ]
}

/// The leases a partition read ([`renewed_pipeline`], [`owners_pipeline`]) reports, by
/// partition number; a document whose time left is not positive is left out.
pub fn partitions_from_replies(replies: &[Document]) -> Result<Vec<lease_core::PartitionLease>> {
    let mut out = Vec::with_capacity(replies.len());
    for r in replies {
        let expires_in = remaining_of(r)?;
        if expires_in.is_zero() {
            continue;
        }
        let partition = r
            .get(PARTITION)
            .and_then(number)
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| malformed(PARTITION, r))?;
        let owner = r.get_str(OWNER).map_err(|_| malformed(OWNER, r))?;
        out.push(lease_core::PartitionLease {
            partition,
            owner: owner.to_owned(),
            epoch: term_of(r)?,
            expires_in,
        });
    }
    out.sort_by_key(|l| l.partition);
    Ok(out)
}

/// A membership record's `_id`: `{s: service, n: node}` (field order fixed).
pub fn member_id(service: &str, node: &str) -> Document {
    doc! { "s": service, "n": node }
}

/// Heartbeat's filter: the node's record, whatever its state (an upsert, so no `$expr`).
pub fn member_filter(service: &str, node: &str) -> Document {
    doc! { "_id": member_id(service, node) }
}

/// Heartbeat's update pipeline: the address, the groups (an array of strings) and the expiry
/// `ttl_ms` after `$$NOW`, replacing what the last heartbeat wrote. Address and groups are
/// wrapped in `$literal`, so no text is read as a field path or operator.
pub fn heartbeat_update(address: &str, groups: &[String], ttl_ms: i64) -> Vec<Document> {
    vec![doc! {
        "$set": {
            ADDRESS: { "$literal": address },
            GROUPS: { "$literal": groups },
            EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
        }
    }]
}

/// What heartbeat returns of the record after its update: address and groups.
pub fn heartbeat_projection() -> Document {
    doc! { "_id": 0, ADDRESS: 1, GROUPS: 1 }
}

fn groups_of(reply: &Document) -> Result<Vec<String>> {
    match reply.get(GROUPS) {
        None | Some(Bson::Null) => Ok(Vec::new()),
        Some(Bson::Array(a)) => a
            .iter()
            .map(|g| g.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| malformed(GROUPS, reply)),
        Some(_) => Err(malformed(GROUPS, reply)),
    }
}

/// The member a heartbeat reports from the record after its update: address and groups as
/// stored, `ttl` left (the expiry was just set to `$$NOW` + `ttl`).
pub fn member_from_heartbeat(
    reply: &Document,
    node: &str,
    ttl: Duration,
) -> Result<lease_core::Member> {
    Ok(lease_core::Member {
        node: node.to_owned(),
        address: reply
            .get_str(ADDRESS)
            .map_err(|_| malformed(ADDRESS, reply))?
            .to_owned(),
        groups: groups_of(reply)?,
        expires_in: ttl,
    })
}

/// Members' aggregation: the live records of `service` by `$$NOW` (through
/// [`MEMBER_INDEX`]), with the time left computed by the server.
pub fn members_pipeline(service: &str) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id.s": service, "$expr": live() } },
        doc! { "$project": {
            "_id": 0,
            NODE: "$_id.n",
            ADDRESS: 1,
            GROUPS: 1,
            REMAINING_MS: { "$subtract": ["$expires_at", "$$NOW"] },
        } },
    ]
}

/// The members [`members_pipeline`] reports, by node id in byte order (sorted here, so the
/// order does not depend on a collation); a record whose time left is not positive is left
/// out.
pub fn members_from_replies(replies: &[Document]) -> Result<Vec<lease_core::Member>> {
    let mut out = Vec::with_capacity(replies.len());
    for r in replies {
        let expires_in = remaining_of(r)?;
        if expires_in.is_zero() {
            continue;
        }
        out.push(lease_core::Member {
            node: r.get_str(NODE).map_err(|_| malformed(NODE, r))?.to_owned(),
            address: r
                .get_str(ADDRESS)
                .map_err(|_| malformed(ADDRESS, r))?
                .to_owned(),
            groups: groups_of(r)?,
            expires_in,
        });
    }
    out.sort_by(|a, b| a.node.as_bytes().cmp(b.node.as_bytes()));
    Ok(out)
}

/// Leave's filter (`update`, no upsert): the node's record while live by `$$NOW`. Its update
/// is [`release_update`] (expiry at 1970), so the record is gone from [`members_pipeline`] at
/// once, and the update matches only when the record was live.
pub fn leave_filter(service: &str, node: &str) -> Document {
    doc! { "_id": member_id(service, node), "$expr": live() }
}

/// `buildInfo`, which tells the server's version.
pub fn build_info_command() -> Document {
    doc! { "buildInfo": 1 }
}

/// Refuses a server older than [`MIN_SERVER_VERSION`], from a `buildInfo` reply.
pub fn check_build_info(reply: &Document, server: &str) -> Result<()> {
    let parts = match reply.get_array("versionArray") {
        Ok(a) => a.iter().filter_map(number).collect::<Vec<i64>>(),
        Err(_) => Vec::new(),
    };
    let version = reply.get_str("version").unwrap_or("unknown");
    let (Some(&major), Some(&minor)) = (parts.first(), parts.get(1)) else {
        return Err(Error::unsupported(format!(
            "{server} did not tell its version (buildInfo gave {version}); lease-mongo needs \
             MongoDB {}.{} or newer",
            MIN_SERVER_VERSION.0, MIN_SERVER_VERSION.1
        )));
    };
    let (min_major, min_minor) = MIN_SERVER_VERSION;
    if (major, minor) < (i64::from(min_major), i64::from(min_minor)) {
        return Err(Error::unsupported(format!(
            "{server} runs MongoDB {version}; lease-mongo needs {min_major}.{min_minor} or newer \
             (pipeline updates and $$NOW)"
        )));
    }
    Ok(())
}

/// Refuses a collection of the store (lease, partition or membership) that is a view, or
/// whose default collation is not the simple (binary) one: names must compare byte for byte
/// (`"Job"` and `"job"` are two leases, two groups, two nodes), and a query with another
/// collation than the `_id` index's cannot use the index.
pub fn check_collection(
    collection: &str,
    is_view: bool,
    collation_locale: Option<&str>,
    server: &str,
) -> Result<()> {
    if is_view {
        return Err(Error::unsupported(format!(
            "the lease store's collection {collection:?} on {server} is a view; give a \
             collection name that is free or holds a plain collection"
        )));
    }
    match collation_locale {
        None | Some("simple") => Ok(()),
        Some(locale) => Err(Error::unsupported(format!(
            "the lease store's collection {collection:?} on {server} has the default collation \
             {locale:?}; lease, group and node names must compare byte for byte: use a \
             collection with the simple collation"
        ))),
    }
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

/// The grant a claim reports from the document after its update: `Some` with the term and
/// `ttl` left when the document carries this call's `claim_id` (the claim won and set the
/// expiry to `$$NOW` + `ttl`), `None` when someone holds the name live.
pub fn grant_from_claim(reply: &Document, claim_id: &str, ttl: Duration) -> Result<Option<Grant>> {
    if reply.get_str(CLAIM_ID).ok() != Some(claim_id) {
        return Ok(None);
    }
    grant_from_update(reply, ttl).map(Some)
}

/// The grant a renewal reports from the document after the update: its term, and `ttl` left
/// (the expiry was just set to the server's `$$NOW` + `ttl`).
pub fn grant_from_update(reply: &Document, ttl: Duration) -> Result<Grant> {
    Ok(Grant {
        term: term_of(reply)?,
        expires_in: ttl,
    })
}

/// The grant verify reports: the term and the time left as the server computed it. `None`
/// when the server's answer says no time is left.
pub fn grant_from_verify(reply: &Document) -> Result<Option<Grant>> {
    let expires_in = remaining_of(reply)?;
    if expires_in.is_zero() {
        return Ok(None);
    }
    Ok(Some(Grant {
        term: term_of(reply)?,
        expires_in,
    }))
}

/// What get reports of `name` from its aggregation's answer.
pub fn info_from_get(name: &str, reply: &Document) -> Result<LeaseInfo> {
    let expires_in = remaining_of(reply)?;
    Ok(LeaseInfo {
        name: name.to_owned(),
        instance: reply.get_str(INSTANCE).unwrap_or_default().to_owned(),
        term: term_of(reply)?,
        live: !expires_in.is_zero(),
        expires_in,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::ErrorKind;

    #[test]
    fn claim_filter_is_the_name_alone_because_upserts_refuse_expr() {
        assert_eq!(
            claim_filter("orders/compactor"),
            doc! { "_id": "orders/compactor" }
        );
        assert!(!claim_filter("n").contains_key("$expr"));
    }

    #[test]
    fn claim_update_is_a_conditional_pipeline_on_the_server_clock() {
        let holder = "00112233445566778899aabbccddeeff";
        let id = "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f";
        let free = || doc! { "$lte": ["$expires_at", "$$NOW"] };
        assert_eq!(
            claim_update(holder, "worker-7", 15_000, id),
            vec![doc! {
                "$set": {
                    "holder": { "$cond": [
                        free(), { "$literal": "00112233445566778899aabbccddeeff" }, "$holder"
                    ] },
                    "instance": { "$cond": [free(), { "$literal": "worker-7" }, "$instance"] },
                    "epoch": { "$cond": [
                        free(),
                        { "$add": [{ "$ifNull": ["$epoch", Bson::Int64(0)] }, Bson::Int64(1)] },
                        "$epoch",
                    ] },
                    "expires_at": { "$cond": [
                        free(), { "$add": ["$$NOW", Bson::Int64(15_000)] }, "$expires_at"
                    ] },
                    "claim_id": { "$cond": [
                        free(), { "$literal": "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f" }, "$claim_id"
                    ] },
                }
            }]
        );
        // A label that looks like a field path is kept as text.
        let update = claim_update(holder, "$epoch", 1, id);
        let set = update[0].get_document("$set").unwrap();
        let cond = set
            .get_document("instance")
            .unwrap()
            .get_array("$cond")
            .unwrap();
        assert_eq!(cond[1], Bson::Document(doc! { "$literal": "$epoch" }));
        assert_eq!(
            claim_projection(),
            doc! { "_id": 0, "epoch": 1, "claim_id": 1 }
        );
        assert_eq!(grant_projection(), doc! { "_id": 0, "epoch": 1 });
    }

    #[test]
    fn a_claim_won_only_when_its_own_claim_id_came_back() {
        let ttl = Duration::from_millis(600);
        let won = doc! { "epoch": 7_i64, "claim_id": "mine" };
        assert_eq!(
            grant_from_claim(&won, "mine", ttl).unwrap(),
            Some(Grant {
                term: 7,
                expires_in: ttl
            })
        );
        // Someone else's live lease came back unchanged: held.
        assert_eq!(grant_from_claim(&won, "other", ttl).unwrap(), None);
        assert_eq!(
            grant_from_claim(&doc! { "epoch": 7_i64 }, "mine", ttl).unwrap(),
            None
        );
        // Won, but the term is unreadable: an error, never a guess.
        assert!(grant_from_claim(&doc! { "claim_id": "mine" }, "mine", ttl).is_err());
    }

    #[test]
    fn renew_and_release_act_only_on_a_live_lease_of_the_holder() {
        let holder = "ffeeddccbbaa99887766554433221100";
        let held = doc! {
            "_id": "n",
            "holder": "ffeeddccbbaa99887766554433221100",
            "$expr": { "$gt": ["$expires_at", "$$NOW"] },
        };
        assert_eq!(held_filter("n", holder), held);
        assert_eq!(
            renew_update(600),
            vec![doc! { "$set": { "expires_at": { "$add": ["$$NOW", Bson::Int64(600)] } } }]
        );
        assert_eq!(
            release_update(),
            doc! { "$set": { "expires_at": DateTime::from_millis(0) } }
        );
        assert_eq!(release_projection(), doc! { "_id": 1 });
        assert_eq!(
            live_filter("n"),
            doc! { "_id": "n", "$expr": { "$gt": ["$expires_at", "$$NOW"] } }
        );
    }

    #[test]
    fn reads_compute_the_time_left_on_the_server() {
        let holder = "ffeeddccbbaa99887766554433221100";
        assert_eq!(
            verify_pipeline("n", holder),
            vec![
                doc! { "$match": {
                    "_id": "n",
                    "holder": "ffeeddccbbaa99887766554433221100",
                    "$expr": { "$gt": ["$expires_at", "$$NOW"] },
                } },
                doc! { "$project": {
                    "_id": 0,
                    "epoch": 1,
                    "remaining_ms": { "$subtract": ["$expires_at", "$$NOW"] },
                } },
            ]
        );
        assert_eq!(
            get_pipeline("n"),
            vec![
                doc! { "$match": { "_id": "n" } },
                doc! { "$project": {
                    "_id": 1,
                    "instance": 1,
                    "epoch": 1,
                    "remaining_ms": {
                        "$max": [{ "$subtract": ["$expires_at", "$$NOW"] }, Bson::Int64(0)]
                    },
                } },
            ]
        );
    }

    #[test]
    fn names_are_matched_as_text() {
        // A name that looks like an operator or a field path stays a plain equality.
        assert_eq!(
            claim_filter("$where").get("_id"),
            Some(&Bson::String("$where".into()))
        );
        assert_eq!(get_pipeline("$x")[0], doc! { "$match": { "_id": "$x" } });
    }

    #[test]
    fn replies_are_read_whatever_the_numeric_type() {
        let g = grant_from_update(&doc! { "epoch": 3_i64 }, Duration::from_millis(600)).unwrap();
        assert_eq!((g.term, g.expires_in), (3, Duration::from_millis(600)));
        let g = grant_from_update(&doc! { "epoch": 4_i32 }, Duration::from_secs(1)).unwrap();
        assert_eq!(g.term, 4);
        let e = grant_from_update(&doc! {}, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(grant_from_update(&doc! { "epoch": -1_i64 }, Duration::from_secs(1)).is_err());

        let v = grant_from_verify(&doc! { "epoch": 2_i64, "remaining_ms": 450_i64 }).unwrap();
        assert_eq!(
            v,
            Some(Grant {
                term: 2,
                expires_in: Duration::from_millis(450)
            })
        );
        assert_eq!(
            grant_from_verify(&doc! { "epoch": 2_i64, "remaining_ms": 0_i64 }).unwrap(),
            None
        );

        let info = info_from_get(
            "n",
            &doc! { "_id": "n", "instance": "a", "epoch": 5_i64, "remaining_ms": 0_i32 },
        )
        .unwrap();
        assert_eq!(
            info,
            LeaseInfo {
                name: "n".into(),
                instance: "a".into(),
                term: 5,
                live: false,
                expires_in: Duration::ZERO
            }
        );
        let info = info_from_get(
            "n",
            &doc! { "instance": "b", "epoch": 6.0, "remaining_ms": 1200_i64 },
        )
        .unwrap();
        assert!(info.live);
        assert_eq!(
            (info.term, info.expires_in),
            (6, Duration::from_millis(1200))
        );
    }

    #[test]
    fn the_slot_claim_reads_the_record_and_the_server_clock_in_one_aggregate() {
        assert_eq!(
            slot_read_pipeline("job/nightly"),
            vec![
                doc! { "$match": { "_id": "job/nightly" } },
                doc! { "$project": {
                    "_id": 0,
                    "epoch": 1,
                    "slot_ms": 1,
                    "unfinished_ms": 1,
                    "live": { "$gt": ["$expires_at", "$$NOW"] },
                } },
                doc! { "$facet": { "rec": [{ "$limit": 1_i32 }] } },
                doc! { "$project": {
                    "now_ms": { "$toLong": "$$NOW" },
                    "rec": { "$arrayElemAt": ["$rec", 0_i32] },
                } },
            ]
        );
    }

    #[test]
    fn the_slot_claim_is_decided_in_the_contracts_order() {
        use lease_core::backend::SlotClaim;
        let now = 1_700_000_000_000_i64;
        let plan = |rec: Option<Document>, at: i64| {
            let mut reply = doc! { "now_ms": now };
            if let Some(r) = rec {
                reply.insert("rec", r);
            }
            slot_plan(&reply, at).unwrap()
        };
        // No record: claimable when due, early otherwise; never taken.
        assert_eq!(plan(None, now), SlotPlan::Write { term: None });
        assert_eq!(plan(None, i64::MIN), SlotPlan::Write { term: None });
        assert_eq!(
            plan(None, now + 1),
            SlotPlan::Refuse(SlotClaim::Early { now_ms: now })
        );
        // A live lease is held before anything else.
        let live = doc! { "epoch": 4_i64, "slot_ms": now, "live": true };
        assert_eq!(plan(Some(live), now), SlotPlan::Refuse(SlotClaim::Held));
        let free = || doc! { "epoch": 4_i64, "slot_ms": now - 1_000, "unfinished_ms": Bson::Null, "live": false };
        assert_eq!(
            plan(Some(free()), now - 1_000),
            SlotPlan::Refuse(SlotClaim::Taken {
                last_ms: now - 1_000
            })
        );
        assert_eq!(
            plan(Some(free()), now - 5_000),
            SlotPlan::Refuse(SlotClaim::Taken {
                last_ms: now - 1_000
            })
        );
        // Taken before early.
        let ahead = doc! { "epoch": 4_i64, "slot_ms": now + 9_000, "live": false };
        assert_eq!(
            plan(Some(ahead), now + 5_000),
            SlotPlan::Refuse(SlotClaim::Taken {
                last_ms: now + 9_000
            })
        );
        assert_eq!(
            plan(Some(free()), now + 1),
            SlotPlan::Refuse(SlotClaim::Early { now_ms: now })
        );
        assert_eq!(
            plan(Some(free()), now - 999),
            SlotPlan::Write { term: Some(4) }
        );
        // A record of plain claims (no slot fields), and one no claim ever wrote (no epoch).
        assert_eq!(
            plan(Some(doc! { "epoch": 2_i32, "live": false }), now),
            SlotPlan::Write { term: Some(2) }
        );
        assert_eq!(
            plan(Some(doc! { "live": false }), now),
            SlotPlan::Write { term: None }
        );
        // Unreadable answers are errors, never guesses.
        assert!(slot_plan(&doc! {}, now).is_err());
        assert!(slot_plan(&doc! { "now_ms": now, "rec": "x" }, now).is_err());
        let bad_last =
            doc! { "now_ms": now, "rec": { "epoch": 1_i64, "slot_ms": "x", "live": false } };
        assert!(slot_plan(&bad_last, now).is_err());
        let bad_term = doc! { "now_ms": now, "rec": { "epoch": 0_i64, "live": false } };
        assert!(slot_plan(&bad_term, now).is_err());
    }

    #[test]
    fn the_slot_claim_writes_with_the_term_compared() {
        let free = doc! { "$lte": ["$expires_at", "$$NOW"] };
        assert_eq!(
            slot_claim_filter("n", Some(7), 1_000),
            doc! {
                "_id": "n",
                "epoch": 7_i64,
                "$expr": { "$and": [
                    free,
                    { "$lt": [{ "$ifNull": ["$slot_ms", Bson::Null] }, 1_000_i64] },
                    { "$lte": [1_000_i64, { "$toLong": "$$NOW" }] },
                ] },
            }
        );
        // The first record: an upsert, so no $expr; a competitor's insert collides on _id.
        assert_eq!(
            slot_claim_filter("n", None, 1_000),
            doc! { "_id": "n", "epoch": { "$exists": false } }
        );
        assert!(!slot_claim_filter("n", None, 1).contains_key("$expr"));
        assert_eq!(
            slot_claim_update("00112233445566778899aabbccddeeff", "$epoch", 15_000, 1_000),
            vec![doc! {
                "$set": {
                    "holder": { "$literal": "00112233445566778899aabbccddeeff" },
                    "instance": { "$literal": "$epoch" },
                    "epoch": { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
                    "expires_at": { "$add": ["$$NOW", 15_000_i64] },
                    "slot_ms": { "$literal": 1_000_i64 },
                    "unfinished_ms": { "$literal": 1_000_i64 },
                }
            }]
        );
        assert_eq!(
            slot_claim_projection(),
            doc! { "_id": 0, "epoch": 1, "unfinished_ms": 1 }
        );
    }

    #[test]
    fn a_slot_claim_reports_from_the_document_before_its_write() {
        use lease_core::backend::SlotClaim;
        let ttl = Duration::from_millis(900);
        let claimed = |term, superseded_ms| SlotClaim::Claimed {
            grant: Grant {
                term,
                expires_in: ttl,
            },
            superseded_ms,
        };
        assert_eq!(slot_claimed(None, ttl).unwrap(), claimed(1, None));
        assert_eq!(
            slot_claimed(
                Some(&doc! { "epoch": 3_i64, "unfinished_ms": 500_i64 }),
                ttl
            )
            .unwrap(),
            claimed(4, Some(500))
        );
        assert_eq!(
            slot_claimed(
                Some(&doc! { "epoch": 3_i64, "unfinished_ms": Bson::Null }),
                ttl
            )
            .unwrap(),
            claimed(4, None)
        );
        assert_eq!(slot_claimed(Some(&doc! {}), ttl).unwrap(), claimed(1, None));
        assert!(slot_claimed(Some(&doc! { "epoch": "x" }), ttl).is_err());
        assert!(slot_claimed(Some(&doc! { "epoch": 1_i64, "unfinished_ms": 0.5 }), ttl).is_err());
    }

    #[test]
    fn finish_is_one_conditional_pipeline_that_reports_what_applied() {
        let holder = "ffeeddccbbaa99887766554433221100";
        let fid = "0123456789abcdef0123456789abcdef";
        let held = || {
            doc! { "$and": [
                { "$eq": ["$holder", { "$literal": "ffeeddccbbaa99887766554433221100" }] },
                { "$gt": ["$expires_at", "$$NOW"] },
            ] }
        };
        let recorded = || doc! { "$eq": ["$slot_ms", 1_000_i64] };
        let taken =
            doc! { "$and": [held(), recorded(), { "$lte": [5_000_i64, { "$toLong": "$$NOW" }] }] };
        let tail = |taken: Bson| {
            doc! {
                "unfinished_ms": { "$cond": [
                    { "$and": [recorded(), { "$eq": ["$unfinished_ms", 1_000_i64] }] },
                    Bson::Null,
                    "$unfinished_ms",
                ] },
                "expires_at": { "$cond": [held(), DateTime::from_millis(0), "$expires_at"] },
                "last_finish": { "$cond": [
                    { "$or": [held(), recorded()] },
                    {
                        "id": { "$literal": "0123456789abcdef0123456789abcdef" },
                        "recorded": recorded(),
                        "passed_taken": taken,
                        "released": held(),
                    },
                    "$last_finish",
                ] },
            }
        };
        let mut with_passed = doc! {
            "slot_ms": { "$cond": [taken.clone(), 5_000_i64, "$slot_ms"] },
        };
        with_passed.extend(tail(Bson::Document(taken)));
        assert_eq!(
            finish_update(holder, 1_000, Some(5_000), fid),
            vec![doc! { "$set": with_passed }]
        );
        // No passed instant, or one not after the instant: slot_ms is left alone.
        let without = vec![doc! { "$set": tail(Bson::Document(doc! { "$literal": false })) }];
        assert_eq!(finish_update(holder, 1_000, None, fid), without);
        assert_eq!(finish_update(holder, 1_000, Some(1_000), fid), without);
        assert_eq!(finish_update(holder, 1_000, Some(10), fid), without);
        assert_eq!(finish_projection(), doc! { "_id": 0, "last_finish": 1 });
        assert_eq!(name_filter("$x"), doc! { "_id": "$x" });
    }

    #[test]
    fn a_finish_reports_only_its_own_outcome() {
        use lease_core::backend::SlotFinish;
        let fid = "mine";
        let reply = doc! { "last_finish": {
            "id": "mine", "recorded": true, "passed_taken": false, "released": true,
        } };
        assert_eq!(
            finish_from_reply(Some(&reply), fid),
            SlotFinish {
                recorded: true,
                passed_taken: false,
                released: true
            }
        );
        // An earlier finish's outcome left as it was: nothing applied.
        assert_eq!(
            finish_from_reply(Some(&reply), "other"),
            SlotFinish::default()
        );
        assert_eq!(
            finish_from_reply(Some(&doc! {}), fid),
            SlotFinish::default()
        );
        assert_eq!(finish_from_reply(None, fid), SlotFinish::default());
    }

    #[test]
    fn a_rerun_is_one_conditional_write() {
        assert_eq!(
            rerun_filter("n", 1_000),
            doc! {
                "_id": "n",
                "unfinished_ms": 1_000_i64,
                "slot_ms": 1_000_i64,
                "rerun_ms": { "$ne": 1_000_i64 },
                "$expr": { "$lte": ["$expires_at", "$$NOW"] },
            }
        );
        assert_eq!(
            rerun_update("00112233445566778899aabbccddeeff", "w", 600, 1_000),
            vec![doc! {
                "$set": {
                    "holder": { "$literal": "00112233445566778899aabbccddeeff" },
                    "instance": { "$literal": "w" },
                    "epoch": { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
                    "expires_at": { "$add": ["$$NOW", 600_i64] },
                    "rerun_ms": { "$literal": 1_000_i64 },
                }
            }]
        );
    }

    #[test]
    fn unfinished_is_one_aggregate_over_all_names() {
        let names = vec!["a".to_owned(), "$b".to_owned()];
        assert_eq!(
            unfinished_pipeline(&names),
            vec![
                doc! { "$match": {
                    "_id": { "$in": ["a", "$b"] },
                    "unfinished_ms": { "$ne": Bson::Null },
                    "$expr": { "$and": [
                        { "$eq": ["$slot_ms", "$unfinished_ms"] },
                        { "$ne": ["$rerun_ms", "$unfinished_ms"] },
                        { "$lte": ["$expires_at", "$$NOW"] },
                    ] },
                } },
                doc! { "$project": { "_id": 1, "unfinished_ms": 1 } },
            ]
        );
        let names: Vec<String> = ["c", "a", "b", "a"].map(String::from).to_vec();
        let replies = [
            doc! { "_id": "a", "unfinished_ms": 10_i64 },
            doc! { "_id": "c", "unfinished_ms": 30_i32 },
        ];
        assert_eq!(
            unfinished_from_replies(&names, &replies).unwrap(),
            vec![("c".into(), 30), ("a".into(), 10), ("a".into(), 10)]
        );
        assert!(unfinished_from_replies(&names, &[doc! { "_id": "a" }]).is_err());
        assert!(unfinished_from_replies(&names, &[doc! { "unfinished_ms": 1_i64 }]).is_err());
    }

    #[test]
    fn last_slot_reads_the_three_instants() {
        assert_eq!(
            last_slot_projection(),
            doc! { "_id": 0, "slot_ms": 1, "unfinished_ms": 1, "rerun_ms": 1 }
        );
        assert_eq!(
            slot_record_from(
                &doc! { "slot_ms": 5_i64, "unfinished_ms": Bson::Null, "rerun_ms": 3_i32 }
            )
            .unwrap(),
            lease_core::backend::SlotRecord {
                last_ms: Some(5),
                unfinished_ms: None,
                rerun_ms: Some(3)
            }
        );
        // A record of plain claims only.
        assert_eq!(
            slot_record_from(&doc! {}).unwrap(),
            lease_core::backend::SlotRecord::default()
        );
        assert!(slot_record_from(&doc! { "slot_ms": "x" }).is_err());
    }

    #[test]
    fn views_and_collations_other_than_binary_are_refused() {
        assert!(check_collection("leases", false, None, "db").is_ok());
        assert!(check_collection("leases", false, Some("simple"), "db").is_ok());
        let e = check_collection("leases", false, Some("en"), "db:1").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(
            e.message().contains("\"en\"") && e.message().contains("db:1"),
            "{e}"
        );
        let e = check_collection("leases", true, None, "db").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn old_servers_are_refused() {
        let ok = doc! { "version": "4.2.0", "versionArray": [4_i32, 2_i32, 0_i32, 0_i32] };
        assert!(check_build_info(&ok, "db:27017").is_ok());
        let new = doc! { "version": "8.0.4", "versionArray": [8_i32, 0_i32, 4_i32, 0_i32] };
        assert!(check_build_info(&new, "db:27017").is_ok());
        let old = doc! { "version": "4.0.28", "versionArray": [4_i32, 0_i32, 28_i32, 0_i32] };
        let e = check_build_info(&old, "db:27017").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(
            e.message().contains("4.0.28") && e.message().contains("4.2"),
            "{e}"
        );
        assert!(e.message().contains("db:27017"), "{e}");
        assert!(check_build_info(&doc! {}, "db").is_err());
    }
}
