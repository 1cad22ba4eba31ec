//! The partition and membership commands, checked without a server: first the exact BSON of
//! each filter, pipeline and update, then their meaning, by running them on a small model of
//! the MongoDB semantics they rely on (a `$set` stage reads the document as it was; a missing
//! field sorts below every date; `$$NOW` is one value per command; an upsert inserts the
//! filter's `_id`). The model is no substitute for a server: it checks the logic of the
//! documents (the epoch rule, "expired or own", renewal ids), not MongoDB's implementation.

use std::cmp::Ordering;
use std::time::Duration;

use lease_core::backend::{membership::Member, partitions::PartitionLease};
use mongodb::bson::{Bson, DateTime, Document, doc};

use crate::wire::{self as commands, *};

const OWNER_A: &str = "node-a@0001";
const OWNER_B: &str = "node-b@0001";

// ---- The exact documents ---------------------------------------------------------------------

fn live() -> Document {
    doc! { "$gt": ["$expires_at", "$$NOW"] }
}

fn expired() -> Document {
    doc! { "$lte": ["$expires_at", "$$NOW"] }
}

/// `true` when `key` occurs anywhere in `b`.
fn contains_key(b: &Bson, key: &str) -> bool {
    match b {
        Bson::Document(d) => d.iter().any(|(k, v)| k == key || contains_key(v, key)),
        Bson::Array(a) => a.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

#[test]
fn acquire_filters_on_the_id_alone_because_upserts_refuse_expr() {
    let filter = acquire_filter("orders", 7);
    assert_eq!(filter, doc! { "_id": { "g": "orders", "p": 7_i64 } });
    assert!(!contains_key(&Bson::Document(filter), "$expr"));
    // The largest partition fits: int64, never a truncated int32.
    assert_eq!(
        partition_id("g", u32::MAX),
        doc! { "g": "g", "p": i64::from(u32::MAX) }
    );
    assert_eq!(
        member_filter("svc", "n1"),
        doc! { "_id": { "s": "svc", "n": "n1" } }
    );
    assert!(!contains_key(
        &Bson::Document(member_filter("s", "n")),
        "$expr"
    ));
}

#[test]
fn acquire_admits_only_an_expired_lease_or_the_acquirers_own_and_keeps_the_epoch_when_own_and_live()
{
    let own = || doc! { "$eq": ["$owner", { "$literal": OWNER_A }] };
    let admitted = || doc! { "$or": [expired(), own()] };
    assert_eq!(
        acquire_update(OWNER_A, 15_000),
        vec![doc! { "$set": {
            "owner": { "$cond": [admitted(), { "$literal": OWNER_A }, "$owner"] },
            "epoch": { "$cond": [
                admitted(),
                { "$cond": [
                    { "$and": [own(), live()] },
                    "$epoch",
                    { "$add": [{ "$ifNull": ["$epoch", 0_i64] }, 1_i64] },
                ] },
                "$epoch",
            ] },
            "expires_at": { "$cond": [
                admitted(),
                { "$add": ["$$NOW", 15_000_i64] },
                "$expires_at",
            ] },
        } }]
    );
    assert_eq!(
        acquire_projection(),
        doc! { "_id": 0, "owner": 1, "epoch": 1 }
    );
    // An owner that looks like a field path is compared and stored as text.
    let update = acquire_update("$epoch", 1);
    let set = update[0].get_document("$set").unwrap();
    let cond = set
        .get_document("owner")
        .unwrap()
        .get_array("$cond")
        .unwrap();
    assert_eq!(cond[1], Bson::Document(doc! { "$literal": "$epoch" }));
}

#[test]
fn renew_and_release_touch_only_the_owners_live_leases_through_the_id_index() {
    // Duplicates once, in order; the owner as a plain equality; live by $$NOW.
    assert_eq!(
        owned_filter("g", &[3, 1, 3], OWNER_A),
        doc! {
            "_id": { "$in": [{ "g": "g", "p": 1_i64 }, { "g": "g", "p": 3_i64 }] },
            "owner": OWNER_A,
            "$expr": live(),
        }
    );
    assert_eq!(
        partition_renew_update(600, "0123456789abcdef0123456789abcdef"),
        vec![doc! { "$set": {
            "expires_at": { "$add": ["$$NOW", 600_i64] },
            "renewal_id": { "$literal": "0123456789abcdef0123456789abcdef" },
        } }]
    );
    assert_eq!(
        release_update(),
        doc! { "$set": { "expires_at": DateTime::from_millis(0) } }
    );
}

#[test]
fn the_renewal_is_read_back_by_its_own_renewal_id() {
    let projection = doc! { "$project": {
        "_id": 0,
        "partition": "$_id.p",
        "owner": 1,
        "epoch": 1,
        "remaining_ms": { "$subtract": ["$expires_at", "$$NOW"] },
    } };
    assert_eq!(
        renewed_pipeline("g", &[2, 0, 2], OWNER_A, "rid"),
        vec![
            doc! { "$match": {
                "_id": { "$in": [{ "g": "g", "p": 0_i64 }, { "g": "g", "p": 2_i64 }] },
                "owner": OWNER_A,
                "renewal_id": "rid",
                "$expr": live(),
            } },
            projection.clone(),
        ]
    );
    assert_eq!(
        owners_pipeline("g"),
        vec![
            doc! { "$match": { "_id.g": "g", "$expr": live() } },
            projection
        ]
    );
    assert_eq!(partition_index_keys(), doc! { "_id.g": 1, "_id.p": 1 });
    assert_eq!(member_index_keys(), doc! { "_id.s": 1, "_id.n": 1 });
    assert_ne!(commands::PARTITION_INDEX, commands::MEMBER_INDEX);
}

#[test]
fn membership_commands_replace_the_record_and_read_live_ones_by_now() {
    let groups = vec!["orders".to_owned(), "$mail".to_owned()];
    assert_eq!(
        heartbeat_update("$addr", &groups, 900),
        vec![doc! { "$set": {
            "address": { "$literal": "$addr" },
            "groups": { "$literal": ["orders", "$mail"] },
            "expires_at": { "$add": ["$$NOW", 900_i64] },
        } }]
    );
    assert_eq!(
        heartbeat_projection(),
        doc! { "_id": 0, "address": 1, "groups": 1 }
    );
    assert_eq!(
        members_pipeline("svc"),
        vec![
            doc! { "$match": { "_id.s": "svc", "$expr": live() } },
            doc! { "$project": {
                "_id": 0,
                "node": "$_id.n",
                "address": 1,
                "groups": 1,
                "remaining_ms": { "$subtract": ["$expires_at", "$$NOW"] },
            } },
        ]
    );
    assert_eq!(
        leave_filter("svc", "n1"),
        doc! { "_id": { "s": "svc", "n": "n1" }, "$expr": live() }
    );
}

#[test]
fn replies_are_read_strictly() {
    let ttl = Duration::from_millis(600);
    let mine = doc! { "owner": OWNER_A, "epoch": 3_i64 };
    assert_eq!(
        partition_from_acquire(&mine, 5, OWNER_A, ttl).unwrap(),
        Some(PartitionLease {
            partition: 5,
            owner: OWNER_A.into(),
            epoch: 3,
            expires_in: ttl
        })
    );
    // Another owner's live lease came back unchanged: held.
    assert_eq!(
        partition_from_acquire(&mine, 5, OWNER_B, ttl).unwrap(),
        None
    );
    // Acquired, but the epoch is unreadable: an error, never a guess.
    assert!(partition_from_acquire(&doc! { "owner": OWNER_A }, 5, OWNER_A, ttl).is_err());
    assert!(
        partition_from_acquire(&doc! { "owner": OWNER_A, "epoch": 0_i64 }, 5, OWNER_A, ttl)
            .is_err()
    );

    let replies = [
        doc! { "partition": 9_i64, "owner": OWNER_A, "epoch": 2_i32, "remaining_ms": 500_i64 },
        doc! { "partition": 1_i32, "owner": OWNER_B, "epoch": 1_i64, "remaining_ms": 700_i64 },
        doc! { "partition": 4_i64, "owner": OWNER_A, "epoch": 1_i64, "remaining_ms": 0_i64 },
    ];
    let leases = partitions_from_replies(&replies).unwrap();
    assert_eq!(
        leases,
        vec![
            PartitionLease {
                partition: 1,
                owner: OWNER_B.into(),
                epoch: 1,
                expires_in: Duration::from_millis(700)
            },
            PartitionLease {
                partition: 9,
                owner: OWNER_A.into(),
                epoch: 2,
                expires_in: Duration::from_millis(500)
            },
        ],
        "by partition, none without time left"
    );
    for bad in [
        doc! { "owner": "o", "epoch": 1_i64, "remaining_ms": 5_i64 },
        doc! { "partition": -1_i64, "owner": "o", "epoch": 1_i64, "remaining_ms": 5_i64 },
        doc! { "partition": 4_294_967_296_i64, "owner": "o", "epoch": 1_i64, "remaining_ms": 5_i64 },
        doc! { "partition": 1_i64, "epoch": 1_i64, "remaining_ms": 5_i64 },
        doc! { "partition": 1_i64, "owner": "o", "remaining_ms": 5_i64 },
        doc! { "partition": 1_i64, "owner": "o", "epoch": 1_i64 },
    ] {
        assert!(
            partitions_from_replies(std::slice::from_ref(&bad)).is_err(),
            "{bad}"
        );
    }

    let m = member_from_heartbeat(
        &doc! { "address": "10.0.0.1:7000", "groups": ["a", "b"] },
        "n1",
        ttl,
    )
    .unwrap();
    assert_eq!(
        m,
        Member {
            node: "n1".into(),
            address: "10.0.0.1:7000".into(),
            groups: vec!["a".into(), "b".into()],
            expires_in: ttl
        }
    );
    let empty = member_from_heartbeat(&doc! { "address": "", "groups": [] }, "n", ttl).unwrap();
    assert!(empty.groups.is_empty());
    assert!(member_from_heartbeat(&doc! { "groups": [] }, "n", ttl).is_err());
    assert!(member_from_heartbeat(&doc! { "address": "", "groups": [1_i32] }, "n", ttl).is_err());
    assert!(member_from_heartbeat(&doc! { "address": "", "groups": "a" }, "n", ttl).is_err());

    let member = |node: &str, left: i64| {
        doc! { "node": node, "address": "", "groups": [], "remaining_ms": left }
    };
    let members = members_from_replies(&[
        member("b", 5),
        member("a", 5),
        member("B", 5),
        member("c", 0),
    ])
    .unwrap();
    let nodes: Vec<_> = members.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(nodes, ["B", "a", "b"], "byte order, none without time left");
    assert!(members_from_replies(&[doc! { "address": "", "remaining_ms": 5_i64 }]).is_err());
}

// ---- The model ---------------------------------------------------------------------------------

/// MongoDB's order of BSON types, for the types the commands use (missing lowest).
fn rank(v: Option<&Bson>) -> u8 {
    match v {
        None => 0,
        Some(Bson::Null) => 1,
        Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) => 2,
        Some(Bson::String(_)) => 3,
        Some(Bson::Document(_)) => 4,
        Some(Bson::Array(_)) => 5,
        Some(Bson::Boolean(_)) => 8,
        Some(Bson::DateTime(_)) => 9,
        Some(other) => panic!("the model does not order {other:?}"),
    }
}

fn num(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        _ => None,
    }
}

