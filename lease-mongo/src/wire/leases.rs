//! The lease documents: claim, renew, release, force release, verify and get, and how their
//! replies are read.

use std::time::Duration;

use lease_core::backend::Grant;
use lease_core::{Result, backend::LeaseInfo};
use mongodb::bson::{Bson, Document, doc};

use super::{
    EPOCH, EXPIRES_AT, HOLDER, INSTANCE, REMAINING_MS, RENEWAL_ID, if_free, live, number,
    remaining_of, term_of,
};

/// The field holding the random id of the claim that last won the name: how a claim tells
/// that its own update took the lease.
pub(crate) const CLAIM_ID: &str = "claim_id";

/// The claim's filter: the name's document, whatever its state. With `upsert`, a missing
/// document is inserted with `_id` = `name`.
///
/// The condition "free by the server's clock" cannot be in this filter: MongoDB refuses
/// `$expr` in the query of an upsert (error 224, "$expr is not allowed in the query predicate
/// for an upsert"; SERVER-59704). It is in the update pipeline instead ([`claim_update`]).
pub(crate) fn claim_filter(name: &str) -> Document {
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
pub(crate) fn claim_update(
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
pub(crate) fn claim_projection() -> Document {
    doc! { "_id": 0, EPOCH: 1, CLAIM_ID: 1 }
}

/// What renew returns of the document after the update: the term alone.
pub(crate) fn grant_projection() -> Document {
    doc! { "_id": 0, EPOCH: 1 }
}

/// Renew's and release's filter: the name's document, live, under this holder token.
pub(crate) fn held_filter(name: &str, holder_hex: &str) -> Document {
    doc! { "_id": name, HOLDER: holder_hex, "$expr": live() }
}

/// Renew's update pipeline: the expiry `ttl_ms` after the server's `$$NOW`; nothing else
/// changes.
pub(crate) fn renew_update(ttl_ms: i64) -> Vec<Document> {
    vec![doc! { "$set": { EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] } } }]
}

/// Force release's filter: the name's document while live, whoever holds it.
pub(crate) fn live_filter(name: &str) -> Document {
    doc! { "_id": name, "$expr": live() }
}

/// What release returns of the matched document: only that there was one.
pub(crate) fn release_projection() -> Document {
    doc! { "_id": 1 }
}

