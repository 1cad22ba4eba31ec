//! The HTTP fence over a shared book, for several server replicas: two axum servers on
//! 127.0.0.1 (two replicas, each with its own `FenceLayer` and connection or pool) sharing one
//! book on a real store — Redis (`LEASE_TEST_REDIS_URL`), PostgreSQL
//! (`LEASE_TEST_POSTGRES_URL`), MySQL/MariaDB (`LEASE_TEST_MYSQL_URL`), a SQLite file; an unset
//! URL prints one `SKIPPED` line, a failure when `LEASE_TEST_REQUIRE` names the backend.
//!
//! Per store: the successor's request admitted at replica A, the zombie's at replica B is
//! refused 409 and its handler does not run; with the book's check broken the zombie gets
//! through (so the first test can fail); the store cut off (a TCP proxy between replica and
//! store that drops its connections, or stops answering) is answered 503 and the handler does
//! not run. Each test fences resources under a key prefix or table of its own.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use common::unique;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use lease_conformance::env;
use lease_fence::http::{CURRENT_HEADER, FenceBook, FenceLayer, RedisBook, SqlBook, StampLayer};
use lease_fence::redis::RedisFence;
use lease_fence::sql::SqlFence;
use tokio::sync::watch;
use tower::{Layer, ServiceExt};

/// The tokens of the handler's calls, in the order they ran.
#[derive(Clone, Default)]
struct Seen {
    calls: Arc<AtomicUsize>,
    tokens: Arc<Mutex<Vec<u64>>>,
}

impl Seen {
    fn tokens(&self) -> Vec<u64> {
        self.tokens.lock().unwrap().clone()
    }
}

async fn write(State(seen): State<Seen>, headers: HeaderMap) -> &'static str {
    let token = headers
        .get(lease_fence::http::TOKEN_HEADER)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    seen.tokens.lock().unwrap().push(token);
    seen.calls.fetch_add(1, Ordering::SeqCst);
    "written"
}

/// A replica: a server on 127.0.0.1:0 whose `/write` is behind `layer`.
async fn replica(layer: FenceLayer) -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/write", post(write))
        .with_state(seen.clone())
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

/// An answer: status, headers, body text.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

/// A holder's write to `addr` through `StampLayer` (`resource`, `token`), on a connection of
/// its own.
async fn stamped(addr: SocketAddr, resource: &str, token: u64) -> Answer {
    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    let client = tower::service_fn(move |request: Request<Full<Bytes>>| async move {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok::<_, BoxError>(sender.send_request(request).await?)
    });
    let request = Request::post("/write")
        .header("host", "127.0.0.1")
        .body(Full::new(Bytes::from_static(b"data")))
        .unwrap();
    let stamp = StampLayer::new(resource, token).unwrap();
    let response = stamp.layer(client).oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let text = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Answer {
        status: parts.status,
        headers: parts.headers,
        text,
    }
}

/// Two replicas, A over `book_a` and B over `book_b` (one book, reached twice). The zombie
/// (token 6) writes at B, its successor (7) at A, then the zombie again at B. Answers the
/// zombie's second answer and what B's handler saw.
async fn zombie_at_the_other_replica(
    book_a: impl FenceBook,
    book_b: impl FenceBook,
    resource: &str,
) -> (Answer, Vec<u64>) {
    let (a, seen_a) = replica(FenceLayer::new().book(book_a)).await;
    let (b, seen_b) = replica(FenceLayer::new().book(book_b)).await;
    let first = stamped(b, resource, 6).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let successor = stamped(a, resource, 7).await;
    assert_eq!(successor.status, StatusCode::OK, "{}", successor.text);
    assert_eq!(seen_a.tokens(), [7]);
    let zombie = stamped(b, resource, 6).await;
    (zombie, seen_b.tokens())
}

/// The zombie's second request was refused 409 naming the successor's token, and B's handler
/// ran for its first request only.
fn assert_zombie_refused(zombie: &Answer, seen_b: &[u64]) {
    assert_eq!(zombie.status, StatusCode::CONFLICT, "{}", zombie.text);
    assert_eq!(zombie.headers[&CURRENT_HEADER], "7");
    assert!(zombie.text.contains("refused token 6"), "{}", zombie.text);
    assert_eq!(seen_b, [6], "replica B's handler ran for the zombie");
}

