//! Fenced HTTP requests: a [`tower`](https://docs.rs/tower) layer for servers ([`FenceLayer`])
//! that refuses a request whose token is lower than the highest accepted for the request's
//! resource — by its process, or by every replica sharing a [book of fences](FenceBook) in
//! Redis or a SQL database — and one for clients ([`StampLayer`]) that stamps the holder's
//! resource and token on every request.
//!
//! # The headers
//!
//! A fenced request carries two headers:
//!
//! ```text
//! Lease-Fence-Resource: orders/42
//! Lease-Fence-Token: 17
//! ```
//!
//! - [`RESOURCE_HEADER`] (`Lease-Fence-Resource`): the resource name, the UTF-8 bytes of the
//!   name as they are. It must be 1 to [`MAX_RESOURCE_BYTES`](crate::MAX_RESOURCE_BYTES) bytes,
//!   without control characters and without leading or trailing spaces or tabs (HTTP strips
//!   those from a header value, so the server would see another name).
//! - [`TOKEN_HEADER`] (`Lease-Fence-Token`): the term's token
//!   ([`Term::token`](lease_core::Term::token)) in decimal ASCII digits, 1 to 20 of them, no
//!   sign, no spaces inside, at least 1 and at most `u64::MAX`.
//!
//! Two headers rather than one with parameters, so a resource name needs no quoting or
//! escaping. Each must appear once: a repeated header is refused (which one would count?).
//!
//! # The answers of the server layer
//!
//! | request | answer | inner service called |
//! |---|---|---|
//! | token ≥ the resource's fence | the inner service's response; a higher token raised the fence first | yes |
//! | token < the resource's fence | **409 Conflict**, with [`CURRENT_HEADER`] (the fence's token) and the request's own two headers, and a text body that says to stop | no |
//! | header missing (one of the two, or both under [`Unfenced::Refuse`], the default), repeated, not UTF-8, a bad name, not a number, 0 | **400 Bad Request**, a text body saying what to send | no |
//! | token < the resource's fence in the layer's [book](FenceLayer::book) | **409 Conflict**, as above | no |
//! | the book cannot be checked: its store is unreachable, fails, or does not answer within [`FenceLayer::book_timeout`] | **503 Service Unavailable**, a text body saying the fence could not be checked and why | no |
//! | a new resource when the fence already holds [`FenceLayer::max_resources`] | **503 Service Unavailable** | no |
//!
//! **Why 409 and not 412.** 412 Precondition Failed is the answer to HTTP's own conditional
//! headers (`If-Match`, `If-Unmodified-Since`, RFC 9110 §13), which a server, a cache or a
//! client library may evaluate and answer on its own; keeping 412 for those lets a client tell
//! "my `If-Match` failed: read again and retry" from "my term is over: stop". 409 Conflict is
//! "the request conflicts with the current state of the target resource" (RFC 9110 §15.5.10):
//! a newer term has written there. Neither is retried by HTTP clients on their own.
//! [`refusal`] reads a 409 of this layer back into a [`Stale`].
//!
//! **Why a missing header is refused by default.** A route behind the layer is a fenced route:
//! a request without the headers is most likely a client that forgot to stamp them, and
//! letting it through would let that client's zombie through too. Routes that take unfenced
//! requests (reads, health checks) belong outside the layer; where one router must serve both,
//! [`FenceLayer::allow_unfenced`] lets a request with *neither* header pass unchecked (one of
//! the two alone is still a 400).
//!
//! # What the server layer guarantees
//!
//! The fence of a resource is its highest accepted token, in the memory of the
//! [`MemoryFence`] the layer holds (clones of a layer share it). For each fenced request the
//! layer, before calling the inner service:
//!
//! 1. takes the resource's lock (an async mutex per resource name; it waits while another
//!    request of the same resource is in its inner service);
//! 2. compares: a lower token is answered 409 and the lock let go; an equal or higher token
//!    raises the fence to it;
//! 3. calls the inner service and **keeps the lock until its response future finishes** (the
//!    response's head is ready; a streamed body is not waited for).
//!
//! So, among the requests through one `MemoryFence`: once a request under token *t* was
//! admitted, every later request of the resource under a lower token is refused without
//! calling the inner service, and the inner service's work for one resource is never
//! concurrent: a handler under a lower token never runs after, or while, a handler under a
//! higher token — the check and the handler's work are one step per resource, as a fenced
//! write is on the other resources. Requests of different resources do not wait for each
//! other. Requests of one holder to one resource are served one at a time (the price of the
//! order; a holder that needs parallel writes fences finer resources, `orders/42` rather than
//! `orders`).
//!
//! # Several replicas: a shared book of fences
//!
//! Replicas behind a load balancer each have their own memory, so a `MemoryFence` alone lets a
//! zombie through at a replica that has not seen its successor. Give each replica's layer the
//! same [`FenceBook`] — [`RedisBook`] (one script per request, one round trip), [`SqlBook`]
//! (one upsert in a short transaction on PostgreSQL, MySQL/MariaDB or SQLite), or a book of
//! your own over another store — with [`FenceLayer::book`]. For each fenced request the layer
//! then first checks and raises the resource's fence **in the book**, atomically in the store
//! (a lower token: 409, the inner service not called), and only then takes the local steps 1
//! to 3 above.
//!
//! - **What it guarantees.** Across all the replicas sharing a book: once a request under
//!   token *t* was admitted at any replica, every later request of the resource under a lower
//!   token is refused, at every replica, without calling its inner service. Within one
//!   replica, the order above still holds.
//! - **What it does not.** The per-resource lock is per process: a handler admitted under a
//!   lower token *before* the higher one was admitted may still be running at another replica
//!   while the higher one's runs, and its writes may land after the higher one's. Handlers
//!   whose effects must never interleave across replicas fence their own writes with a
//!   resource fence (the [SQL](crate::sql), [Redis](crate::redis), [etcd](crate::etcd), …
//!   fences), under the layer: the book keeps zombies out of the service, the resource fence
//!   orders the writes that race it.
//! - **A store that cannot answer refuses.** When the book's store is unreachable, fails, or
//!   does not answer within [`FenceLayer::book_timeout`] (default [`DEFAULT_BOOK_TIMEOUT`]),
//!   the request is answered **503** and the inner service is not called: a request is never
//!   let through unchecked because the fence could not be read. A check cut off by the timeout
//!   may still have raised the book's fence; that only refuses lower tokens sooner.
//! - **Cost.** One check in the book per fenced request before the handler runs: one round trip
//!   on Redis, three on SQL (begin, the upsert, commit).
//!
//! ```no_run
//! # async fn f(conn: redis::aio::ConnectionManager) {
//! use axum::{Router, routing::post};
//! use lease_fence::http::{FenceLayer, RedisBook};
//! use lease_fence::redis::RedisFence;
//!
//! // Every replica: the same fence keys on the same Redis.
//! let book = RedisBook::new(RedisFence::new(), conn);
//! let app: Router = Router::new()
//!     .route("/orders/42", post(|| async { "written" }))
//!     .layer(FenceLayer::new().book(book));
//! # let _ = app; }
//! ```
//!
//! # What it cannot do
//!
//! - **Without a book, the fence is per server process.** It lives in memory: a restart
//!   forgets it (the next request of any token is accepted), and several replicas behind a
//!   load balancer each keep their own, so a zombie reaching a replica that has not seen the
//!   successor gets through. For several replicas, or a fence that survives restarts, give the
//!   layer a shared [book](FenceLayer::book).
//! - **With a book, handlers are not ordered across replicas** (see above): fence the
//!   handler's own writes with a resource fence where they must never interleave. The book is
//!   as durable as its store (a Redis failover to a replica that had not received a raise lets
//!   a lower token in again).
//! - **Only the inner service is fenced.** Work the handler leaves running after its response
//!   (a spawned task, a streamed body) is not ordered by the lock.
//! - **Growth.** One entry (the name and a lock) per resource name ever fenced, never removed
//!   while the process lives (removing one would forget its fence); at most
//!   [`FenceLayer::max_resources`] (default [`DEFAULT_MAX_RESOURCES`]) — a request for one more
//!   is answered 503. A book keeps one row or key per resource name, never removed. Anyone who
//!   can reach the layer can fill them with names: put authentication before it.
//! - **A dropped request lets go of the lock** (its future is dropped). If its handler had
//!   already written something before being dropped, that partial write stands.
//! - **The raise is not undone.** An admitted higher token raises the fence (the book's and the
//!   process's) before its handler runs, and the fence stays raised if the handler then fails
//!   (unlike a rolled-back SQL fence). That only refuses the older term sooner, which is over
//!   anyway.
//! - **A slow request holds up its resource.** The lock is held while the handler reads the
//!   request body, so a client that sends its body slowly delays the resource's other requests
//!   (not other resources'): put a timeout on requests (such as tower-http's `TimeoutLayer`)
//!   around the fenced service.
//!
//! ```
//! use axum::{Router, routing::post};
//! use lease_fence::http::{FenceLayer, StampLayer};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The server: every route of the router is fenced.
//! let app = Router::new()
//!     .route("/orders/42", post(|| async { "written" }))
//!     .layer(FenceLayer::new());
//!
//! // The successor (token 8) writes; then the zombie (token 7) tries.
//! for (token, status) in [(8, 200), (7, 409)] {
//!     let client = StampLayer::new("orders/42", token)?; // `StampLayer::for_term` with a Term
//!     let app = tower::Layer::layer(&client, app.clone());
//!     let request = http::Request::post("/orders/42").body(axum::body::Body::empty())?;
//!     let response = app.oneshot(request).await?;
//!     assert_eq!(response.status().as_u16(), status);
//!     if status == 409 {
//!         let stale = lease_fence::http::refusal(&response).expect("a refusal");
//!         assert_eq!((stale.offered(), stale.fence()), (7, 8));
//!     }
//! }
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Full};
use lease_core::Term;
use tower_layer::Layer;
use tower_service::Service;