fn compare(a: Option<&Bson>, b: Option<&Bson>) -> Ordering {
    let by_rank = rank(a).cmp(&rank(b));
    if by_rank != Ordering::Equal {
        return by_rank;
    }
    match (a, b) {
        (Some(Bson::DateTime(x)), Some(Bson::DateTime(y))) => x.cmp(y),
        (Some(Bson::String(x)), Some(Bson::String(y))) => x.as_bytes().cmp(y.as_bytes()),
        (Some(x), Some(y)) if num(x).is_some() => num(x).cmp(&num(y)),
        (Some(x), Some(y)) => {
            assert_eq!(x, y, "the model compares only equal documents and arrays");
            Ordering::Equal
        }
        _ => Ordering::Equal,
    }
}

fn truthy(v: Option<&Bson>) -> bool {
    !matches!(
        v,
        None | Some(Bson::Null)
            | Some(Bson::Boolean(false))
            | Some(Bson::Int32(0))
            | Some(Bson::Int64(0))
    )
}

fn path<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut parts = path.split('.');
    let mut at = doc.get(parts.next()?)?;
    for part in parts {
        at = at.as_document()?.get(part)?;
    }
    Some(at)
}

/// Evaluates an aggregation expression on `doc` at `now` (`None`: missing).
fn eval(e: &Bson, doc: &Document, now: DateTime) -> Option<Bson> {
    match e {
        Bson::String(s) if s == "$$NOW" => Some(Bson::DateTime(now)),
        Bson::String(s) if s.starts_with('$') => path(doc, &s[1..]).cloned(),
        Bson::Array(items) => Some(Bson::Array(
            items
                .iter()
                .map(|i| eval(i, doc, now).unwrap_or(Bson::Null))
                .collect(),
        )),
        Bson::Document(d) if d.len() == 1 && d.keys().all(|k| k.starts_with('$')) => {
            let (op, arg) = d.iter().next().unwrap();
            let args = || arg.as_array().unwrap().iter().collect::<Vec<_>>();
            let ev = |i: usize| eval(args()[i], doc, now);
            match op.as_str() {
                "$literal" => Some(arg.clone()),
                "$cond" => {
                    if truthy(ev(0).as_ref()) {
                        ev(1)
                    } else {
                        ev(2)
                    }
                }
                "$and" => Some(Bson::Boolean(
                    (0..args().len()).all(|i| truthy(ev(i).as_ref())),
                )),
                "$or" => Some(Bson::Boolean(
                    (0..args().len()).any(|i| truthy(ev(i).as_ref())),
                )),
                "$eq" | "$lte" | "$gt" => {
                    let order = compare(ev(0).as_ref(), ev(1).as_ref());
                    Some(Bson::Boolean(match op.as_str() {
                        "$eq" => order == Ordering::Equal,
                        "$lte" => order != Ordering::Greater,
                        _ => order == Ordering::Greater,
                    }))
                }
                "$ifNull" => match ev(0) {
                    None | Some(Bson::Null) => ev(1),
                    v => v,
                },
                "$add" => match (ev(0)?, ev(1)?) {
                    (Bson::DateTime(d), n) => Some(Bson::DateTime(DateTime::from_millis(
                        d.timestamp_millis() + num(&n).unwrap(),
                    ))),
                    (a, b) => Some(Bson::Int64(num(&a).unwrap() + num(&b).unwrap())),
                },
                "$subtract" => match (ev(0)?, ev(1)?) {
                    (Bson::DateTime(a), Bson::DateTime(b)) => {
                        Some(Bson::Int64(a.timestamp_millis() - b.timestamp_millis()))
                    }
                    other => panic!("the model cannot subtract {other:?}"),
                },
                other => panic!("the model has no {other}"),
            }
        }
        // An object expression: each field evaluated.
        Bson::Document(d) => {
            let mut out = Document::new();
            for (k, v) in d {
                if let Some(v) = eval(v, doc, now) {
                    out.insert(k, v);
                }
            }
            Some(Bson::Document(out))
        }
        other => Some(other.clone()),
    }
}