/// With the book's check broken, the zombie got through at B (B's own memory had only seen 6).
fn assert_zombie_through(zombie: &Answer, seen_b: &[u64]) {
    assert_eq!(
        zombie.status,
        StatusCode::OK,
        "the broken book let the zombie in: {}",
        zombie.text
    );
    assert_eq!(seen_b, [6, 6], "replica B's handler ran for the zombie");
}

/// A TCP proxy between a replica and its store, to cut the store off: `cut` drops every
/// connection through it and every new one; `hang` keeps them open but forwards nothing.
struct Proxy {
    addr: SocketAddr,
    state: watch::Sender<Link>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    Up,
    Cut,
    Hang,
}

impl Proxy {
    async fn to(target: &str) -> Proxy {
        let target: SocketAddr = tokio::net::lookup_host(target)
            .await
            .unwrap()
            .next()
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (state, link) = watch::channel(Link::Up);
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                let mut link = link.clone();
                tokio::spawn(async move {
                    let now = *link.borrow();
                    match now {
                        Link::Up => {}
                        Link::Cut => return,
                        Link::Hang => {
                            let _ = link.wait_for(|l| *l == Link::Up).await;
                        }
                    }
                    let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                        return;
                    };
                    let broken = link.wait_for(|l| *l != Link::Up);
                    let copy = tokio::io::copy_bidirectional(&mut inbound, &mut outbound);
                    let cut = tokio::select! {
                        _ = copy => return,
                        l = broken => l.map(|l| *l).unwrap_or(Link::Cut),
                    };
                    if cut == Link::Hang {
                        // Keep both ends open, forwarding nothing.
                        let _ = link.wait_for(|l| *l == Link::Cut).await;
                    }
                });
            }
        });
        Proxy { addr, state }
    }

    fn set(&self, link: Link) {
        self.state.send_replace(link);
    }
}

/// `url` with its `host:port` (after the scheme and any `user@`) replaced by `addr`, and the
/// `host:port` it had.
fn through(url: &str, addr: SocketAddr) -> (String, String) {
    let (scheme, rest) = url.split_once("://").unwrap();
    let start = rest.find('@').map_or(0, |i| i + 1);
    let end = rest[start..]
        .find(['/', '?'])
        .map_or(rest.len(), |i| start + i);
    let target = rest[start..end].to_owned();
    let proxied = format!("{scheme}://{}{addr}{}", &rest[..start], &rest[end..]);
    (proxied, target)
}

/// The replica's answer and handler calls once its store was cut off (`link`) after one
/// admitted request. The layer waits 2 s for its book when the link is cut (the store's
/// client fails first), 200 ms when it hangs (the layer's timeout runs out first).
async fn with_the_store_cut(
    book: impl FenceBook,
    proxy: &Proxy,
    link: Link,
    resource: &str,
) -> (Answer, Seen) {
    let timeout = match link {
        Link::Hang => Duration::from_millis(200),
        _ => Duration::from_secs(2),
    };
    let layer = FenceLayer::new().book(book).book_timeout(timeout);
    let (addr, seen) = replica(layer).await;
    let before = stamped(addr, resource, 3).await;
    assert_eq!(before.status, StatusCode::OK, "{}", before.text);
    proxy.set(link);
    let after = stamped(addr, resource, 4).await;
    (after, seen)
}

fn assert_unavailable(answer: &Answer, seen: &Seen, says: &str) {
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.text
    );
    assert!(answer.text.contains(says), "{}", answer.text);
    assert!(answer.text.contains("not run"), "{}", answer.text);
    assert_eq!(seen.tokens(), [3], "the handler ran unchecked");
}

mod redis_book {
    use super::*;
    use redis::aio::MultiplexedConnection;

    async fn conn(url: &str) -> MultiplexedConnection {
        let client = redis::Client::open(url).unwrap();
        client.get_multiplexed_async_connection().await.unwrap()
    }

