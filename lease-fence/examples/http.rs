//! An HTTP service fenced with `FenceLayer`, and two holders of one lease calling it through
//! `StampLayer`: the successor's write is served, the zombie's (its term superseded) is
//! refused 409 and its handler never runs. Exits on its own.
//!
//! `cargo run -p lease-fence --example http --features http`

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use lease_core::Coordinator;
use lease_fence::http::{FenceLayer, StampLayer};
use lease_local::MemoryStore;
use tower::{Layer, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One fenced write of the holder of `term`: a POST to `/invoices/7` carrying its token.
async fn write(
    addr: SocketAddr,
    term: &lease_core::Term,
) -> Result<http::Response<hyper::body::Incoming>, BoxError> {
    // A plain hyper client (one connection per request), under the stamp.
    let client = tower::service_fn(move |request: Request<Full<Bytes>>| async move {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok::<_, BoxError>(sender.send_request(request).await?)
    });
    let client = StampLayer::for_term("invoices/7", term)?.layer(client);
    let request = Request::post("/invoices/7")
        .header("host", addr.to_string())
        .body(Full::new(Bytes::from_static(b"{\"paid\":true}")))?;
    client.oneshot(request).await
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // The service: its writes behind the fence.
    let writes = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/invoices/7",
            post(|State(writes): State<Arc<AtomicUsize>>| async move {
                writes.fetch_add(1, Ordering::SeqCst);
                "paid"
            }),
        )
        .with_state(writes.clone())
        .layer(FenceLayer::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // Two holders of the lease "billing", one after the other.
    let leases = Coordinator::builder(MemoryStore::new())
        .instance("biller")
        .build()?;
    let first = leases.try_acquire("billing").await?;
    let response = write(addr, &first).await?;
    println!(
        "first holder (token {}): {}",
        first.token(),
        response.status()
    );

    // The first holder is paused past its lease; a successor takes over and writes.
    first.resign().await?;
    let second = leases.try_acquire("billing").await?;
    let response = write(addr, &second).await?;
    println!(
        "successor (token {}): {}",
        second.token(),
        response.status()
    );

    // The first holder wakes up and writes under its old term: refused, handler not run.
    let response = write(addr, &first).await?;
    println!("zombie (token {}): {}", first.token(), response.status());
    assert_eq!(response.status(), StatusCode::CONFLICT);
    if let Some(stale) = lease_fence::http::refusal(&response) {
        println!("  {stale}");
    }
    assert_eq!(writes.load(Ordering::SeqCst), 2, "the zombie's handler ran");

    second.resign().await?;
    leases.close().await?;
    server.abort();
    Ok(())
}