use crate::check;
use crate::error::{FenceError, Stale};

mod book;

#[cfg(feature = "redis")]
pub use book::RedisBook;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub use book::SqlBook;
pub use book::{BookFuture, FenceBook};

/// The header that names the resource of a fenced request: `Lease-Fence-Resource`.
pub const RESOURCE_HEADER: HeaderName = HeaderName::from_static("lease-fence-resource");

/// The header that carries the term's token, in decimal: `Lease-Fence-Token`.
pub const TOKEN_HEADER: HeaderName = HeaderName::from_static("lease-fence-token");

/// The header of a 409 answer that carries the fence's token (the newer term's), in decimal:
/// `Lease-Fence-Current`.
pub const CURRENT_HEADER: HeaderName = HeaderName::from_static("lease-fence-current");

/// How many resource names a [`MemoryFence`] keeps by default (see
/// [`FenceLayer::max_resources`]): with names of at most 255 bytes, a few tens of MB at most.
pub const DEFAULT_MAX_RESOURCES: usize = 65_536;

/// How long a [`FenceLayer`] waits for its [book](FenceLayer::book)'s answer by default before
/// answering 503 (see [`FenceLayer::book_timeout`]).
pub const DEFAULT_BOOK_TIMEOUT: Duration = Duration::from_secs(5);