/// A query filter: field equalities (dotted paths), `{$in: [...]}`, and `$expr`.
fn matches(filter: &Document, doc: &Document, now: DateTime) -> bool {
    filter.iter().all(|(k, cond)| {
        if k == "$expr" {
            return truthy(eval(cond, doc, now).as_ref());
        }
        let value = path(doc, k);
        match cond {
            Bson::Document(c) if c.keys().any(|k| k.starts_with('$')) => {
                let values = c.get_array("$in").expect("the model knows $in only");
                values.iter().any(|v| value == Some(v))
            }
            v => value == Some(v),
        }
    })
}

/// An update: a pipeline of `$set` stages, or one `{$set: {field: value}}` document.
fn apply(update: &[Document], doc: &mut Document, now: DateTime) {
    for stage in update {
        let set = stage
            .get_document("$set")
            .expect("the model knows $set only");
        let old = doc.clone();
        for (k, e) in set {
            match eval(e, &old, now) {
                Some(v) => {
                    doc.insert(k, v);
                }
                None => {
                    doc.remove(k);
                }
            }
        }
    }
}

/// One collection, with the server's clock in the test's hands.
#[derive(Default)]
struct Model {
    docs: Vec<Document>,
    now_ms: i64,
}

impl Model {
    fn now(&self) -> DateTime {
        DateTime::from_millis(self.now_ms)
    }

