//! The command documents, checked without a server: the lease and slot documents here, the
//! partition and membership documents (and a small model of the MongoDB semantics they rely
//! on) in `groups.rs`.

use super::*;
use lease_core::backend::Grant;
use lease_core::{ErrorKind, backend::LeaseInfo};

mod groups;

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
    use lease_core::backend::slots::SlotClaim;
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
    let bad_last = doc! { "now_ms": now, "rec": { "epoch": 1_i64, "slot_ms": "x", "live": false } };
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
    use lease_core::backend::slots::SlotClaim;
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
    use lease_core::backend::slots::SlotFinish;
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
        lease_core::backend::slots::SlotRecord {
            last_ms: Some(5),
            unfinished_ms: None,
            rerun_ms: Some(3)
        }
    );
    // A record of plain claims only.
    assert_eq!(
        slot_record_from(&doc! {}).unwrap(),
        lease_core::backend::slots::SlotRecord::default()
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

#[test]
fn renew_many_checks_each_holder_and_tags_the_call() {
    let holder = "00112233445566778899aabbccddeeff";
    let id = "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f";
    let statement = renew_many_statement("orders", holder, 15_000, id);
    assert_eq!(
        statement,
        doc! {
            "q": {
                "_id": "orders",
                "holder": "00112233445566778899aabbccddeeff",
                "$expr": { "$gt": ["$expires_at", "$$NOW"] },
            },
            "u": [{ "$set": {
                "expires_at": { "$add": ["$$NOW", Bson::Int64(15_000)] },
                "renewal_id": { "$literal": "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f" },
            } }],
            "multi": false,
            "upsert": false,
        }
    );
    let command = renew_many_command("leases", vec![statement.clone()], 5_000);
    assert_eq!(
        command,
        doc! {
            "update": "leases",
            "updates": [statement],
            "ordered": false,
            "writeConcern": { "w": "majority", "j": true, "wtimeout": Bson::Int64(5_000) },
        }
    );
    assert_eq!(
        renewed_many_pipeline(&["a", "b"], id),
        vec![
            doc! { "$match": {
                "_id": { "$in": ["a", "b"] },
                "renewal_id": "0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f",
                "$expr": { "$gt": ["$expires_at", "$$NOW"] },
            } },
            doc! { "$project": { "_id": 1, "holder": 1, "epoch": 1 } },
        ]
    );
}

#[test]
fn renew_many_reads_its_answers_and_failures() {
    let renewed = renewed_many_from_replies(&[
        doc! { "_id": "a", "holder": "h1", "epoch": Bson::Int64(3) },
        doc! { "_id": "b", "holder": "h2", "epoch": 7_i32 },
    ])
    .unwrap();
    assert_eq!(
        renewed,
        vec![
            ("a".to_owned(), "h1".to_owned(), 3),
            ("b".to_owned(), "h2".to_owned(), 7)
        ]
    );
    let err = renewed_many_from_replies(&[doc! { "_id": "a", "epoch": 1_i64 }]).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Backend);

    assert_eq!(
        update_failures(&doc! { "ok": 1, "n": 2 }),
        UpdateFailures::default()
    );
    let failed = update_failures(&doc! {
        "ok": 1,
        "n": 1,
        "writeErrors": [
            { "index": 1, "code": 112, "errmsg": "write conflict" },
            { "code": 2, "errmsg": "no index" },
        ],
        "writeConcernError": { "code": 64, "errmsg": "waiting for replication timed out" },
    });
    assert_eq!(
        failed.statements,
        vec![(
            1,
            doc! { "index": 1, "code": 112, "errmsg": "write conflict" }
        )]
    );
    assert_eq!(
        failed.write_concern,
        Some(doc! { "code": 64, "errmsg": "waiting for replication timed out" })
    );
}
