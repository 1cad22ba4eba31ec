//! The scheduler slot documents, kept on the lease document: claim slot, finish, claim rerun,
//! unfinished and last slot, and how their replies are read.

use std::time::Duration;

use lease_core::Result;
use lease_core::backend::Grant;
use mongodb::bson::{Bson, DateTime, Document, doc};

use super::*;

/// The field holding the last instant claimed (or taken along by a finish), in milliseconds
/// since the Unix epoch.
pub(crate) const SLOT_MS: &str = "slot_ms";
/// The field holding the instant whose round is running or was cut short (ms since the epoch).
pub(crate) const UNFINISHED_MS: &str = "unfinished_ms";
/// The field holding the unfinished instant claimed a second time (ms since the epoch).
pub(crate) const RERUN_MS: &str = "rerun_ms";
/// The field holding the outcome of the last finish that changed the document:
/// `{id, recorded, passed_taken, released}`, `id` being that finish's fresh random id.
pub(crate) const LAST_FINISH: &str = "last_finish";
/// The computed field the slot claim's read returns: the server's `$$NOW` in milliseconds.
pub(crate) const NOW_MS: &str = "now_ms";
/// The computed field the slot claim's read returns: the lease is live by `$$NOW`.
pub(crate) const LIVE: &str = "live";
/// The field of the slot claim's read holding the record, absent when there is none.
pub(crate) const RECORD: &str = "rec";

/// `{$toLong: "$$NOW"}`: the server's clock in milliseconds since the Unix epoch, to compare
/// with the instants (a number compared with a date is always smaller, whatever its value).
fn now_ms() -> Bson {
    Bson::Document(doc! { "$toLong": "$$NOW" })
}

/// The name's document, whatever its state: the filter of finish and last slot.
pub(crate) fn name_filter(name: &str) -> Document {
    doc! { "_id": name }
}

/// The slot claim's read (`aggregate`): one document whether or not the name has a record,
/// `{now_ms: <$$NOW in ms>, rec: {epoch, slot_ms, unfinished_ms, live}}` with `rec` absent
/// when there is no record. `$facet` turns "no document" into one document with an empty
/// array, so the server's clock comes back either way; `$$NOW` is used outside the facet's
/// sub-pipeline only.
pub(crate) fn slot_read_pipeline(name: &str) -> Vec<Document> {
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
pub(crate) enum SlotPlan {
    /// The claim is refused: held, taken or early, as the read says.
    Refuse(lease_core::backend::slots::SlotClaim),
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
pub(crate) fn slot_plan(reply: &Document, instant_ms: i64) -> Result<SlotPlan> {
    use lease_core::backend::slots::SlotClaim;
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
pub(crate) fn slot_claim_filter(name: &str, term: Option<u64>, instant_ms: i64) -> Document {
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
pub(crate) fn slot_claim_update(
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
pub(crate) fn slot_claim_projection() -> Document {
    doc! { "_id": 0, EPOCH: 1, UNFINISHED_MS: 1 }
}

/// The claim a slot claim reports once its write applied, from the document before the update
/// (`None` when the upsert inserted it): the term one above the old one, `ttl` left, and the
/// old unfinished instant as superseded.
pub(crate) fn slot_claimed(
    before: Option<&Document>,
    ttl: Duration,
) -> Result<lease_core::backend::slots::SlotClaim> {
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
    Ok(lease_core::backend::slots::SlotClaim::Claimed {
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
pub(crate) fn finish_update(
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
pub(crate) fn finish_projection() -> Document {
    doc! { "_id": 0, LAST_FINISH: 1 }
}

/// What a finish reports from the document after its update (`None`: no document): the
/// outcome it wrote when `last_finish.id` is its own `finish_id`, nothing applied otherwise.
pub(crate) fn finish_from_reply(
    reply: Option<&Document>,
    finish_id: &str,
) -> lease_core::backend::slots::SlotFinish {
    let Some(outcome) = reply.and_then(|r| r.get_document(LAST_FINISH).ok()) else {
        return lease_core::backend::slots::SlotFinish::default();
    };
    if outcome.get_str("id").ok() != Some(finish_id) {
        return lease_core::backend::slots::SlotFinish::default();
    }
    let flag = |k: &str| outcome.get_bool(k).unwrap_or(false);
    lease_core::backend::slots::SlotFinish {
        recorded: flag("recorded"),
        passed_taken: flag("passed_taken"),
        released: flag("released"),
    }
}

/// Claim again's filter (no upsert): the name's document with `instant_ms` unfinished and
/// still the last instant, not rerun yet, and the lease free by `$$NOW`.
pub(crate) fn rerun_filter(name: &str, instant_ms: i64) -> Document {
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
pub(crate) fn rerun_update(
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
pub(crate) fn unfinished_pipeline(names: &[String]) -> Vec<Document> {
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
pub(crate) fn unfinished_from_replies(
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
pub(crate) fn last_slot_projection() -> Document {
    doc! { "_id": 0, SLOT_MS: 1, UNFINISHED_MS: 1, RERUN_MS: 1 }
}

/// The instants on record, from last slot's `find`: a missing or null field is `None`.
pub(crate) fn slot_record_from(reply: &Document) -> Result<lease_core::backend::slots::SlotRecord> {
    Ok(lease_core::backend::slots::SlotRecord {
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