    /// `findAndModify` with `upsert` and `returnDocument: after`, projected.
    fn upsert(
        &mut self,
        filter: &Document,
        update: &[Document],
        projection: &Document,
    ) -> Document {
        let now = self.now();
        let at = match self.docs.iter().position(|d| matches(filter, d, now)) {
            Some(i) => i,
            None => {
                self.docs
                    .push(doc! { "_id": filter.get("_id").unwrap().clone() });
                self.docs.len() - 1
            }
        };
        apply(update, &mut self.docs[at], now);
        project(projection, &self.docs[at], now)
    }

    /// `update` (multi): the matched count.
    fn update_many(&mut self, filter: &Document, update: &[Document]) -> usize {
        let now = self.now();
        let mut matched = 0;
        for d in &mut self.docs {
            if matches(filter, d, now) {
                apply(update, d, now);
                matched += 1;
            }
        }
        matched
    }

    fn aggregate(&self, pipeline: &[Document]) -> Vec<Document> {
        let now = self.now();
        let mut docs = self.docs.clone();
        for stage in pipeline {
            if let Ok(m) = stage.get_document("$match") {
                docs.retain(|d| matches(m, d, now));
            } else if let Ok(p) = stage.get_document("$project") {
                docs = docs.iter().map(|d| project(p, d, now)).collect();
            } else {
                panic!("the model has no stage {stage}");
            }
        }
        docs
    }
}

