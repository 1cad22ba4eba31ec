//! The counted-lease document: one per counted name in the lease collection, apart from the
//! name's lease document (its `_id` is a document, a lease's a string), holding the greatest
//! term issued for the name and an array with one element per permit ever claimed:
//!
//! ```text
//! { _id: { c: <name: string> }, epoch: <greatest term: int64>,
//!   permits: [ { p: <index: int32>, holder: <token: 32 hex digits>, instance: <label>,
//!                epoch: <term: int64>, expires_at: <date, by $$NOW>,
//!                op_id: <random id of the claim, renewal or release that last changed it> },
//!              … ] }
//! ```
//!
//! Claim = `findAndModify` upsert [`counted_filter`] / [`permit_claim_update`]; renew and
//! release = `findAndModify` [`counted_filter`] / [`permit_renew_update`],
//! [`permit_release_update`]; verify and permits = `aggregate` [`permits_pipeline`]. Each update
//! is one pipeline judged on one `$$NOW`, so counting and taking are one atomic step, and each
//! call tells that its own update took effect by the fresh `op_id` it wrote
//! ([`permits_from_reply`]).

use std::time::Duration;

use lease_core::{Error, Result};
use mongodb::bson::{Bson, DateTime, Document, doc};

use super::{EPOCH, EXPIRES_AT, HOLDER, INSTANCE, REMAINING_MS, number};

/// The array of a counted name's permits.
pub(crate) const PERMITS: &str = "permits";
/// A permit's index in its element.
pub(crate) const PERMIT: &str = "p";
/// The random id of the call that last changed a permit.
pub(crate) const OP_ID: &str = "op_id";

/// The filter of every counted-lease command: the counted name's document. With `upsert`, a
/// missing one is inserted with this `_id`.
pub(crate) fn counted_filter(name: &str) -> Document {
    doc! { "_id": { "c": name } }
}

/// A permit count or index as the int32 `$range` takes (both are at most
/// [`MAX_PERMITS`](lease_core::backend::permits::MAX_PERMITS), checked before any I/O).
fn int32(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// `$permits`, or an empty array on a new document.
fn permits() -> Bson {
    Bson::Document(doc! { "$ifNull": ["$permits", []] })
}

/// The claim's update pipeline. Stage 1 counts, on the document as it was and by one
/// `$$NOW`, the permits live (`expires_at` > `$$NOW`), whether `holder_hex` holds one of them,
/// and the lowest index below `count` that none of them has; stage 2, when fewer than `count`
/// are live and none under this holder, raises `epoch` by one; stage 3 then replaces that
/// permit's element by the new holder's, with the new `epoch`, expiry `ttl_ms` after `$$NOW`
/// and `op_id`; stage 4 drops the scratch field. Otherwise the document is left as it was.
pub(crate) fn permit_claim_update(
    count: u32,
    holder_hex: &str,
    instance: &str,
    ttl_ms: i64,
    op_id: &str,
) -> Vec<Document> {
    let live = doc! { "$filter": {
        "input": permits(),
        "cond": { "$gt": ["$$this.expires_at", "$$NOW"] },
    } };
    vec![
        doc! { "$set": { "_claim": { "$let": {
            "vars": { "live": live },
            "in": {
                "ok": { "$and": [
                    { "$lt": [{ "$size": "$$live" }, i64::from(count)] },
                    // `$eq: [.., false]` rather than `$not`, which the emulator CI runs lacks.
                    { "$eq": [{ "$in": [{ "$literal": holder_hex }, "$$live.holder"] }, false] },
                ] },
                "free": { "$min": { "$setDifference": [
                    { "$range": [0_i32, int32(count)] },
                    "$$live.p",
                ] } },
            },
        } } } },
        doc! { "$set": { EPOCH: { "$cond": [
            "$_claim.ok",
            { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
            { "$ifNull": ["$epoch", 0_i64] },
        ] } } },
        doc! { "$set": { PERMITS: { "$cond": [
            "$_claim.ok",
            { "$concatArrays": [
                { "$filter": {
                    "input": permits(),
                    "cond": { "$ne": ["$$this.p", "$_claim.free"] },
                } },
                [{
                    PERMIT: "$_claim.free",
                    HOLDER: { "$literal": holder_hex },
                    INSTANCE: { "$literal": instance },
                    EPOCH: "$epoch",
                    EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
                    OP_ID: { "$literal": op_id },
                }],
            ] },
            permits(),
        ] } } },
        doc! { "$unset": "_claim" },
    ]
}

/// An update pipeline that rewrites the element of permit `permit` with `set` when it is live
/// by `$$NOW` under `holder_hex`, stamping `op_id` on it; every other element is kept.
fn permit_update(permit: u32, holder_hex: &str, op_id: &str, set: Document) -> Vec<Document> {
    let mut set = set;
    set.insert(OP_ID, doc! { "$literal": op_id });
    vec![doc! { "$set": { PERMITS: { "$map": {
        "input": permits(),
        "in": { "$cond": [
            { "$and": [
                { "$eq": ["$$this.p", int32(permit)] },
                { "$eq": ["$$this.holder", { "$literal": holder_hex }] },
                { "$gt": ["$$this.expires_at", "$$NOW"] },
            ] },
            { "$mergeObjects": ["$$this", set] },
            "$$this",
        ] },
    } } } }]
}

/// Renewal: the permit's expiry `ttl_ms` after `$$NOW`, its term kept.
pub(crate) fn permit_renew_update(
    permit: u32,
    holder_hex: &str,
    ttl_ms: i64,
    op_id: &str,
) -> Vec<Document> {
    permit_update(
        permit,
        holder_hex,
        op_id,
        doc! { EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] } },
    )
}

