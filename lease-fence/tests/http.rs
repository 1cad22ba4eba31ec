//! The HTTP fence against a real server: axum on 127.0.0.1, behind `FenceLayer`, and a real
//! hyper client (one connection per request) behind `StampLayer`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use lease_fence::FenceError;
use lease_fence::http::{CURRENT_HEADER, FenceLayer, StampLayer, TOKEN_HEADER};
use tower::{Layer, ServiceExt};

/// What the handler saw: how many times it ran, and the tokens of its calls in the order they
/// ran.
#[derive(Clone, Default)]
struct Seen {
    calls: Arc<AtomicUsize>,
    tokens: Arc<Mutex<Vec<u64>>>,
}

impl Seen {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn tokens(&self) -> Vec<u64> {
        self.tokens.lock().unwrap().clone()
    }
}

/// The write handler: counts the call and records the request's token (none: 0).
async fn write(State(seen): State<Seen>, headers: HeaderMap) -> &'static str {
    let token = headers
        .get(TOKEN_HEADER)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    seen.tokens.lock().unwrap().push(token);
    // Give a racing request time to overtake, were the layer not holding the resource.
    tokio::task::yield_now().await;
    seen.calls.fetch_add(1, Ordering::SeqCst);
    "written"
}

/// The slow handler: counts the requests in it at once (the most in `tokens[0]`), for 30 ms.
async fn slow(State(seen): State<Seen>) -> &'static str {
    let now = seen.calls.fetch_add(1, Ordering::SeqCst) + 1;
    {
        let mut most = seen.tokens.lock().unwrap();
        if most.is_empty() {
            most.push(0);
        }
        most[0] = most[0].max(now as u64);
    }
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    seen.calls.fetch_sub(1, Ordering::SeqCst);
    "slow"
}

/// A server on 127.0.0.1:0 whose `/write` (and `/slow`) is behind `layer`.
async fn serve(layer: FenceLayer) -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new()
        .route("/write", post(write))
        .route("/slow", post(slow))
        .with_state(seen.clone())
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A real HTTP/1 client: a new connection per request.
fn client(
    addr: SocketAddr,
) -> impl tower::Service<
    Request<Full<Bytes>>,
    Response = http::Response<hyper::body::Incoming>,
    Error = BoxError,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |request: Request<Full<Bytes>>| async move {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok::<_, BoxError>(sender.send_request(request).await?)
    })
}

/// An answer: status, headers, body text.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

async fn answer(response: http::Response<hyper::body::Incoming>) -> Answer {
    let (parts, body) = response.into_parts();
    let text = String::from_utf8(body.collect().await.unwrap().to_bytes().to_vec()).unwrap();
    Answer {
        status: parts.status,
        headers: parts.headers,
        text,
    }
}

fn request() -> Request<Full<Bytes>> {
    Request::post("/write")
        .header("host", "127.0.0.1")
        .body(Full::new(Bytes::from_static(b"data")))
        .unwrap()
}

/// A holder's write through `StampLayer` (`resource`, `token`).
async fn stamped(addr: SocketAddr, resource: &str, token: u64) -> Answer {
    let stamp = StampLayer::new(resource, token).unwrap();
    let response = stamp.layer(client(addr)).oneshot(request()).await.unwrap();
    answer(response).await
}

