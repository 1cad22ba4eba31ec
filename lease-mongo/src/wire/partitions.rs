//! The partition lease documents, one per `(group, partition)` in the partition collection:
//! acquire, renew (update, then read back), release and owners, and how their replies are read.

use std::time::Duration;

use lease_core::Result;
use mongodb::bson::{Bson, Document, doc};

use super::*;

/// The field of a partition lease holding its owner (one process incarnation, as given).
pub(crate) const OWNER: &str = "owner";
/// The field of a partition lease holding the random id of the last renewal that extended it:
/// how a batch renewal reads back exactly the leases it extended.
pub(crate) const RENEWAL_ID: &str = "renewal_id";
/// The computed field partition reads return: the partition number (from `_id.p`).
pub(crate) const PARTITION: &str = "partition";

/// A partition lease's `_id`: `{g: group, p: partition}`, the partition as an int64 (a `u32`
/// does not fit an int32). The field order is fixed: `_id` equality compares whole documents.
pub(crate) fn partition_id(group: &str, partition: u32) -> Document {
    doc! { "g": group, "p": i64::from(partition) }
}

/// Acquire's filter: the partition's document, whatever its state. With `upsert`, a missing
/// document is inserted with this `_id`.
///
/// As for the lease claim ([`claim_filter`]), the condition "expired or the acquirer's own" is
/// not in the filter: MongoDB refuses `$expr` in the query of an upsert (error 224). It is in
/// the update pipeline ([`acquire_update`]), which leaves a document it does not admit as it
/// was.
pub(crate) fn acquire_filter(group: &str, partition: u32) -> Document {
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
pub(crate) fn acquire_update(owner: &str, ttl_ms: i64) -> Vec<Document> {
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
pub(crate) fn acquire_projection() -> Document {
    doc! { "_id": 0, OWNER: 1, EPOCH: 1 }
}

/// The lease an acquire reports from the document after its update: `Some` with the epoch and
/// `ttl` left (the expiry was just set to `$$NOW` + `ttl`) when the document names `owner`,
/// `None` when another owner holds the partition live.
pub(crate) fn partition_from_acquire(
    reply: &Document,
    partition: u32,
    owner: &str,
    ttl: Duration,
) -> Result<Option<lease_core::backend::partitions::PartitionLease>> {
    if reply.get_str(OWNER).ok() != Some(owner) {
        return Ok(None);
    }
    Ok(Some(lease_core::backend::partitions::PartitionLease {
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
pub(crate) fn owned_filter(group: &str, partitions: &[u32], owner: &str) -> Document {
    doc! {
        "_id": { "$in": partition_ids(group, partitions) },
        OWNER: owner,
        "$expr": live(),
    }
}

/// Renew's update pipeline: the expiry `ttl_ms` after `$$NOW` (one value for the whole
/// command, so one expiry for the batch) and this call's `renewal_id` (fresh and random per
/// call). Owner and epoch stay.
pub(crate) fn partition_renew_update(ttl_ms: i64, renewal_id: &str) -> Vec<Document> {
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
pub(crate) fn renewed_pipeline(
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
pub(crate) fn owners_pipeline(group: &str) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id.g": group, "$expr": live() } },
        partition_projection(),
    ]
}

/// The leases a partition read ([`renewed_pipeline`], [`owners_pipeline`]) reports, by
/// partition number; a document whose time left is not positive is left out.
pub(crate) fn partitions_from_replies(
    replies: &[Document],
) -> Result<Vec<lease_core::backend::partitions::PartitionLease>> {
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
        out.push(lease_core::backend::partitions::PartitionLease {
            partition,
            owner: owner.to_owned(),
            epoch: term_of(r)?,
            expires_in,
        });
    }
    out.sort_by_key(|l| l.partition);
    Ok(out)
}