/// The response body of a fenced service: the inner service's body, or the layer's own text
/// answer (400, 409, 503).
pub type FenceBody<B> = Either<B, Full<Bytes>>;

/// The fences of one server process: per resource name, the highest token accepted, in memory
/// (see the [module docs](self) for what that guarantees and what it cannot). Clones share the
/// same fences.
#[derive(Clone)]
pub struct MemoryFence {
    shared: Arc<Shared>,
}

struct Shared {
    fences: Mutex<HashMap<String, Arc<tokio::sync::Mutex<u64>>>>,
    max: usize,
}

impl fmt::Debug for MemoryFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryFence")
            .field("resources", &self.len())
            .field("max_resources", &self.shared.max)
            .finish()
    }
}

impl Default for MemoryFence {
    fn default() -> Self {
        MemoryFence::new(DEFAULT_MAX_RESOURCES)
    }
}

/// Why a request was not admitted.
enum Refusal {
    Stale(Stale),
    Full(usize),
}

impl MemoryFence {
    /// Empty fences that keep at most `max_resources` resource names (at least 1).
    pub fn new(max_resources: usize) -> MemoryFence {
        MemoryFence {
            shared: Arc::new(Shared {
                fences: Mutex::new(HashMap::new()),
                max: max_resources.max(1),
            }),
        }
    }

