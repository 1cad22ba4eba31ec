//! The MongoDB fence on the server in `LEASE_TEST_MONGODB_URL` (in CI the project's wire
//! emulator, which runs one command at a time: the race here shows the logic, not a real
//! server's concurrency; unset prints one `SKIPPED` line, a failure when `LEASE_TEST_REQUIRE`
//! names mongodb): a zombie whose successor has written is refused and changes nothing; one
//! term writes twice; a higher term raises the fence; with the check broken the zombie's update
//! gets through; two racing writers never land a lower token after a higher one.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use common::{RACE_WRITES, assert_never_back, race, unique};
use lease_conformance::env;
use lease_core::ErrorKind;
use lease_fence::mongo::MongoFence;
use mongodb::Collection;
use mongodb::bson::{Document, doc};

/// A collection of the test's own.
async fn collection() -> Option<Collection<Document>> {
    let url = env::server_url("mongodb")?;
    let client = match mongodb::Client::with_uri_str(&url).await {
        Ok(c) => c,
        Err(e) => {
            env::skip("mongodb", &format!("cannot use {url}: {e}"));
            return None;
        }
    };
    let coll = client.database("lease_test").collection(&unique("fence_"));
    if let Err(e) = coll.insert_one(doc! { "_id": "probe" }).await {
        env::skip("mongodb", &format!("cannot write to {url}: {e}"));
        return None;
    }
    Some(coll)
}

