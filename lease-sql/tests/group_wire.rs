//! Partitions and membership on the wire: round trips per operation through the proxy, and the
//! corners the conformance cases do not reach (concurrent acquirers, byte-exact names, the
//! longest values, the largest batch), on every dialect.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use lease_conformance::{FaultProxy, GroupStore};
use lease_core::backend::{
    MAX_INSTANCE_BYTES,
    membership::{MAX_ADDRESS_BYTES, MAX_GROUPS_PER_MEMBER, MAX_NODE_ID_BYTES},
    partitions::{MAX_PARTITIONS_PER_CALL, PartitionStore},
};
use lease_sql::{Dialect, SqlConfig, SqlStore};

const TTL: Duration = Duration::from_secs(30);

fn tag(what: &str) -> String {
    format!("{what}-{:x}", support::rand_u64())
}

/// Each operation's round trips through the proxy, on a warm connection.
async fn count(s: &dyn GroupStore, proxy: &FaultProxy) -> Vec<(&'static str, u64)> {
    let group = tag("grt");
    let service = tag("mrt");
    let (a, b) = ("node-a@1", "node-b@1");
    let hundred: Vec<u32> = (0..1000).collect();
    // Warm up: every statement prepared once on the store's one lease connection.
    for p in &hundred {
        s.acquire_partition(&group, *p, a, TTL)
            .await
            .unwrap()
            .unwrap();
    }
    s.renew_partitions(&group, &hundred[..10], a, TTL)
        .await
        .unwrap();
    s.owners(&group).await.unwrap();
    s.release_partitions(&group, &[999], a).await.unwrap();
    s.heartbeat(&service, "n0", "x", TTL, &[]).await.unwrap();
    s.members(&service).await.unwrap();
    s.leave(&service, "n0").await.unwrap();

    let mut counts = Vec::new();
    let mut measure = |what, n: u64| counts.push((what, n));
    // Released above, 999 is acquired again under epoch 2, then kept by its owner.
    for what in ["acquire", "acquire (own, kept)"] {
        proxy.reset_stats();
        let lease = s.acquire_partition(&group, 999, a, TTL).await.unwrap();
        assert_eq!(lease.unwrap().epoch, 2, "{what}");
        measure(what, proxy.stats().round_trips);
    }
    proxy.reset_stats();
    assert_eq!(
        s.acquire_partition(&group, 999, b, TTL).await.unwrap(),
        None
    );
    measure("acquire (held)", proxy.stats().round_trips);
    proxy.reset_stats();
    let renewed = s
        .renew_partitions(&group, &hundred[..10], a, TTL)
        .await
        .unwrap();
    assert_eq!(renewed.len(), 10);
    measure("renew (10)", proxy.stats().round_trips);
    proxy.reset_stats();
    let renewed = s.renew_partitions(&group, &hundred, a, TTL).await.unwrap();
    assert_eq!(renewed.len(), 1000);
    measure("renew (1,000)", proxy.stats().round_trips);
    proxy.reset_stats();
    assert!(
        s.renew_partitions(&group, &[], a, TTL)
            .await
            .unwrap()
            .is_empty()
    );
    measure("renew (none)", proxy.stats().round_trips);
    proxy.reset_stats();
    assert_eq!(s.owners(&group).await.unwrap().len(), 1000);
    measure("owners (1,000)", proxy.stats().round_trips);
    proxy.reset_stats();
    assert_eq!(
        s.release_partitions(&group, &hundred, a).await.unwrap(),
        1000
    );
    measure("release (1,000)", proxy.stats().round_trips);
    proxy.reset_stats();
    s.heartbeat(&service, "n1", "10.0.0.1:1", TTL, &["g".into()])
        .await
        .unwrap();
    measure("heartbeat (new)", proxy.stats().round_trips);
    proxy.reset_stats();
    s.heartbeat(&service, "n1", "10.0.0.1:2", TTL, &[])
        .await
        .unwrap();
    measure("heartbeat", proxy.stats().round_trips);
    proxy.reset_stats();
    assert_eq!(s.members(&service).await.unwrap().len(), 1);
    measure("members", proxy.stats().round_trips);
    proxy.reset_stats();
    assert!(s.leave(&service, "n1").await.unwrap());
    measure("leave", proxy.stats().round_trips);
    // Bad arguments never reach the wire.
    proxy.reset_stats();
    assert!(
        s.acquire_partition(&"g".repeat(256), 0, a, TTL)
            .await
            .is_err()
    );
    assert!(s.heartbeat(&service, "n", "a\nb", TTL, &[]).await.is_err());
    let huge = vec![0; MAX_PARTITIONS_PER_CALL + 1];
    assert!(s.renew_partitions(&group, &huge, a, TTL).await.is_err());
    measure("bad arguments", proxy.stats().round_trips);
    counts
}