    /// How many resource names the fences hold.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// `true` when no resource was fenced yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The fence of `resource`: the highest token accepted, `None` for a resource never fenced.
    /// It waits while a request of the resource is in the inner service.
    pub async fn token(&self, resource: &str) -> Option<u64> {
        let entry = self.map().get(resource).cloned()?;
        let token = *entry.lock().await;
        Some(token)
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<u64>>>> {
        // The map is only read or extended under the lock, never left half-changed: a panic
        // elsewhere while it was held leaves it whole.
        self.shared
            .fences
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the resource's lock, compares and raises; the guard is held while the inner
    /// service runs. Without `compare` (the break switch), the fence is set to the token.
    async fn admit(
        &self,
        resource: &str,
        token: u64,
        compare: bool,
    ) -> Result<tokio::sync::OwnedMutexGuard<u64>, Refusal> {
        let entry = {
            let mut map = self.map();
            match map.get(resource) {
                Some(entry) => entry.clone(),
                None if map.len() >= self.shared.max => return Err(Refusal::Full(map.len())),
                None => map.entry(resource.to_owned()).or_default().clone(),
            }
        };
        let mut fence = entry.lock_owned().await;
        if compare && token < *fence {
            return Err(Refusal::Stale(Stale::new(resource, token, *fence)));
        }
        *fence = if compare { token.max(*fence) } else { token };
        Ok(fence)
    }
}

/// What the server layer does with a request that carries neither fence header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unfenced {
    /// Answer 400, saying what to send (the default: a route behind the layer is fenced).
    Refuse,
    /// Call the inner service unchecked (for routers that serve unfenced routes too).
    Pass,
}

/// The server layer: fences the requests of the services it wraps (see the [module
/// docs](self) for the headers, the answers and the guarantee). Clones share one
/// [`MemoryFence`], and one [`FenceBook`] when it has one.
#[derive(Debug, Clone)]
pub struct FenceLayer {
    fence: MemoryFence,
    book: Option<Arc<dyn FenceBook>>,
    book_timeout: Duration,
    unfenced: Unfenced,
    compare: bool,
}

impl Default for FenceLayer {
    fn default() -> Self {
        FenceLayer::new()
    }
}

impl FenceLayer {
    /// A layer over new, empty fences ([`DEFAULT_MAX_RESOURCES`]), refusing unfenced requests.
    pub fn new() -> FenceLayer {
        FenceLayer::with_fence(MemoryFence::default())
    }

    /// A layer over `fence`, for several layers (routers, listeners) of one process that must
    /// share their fences.
    pub fn with_fence(fence: MemoryFence) -> FenceLayer {
        FenceLayer {
            fence,
            book: None,
            book_timeout: DEFAULT_BOOK_TIMEOUT,
            unfenced: Unfenced::Refuse,
            compare: true,
        }
    }