/// A projection: `_id: 0`, `field: 1` inclusions, and computed fields.
fn project(p: &Document, doc: &Document, now: DateTime) -> Document {
    let mut out = Document::new();
    if p.get("_id") != Some(&Bson::Int32(0))
        && let Some(id) = doc.get("_id")
    {
        out.insert("_id", id.clone());
    }
    for (k, v) in p {
        if k == "_id" {
            continue;
        }
        match v {
            Bson::Int32(1) => {
                if let Some(x) = doc.get(k) {
                    out.insert(k, x.clone());
                }
            }
            e => {
                if let Some(x) = eval(e, doc, now) {
                    out.insert(k, x);
                }
            }
        }
    }
    out
}

fn acquire(m: &mut Model, group: &str, p: u32, owner: &str, ttl_ms: i64) -> Option<PartitionLease> {
    let after = m.upsert(
        &acquire_filter(group, p),
        &acquire_update(owner, ttl_ms),
        &acquire_projection(),
    );
    partition_from_acquire(&after, p, owner, Duration::from_millis(ttl_ms as u64)).unwrap()
}

fn renew(
    m: &mut Model,
    group: &str,
    ps: &[u32],
    owner: &str,
    ttl_ms: i64,
    id: &str,
) -> Vec<PartitionLease> {
    m.update_many(
        &owned_filter(group, ps, owner),
        &partition_renew_update(ttl_ms, id),
    );
    partitions_from_replies(&m.aggregate(&renewed_pipeline(group, ps, owner, id))).unwrap()
}

fn release(m: &mut Model, group: &str, ps: &[u32], owner: &str) -> usize {
    m.update_many(&owned_filter(group, ps, owner), &[release_update()])
}

fn owners(m: &Model, group: &str) -> Vec<PartitionLease> {
    partitions_from_replies(&m.aggregate(&owners_pipeline(group))).unwrap()
}