/// Release: the permit's expiry at the epoch (1970), its element and term kept, so the name's
/// `epoch` goes on.
pub(crate) fn permit_release_update(permit: u32, holder_hex: &str, op_id: &str) -> Vec<Document> {
    permit_update(
        permit,
        holder_hex,
        op_id,
        doc! { EXPIRES_AT: { "$literal": DateTime::from_millis(0) } },
    )
}

/// What the counted-lease commands return of the document: its permits.
pub(crate) fn permits_projection() -> Document {
    doc! { "_id": 0, PERMITS: 1 }
}

/// The read of verify and permits: every permit of the name with the milliseconds left by the
/// server's clock (zero when expired or released).
pub(crate) fn permits_pipeline(name: &str) -> Vec<Document> {
    vec![
        doc! { "$match": counted_filter(name) },
        doc! { "$project": {
            "_id": 0,
            PERMITS: { "$map": {
                "input": permits(),
                "in": {
                    PERMIT: "$$this.p",
                    HOLDER: "$$this.holder",
                    INSTANCE: "$$this.instance",
                    EPOCH: "$$this.epoch",
                    OP_ID: "$$this.op_id",
                    REMAINING_MS: { "$max": [
                        { "$subtract": ["$$this.expires_at", "$$NOW"] },
                        0_i64,
                    ] },
                },
            } },
        } },
    ]
}

/// One permit as a command's reply holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermitDoc {
    pub(crate) permit: u32,
    pub(crate) holder: String,
    pub(crate) instance: String,
    pub(crate) term: u64,
    pub(crate) op_id: String,
    /// Time left by the server's clock: read by [`permits_pipeline`] only.
    pub(crate) remaining: Option<Duration>,
}

fn malformed(what: &str, reply: &Document) -> Error {
    Error::new(
        lease_core::ErrorKind::Backend,
        format!("the counted-lease document has no valid {what}: {reply}"),
    )
    .with_temporary(false)
}