/// A request with the headers given, as they are (no `StampLayer`).
async fn raw(addr: SocketAddr, headers: &[(&str, &[u8])]) -> Answer {
    let mut request = request();
    for (name, value) in headers {
        request.headers_mut().append(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            http::HeaderValue::from_bytes(value).unwrap(),
        );
    }
    answer(client(addr).oneshot(request).await.unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_after_its_successor_is_refused_409_and_the_handler_does_not_run() {
    let (addr, seen) = serve(FenceLayer::new()).await;
    let resource = common::unique("orders/");
    assert_eq!(stamped(addr, &resource, 6).await.status, StatusCode::OK);
    assert_eq!(stamped(addr, &resource, 7).await.status, StatusCode::OK);
    assert_eq!(seen.calls(), 2);

    let zombie = stamped(addr, &resource, 6).await;
    assert_eq!(zombie.status, StatusCode::CONFLICT, "{}", zombie.text);
    assert_eq!(seen.calls(), 2, "the handler ran for the zombie");
    assert_eq!(seen.tokens(), [6, 7]);
    assert_eq!(zombie.headers[&CURRENT_HEADER], "7");
    assert!(zombie.text.contains("refused token 6"), "{}", zombie.text);
    assert!(zombie.text.contains("stop"), "{}", zombie.text);

    // The client reads the refusal back as the typed error.
    let mut response = http::Response::new(());
    *response.status_mut() = zombie.status;
    *response.headers_mut() = zombie.headers;
    let stale = lease_fence::http::refusal(&response).expect("a refusal");
    assert_eq!(
        (stale.resource(), stale.offered(), stale.fence()),
        (&resource[..], 6, 7)
    );
    assert!(FenceError::from(stale).is_stale());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_equal_token_passes_twice_and_a_higher_one_raises_the_fence() {
    let layer = FenceLayer::new();
    let fence = layer.fence().clone();
    let (addr, seen) = serve(layer).await;
    let resource = common::unique("invoices/");
    for _ in 0..2 {
        assert_eq!(stamped(addr, &resource, 3).await.status, StatusCode::OK);
    }
    assert_eq!(fence.token(&resource).await, Some(3));
    assert_eq!(stamped(addr, &resource, 9).await.status, StatusCode::OK);
    assert_eq!(fence.token(&resource).await, Some(9));
    assert_eq!(
        stamped(addr, &resource, 8).await.status,
        StatusCode::CONFLICT
    );
    // Another resource has a fence of its own.
    let other = common::unique("invoices/");
    assert_eq!(stamped(addr, &other, 1).await.status, StatusCode::OK);
    assert_eq!(seen.tokens(), [3, 3, 9, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_malformed_or_zero_headers_are_refused_400_saying_what_to_send() {
    let (addr, seen) = serve(FenceLayer::new()).await;
    let r = "lease-fence-resource";
    let t = "lease-fence-token";
    for (headers, says) in [
        (&[][..], "this route is fenced"),
        (
            &[(r, &b"orders/1"[..])][..],
            "`lease-fence-token` is missing",
        ),
        (&[(t, &b"5"[..])][..], "`lease-fence-resource` is missing"),
        (&[(r, &b"orders/1"[..]), (t, &b"0"[..])][..], "token 0"),
        (&[(r, &b"orders/1"[..]), (t, &b"abc"[..])][..], "decimal"),
        (&[(r, &b"orders/1"[..]), (t, &b"-3"[..])][..], "decimal"),
        (
            &[(r, &b"orders/1"[..]), (t, &b"99999999999999999999"[..])][..],
            "u64::MAX",
        ),
        (
            &[(r, &b"orders/1"[..]), (t, &b"5"[..]), (t, &b"6"[..])][..],
            "more than once",
        ),
        (&[(r, &b"\xff\xfe"[..]), (t, &b"5"[..])][..], "UTF-8"),
    ] {
        let refused = raw(addr, headers).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{headers:?}");
        assert!(refused.text.contains(says), "{headers:?}: {}", refused.text);
    }
    assert_eq!(seen.calls(), 0, "the handler ran for a bad request");
    // The stamp refuses a token of 0 before any request.
    let e = StampLayer::new("orders/1", 0).unwrap_err();
    assert_eq!(e.kind(), lease_core::ErrorKind::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_unfenced_passes_a_request_with_neither_header_only() {
    let (addr, seen) = serve(FenceLayer::new().allow_unfenced()).await;
    assert_eq!(raw(addr, &[]).await.status, StatusCode::OK);
    assert_eq!(seen.calls(), 1);
    let half = raw(addr, &[("lease-fence-token", b"4")]).await;
    assert_eq!(half.status, StatusCode::BAD_REQUEST);
    let resource = common::unique("jobs/");
    assert_eq!(stamped(addr, &resource, 4).await.status, StatusCode::OK);
    assert_eq!(
        stamped(addr, &resource, 3).await.status,
        StatusCode::CONFLICT
    );
    assert_eq!(seen.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_fence_refuses_a_new_resource_503() {
    let (addr, seen) = serve(FenceLayer::new().max_resources(1)).await;
    assert_eq!(stamped(addr, "a", 1).await.status, StatusCode::OK);
    let full = stamped(addr, "b", 1).await;
    assert_eq!(
        full.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        full.text
    );
    assert_eq!(stamped(addr, "a", 2).await.status, StatusCode::OK);
    assert_eq!(seen.calls(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_check_broken_the_zombie_gets_through() {
    let layer = FenceLayer::new();
    let fence = layer.fence().clone();
    let (addr, seen) = serve(layer.break_check_for_tests()).await;
    let resource = common::unique("orders/");
    assert_eq!(stamped(addr, &resource, 7).await.status, StatusCode::OK);
    let zombie = stamped(addr, &resource, 6).await;
    assert_eq!(
        zombie.status,
        StatusCode::OK,
        "the broken fence let the zombie in"
    );
    assert_eq!(seen.calls(), 2, "the handler ran for the zombie");
    assert_eq!(seen.tokens(), [7, 6]);
    assert_eq!(fence.token(&resource).await, Some(6));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
    let (addr, seen) = serve(FenceLayer::new()).await;
    let resource = common::unique("race/");
    let (low, high) = (10_u64, 11_u64);
    let race = common::race(low, high, move |token, _i| {
        let resource = resource.clone();
        async move {
            let stamp = StampLayer::new(&resource, token)?;
            let response = stamp
                .layer(client(addr))
                .oneshot(request())
                .await
                .map_err(|e| lease_core::Error::unavailable(e.to_string()))?;
            match response.status() {
                StatusCode::OK => Ok(()),
                StatusCode::CONFLICT => Err(lease_fence::http::refusal(&response)
                    .expect("a 409 of the layer")
                    .into()),
                other => panic!("answered {other}"),
            }
        }
    })
    .await;
    let tokens = seen.tokens();
    common::assert_never_back(&tokens);
    assert_eq!(
        tokens.iter().filter(|&&t| t == high).count(),
        common::RACE_WRITES
    );
    assert_eq!(
        tokens.iter().filter(|&&t| t == low).count(),
        race.low_accepted
    );
}

/// The most requests in the slow handler at once when `resources` (one request each) are sent
/// together.
async fn most_at_once(resources: &[String]) -> u64 {
    let (addr, seen) = serve(FenceLayer::new()).await;
    let requests = resources.iter().map(|resource| {
        let stamp = StampLayer::new(resource, 5).unwrap();
        let request = Request::post("/slow")
            .header("host", "127.0.0.1")
            .body(Full::new(Bytes::new()))
            .unwrap();
        tokio::spawn(stamp.layer(client(addr)).oneshot(request))
    });
    for request in requests.collect::<Vec<_>>() {
        assert_eq!(request.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    seen.tokens()[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_resource_runs_one_handler_at_a_time_and_others_run_alongside() {
    let same = vec![common::unique("one/"); 4];
    assert_eq!(
        most_at_once(&same).await,
        1,
        "two handlers of one resource at once"
    );
    let different: Vec<String> = (0..4).map(|_| common::unique("many/")).collect();
    assert!(
        most_at_once(&different).await > 1,
        "resources waited for each other"
    );
}
