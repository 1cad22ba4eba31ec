//! The exact documents the store sends, and how it reads the replies: pure functions, so they
//! are tested against expected BSON without a server.
//!
//! One document per lease name in the lease collection:
//!
//! ```text
//! { _id: <name: string>, holder: <token: 32 hex digits>, instance: <label: string>,
//!   epoch: <term: int64>, expires_at: <date, by the server's $$NOW>,
//!   claim_id: <random id of the claim that won it: 32 hex digits> }
//! ```
//!
//! Every "now" is the server's `$$NOW`, which is one value for the whole command. In a filter
//! it needs `$expr`; in an update it needs an aggregation pipeline (both MongoDB 4.2+).

use std::time::Duration;

use lease_core::{Error, Grant, LeaseInfo, Result};
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

/// Refuses a lease collection that is a view, or whose default collation is not the simple
/// (binary) one: names must compare byte for byte (`"Job"` and `"job"` are two leases), and a
/// query with another collation than the `_id` index's cannot use the index.
pub fn check_collection(
    collection: &str,
    is_view: bool,
    collation_locale: Option<&str>,
    server: &str,
) -> Result<()> {
    if is_view {
        return Err(Error::unsupported(format!(
            "the lease collection {collection:?} on {server} is a view; give a collection name \
             that is free or holds a plain collection"
        )));
    }
    match collation_locale {
        None | Some("simple") => Ok(()),
        Some(locale) => Err(Error::unsupported(format!(
            "the lease collection {collection:?} on {server} has the default collation \
             {locale:?}; lease names must compare byte for byte: use a collection with the \
             simple collation"
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
