//! The service: elector, fenced write, HTTP (readiness, health, metrics), graceful shutdown.

use std::future::IntoFuture;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::routing::get;
use lease::sql::{SqlResultExt, SqliteStore, Token};
use lease::{Coordinator, Leadership, OpenOptions, Term, Timings};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::sync::watch;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::Args;

/// The lease the instances elect a leader for.
pub(crate) const LEASE: &str = "report";
/// Counter: report writes this instance committed under its term.
pub(crate) const WRITES: &str = "service_reports_written_total";
/// Counter: report writes refused because a newer term had written first.
const REFUSED: &str = "service_reports_refused_total";

/// Buckets of every `_seconds` histogram: 1 ms to 10 s.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Runs the service until SIGTERM or Ctrl-C.
pub(crate) async fn serve(args: Args) -> Result<()> {
    let prometheus = install_metrics()?;
    let lease = args.lease()?;
    // Every timing from the lease: renew every 2/15 of it, the term's local deadline at 10/15,
    // the step-down grace 4/15, a campaign every 2/15 (plus jitter). A follower takes over
    // within about lease + retry after a crash, within retry after a graceful stop.
    let timings = Timings::from_lease(lease)?;
    let store = lease::open(&args.store(), &OpenOptions::new().lease(lease))
        .await
        .context("opening the store")?;
    let Some(sqlite) = store.downcast_ref::<SqliteStore>().cloned() else {
        bail!("this example keeps its business table in SQLite: give --store sqlite://PATH");
    };
    prepare(&sqlite).await?;
    let mut builder = Coordinator::builder(sqlite.clone()).timings(timings);
    if let Some(instance) = &args.instance {
        builder = builder.instance(instance.clone());
    }
    let coordinator = builder.build()?;

    let shutdown = CancellationToken::new();
    tokio::spawn(signals(shutdown.clone()));

    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    // Scripts (the CI step, the plot) read the address from this line.
    println!("listening on http://{}", listener.local_addr()?);
    let http = Http {
        leadership: coordinator.leadership(LEASE),
        prometheus,
    };
    let app = Router::new()
        .route("/ready", get(ready))
        .route("/health", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics_text))
        .with_state(http);
    let stop_http = CancellationToken::new();
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(stop_http.clone().cancelled_owned())
            .into_future(),
    );

    let every = Duration::from_millis(args.every_ms.max(1));
    let mut elector = {
        let coordinator = coordinator.clone();
        tokio::spawn(async move {
            coordinator
                .run_elected(LEASE, move |term: Term| lead(sqlite.clone(), term, every))
                .await
        })
    };
    info!(instance = coordinator.instance(), lease = ?lease, "campaigning for '{LEASE}'");

    let ended_early = tokio::select! {
        () = shutdown.cancelled() => None,
        ended = &mut elector => Some(ended),
    };
    if let Some(ended) = ended_early {
        // run_elected returns before a close only on an error it cannot retry.
        stop_http.cancel();
        let _ = server.await;
        return match ended {
            Ok(Ok(())) => bail!("the election ended by itself"),
            Ok(Err(e)) => Err(e).context("the election ended"),
            Err(e) => Err(e).context("the elector's task failed"),
        };
    }
    info!("shutting down: the work is told to stop, then the lease is released");
    // Readiness turns 503 at once (the term ends); the lease is renewed until the work has
    // returned, then released, so a follower takes over within one retry.
    let closed = coordinator.close().await;
    let elected = elector.await;
    if args.linger_ms > 0 {
        tokio::time::sleep(Duration::from_millis(args.linger_ms)).await;
    }
    stop_http.cancel();
    server
        .await
        .context("the HTTP server's task failed")?
        .context("the HTTP server failed")?;
    closed.context("closing the coordinator")?;
    elected
        .context("the elector's task failed")?
        .context("the election ended with an error")?;
    info!("shut down cleanly");
    Ok(())
}