    /// Two connections (one per replica) and a fence under a key prefix of the test's own.
    async fn setup() -> Option<(String, RedisFence)> {
        let url = env::server_url("redis")?;
        if let Err(e) = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
        {
            env::skip("redis", &format!("cannot connect to {url}: {e}"));
            return None;
        }
        let fence = RedisFence::with_prefix(&unique("lease-fence-http-test:")).unwrap();
        Some((url, fence))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_zombie_at_another_replica_is_refused_409_and_its_handler_does_not_run() {
        let Some((url, fence)) = setup().await else {
            return;
        };
        let resource = unique("orders/");
        let (zombie, seen_b) = zombie_at_the_other_replica(
            RedisBook::new(fence.clone(), conn(&url).await),
            RedisBook::new(fence.clone(), conn(&url).await),
            &resource,
        )
        .await;
        assert_zombie_refused(&zombie, &seen_b);
        let mut c = conn(&url).await;
        assert_eq!(fence.token(&mut c, &resource).await.unwrap(), Some(7));
        let _: () = redis::cmd("DEL")
            .arg(fence.key(&resource))
            .query_async(&mut c)
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn with_the_books_check_broken_the_zombie_gets_through() {
        let Some((url, fence)) = setup().await else {
            return;
        };
        let resource = unique("orders/");
        let broken = fence.clone().break_check_for_tests();
        let (zombie, seen_b) = zombie_at_the_other_replica(
            RedisBook::new(broken.clone(), conn(&url).await),
            RedisBook::new(broken, conn(&url).await),
            &resource,
        )
        .await;
        assert_zombie_through(&zombie, &seen_b);
        let mut c = conn(&url).await;
        let _: () = redis::cmd("DEL")
            .arg(fence.key(&resource))
            .query_async(&mut c)
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_store_cut_off_is_answered_503_and_the_handler_does_not_run() {
        let Some((url, fence)) = setup().await else {
            return;
        };
        for (link, says) in [
            (Link::Cut, "could not be checked"),
            (Link::Hang, "did not answer within 200ms"),
        ] {
            let proxy = Proxy::to(&through(&url, "127.0.0.1:1".parse().unwrap()).1).await;
            let (proxied, _) = through(&url, proxy.addr);
            let book = RedisBook::new(fence.clone(), conn(&proxied).await);
            let resource = unique("cut/");
            let (answer, seen) = with_the_store_cut(book, &proxy, link, &resource).await;
            assert_unavailable(&answer, &seen, says);
            proxy.set(Link::Cut);
            let _: () = redis::cmd("DEL")
                .arg(fence.key(&resource))
                .query_async(&mut conn(&url).await)
                .await
                .unwrap();
        }
    }
}

/// The SQL books, once per dialect: `$db` the sqlx database, `$pool` the async fn giving a
/// pool on the URL given (`None`: skipped).
macro_rules! sql_book {
    ($name:ident, $db:ty, $backend:literal) => {
        mod $name {
            use super::*;

            type Db = $db;

            /// The URL, and a fence table of the test's own (ensured).
            async fn setup() -> Option<(String, SqlFence)> {
                let url = url($backend)?;
                let pool = match pool(&url).await {
                    Ok(pool) => pool,
                    Err(e) => {
                        env::skip($backend, &format!("cannot connect to {url}: {e}"));
                        return None;
                    }
                };
                let fence = SqlFence::new(&unique("http_book_")).unwrap();
                fence.ensure(&pool).await.unwrap();
                pool.close().await;
                Some((url, fence))
            }

            async fn pool(url: &str) -> Result<sqlx::Pool<Db>, sqlx::Error> {
                sqlx::pool::PoolOptions::<Db>::new()
                    .max_connections(2)
                    .acquire_timeout(Duration::from_secs(1))
                    .connect(url)
                    .await
            }

            async fn drop_table(url: &str, fence: &SqlFence) {
                let pool = pool(url).await.unwrap();
                sqlx::query::<Db>(&format!("DROP TABLE {}", fence.table()))
                    .execute(&pool)
                    .await
                    .unwrap();
                pool.close().await;
                remove_sqlite_file(url);
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_zombie_at_another_replica_is_refused_409_and_its_handler_does_not_run() {
                let Some((url, fence)) = setup().await else {
                    return;
                };
                let resource = unique("orders/");
                let (zombie, seen_b) = zombie_at_the_other_replica(
                    SqlBook::new(fence.clone(), pool(&url).await.unwrap()),
                    SqlBook::new(fence.clone(), pool(&url).await.unwrap()),
                    &resource,
                )
                .await;
                assert_zombie_refused(&zombie, &seen_b);
                let pool = pool(&url).await.unwrap();
                let mut conn = pool.acquire().await.unwrap();
                assert_eq!(
                    fence.token::<Db>(&mut *conn, &resource).await.unwrap(),
                    Some(7)
                );
                drop(conn);
                pool.close().await;
                drop_table(&url, &fence).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn with_the_books_check_broken_the_zombie_gets_through() {
                let Some((url, fence)) = setup().await else {
                    return;
                };
                let resource = unique("orders/");
                let broken = fence.clone().break_check_for_tests();
                let (zombie, seen_b) = zombie_at_the_other_replica(
                    SqlBook::new(broken.clone(), pool(&url).await.unwrap()),
                    SqlBook::new(broken, pool(&url).await.unwrap()),
                    &resource,
                )
                .await;
                assert_zombie_through(&zombie, &seen_b);
                drop_table(&url, &fence).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_token_the_table_cannot_hold_is_answered_400_and_the_handler_does_not_run() {
                let Some((url, fence)) = setup().await else {
                    return;
                };
                let book = SqlBook::new(fence.clone(), pool(&url).await.unwrap());
                let (addr, seen) = replica(FenceLayer::new().book(book)).await;
                let answer = stamped(addr, &unique("orders/"), u64::MAX).await;
                assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
                assert!(
                    answer.text.contains("cannot take this request"),
                    "{}",
                    answer.text
                );
                assert!(seen.tokens().is_empty(), "the handler ran unchecked");
                drop_table(&url, &fence).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_missing_fence_table_is_answered_503_and_the_handler_does_not_run() {
                let Some((url, fence)) = setup().await else {
                    return;
                };
                drop_table(&url, &fence).await;
                let book = SqlBook::new(fence.clone(), pool(&url).await.unwrap());
                let (addr, seen) = replica(FenceLayer::new().book(book)).await;
                let answer = stamped(addr, &unique("orders/"), 3).await;
                assert_eq!(
                    answer.status,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "{}",
                    answer.text
                );
                assert!(answer.text.contains("does not exist"), "{}", answer.text);
                assert!(seen.tokens().is_empty(), "the handler ran unchecked");
                remove_sqlite_file(&url);
            }
        }
    };
}

/// A server's URL (`None`: skipped); a fresh SQLite file for `sqlite`.
fn url(backend: &str) -> Option<String> {
    if backend == "sqlite" {
        let dir = std::env::temp_dir().join("lease-fence-tests");
        std::fs::create_dir_all(&dir).unwrap();
        return Some(format!(
            "sqlite://{}/{}.db?mode=rwc",
            dir.display(),
            unique("http")
        ));
    }
    env::server_url(backend)
}

/// Removes the file of a SQLite URL (`url()`'s); nothing for a server's URL.
fn remove_sqlite_file(url: &str) {
    if let Some(path) = url.strip_prefix("sqlite://") {
        let path = path.split('?').next().unwrap_or(path);
        let _ = std::fs::remove_file(path);
    }
}

sql_book!(postgres_book, sqlx::Postgres, "postgres");
sql_book!(mysql_book, sqlx::MySql, "mysql");
sql_book!(sqlite_book, sqlx::Sqlite, "sqlite");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_cut_off_is_answered_503_and_the_handler_does_not_run() {
    let Some(url) = env::server_url("postgres") else {
        return;
    };
    let fence = SqlFence::new(&unique("http_book_")).unwrap();
    let direct = match sqlx::PgPool::connect(&url).await {
        Ok(pool) => pool,
        Err(e) => {
            env::skip("postgres", &format!("cannot connect to {url}: {e}"));
            return;
        }
    };
    fence.ensure(&direct).await.unwrap();
    for (link, says) in [
        (Link::Cut, "could not be checked"),
        (Link::Hang, "did not answer within 200ms"),
    ] {
        let proxy = Proxy::to(&through(&url, "127.0.0.1:1".parse().unwrap()).1).await;
        let (proxied, _) = through(&url, proxy.addr);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(1))
            .connect(&proxied)
            .await
            .unwrap();
        let book = SqlBook::new(fence.clone(), pool);
        let (answer, seen) = with_the_store_cut(book, &proxy, link, &unique("cut/")).await;
        assert_unavailable(&answer, &seen, says);
        proxy.set(Link::Cut);
    }
    sqlx::query(&format!("DROP TABLE {}", fence.table()))
        .execute(&direct)
        .await
        .unwrap();
}