/// Verify's aggregation: the name's document when live under this holder token, with the
/// term and the milliseconds left, both computed by the server.
pub(crate) fn verify_pipeline(name: &str, holder_hex: &str) -> Vec<Document> {
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
pub(crate) fn get_pipeline(name: &str) -> Vec<Document> {
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

/// The grant a claim reports from the document after its update: `Some` with the term and
/// `ttl` left when the document carries this call's `claim_id` (the claim won and set the
/// expiry to `$$NOW` + `ttl`), `None` when someone holds the name live.
pub(crate) fn grant_from_claim(
    reply: &Document,
    claim_id: &str,
    ttl: Duration,
) -> Result<Option<Grant>> {
    if reply.get_str(CLAIM_ID).ok() != Some(claim_id) {
        return Ok(None);
    }
    grant_from_update(reply, ttl).map(Some)
}

/// The grant a renewal reports from the document after the update: its term, and `ttl` left
/// (the expiry was just set to the server's `$$NOW` + `ttl`).
pub(crate) fn grant_from_update(reply: &Document, ttl: Duration) -> Result<Grant> {
    Ok(Grant {
        term: term_of(reply)?,
        expires_in: ttl,
    })
}

/// The grant verify reports: the term and the time left as the server computed it. `None`
/// when the server's answer says no time is left.
pub(crate) fn grant_from_verify(reply: &Document) -> Result<Option<Grant>> {
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
pub(crate) fn info_from_get(name: &str, reply: &Document) -> Result<LeaseInfo> {
    let expires_in = remaining_of(reply)?;
    Ok(LeaseInfo {
        name: name.to_owned(),
        instance: reply.get_str(INSTANCE).unwrap_or_default().to_owned(),
        term: term_of(reply)?,
        live: !expires_in.is_zero(),
        expires_in,
    })
}

/// One statement of `renew_many`'s `update` command ([`renew_many_command`]): the name's
/// document while live under this holder token ([`held_filter`], checked per name), its expiry
/// `ttl_ms` after the statement's `$$NOW` (as [`renew_update`] sets it) and the call's
/// `renewal_id` (fresh and random per call), which the read-back ([`renewed_many_pipeline`])
/// looks for. One document at most (`multi: false`), never inserted.
pub(crate) fn renew_many_statement(
    name: &str,
    holder_hex: &str,
    ttl_ms: i64,
    renewal_id: &str,
) -> Document {
    doc! {
        "q": held_filter(name, holder_hex),
        "u": [{ "$set": {
            EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
            RENEWAL_ID: { "$literal": renewal_id },
        } }],
        "multi": false,
        "upsert": false,
    }
}

/// `renew_many`'s write: one `update` command on `collection` carrying one statement per name
/// ([`renew_many_statement`]), unordered (a statement that fails does not stop the others), with
/// the store's write concern (`{w: "majority", j: true}`, `wtimeout` the operation timeout).
pub(crate) fn renew_many_command(
    collection: &str,
    statements: Vec<Document>,
    wtimeout_ms: i64,
) -> Document {
    doc! {
        "update": collection,
        "updates": statements,
        "ordered": false,
        "writeConcern": { "w": "majority", "j": true, "wtimeout": wtimeout_ms },
    }
}

/// `renew_many`'s read-back (`aggregate`, in the same causally consistent session as the
/// update): the documents of `names` that carry this call's `renewal_id` and are live by
/// `$$NOW`, with their holder token and term. The client keeps those whose holder is the one
/// its item named: a document renewed by this call and then released, expired and claimed by
/// another holder would still carry the renewal id.
pub(crate) fn renewed_many_pipeline(names: &[&str], renewal_id: &str) -> Vec<Document> {
    vec![
        doc! { "$match": {
            "_id": { "$in": names },
            RENEWAL_ID: renewal_id,
            "$expr": live(),
        } },
        doc! { "$project": { "_id": 1, HOLDER: 1, EPOCH: 1 } },
    ]
}

/// The read-back's documents ([`renewed_many_pipeline`]) as `(name, holder token, term)`.
pub(crate) fn renewed_many_from_replies(
    replies: &[Document],
) -> Result<Vec<(String, String, u64)>> {
    replies
        .iter()
        .map(|r| {
            let name = r.get_str("_id").map_err(|_| super::malformed("_id", r))?;
            let holder = r.get_str(HOLDER).map_err(|_| super::malformed(HOLDER, r))?;
            Ok((name.to_owned(), holder.to_owned(), term_of(r)?))
        })
        .collect()
}

/// What an `update` command's reply says went wrong: the statements that failed, by their index
/// in the command (`writeErrors`: `{index, code, errmsg}`), and the write concern error
/// (`writeConcernError`: `{code, errmsg}`) when the writes were not confirmed as asked, which
/// leaves the outcome of every statement unknown. The documents are the server's, for the
/// driver's error types to read.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct UpdateFailures {
    pub(crate) statements: Vec<(usize, Document)>,
    pub(crate) write_concern: Option<Document>,
}

/// The failures an `update` command's reply reports (see [`UpdateFailures`]); a write error
/// without a valid index is left out (no statement can be blamed; the read-back still answers
/// for every name).
pub(crate) fn update_failures(reply: &Document) -> UpdateFailures {
    let statements = reply
        .get_array("writeErrors")
        .map(|errors| {
            errors
                .iter()
                .filter_map(Bson::as_document)
                .filter_map(|e| {
                    let index = e.get("index").and_then(number)?;
                    Some((usize::try_from(index).ok()?, e.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let write_concern = reply.get_document("writeConcernError").ok().cloned();
    UpdateFailures {
        statements,
        write_concern,
    }
}