/// Installs the Prometheus recorder (histograms with buckets, so `_bucket` series come out)
/// and describes every metric: lease's and the service's own.
fn install_metrics() -> Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), BUCKETS)?
        .install_recorder()?;
    lease::telemetry::describe();
    metrics::describe_counter!(
        WRITES,
        metrics::Unit::Count,
        "report writes this instance committed under its term"
    );
    metrics::describe_counter!(
        REFUSED,
        metrics::Unit::Count,
        "report writes refused because a newer term had written first"
    );
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    Ok(handle)
}

/// The business table: one report row, with the fencing token of its last writer.
async fn prepare(sqlite: &SqliteStore) -> Result<()> {
    let pool = sqlite.app_pool();
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS service_report (
             id INTEGER PRIMARY KEY,
             fence INTEGER NOT NULL,
             writes INTEGER NOT NULL,
             writer TEXT NOT NULL
         )",
    )
    .execute(pool)
    .await
    .context("creating the report table")?;
    sqlx::query(
        "INSERT OR IGNORE INTO service_report (id, fence, writes, writer) VALUES (1, 0, 0, '')",
    )
    .execute(pool)
    .await
    .context("creating the report row")?;
    Ok(())
}

/// The leader's work: a fenced write every `every`, until the term ends.
async fn lead(sqlite: SqliteStore, term: Term, every: Duration) -> Result<(), lease::Error> {
    info!(
        term = term.token(),
        "leading: writing the report under this term's fencing token"
    );
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = term.done() => return Ok(()),
            _ = tick.tick() => {}
        }
        write_report(&sqlite, &term).await?;
    }
}

/// One fenced write: a transaction whose first statement verifies the lease (`Lost` when it
/// is gone: not one business statement runs), then an update that refuses a lower token than
/// the last writer's — the guard against a holder that was paused past its lease.
async fn write_report(sqlite: &SqliteStore, term: &Term) -> Result<(), lease::Error> {
    let mut tx = sqlite.begin_verified(term).await?;
    // `Token` binds the fencing token as SQLite's INTEGER (a token above i64::MAX is an
    // InvalidArgument, never a wrapped number); `lease_err` turns a driver error into a lease
    // error with the store's own verdict on whether a retry may help.
    let done = sqlx::query(
        "UPDATE service_report SET fence = ?1, writes = writes + 1, writer = ?2
          WHERE id = 1 AND fence <= ?1",
    )
    .bind(Token::of(term)?)
    .bind(term.instance())
    .execute(&mut *tx)
    .await
    .lease_err("writing the report")?;
    if done.rows_affected() == 0 {
        metrics::counter!(REFUSED).increment(1);
        return Err(lease::Error::lost(
            term.name(),
            "a newer term has written the report: this term is stale",
        ));
    }
    tx.commit().await.lease_err("committing the report")?;
    metrics::counter!(WRITES).increment(1);
    Ok(())
}

/// What the HTTP handlers share.
#[derive(Clone)]
struct Http {
    leadership: watch::Receiver<Leadership>,
    prometheus: PrometheusHandle,
}

/// 200 on the leader, 503 on a follower: a leader-only route's readiness probe. The body says
/// who leads, under which term, and for how long.
async fn ready(
    State(http): State<Http>,
) -> (StatusCode, [(header::HeaderName, &'static str); 1], String) {
    let l = http.leadership.borrow().clone();
    let body = serde_json::json!({
        "name": l.name,
        "leader": l.held,
        "term": l.term,
        "holder": l.holder,
        "leader_for_seconds": l.since.map(|s| s.elapsed().as_secs_f64()),
        "holder_expires_in_seconds": l.holder_expires_in.map(|d| d.as_secs_f64()),
    });
    let status = if l.held {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{body}\n"),
    )
}

async fn metrics_text(
    State(http): State<Http>,
) -> ([(header::HeaderName, &'static str); 1], String) {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        http.prometheus.render(),
    )
}

/// Cancels `shutdown` at SIGTERM or Ctrl-C.
async fn signals(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => info!("Ctrl-C"),
                    _ = term.recv() => info!("SIGTERM"),
                }
            }
            Err(e) => {
                error!(error = %e, "cannot listen for SIGTERM; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        info!("Ctrl-C");
    }
    shutdown.cancel();
}