    /// The same layer, checking every fenced request in `book` — a fence shared by several
    /// server replicas, such as a [`RedisBook`] or a [`SqlBook`] — before its own
    /// [`MemoryFence`]: a token lower than the book's fence is answered 409, and a book that
    /// cannot answer (unreachable, failing, slower than [`book_timeout`](Self::book_timeout))
    /// is answered 503; the inner service is called in neither case. See the [module
    /// docs](self) for what that guarantees across replicas, and what it does not.
    pub fn book(self, book: impl FenceBook) -> FenceLayer {
        FenceLayer {
            book: Some(Arc::new(book)),
            ..self
        }
    }

    /// The same layer, waiting at most `timeout` for its book's answer (default
    /// [`DEFAULT_BOOK_TIMEOUT`]); past it the request is answered 503 and not run. A check cut
    /// off by the timeout may still have raised the book's fence, which only refuses lower
    /// tokens sooner.
    pub fn book_timeout(self, timeout: Duration) -> FenceLayer {
        FenceLayer {
            book_timeout: timeout,
            ..self
        }
    }

    /// The same layer over new fences that keep at most `max` resource names (at least 1): a
    /// request that would fence one more is answered 503 Service Unavailable.
    pub fn max_resources(self, max: usize) -> FenceLayer {
        FenceLayer {
            fence: MemoryFence::new(max),
            ..self
        }
    }

    /// The same layer, letting a request that carries *neither* fence header through to the
    /// inner service unchecked. A request with one header only, or a malformed one, is still
    /// answered 400. Unfenced requests are not ordered with fenced ones.
    pub fn allow_unfenced(self) -> FenceLayer {
        FenceLayer {
            unfenced: Unfenced::Pass,
            ..self
        }
    }

    /// The fences of this process the layer checks (after its book, when it has one).
    pub fn fence(&self) -> &MemoryFence {
        &self.fence
    }

    /// The shared book of fences the layer checks first, when it has one.
    pub fn shared_book(&self) -> Option<&dyn FenceBook> {
        self.book.as_deref()
    }

    /// Test support: the same layer with its own check left out — every well-formed request
    /// the book (if any) admits is admitted and sets the [`MemoryFence`] to its token, as a
    /// server that does not compare tokens would. A book has a break switch of its own. Tests
    /// use it to show that their zombie gets through without the check. Never use it in a
    /// service.
    #[doc(hidden)]
    pub fn break_check_for_tests(self) -> FenceLayer {
        FenceLayer {
            compare: false,
            ..self
        }
    }
}

impl<S> Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            layer: self.clone(),
        }
    }
}

/// A service fenced by a [`FenceLayer`].
#[derive(Debug, Clone)]
pub struct Fenced<S> {
    inner: S,
    layer: FenceLayer,
}

/// The future of a [`Fenced`] service.
pub type FencedFuture<B, E> =
    Pin<Box<dyn Future<Output = Result<Response<FenceBody<B>>, E>> + Send + 'static>>;

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Fenced<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<FenceBody<ResBody>>;
    type Error = S::Error;
    type Future = FencedFuture<ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The service that was polled ready goes into the future; a clone stays.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (resource, token) = match parse(request.headers()) {
            Ok(Some(fenced)) => fenced,
            Ok(None) if self.layer.unfenced == Unfenced::Pass => {
                return Box::pin(async move { Ok(inner.call(request).await?.map(Either::Left)) });
            }
            Ok(None) => {
                let text = format!(
                    "this route is fenced: send the headers `{RESOURCE_HEADER}: <resource>` and \
                     `{TOKEN_HEADER}: <the term's token, a decimal number ≥ 1>`"
                );
                return ready(answer(StatusCode::BAD_REQUEST, text));
            }
            Err(text) => return ready(answer(StatusCode::BAD_REQUEST, text)),
        };
        let fence = self.layer.fence.clone();
        let compare = self.layer.compare;
        let book = self.layer.book.clone();
        let timeout = self.layer.book_timeout;
        Box::pin(async move {
            if let Some(book) = book
                && let Err(refused) = check_book(&*book, &resource, token, timeout).await
            {
                return Ok(refused);
            }
            let held = match fence.admit(&resource, token, compare).await {
                Ok(held) => held,
                Err(Refusal::Stale(stale)) => return Ok(stale_answer(&stale)),
                Err(Refusal::Full(n)) => {
                    let text = format!(
                        "this server's fence holds {n} resources, its most; it takes no new \
                         resource name ('{resource}') until it restarts"
                    );
                    return Ok(answer(StatusCode::SERVICE_UNAVAILABLE, text));
                }
            };
            let response = inner.call(request).await;
            drop(held);
            Ok(response?.map(Either::Left))
        })
    }
}