fn assert_counts(backend: &str, counts: &[(&str, u64)]) {
    eprintln!("{backend} group round trips: {counts:?}");
    let expected = [
        ("acquire", 1),
        ("acquire (own, kept)", 1),
        ("acquire (held)", 1),
        ("renew (10)", 1),
        ("renew (1,000)", 1),
        ("renew (none)", 0),
        ("owners (1,000)", 1),
        ("release (1,000)", 1),
        ("heartbeat (new)", 1),
        ("heartbeat", 1),
        ("members", 1),
        ("leave", 1),
        ("bad arguments", 0),
    ];
    assert_eq!(counts, expected, "{backend}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_group_round_trips() {
    let Some((_, p)) = support::postgres_with(SqlConfig::default().lease_connections(1)).await
    else {
        return;
    };
    assert_counts("postgres", &count(&p.store, &p.proxy).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_group_round_trips() {
    let Some((_, p)) = support::mysql_with(SqlConfig::default().lease_connections(1)).await else {
        return;
    };
    assert_counts("mysql", &count(&p.store, &p.proxy).await);
}

/// Many owners acquire one partition at once: exactly one wins, and the epoch goes up by one
/// per change of hands.
async fn one_winner_among_concurrent_acquirers(s: Arc<dyn GroupStore>) {
    let group = tag("race");
    for round in 1..=5u64 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..8 {
            let (s, group) = (s.clone(), group.clone());
            tasks.spawn(async move {
                let owner = format!("node-{i}@{round}");
                s.acquire_partition(&group, 7, &owner, TTL)
                    .await
                    .unwrap()
                    .map(|l| (owner, l))
            });
        }
        let mut winners = Vec::new();
        while let Some(done) = tasks.join_next().await {
            winners.extend(done.unwrap());
        }
        assert_eq!(
            winners.len(),
            1,
            "{}: round {round}: {winners:?}",
            s.backend()
        );
        let (owner, lease) = winners.pop().unwrap();
        assert_eq!(lease.epoch, round, "{}", s.backend());
        assert_eq!(lease.owner, owner);
        let owners = s.owners(&group).await.unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(
            (owners[0].owner.as_str(), owners[0].epoch),
            (owner.as_str(), round)
        );
        assert_eq!(s.release_partitions(&group, &[7], &owner).await.unwrap(), 1);
    }
}

/// Groups, owners, services and nodes are compared byte for byte, and members are listed in
/// byte order of their node ids.
async fn names_are_exact_bytes(s: &dyn GroupStore) {
    let base = tag("exact");
    for (i, g) in ["Job", "job", "job "].iter().enumerate() {
        let group = format!("{base}-{g}");
        let owner = format!("owner-{i}");
        let l = s.acquire_partition(&group, 0, &owner, TTL).await.unwrap();
        assert_eq!(l.map(|l| l.epoch), Some(1), "{}: {group:?}", s.backend());
    }
    let group = format!("{base}-owners");
    s.acquire_partition(&group, 0, "Node@1", TTL)
        .await
        .unwrap()
        .unwrap();
    for other in ["node@1", "Node@1 ", "Node@"] {
        assert_eq!(
            s.acquire_partition(&group, 0, other, TTL).await.unwrap(),
            None,
            "{}: {other:?} is not Node@1",
            s.backend()
        );
        assert!(
            s.renew_partitions(&group, &[0], other, TTL)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(s.release_partitions(&group, &[0], other).await.unwrap(), 0);
    }

    let service = format!("{base}-svc");
    for node in ["é", "a ", "B", "a", "b"] {
        s.heartbeat(&service, node, node, TTL, &[]).await.unwrap();
    }
    s.heartbeat(&format!("{base}-Svc"), "z", "", TTL, &[])
        .await
        .unwrap();
    let nodes: Vec<_> = s
        .members(&service)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.node, m.address))
        .collect();
    let want: Vec<_> = ["B", "a", "a ", "b", "é"]
        .iter()
        .map(|n| (n.to_string(), n.to_string()))
        .collect();
    assert_eq!(nodes, want, "{}: byte order", s.backend());
    assert!(s.leave(&service, "a ").await.unwrap());
    assert!(!s.leave(&service, "a  ").await.unwrap());
    assert_eq!(s.members(&service).await.unwrap().len(), 4);
}

/// The longest group, owner, service, node and address the store accepts, the most groups a
/// member may serve, and the first and last partition numbers, are kept exactly.
async fn longest_values_are_kept(s: &dyn GroupStore) {
    let max = s.capabilities().max_name_bytes;
    let pad = |prefix: String, bytes: usize| {
        // Multi-byte characters up to the limit, then one-byte ones to reach it exactly.
        let mut v = prefix;
        while v.len() + 3 <= bytes {
            v.push('日');
        }
        while v.len() < bytes {
            v.push('x');
        }
        v
    };
    let group = pad(tag("long"), max);
    let owner = pad("owner-".into(), MAX_INSTANCE_BYTES);
    for p in [0, u32::MAX] {
        let l = s
            .acquire_partition(&group, p, &owner, TTL)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((l.partition, l.owner.as_str()), (p, owner.as_str()));
    }
    let renewed: BTreeSet<u32> = s
        .renew_partitions(&group, &[u32::MAX, 0, u32::MAX], &owner, TTL)
        .await
        .unwrap()
        .into_iter()
        .map(|l| l.partition)
        .collect();
    assert_eq!(renewed, [0, u32::MAX].into());
    let owners = s.owners(&group).await.unwrap();
    assert_eq!(
        owners
            .iter()
            .map(|l| (l.partition, l.owner.as_str()))
            .collect::<Vec<_>>(),
        [(0, owner.as_str()), (u32::MAX, owner.as_str())]
    );
    assert_eq!(
        s.release_partitions(&group, &[0, u32::MAX], &owner)
            .await
            .unwrap(),
        2
    );

    let service = pad(tag("long-svc"), max);
    let node = pad("node-".into(), MAX_NODE_ID_BYTES);
    let address = pad("[::1]:".into(), MAX_ADDRESS_BYTES);
    let groups: Vec<String> = (0..MAX_GROUPS_PER_MEMBER)
        .map(|i| pad(format!("g{i:02}-"), max))
        .collect();
    let m = s
        .heartbeat(&service, &node, &address, TTL, &groups)
        .await
        .unwrap();
    assert_eq!(m.groups, groups);
    let members = s.members(&service).await.unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!(
        (&members[0].node, &members[0].address, &members[0].groups),
        (&node, &address, &groups),
        "{}: kept exactly",
        s.backend()
    );
    assert!(s.leave(&service, &node).await.unwrap());
}

/// The largest batch a call takes, renewed and released in one statement each.
async fn largest_batch(
    s: &dyn GroupStore,
    seed: impl std::future::Future<Output = ()>,
    group: &str,
) {
    seed.await;
    let owner = "node-a@1";
    let all: Vec<u32> = (0..MAX_PARTITIONS_PER_CALL as u32).collect();
    assert_eq!(s.owners(group).await.unwrap().len(), all.len());
    let started = std::time::Instant::now();
    let renewed = s.renew_partitions(group, &all, owner, TTL).await.unwrap();
    eprintln!(
        "{}: renewal of {} partitions took {:?}",
        s.backend(),
        all.len(),
        started.elapsed()
    );
    assert_eq!(renewed.len(), all.len());
    assert!(renewed.iter().all(|l| l.epoch == 1 && l.owner == owner));
    assert_eq!(
        s.release_partitions(group, &all, owner).await.unwrap(),
        all.len()
    );
    assert!(s.owners(group).await.unwrap().is_empty());
}

/// 10,000 live leases of `owner` "node-a@1" in `group`, inserted in one statement.
fn seed_sql(dialect: Dialect, table: &str) -> String {
    let now = dialect.now_ms();
    match dialect {
        Dialect::Postgres => format!(
            "INSERT INTO {table} (group_name, partition_no, owner, epoch, expires_at_ms) \
             SELECT $1, g, 'node-a@1', 1, {now} + 60000 FROM generate_series(0, 9999) g"
        ),
        // SQLite's expiries are on the host's boot clock, which no SQL expression reads: bound
        // as ?2.
        Dialect::Sqlite => format!(
            "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n < 9999) \
             INSERT INTO {table} (group_name, partition_no, owner, epoch, expires_at_ms) \
             SELECT ?1, n, 'node-a@1', 1, ?2 + 60000 FROM s"
        ),
        Dialect::MySql => {
            let d = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                     UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                     UNION ALL SELECT 8 UNION ALL SELECT 9)";
            format!(
                "INSERT INTO {table} (group_name, partition_no, owner, epoch, expires_at_ms) \
                 SELECT ?, a.d + 10 * b.d + 100 * c.d + 1000 * e.d, 'node-a@1', 1, \
                 {now} + 60000 FROM {d} a, {d} b, {d} c, {d} e"
            )
        }
    }
}