/// The permits of a reply (a missing array: none), by index.
pub(crate) fn permits_from_reply(reply: &Document) -> Result<Vec<PermitDoc>> {
    let Some(array) = reply.get(PERMITS) else {
        return Ok(Vec::new());
    };
    let Bson::Array(array) = array else {
        return Err(malformed(PERMITS, reply));
    };
    let mut out = Vec::with_capacity(array.len());
    for element in array {
        let Bson::Document(e) = element else {
            return Err(malformed("permit", reply));
        };
        let permit = e
            .get(PERMIT)
            .and_then(number)
            .and_then(|p| u32::try_from(p).ok())
            .ok_or_else(|| malformed("permit index", reply))?;
        let term = e
            .get(EPOCH)
            .and_then(number)
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
            .ok_or_else(|| malformed("permit epoch", reply))?;
        let remaining = match e.get(REMAINING_MS) {
            None => None,
            Some(ms) => Some(Duration::from_millis(
                number(ms)
                    .and_then(|ms| u64::try_from(ms).ok())
                    .ok_or_else(|| malformed(REMAINING_MS, reply))?,
            )),
        };
        out.push(PermitDoc {
            permit,
            holder: e.get_str(HOLDER).unwrap_or_default().to_owned(),
            instance: e.get_str(INSTANCE).unwrap_or_default().to_owned(),
            term,
            op_id: e.get_str(OP_ID).unwrap_or_default().to_owned(),
            remaining,
        });
    }
    out.sort_by_key(|p| p.permit);
    Ok(out)
}

/// The permit a command's own update changed: the element carrying its fresh `op_id`.
pub(crate) fn changed_by(reply: &Document, op_id: &str) -> Result<Option<PermitDoc>> {
    Ok(permits_from_reply(reply)?
        .into_iter()
        .find(|p| p.op_id == op_id))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn labels_and_tokens_are_literals_and_every_now_is_the_servers() {
        let update = permit_claim_update(3, "ab", "$epoch", 1500, "id1");
        let text = format!("{update:?}");
        assert!(text.contains(r#""$literal": String("$epoch")"#), "{text}");
        assert!(text.contains(r#""$literal": String("ab")"#), "{text}");
        assert!(text.contains("$$NOW"));
        assert!(
            text.contains(r#""$range": Array([Int32(0), Int32(3)])"#),
            "{text}"
        );
        assert_eq!(update.len(), 4);
        let renew = format!("{:?}", permit_renew_update(2, "ab", 1500, "id2"));
        assert!(
            renew.contains("Int32(2)") && renew.contains("$$NOW"),
            "{renew}"
        );
        let release = format!("{:?}", permit_release_update(2, "ab", "id3"));
        assert!(release.contains("1970-01-01"), "{release}");
        assert_eq!(counted_filter("a"), doc! { "_id": { "c": "a" } });
    }

    #[test]
    fn replies_are_read_by_index_and_the_changed_permit_by_its_op_id() {
        let reply = doc! { PERMITS: [
            { PERMIT: 1_i32, HOLDER: "h1", INSTANCE: "b", EPOCH: 2_i64, OP_ID: "x" },
            { PERMIT: 0_i64, HOLDER: "h0", INSTANCE: "a", EPOCH: 3_i64, OP_ID: "y",
              REMAINING_MS: 1200_i64 },
        ] };
        let permits = permits_from_reply(&reply).unwrap();
        assert_eq!(permits.iter().map(|p| p.permit).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(permits[0].remaining, Some(Duration::from_millis(1200)));
        assert_eq!(permits[1].remaining, None);
        assert_eq!(changed_by(&reply, "x").unwrap().map(|p| p.term), Some(2));
        assert_eq!(changed_by(&reply, "z").unwrap(), None);
        assert!(permits_from_reply(&doc! {}).unwrap().is_empty());
        for bad in [
            doc! { PERMITS: 1_i32 },
            doc! { PERMITS: [{ PERMIT: -1_i32, EPOCH: 1_i64 }] },
            doc! { PERMITS: [{ PERMIT: 0_i32, EPOCH: 0_i64 }] },
        ] {
            assert!(permits_from_reply(&bad).is_err(), "{bad}");
        }
    }
}