/// The book's check of a request: `Err` with the answer when it does not admit it (409 for a
/// lower token, 400 for one the book cannot hold, 503 when it cannot answer).
async fn check_book<B>(
    book: &dyn FenceBook,
    resource: &str,
    token: u64,
    timeout: Duration,
) -> Result<(), Response<FenceBody<B>>> {
    match tokio::time::timeout(timeout, book.check(resource, token)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(FenceError::Stale(stale))) => Err(stale_answer(&stale)),
        Ok(Err(FenceError::Other(e)))
            if matches!(
                e.kind(),
                lease_core::ErrorKind::InvalidArgument | lease_core::ErrorKind::InvalidName
            ) =>
        {
            Err(answer(
                StatusCode::BAD_REQUEST,
                format!("the shared fence of '{resource}' cannot take this request: {e}"),
            ))
        }
        Ok(Err(e)) => Err(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the shared fence of '{resource}' could not be checked, so the request was not \
                 run; try again later ({e})"
            ),
        )),
        Err(_) => Err(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the shared fence of '{resource}' did not answer within {timeout:?}, so the \
                 request was not run; try again later"
            ),
        )),
    }
}

fn ready<B, E: Send + 'static>(response: Response<FenceBody<B>>) -> FencedFuture<B, E>
where
    B: Send + 'static,
{
    Box::pin(std::future::ready(Ok(response)))
}

/// The layer's own text answer.
fn answer<B>(status: StatusCode, text: String) -> Response<FenceBody<B>> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(text))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The 409: the refusal's text, the fence's token and the request's own headers.
fn stale_answer<B>(stale: &Stale) -> Response<FenceBody<B>> {
    let mut response = answer(StatusCode::CONFLICT, stale.to_string());
    let headers = response.headers_mut();
    headers.insert(CURRENT_HEADER, HeaderValue::from(stale.fence()));
    headers.insert(TOKEN_HEADER, HeaderValue::from(stale.offered()));
    // The name came in as a header value, so it is one.
    if let Ok(name) = HeaderValue::from_bytes(stale.resource().as_bytes()) {
        headers.insert(RESOURCE_HEADER, name);
    }
    response
}

/// The fence headers of a request: `None` when neither is there, the text of a 400 when they
/// are not one valid pair.
fn parse(headers: &HeaderMap) -> Result<Option<(String, u64)>, String> {
    let one = |name: &HeaderName| -> Result<Option<&HeaderValue>, String> {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        if values.next().is_some() {
            return Err(format!(
                "the header `{name}` appears more than once; send it once"
            ));
        }
        Ok(first)
    };
    let (resource, token) = match (one(&RESOURCE_HEADER)?, one(&TOKEN_HEADER)?) {
        (None, None) => return Ok(None),
        (Some(r), Some(t)) => (r, t),
        (Some(_), None) => {
            return Err(format!(
                "the header `{TOKEN_HEADER}` is missing: send the term's token with the \
                 resource, as a decimal number ≥ 1"
            ));
        }
        (None, Some(_)) => {
            return Err(format!(
                "the header `{RESOURCE_HEADER}` is missing: send the resource name with the \
                 token"
            ));
        }
    };
    let resource = std::str::from_utf8(resource.as_bytes()).map_err(|_| {
        format!("the header `{RESOURCE_HEADER}` is not UTF-8; send the resource name in UTF-8")
    })?;
    check::resource(resource, check::MAX_RESOURCE_BYTES)
        .map_err(|e| format!("the header `{RESOURCE_HEADER}` is not a resource name: {e}"))?;
    let token = parse_token(token.as_bytes())?;
    check::token(token).map_err(|e| format!("the header `{TOKEN_HEADER}`: {e}"))?;
    Ok(Some((resource.to_owned(), token)))
}