#[test]
fn model_epochs_follow_the_contract() {
    let mut m = Model {
        now_ms: 1_700_000_000_000,
        ..Model::default()
    };
    let ttl = 30_000;
    let a_restarted = "node-a@0002";

    let first = acquire(&mut m, "g", 0, OWNER_A, ttl).expect("a new partition is free");
    assert_eq!(
        (first.epoch, first.expires_in),
        (1, Duration::from_millis(30_000))
    );
    m.now_ms += 1_000;
    assert_eq!(
        acquire(&mut m, "g", 0, OWNER_A, ttl).unwrap().epoch,
        1,
        "own and live: epoch kept"
    );
    let before = m.docs.clone();
    assert_eq!(
        acquire(&mut m, "g", 0, OWNER_B, ttl),
        None,
        "another owner's live lease"
    );
    assert_eq!(
        acquire(&mut m, "g", 0, a_restarted, ttl),
        None,
        "another incarnation"
    );
    assert_eq!(
        m.docs, before,
        "a refused acquire leaves the document as it was"
    );
    let o = owners(&m, "g");
    assert_eq!((o.len(), o[0].owner.as_str(), o[0].epoch), (1, OWNER_A, 1));
    assert_eq!(
        o[0].expires_in,
        Duration::from_millis(30_000),
        "renewed by the re-acquire"
    );

    assert_eq!(release(&mut m, "g", &[0], OWNER_B), 0, "not B's");
    assert_eq!(release(&mut m, "g", &[0], OWNER_A), 1);
    assert_eq!(release(&mut m, "g", &[0], OWNER_A), 0, "release is once");
    assert!(owners(&m, "g").is_empty());
    assert_eq!(m.docs.len(), 1, "the document stays");

    let taken = acquire(&mut m, "g", 0, OWNER_B, ttl).expect("released: free at once");
    assert_eq!(taken.epoch, 2);
    release(&mut m, "g", &[0], OWNER_B);
    assert_eq!(
        acquire(&mut m, "g", 0, OWNER_B, ttl).unwrap().epoch,
        3,
        "the owner comes back after its release: +1"
    );

    // Expiry by the server's clock, not before.
    let lapsing = acquire(&mut m, "g", 1, OWNER_A, 600).unwrap();
    m.now_ms += 599;
    assert_eq!(
        acquire(&mut m, "g", 1, OWNER_B, 600),
        None,
        "1 ms left: still held"
    );
    m.now_ms += 1;
    assert!(
        renew(&mut m, "g", &[1], OWNER_A, 600, "r1").is_empty(),
        "never revived"
    );
    let back = acquire(&mut m, "g", 1, OWNER_A, 600).unwrap();
    assert_eq!(
        back.epoch,
        lapsing.epoch + 1,
        "the owner comes back after expiry: +1"
    );
    assert_eq!(acquire(&mut m, "g", 1, OWNER_B, 600), None);

    // Another group with the same partition numbers is another lease.
    assert_eq!(acquire(&mut m, "h", 0, OWNER_A, ttl).unwrap().epoch, 1);
    assert_eq!(owners(&m, "h").len(), 1);
}

