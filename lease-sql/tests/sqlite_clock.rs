//! SQLite's expiries live on the host's boot clock, recorded with the boot they were measured
//! in: a file of a lease-sql from before (wall-clock expiries) is converted at start-up with every
//! live lease keeping its time left; a file last used under another boot has every lease
//! expired; and a process of an older lease-sql still writing wall-clock expiries is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::backend::permits::PermitStore;
use lease_core::{
    LeaseStore,
    backend::{HolderToken, partitions::PartitionStore},
};
use lease_sql::{
    Ddl, Dialect, SqlConfig, SqliteStore, members_schema_sql, partitions_schema_sql, schema_sql,
};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn raw(url: &str) -> sqlx::SqlitePool {
    SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::from_str(url)
                .unwrap()
                .create_if_missing(true),
        )
        .await
        .unwrap()
}

/// A file as a lease-sql from before left it: the three tables, wall-clock expiries.
async fn old_file(url: &str, holder: &HolderToken) {
    let pool = raw(url).await;
    let config = SqlConfig::default();
    for ddl in [
        schema_sql(Dialect::Sqlite, "leases"),
        partitions_schema_sql(Dialect::Sqlite, &config.partitions_table_name()),
        members_schema_sql(Dialect::Sqlite, &config.members_table_name()),
    ] {
        sqlx::query(&ddl).execute(&pool).await.unwrap();
    }
    let now = wall_ms();
    for (name, expires) in [("live", now + 60_000), ("gone", now - 1_000)] {
        sqlx::query(
            "INSERT INTO leases (name, holder, instance, term, expires_at_ms) \
             VALUES (?1, ?2, 'old', 7, ?3)",
        )
        .bind(name)
        .bind(holder.to_hex())
        .bind(expires)
        .execute(&pool)
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO leases_partitions (group_name, partition_no, owner, epoch, expires_at_ms) \
         VALUES ('g', 0, 'node-a', 3, ?1)",
    )
    .bind(now + 60_000)
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;
}

#[tokio::test]
async fn a_file_with_wall_clock_expiries_is_converted_and_live_leases_keep_their_time() {
    let url = support::sqlite_url();
    let holder = HolderToken::mint();
    old_file(&url, &holder).await;
    let store = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();

    let live = store.get("live").await.unwrap().unwrap();
    assert!(live.live, "{live:?}");
    assert!(
        live.expires_in > Duration::from_secs(50) && live.expires_in <= Duration::from_secs(60),
        "the live lease kept {:?} of its 60 s",
        live.expires_in
    );
    let other = HolderToken::mint();
    let ttl = Duration::from_secs(5);
    assert!(
        store
            .claim("live", &other, "b", ttl)
            .await
            .unwrap()
            .is_none()
    );
    // Its holder renews it under its term.
    let renewed = store.renew("live", &holder, ttl).await.unwrap().unwrap();
    assert_eq!(renewed.term, 7);

    let gone = store.get("gone").await.unwrap().unwrap();
    assert!(!gone.live, "{gone:?}");
    assert_eq!(
        store
            .claim("gone", &other, "b", ttl)
            .await
            .unwrap()
            .unwrap()
            .term,
        8
    );

    let owners = store.owners("g").await.unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert_eq!(owners[0].epoch, 3);

    // A process of an older lease-sql writes a wall-clock expiry: refused.
    let pool = raw(&url).await;
    let err = sqlx::query("UPDATE leases SET expires_at_ms = ?1 WHERE name = 'gone'")
        .bind(wall_ms() + 5_000)
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("older lease-sql"), "{err}");
    let err = sqlx::query(
        "INSERT INTO leases (name, holder, instance, term, expires_at_ms) \
         VALUES ('new', 'x', 'old', 1, ?1)",
    )
    .bind(wall_ms() + 5_000)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(err.to_string().contains("older lease-sql"), "{err}");
    let err = sqlx::query("UPDATE leases_partitions SET expires_at_ms = ?1 WHERE group_name = 'g'")
        .bind(wall_ms())
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("older lease-sql"), "{err}");

    // Opened again (same boot): nothing moves.
    let again = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    assert!(again.get("live").await.unwrap().unwrap().live);
    assert_eq!(again.get("gone").await.unwrap().unwrap().term, 8);
    assert!(again.get("gone").await.unwrap().unwrap().live);
}