/// A token in decimal: 1 to 20 ASCII digits, fitting a `u64`.
fn parse_token(bytes: &[u8]) -> Result<u64, String> {
    let bad = |why: &str| {
        format!(
            "the header `{TOKEN_HEADER}` ({:?}) {why}; send the term's token as a decimal \
             number ≥ 1, digits only",
            String::from_utf8_lossy(&bytes[..bytes.len().min(32)])
        )
    };
    if bytes.is_empty() || bytes.len() > 20 || !bytes.iter().all(u8::is_ascii_digit) {
        return Err(bad("is not a decimal number of 1 to 20 digits"));
    }
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| bad("is above u64::MAX"))
}

/// Reads a 409 answered by a [`FenceLayer`] back into the refusal it is; `None` for any other
/// response (another status, or a 409 without the layer's headers).
pub fn refusal<B>(response: &Response<B>) -> Option<Stale> {
    if response.status() != StatusCode::CONFLICT {
        return None;
    }
    let headers = response.headers();
    let number = |name: &HeaderName| parse_token(headers.get(name)?.as_bytes()).ok();
    let resource = std::str::from_utf8(headers.get(RESOURCE_HEADER)?.as_bytes()).ok()?;
    Some(Stale::new(
        resource,
        number(&TOKEN_HEADER)?,
        number(&CURRENT_HEADER)?,
    ))
}

/// The client layer: stamps a holder's resource and token on every request of the services it
/// wraps, replacing any fence headers the request had (see the [module docs](self) for the
/// format).
///
/// A term's token never changes, so a layer is for one term: when the holder gets a new term,
/// build a new layer (or service) with the new token. The layer does not know whether the term
/// is still held — that is the server's fence's job: a zombie's stamped requests are refused
/// there once a newer term has been admitted.
#[derive(Debug, Clone)]
pub struct StampLayer {
    resource: HeaderValue,
    token: HeaderValue,
}

impl StampLayer {
    /// Stamps `resource` and `token`. `InvalidArgument` for a token of 0; `InvalidName` for a
    /// resource name that is empty, longer than [`MAX_RESOURCE_BYTES`](crate::MAX_RESOURCE_BYTES)
    /// bytes, holds a control character or starts or ends with a space or tab (HTTP would strip
    /// it). No I/O.
    pub fn new(resource: &str, token: u64) -> Result<StampLayer, FenceError> {
        check::token(token)?;
        check::resource(resource, check::MAX_RESOURCE_BYTES)?;
        if resource.trim_matches([' ', '\t']) != resource {
            return Err(lease_core::Error::invalid_name(format!(
                "the resource name {resource:?} starts or ends with a space or tab, which HTTP \
                 strips from a header value; trim it"
            ))
            .into());
        }
        let resource = HeaderValue::from_bytes(resource.as_bytes()).map_err(|_| {
            lease_core::Error::invalid_name(format!(
                "the resource name {resource:?} cannot be an HTTP header value"
            ))
        })?;
        Ok(StampLayer {
            resource,
            token: HeaderValue::from(token),
        })
    }