#[test]
fn model_batch_renewal_extends_only_the_owners_live_leases_to_one_expiry() {
    let mut m = Model {
        now_ms: 1_000_000,
        ..Model::default()
    };
    for p in 0..4 {
        acquire(&mut m, "g", p, OWNER_A, 10_000).unwrap();
    }
    for p in 4..6 {
        acquire(&mut m, "g", p, OWNER_B, 10_000).unwrap();
    }
    acquire(&mut m, "other", 0, OWNER_A, 10_000).unwrap();
    m.now_ms += 4_000;
    let renewed = renew(
        &mut m,
        "g",
        &[0, 1, 2, 3, 4, 5, 9, 0],
        OWNER_A,
        30_000,
        "r1",
    );
    let ps: Vec<_> = renewed.iter().map(|l| l.partition).collect();
    assert_eq!(ps, [0, 1, 2, 3], "the owner's live leases, each once");
    assert!(
        renewed
            .iter()
            .all(|l| l.expires_in == Duration::from_millis(30_000)
                && l.epoch == 1
                && l.owner == OWNER_A)
    );
    let left = |m: &Model, g: &str, p: u32| {
        owners(m, g)
            .into_iter()
            .find(|l| l.partition == p)
            .map(|l| l.expires_in)
    };
    assert_eq!(
        left(&m, "g", 4),
        Some(Duration::from_millis(6_000)),
        "B's untouched"
    );
    assert_eq!(
        left(&m, "other", 0),
        Some(Duration::from_millis(6_000)),
        "other group untouched"
    );

    // The read-back names only this call's renewal: an earlier one's documents are not
    // reported, even where still live.
    m.now_ms += 1_000;
    let again = renew(&mut m, "g", &[0, 1], OWNER_A, 30_000, "r2");
    assert_eq!(again.len(), 2);
    let stale =
        partitions_from_replies(&m.aggregate(&renewed_pipeline("g", &[0, 1, 2, 3], OWNER_A, "r1")))
            .unwrap();
    assert_eq!(
        stale.iter().map(|l| l.partition).collect::<Vec<_>>(),
        [2, 3],
        "0 and 1 carry r2 now"
    );

    assert_eq!(release(&mut m, "g", &[2], OWNER_A), 1);
    let renewed = renew(&mut m, "g", &[0, 1, 2, 3], OWNER_A, 30_000, "r3");
    assert_eq!(
        renewed.iter().map(|l| l.partition).collect::<Vec<_>>(),
        [0, 1, 3],
        "a released lease is not renewed"
    );
    m.now_ms += 30_000;
    assert!(
        renew(&mut m, "g", &[0, 1, 3], OWNER_A, 30_000, "r4").is_empty(),
        "expired"
    );
    assert!(owners(&m, "g").is_empty());
}

#[test]
fn model_membership_expires_and_leave_is_immediate() {
    let mut m = Model {
        now_ms: 5_000,
        ..Model::default()
    };
    let beat = |m: &mut Model, s: &str, n: &str, addr: &str, ttl: i64, groups: &[&str]| {
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        let after = m.upsert(
            &member_filter(s, n),
            &heartbeat_update(addr, &groups, ttl),
            &heartbeat_projection(),
        );
        member_from_heartbeat(&after, n, Duration::from_millis(ttl as u64)).unwrap()
    };
    let members =
        |m: &Model, s: &str| members_from_replies(&m.aggregate(&members_pipeline(s))).unwrap();
    let leave = |m: &mut Model, s: &str, n: &str| {
        m.update_many(&leave_filter(s, n), &[release_update()]) == 1
    };

    let n1 = beat(
        &mut m,
        "svc",
        "n1",
        "10.0.0.1:7000",
        30_000,
        &["orders", "mail"],
    );
    assert_eq!(n1.groups, ["orders", "mail"]);
    beat(&mut m, "svc", "n2", "", 30_000, &[]);
    beat(&mut m, "other", "n3", "x", 30_000, &[]);
    let listed = members(&m, "svc");
    assert_eq!(
        listed.iter().map(|m| m.node.as_str()).collect::<Vec<_>>(),
        ["n1", "n2"]
    );
    assert!(listed[1].groups.is_empty() && listed[1].address.is_empty());

    let n1 = beat(&mut m, "svc", "n1", "10.0.0.9:7000", 30_000, &["mail"]);
    assert_eq!((n1.address.as_str(), n1.groups.len()), ("10.0.0.9:7000", 1));
    assert_eq!(
        members(&m, "svc")[0].groups,
        ["mail"],
        "replaced, not merged"
    );
    assert_eq!(m.docs.len(), 3, "one record per (service, node)");

    assert!(leave(&mut m, "svc", "n2"));
    assert!(!leave(&mut m, "svc", "n2"), "leave is once");
    assert_eq!(members(&m, "svc").len(), 1);
    assert_eq!(members(&m, "other").len(), 1, "services apart");

    beat(&mut m, "svc", "n4", "b", 600, &[]);
    beat(&mut m, "svc", "n1", "a", 600, &[]);
    m.now_ms += 300;
    beat(&mut m, "svc", "n4", "b", 600, &[]);
    m.now_ms += 300;
    let listed = members(&m, "svc");
    assert_eq!(
        listed.iter().map(|m| m.node.as_str()).collect::<Vec<_>>(),
        ["n4"]
    );
    assert_eq!(listed[0].expires_in, Duration::from_millis(300));
}