#[tokio::test]
async fn leases_recorded_under_another_boot_have_expired() {
    let url = support::sqlite_url();
    let store = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    let holder = HolderToken::mint();
    let g = store
        .claim("job", &holder, "a", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    store
        .acquire_partition("g", 0, "node-a", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    // The host reboots: the file was last used under another boot id.
    let pool = raw(&url).await;
    sqlx::query("UPDATE leases_clock SET boot_id = 'a-boot-before'")
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;

    let after = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    assert!(!after.get("job").await.unwrap().unwrap().live);
    assert!(after.owners("g").await.unwrap().is_empty());
    let g2 = after
        .claim("job", &HolderToken::mint(), "b", Duration::from_secs(5))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(g2.term, g.term + 1);
}

#[tokio::test]
async fn with_ddl_off_a_missing_clock_table_is_named_with_its_ddl() {
    let url = support::sqlite_url();
    old_file(&url, &HolderToken::mint()).await;
    let err = SqliteStore::connect(&url, SqlConfig::default().ddl(Ddl::None))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("leases_clock") && text.contains("CREATE TABLE IF NOT EXISTS leases_clock"),
        "{text}"
    );
}

/// The boot clock the store measures SQLite's expiries on, read as it reads it.
fn boot_ms() -> i64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

/// How long another connection holds the file's write lock while a write waits for it.
const HOLD: Duration = Duration::from_millis(300);

/// Runs `write` while another connection holds the file's write lock (`BEGIN IMMEDIATE`) for
/// [`HOLD`]; returns its result and a boot-clock reading taken right before the lock was freed.
/// The write cannot take effect before the lock is freed, so an expiry it computed once it had
/// the lock is at least that reading plus its TTL; one computed from a clock read before it
/// waited is about [`HOLD`] short of it.
async fn behind_the_write_lock<T: Send + 'static>(
    url: &str,
    write: impl std::future::Future<Output = T> + Send + 'static,
) -> (T, i64) {
    use sqlx::Connection;
    let mut blocker = sqlx::SqliteConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut blocker)
        .await
        .unwrap();
    let task = tokio::spawn(write);
    tokio::time::sleep(HOLD).await;
    assert!(!task.is_finished(), "the write did not wait for the lock");
    let freed = boot_ms();
    sqlx::query("COMMIT").execute(&mut blocker).await.unwrap();
    (task.await.unwrap(), freed)
}

/// The expiry recorded by `sql` (one row, one column), in boot-clock milliseconds.
async fn expiry(url: &str, sql: &str, key: &str) -> i64 {
    let pool = raw(url).await;
    let e: i64 = sqlx::query_scalar(sql)
        .bind(key)
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    e
}