    /// Stamps `resource` and the token of `term` (errors as [`new`](StampLayer::new)). For a
    /// counted lease, fence per permit: [`per_permit`](crate::per_permit)`(resource, term)`.
    pub fn for_term(resource: &str, term: &Term) -> Result<StampLayer, FenceError> {
        StampLayer::new(resource, term.token())
    }
}

impl<S> Layer<S> for StampLayer {
    type Service = Stamped<S>;

    fn layer(&self, inner: S) -> Stamped<S> {
        Stamped {
            inner,
            stamp: self.clone(),
        }
    }
}

/// A client service whose requests carry a [`StampLayer`]'s headers.
#[derive(Debug, Clone)]
pub struct Stamped<S> {
    inner: S,
    stamp: StampLayer,
}

impl<S, B> Service<Request<B>> for Stamped<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> S::Future {
        let headers = request.headers_mut();
        headers.insert(RESOURCE_HEADER, self.stamp.resource.clone());
        headers.insert(TOKEN_HEADER, self.stamp.token.clone());
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&HeaderName, &[u8])]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                (*name).clone(),
                HeaderValue::from_bytes(value).unwrap_or(HeaderValue::from_static("x")),
            );
        }
        map
    }

    #[test]
    fn the_headers_parse_strictly() {
        let r = &RESOURCE_HEADER;
        let t = &TOKEN_HEADER;
        assert_eq!(parse(&headers(&[])), Ok(None));
        assert_eq!(
            parse(&headers(&[(r, b"orders/42"), (t, b"17")])),
            Ok(Some(("orders/42".to_owned(), 17)))
        );
        assert_eq!(
            parse(&headers(&[
                (r, "é".as_bytes()),
                (t, b"18446744073709551615")
            ])),
            Ok(Some(("é".to_owned(), u64::MAX)))
        );
        for (bad, says) in [
            (headers(&[(r, b"a")]), "is missing"),
            (headers(&[(t, b"1")]), "is missing"),
            (headers(&[(r, b"a"), (t, b"0")]), "token 0"),
            (headers(&[(r, b"a"), (t, b"-1")]), "not a decimal"),
            (headers(&[(r, b"a"), (t, b"+1")]), "not a decimal"),
            (headers(&[(r, b"a"), (t, b"1 2")]), "not a decimal"),
            (headers(&[(r, b"a"), (t, b"")]), "not a decimal"),
            (
                headers(&[(r, b"a"), (t, b"18446744073709551616")]),
                "u64::MAX",
            ),
            (
                headers(&[(r, b"a"), (t, b"1"), (t, b"2")]),
                "more than once",
            ),
            (
                headers(&[(r, b"a"), (r, b"b"), (t, b"2")]),
                "more than once",
            ),
            (headers(&[(r, b"\xff"), (t, b"2")]), "UTF-8"),
            (headers(&[(r, b""), (t, b"2")]), "empty"),
            (
                headers(&[(r, "x".repeat(256).as_bytes()), (t, b"2")]),
                "at most 255",
            ),
        ] {
            let text = parse(&bad).err().unwrap_or_default();
            assert!(text.contains(says), "{bad:?}: {text}");
        }
    }

    #[test]
    fn the_stamp_refuses_what_it_cannot_send() {
        for (bad, kind) in [
            (
                StampLayer::new("a", 0),
                lease_core::ErrorKind::InvalidArgument,
            ),
            (StampLayer::new("", 1), lease_core::ErrorKind::InvalidName),
            (StampLayer::new(" a", 1), lease_core::ErrorKind::InvalidName),
            (
                StampLayer::new("a\t", 1),
                lease_core::ErrorKind::InvalidName,
            ),
            (
                StampLayer::new("a\nb", 1),
                lease_core::ErrorKind::InvalidName,
            ),
        ] {
            assert_eq!(bad.err().map(|e| e.kind()), Some(kind));
        }
        assert!(StampLayer::new("orders/é 42", u64::MAX).is_ok());
    }
}