async fn val(coll: &Collection<Document>, id: i32) -> Option<String> {
    let d = coll.find_one(doc! { "_id": id }).await.unwrap()?;
    d.get_str("val").ok().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_after_its_successor_is_refused_and_changes_nothing() {
    let Some(coll) = collection().await else {
        return;
    };
    let fence = MongoFence::new();
    fence
        .upsert_by_id(&coll, 7, doc! { "$set": { "val": "first" } }, 5)
        .await
        .unwrap();
    fence
        .update_one(
            &coll,
            doc! { "_id": 7 },
            doc! { "$set": { "val": "successor" } },
            6,
        )
        .await
        .unwrap();
    let e = fence
        .update_one(
            &coll,
            doc! { "_id": 7 },
            doc! { "$set": { "val": "zombie" } },
            5,
        )
        .await
        .unwrap_err();
    let stale = e.stale().expect("a typed refusal");
    assert_eq!((stale.offered(), stale.fence()), (5, 6));
    assert_eq!(e.kind(), ErrorKind::Lost);
    // The upsert form is refused too (it meets the existing _id), and inserts nothing.
    let e = fence
        .upsert_by_id(&coll, 7, doc! { "$set": { "val": "zombie" } }, 5)
        .await
        .unwrap_err();
    assert!(e.is_stale(), "{e}");
    assert_eq!(val(&coll, 7).await.as_deref(), Some("successor"));
    assert_eq!(fence.token(&coll, 7).await.unwrap(), Some(6));
    assert_eq!(coll.count_documents(doc! { "_id": 7 }).await.unwrap(), 1);
    coll.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_term_writes_twice_and_a_higher_one_raises_the_fence() {
    let Some(coll) = collection().await else {
        return;
    };
    let fence = MongoFence::with_field("fence").unwrap();
    coll.insert_one(doc! { "_id": 1, "n": 0 }).await.unwrap();
    assert_eq!(fence.token(&coll, 1).await.unwrap(), None);
    let done = fence
        .update_one(&coll, doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }, 3)
        .await
        .unwrap();
    assert_eq!(done.matched_count, 1);
    fence
        .update_one(&coll, doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }, 3)
        .await
        .unwrap();
    assert_eq!(fence.token(&coll, 1).await.unwrap(), Some(3));
    fence
        .update_one(&coll, doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }, 9)
        .await
        .unwrap();
    assert_eq!(fence.token(&coll, 1).await.unwrap(), Some(9));
    assert!(
        fence
            .update_one(&coll, doc! { "_id": 1 }, doc! { "$inc": { "n": 1 } }, 3)
            .await
            .unwrap_err()
            .is_stale()
    );
    let n = coll
        .find_one(doc! { "_id": 1 })
        .await
        .unwrap()
        .unwrap()
        .get_i32("n")
        .unwrap();
    assert_eq!(n, 3);
    // No document matches: Ok, nothing matched.
    let done = fence
        .update_one(&coll, doc! { "_id": 404 }, doc! { "$set": { "x": 1 } }, 3)
        .await
        .unwrap();
    assert_eq!(done.matched_count, 0);

    // Bad input, before any I/O.
    let bad = |e: lease_fence::FenceError| e.kind();
    assert_eq!(
        bad(fence
            .update_one(&coll, doc! {}, doc! { "$set": { "x": 1 } }, 0)
            .await
            .unwrap_err()),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        bad(fence
            .update_one(&coll, doc! {}, doc! { "$set": { "x": 1 } }, u64::MAX)
            .await
            .unwrap_err()),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        bad(fence
            .update_one(&coll, doc! {}, doc! { "x": 1 }, 1)
            .await
            .unwrap_err()),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        bad(fence
            .update_one(&coll, doc! {}, doc! { "$set": { "fence": 1 } }, 1)
            .await
            .unwrap_err()),
        ErrorKind::InvalidArgument
    );
    for field in ["", "a.b", "$x", "_id"] {
        assert_eq!(
            MongoFence::with_field(field).unwrap_err().kind(),
            ErrorKind::InvalidName
        );
    }
    coll.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_check_broken_the_zombie_gets_through() {
    let Some(coll) = collection().await else {
        return;
    };
    let fence = MongoFence::new();
    fence
        .upsert_by_id(&coll, 7, doc! { "$set": { "val": "successor" } }, 6)
        .await
        .unwrap();
    let broken = fence.clone().break_check_for_tests();
    broken
        .update_one(
            &coll,
            doc! { "_id": 7 },
            doc! { "$set": { "val": "zombie" } },
            5,
        )
        .await
        .unwrap();
    assert_eq!(
        val(&coll, 7).await.as_deref(),
        Some("zombie"),
        "the broken fence let the zombie write"
    );
    assert_eq!(fence.token(&coll, 7).await.unwrap(), Some(5));
    coll.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
    let Some(coll) = collection().await else {
        return;
    };
    let fence = MongoFence::new();
    let (low, high) = (10_u64, 11_u64);
    coll.insert_one(doc! { "_id": 1, "log": [] }).await.unwrap();
    // Each accepted update appends its token to the document's log: the order they landed.
    let push = |token: u64| doc! { "$push": { "log": i64::try_from(token).unwrap() } };
    let race = race(low, high, {
        let (coll, fence) = (coll.clone(), fence.clone());
        move |token: u64, _| {
            let (coll, fence) = (coll.clone(), fence.clone());
            async move {
                let done = fence
                    .update_one(&coll, doc! { "_id": 1 }, push(token), token)
                    .await?;
                assert_eq!(done.matched_count, 1);
                Ok(())
            }
        }
    })
    .await;

    let d = coll.find_one(doc! { "_id": 1 }).await.unwrap().unwrap();
    let tokens: Vec<u64> = d
        .get_array("log")
        .unwrap()
        .iter()
        .map(|t| u64::try_from(t.as_i64().unwrap()).unwrap())
        .collect();
    assert_never_back(&tokens);
    assert_eq!(tokens.iter().filter(|t| **t == high).count(), RACE_WRITES);
    assert_eq!(
        tokens.iter().filter(|t| **t == low).count(),
        race.low_accepted
    );
    assert_eq!(fence.token(&coll, 1).await.unwrap(), Some(high));
    coll.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_field_someone_else_wrote_is_read_by_value_or_refused_as_a_schema_error() {
    let Some(coll) = collection().await else {
        return;
    };
    let fence = MongoFence::new();
    // A whole double (what a shell writes for `6`) is the token 6: token 5 is a refusal, not a
    // filter that "matched nothing".
    coll.insert_one(doc! { "_id": 1, "val": "by shell", "_fence": 6.0 })
        .await
        .unwrap();
    let e = fence
        .update_one(
            &coll,
            doc! { "_id": 1 },
            doc! { "$set": { "val": "zombie" } },
            5,
        )
        .await
        .unwrap_err();
    let stale = e.stale().expect("a typed refusal");
    assert_eq!((stale.offered(), stale.fence()), (5, 6));
    assert_eq!(fence.token(&coll, 1).await.unwrap(), Some(6));

    // A string is no token: the write cannot be judged, and says so.
    coll.insert_one(doc! { "_id": 2, "val": "odd", "_fence": "seven" })
        .await
        .unwrap();
    let e = fence
        .update_one(
            &coll,
            doc! { "_id": 2 },
            doc! { "$set": { "val": "mine" } },
            9,
        )
        .await
        .unwrap_err();
    assert!(!e.is_stale(), "{e}");
    assert_eq!(e.kind(), ErrorKind::Schema, "{e}");
    assert!(e.to_string().contains("`_fence`"), "{e}");
    assert_eq!(val(&coll, 2).await.as_deref(), Some("odd"));
    assert_eq!(
        fence.token(&coll, 2).await.unwrap_err().kind(),
        ErrorKind::Schema
    );
    coll.drop().await.unwrap();
}
