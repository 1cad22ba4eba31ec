//! Round trips per fenced write, counted on the wire by lease-conformance's fault proxy (in
//! pass-through mode) on a warm connection: the check costs one request where the resource
//! allows one — a Redis script, one statement in the caller's PostgreSQL or MySQL transaction —
//! accepted or refused alike; and NATS KV's read plus compare-and-set costs two.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use std::str::FromStr;

use common::unique;
use lease_conformance::{FaultProxy, env};
use lease_fence::nats::NatsFence;
use lease_fence::redis::RedisFence;
use lease_fence::sql::SqlFence;

/// A proxy in front of `host:port`.
async fn proxy(host: &str, port: u16) -> FaultProxy {
    FaultProxy::start((host.to_owned(), port)).await.unwrap()
}

#[tokio::test]
async fn a_fenced_redis_write_is_one_round_trip() {
    let Some(url) = env::server_url("redis") else {
        return;
    };
    let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
    let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        env::skip("redis", "the round-trip count needs a TCP server URL");
        return;
    };
    let proxy = proxy(&host, port).await;
    let local = proxy.local_addr();
    let info = info.set_addr(redis::ConnectionAddr::Tcp(
        local.ip().to_string(),
        local.port(),
    ));
    let mut c = redis::Client::open(info)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let fence = RedisFence::new();
    let (resource, key) = (unique("rt/"), unique("rt:"));
    // Warm: the script is cached on the server after this.
    fence.set(&mut c, &resource, 2, &key, "warm").await.unwrap();

    proxy.reset_stats();
    fence
        .set(&mut c, &resource, 2, &key, "accepted")
        .await
        .unwrap();
    assert_eq!(proxy.stats().round_trips, 1, "an accepted write");
    proxy.reset_stats();
    assert!(
        fence
            .set(&mut c, &resource, 1, &key, "refused")
            .await
            .unwrap_err()
            .is_stale()
    );
    assert_eq!(proxy.stats().round_trips, 1, "a refused write");
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .arg(fence.key(&resource))
        .query_async(&mut c)
        .await
        .unwrap();
}

/// `$name`: the SQL check in a transaction on `$backend`, counted between the `BEGIN` and the
/// `COMMIT` (both the caller's).
macro_rules! sql_round_trips {
    ($name:ident, $backend:literal, $options:ty, $pool:ty) => {
        #[tokio::test]
        async fn $name() {
            let Some(url) = env::server_url($backend) else {
                return;
            };
            let opts = <$options>::from_str(&url).unwrap();
            let proxy = proxy(opts.get_host(), opts.get_port()).await;
            let pool = <$pool>::new()
                .max_connections(1)
                // No ping on checkout: only the fence's own statement goes over the wire.
                .test_before_acquire(false)
                .connect_with(opts.host("127.0.0.1").port(proxy.local_addr().port()))
                .await
                .unwrap();
            let fence = SqlFence::new("lease_fence_tests").unwrap();
            fence.ensure(&pool).await.unwrap();
            let resource = unique("rt/");
            // Warm: the statement is prepared on the connection after this.
            let mut tx = pool.begin().await.unwrap();
            fence.check(&mut tx, &resource, 2).await.unwrap();
            tx.commit().await.unwrap();

            let mut tx = pool.begin().await.unwrap();
            proxy.reset_stats();
            fence.check(&mut tx, &resource, 2).await.unwrap();
            assert_eq!(proxy.stats().round_trips, 1, "an accepted check");
            proxy.reset_stats();
            assert!(
                fence
                    .check(&mut tx, &resource, 1)
                    .await
                    .unwrap_err()
                    .is_stale()
            );
            assert_eq!(proxy.stats().round_trips, 1, "a refused check");
            drop(tx);
        }
    };
}

sql_round_trips!(
    a_postgres_check_is_one_round_trip,
    "postgres",
    sqlx::postgres::PgConnectOptions,
    sqlx::postgres::PgPoolOptions
);
sql_round_trips!(
    a_mysql_check_is_one_round_trip,
    "mysql",
    sqlx::mysql::MySqlConnectOptions,
    sqlx::mysql::MySqlPoolOptions
);

#[tokio::test]
async fn a_fenced_nats_put_is_two_round_trips() {
    let Some(url) = env::server_url("nats") else {
        return;
    };
    let addr = url.trim_start_matches("nats://");
    let (host, port) = addr.rsplit_once(':').unwrap();
    let proxy = proxy(host, port.parse().unwrap()).await;
    let client = async_nats::connect(proxy.local_addr().to_string())
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client);
    let name = unique("fence_rt_");
    let kv = lease_fence::nats::create_bucket(&js, &name).await.unwrap();
    let fence = NatsFence::new();
    fence.put(&kv, "k", 2, "warm").await.unwrap();

    proxy.reset_stats();
    fence.put(&kv, "k", 2, "accepted").await.unwrap();
    assert_eq!(proxy.stats().round_trips, 2, "an accepted put");
    proxy.reset_stats();
    assert!(
        fence
            .put(&kv, "k", 1, "refused")
            .await
            .unwrap_err()
            .is_stale()
    );
    assert_eq!(proxy.stats().round_trips, 1, "a refused put: the read only");
    let _ = js.delete_stream(format!("KV_{name}")).await;
}
