//! The membership documents, one per `(service, node)` in the membership collection:
//! heartbeat, members and leave, and how their replies are read.

use std::time::Duration;

use lease_core::Result;
use mongodb::bson::{Bson, Document, doc};

use super::*;

/// The field of a membership record holding the node's address.
pub(crate) const ADDRESS: &str = "address";
/// The field of a membership record holding the groups the node serves (an array of strings).
pub(crate) const GROUPS: &str = "groups";
/// The computed field membership reads return: the node id (from `_id.n`).
pub(crate) const NODE: &str = "node";

/// A membership record's `_id`: `{s: service, n: node}` (field order fixed).
pub(crate) fn member_id(service: &str, node: &str) -> Document {
    doc! { "s": service, "n": node }
}

/// Heartbeat's filter: the node's record, whatever its state (an upsert, so no `$expr`).
pub(crate) fn member_filter(service: &str, node: &str) -> Document {
    doc! { "_id": member_id(service, node) }
}

/// Heartbeat's update pipeline: the address, the groups (an array of strings) and the expiry
/// `ttl_ms` after `$$NOW`, replacing what the last heartbeat wrote. Address and groups are
/// wrapped in `$literal`, so no text is read as a field path or operator.
pub(crate) fn heartbeat_update(address: &str, groups: &[String], ttl_ms: i64) -> Vec<Document> {
    vec![doc! {
        "$set": {
            ADDRESS: { "$literal": address },
            GROUPS: { "$literal": groups },
            EXPIRES_AT: { "$add": ["$$NOW", ttl_ms] },
        }
    }]
}

/// What heartbeat returns of the record after its update: address and groups.
pub(crate) fn heartbeat_projection() -> Document {
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
pub(crate) fn member_from_heartbeat(
    reply: &Document,
    node: &str,
    ttl: Duration,
) -> Result<lease_core::backend::membership::Member> {
    Ok(lease_core::backend::membership::Member {
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
pub(crate) fn members_pipeline(service: &str) -> Vec<Document> {
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
pub(crate) fn members_from_replies(
    replies: &[Document],
) -> Result<Vec<lease_core::backend::membership::Member>> {
    let mut out = Vec::with_capacity(replies.len());
    for r in replies {
        let expires_in = remaining_of(r)?;
        if expires_in.is_zero() {
            continue;
        }
        out.push(lease_core::backend::membership::Member {
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
pub(crate) fn leave_filter(service: &str, node: &str) -> Document {
    doc! { "_id": member_id(service, node), "$expr": live() }
}