async fn corners<DB: sqlx::Database>(store: SqlStore<DB>, seed: impl AsyncFnOnce(String))
where
    SqlStore<DB>: GroupStore,
{
    one_winner_among_concurrent_acquirers(Arc::new(store.clone())).await;
    names_are_exact_bytes(&store).await;
    longest_values_are_kept(&store).await;
    let group = tag("ten-thousand");
    largest_batch(&store, seed(group.clone()), &group).await;
}

/// The corners on a server's store, the large batch seeded on its application pool.
async fn server_corners<DB: sqlx::Database>(dialect: Dialect, store: SqlStore<DB>)
where
    SqlStore<DB>: GroupStore,
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    for<'q> String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let sql = seed_sql(dialect, &store.config().partitions_table_name());
    let pool = store.app_pool().clone();
    corners(store, async |group| {
        sqlx::query(&sql).bind(group).execute(&pool).await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_group_corners() {
    if let Some((store, _)) = support::postgres().await {
        server_corners(Dialect::Postgres, store).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_group_corners() {
    if let Some((store, _)) = support::mysql().await {
        server_corners(Dialect::MySql, store).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_group_corners() {
    let store = support::sqlite().await;
    let sql = seed_sql(Dialect::Sqlite, &store.config().partitions_table_name());
    let pool = store.app_pool().clone();
    corners(store, async |group| {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let boot_ms = ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000;
        sqlx::query(&sql)
            .bind(group)
            .bind(boot_ms)
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}