#[tokio::test]
async fn a_write_that_waited_for_the_write_lock_is_granted_its_whole_ttl() {
    use lease_core::backend::{
        membership::MembershipStore, partitions::owner_id, slots::SlotStore,
    };
    let url = support::sqlite_url();
    let store = SqliteStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    const TTL: Duration = Duration::from_secs(30);
    let ttl_ms = TTL.as_millis() as i64;
    let owner = owner_id("node-a");
    // The partition, member and permit tables exist before the lock is taken (their first use
    // creates them).
    store
        .acquire_partition("warm", 0, &owner, TTL)
        .await
        .unwrap()
        .unwrap();
    store.heartbeat("warm", "n0", "x", TTL, &[]).await.unwrap();
    store
        .claim_permit("warm", 2, &HolderToken::mint(), "a", TTL)
        .await
        .unwrap()
        .unwrap();

    let mut short = Vec::new();
    let mut check = |what: &str, granted: i64, freed: i64| {
        let given = granted - freed;
        eprintln!("{what}: granted {given} ms from the lock's release (TTL {ttl_ms} ms)");
        if given < ttl_ms {
            short.push(format!("{what}: {given} ms"));
        }
    };
    let lease_expiry = "SELECT expires_at_ms FROM leases WHERE name = ?1";

    // claim
    let holder = HolderToken::mint();
    let (s, h) = (store.clone(), holder.clone());
    let (r, freed) =
        behind_the_write_lock(&url, async move { s.claim("claimed", &h, "a", TTL).await }).await;
    r.unwrap().unwrap();
    check("claim", expiry(&url, lease_expiry, "claimed").await, freed);

    // renew
    let (s, h) = (store.clone(), holder.clone());
    let (r, freed) =
        behind_the_write_lock(&url, async move { s.renew("claimed", &h, TTL).await }).await;
    r.unwrap().unwrap();
    check("renew", expiry(&url, lease_expiry, "claimed").await, freed);

    // claim_permit and renew_permit
    let permit_expiry = "SELECT max(expires_at_ms) FROM leases_permits WHERE name = ?1";
    let (s, h) = (store.clone(), holder.clone());
    let (r, freed) = behind_the_write_lock(&url, async move {
        s.claim_permit("counted", 3, &h, "a", TTL).await
    })
    .await;
    let permit = r.unwrap().unwrap().permit;
    check(
        "claim_permit",
        expiry(&url, permit_expiry, "counted").await,
        freed,
    );
    let (s, h) = (store.clone(), holder.clone());
    let (r, freed) = behind_the_write_lock(&url, async move {
        s.renew_permit("counted", permit, &h, TTL).await
    })
    .await;
    r.unwrap().unwrap();
    check(
        "renew_permit",
        expiry(&url, permit_expiry, "counted").await,
        freed,
    );

    // acquire_partition and renew_partitions
    let partition_expiry = "SELECT expires_at_ms FROM leases_partitions \
                            WHERE group_name = ?1 AND partition_no = 0";
    let (s, o) = (store.clone(), owner.clone());
    let (r, freed) =
        behind_the_write_lock(
            &url,
            async move { s.acquire_partition("g", 0, &o, TTL).await },
        )
        .await;
    r.unwrap().unwrap();
    check(
        "acquire_partition",
        expiry(&url, partition_expiry, "g").await,
        freed,
    );
    let (s, o) = (store.clone(), owner.clone());
    let (r, freed) =
        behind_the_write_lock(
            &url,
            async move { s.renew_partitions("g", &[0], &o, TTL).await },
        )
        .await;
    assert_eq!(r.unwrap().len(), 1);
    check(
        "renew_partitions",
        expiry(&url, partition_expiry, "g").await,
        freed,
    );

    // heartbeat
    let s = store.clone();
    let (r, freed) = behind_the_write_lock(&url, async move {
        s.heartbeat("svc", "n1", "x", TTL, &[]).await
    })
    .await;
    r.unwrap();
    check(
        "heartbeat",
        expiry(
            &url,
            "SELECT expires_at_ms FROM leases_members WHERE service = ?1",
            "svc",
        )
        .await,
        freed,
    );

    // claim_slot (an instant already passed, by the wall clock)
    let (s, h) = (store.clone(), holder.clone());
    let instant = wall_ms() - 1_000;
    let (r, freed) = behind_the_write_lock(&url, async move {
        s.claim_slot("job", &h, "a", TTL, instant).await
    })
    .await;
    let claimed = r.unwrap();
    assert!(
        matches!(
            claimed,
            lease_core::backend::slots::SlotClaim::Claimed { .. }
        ),
        "{claimed:?}"
    );
    check("claim_slot", expiry(&url, lease_expiry, "job").await, freed);

    assert!(
        short.is_empty(),
        "writes that waited {HOLD:?} for the write lock were granted less than their TTL \
         ({ttl_ms} ms) from its release: {short:?}"
    );
}
