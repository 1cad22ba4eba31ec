//! The real resources behind the soak's fenced model: every write the model sees (each
//! contender's section write, each zombie's write) also goes through lease-fence's fences on
//! real servers — a PostgreSQL table ([`SqlFence`]: the fence check and the data row in one
//! transaction), a Redis key ([`RedisFence`]: a fenced `SET`) and an HTTP service (axum on
//! 127.0.0.1:0 behind [`FenceLayer`], called through [`StampLayer`]).
//!
//! **Order.** One write is a step under a lock of the backend's: the real resources first (side
//! by side, each bounded by [`write_timeout`]), the model last (a zombie's write takes no turn:
//! see [`Downstream::write`]). So every resource sees the
//! same sequence of tokens as the model, and when a zombie sees the model's fence above its
//! token, every real resource has already been offered the successor's token. Each real
//! resource's verdict must then equal the model's: a token the model refuses must be refused
//! (typed [`FenceError::Stale`], HTTP 409), and one it accepts must be accepted. After a
//! zombie's write, each resource is read back: it must not hold the zombie's value, nor one
//! older than the successor's.
//!
//! **Limits.** The servers are the test suites' (`LEASE_TEST_POSTGRES_URL`,
//! `LEASE_TEST_REDIS_URL`), outside the soak's faults and restart: the soak checks that each
//! fence refuses what the model refuses, not how a fence behaves while its own server fails.
//! A resource whose server is absent is skipped with one `SKIPPED` line (a failure when
//! `LEASE_TEST_REQUIRE` names it). The PostgreSQL connections run with `synchronous_commit =
//! off`: a commit does not wait for the disk, which keeps the sections short on a loaded
//! machine and changes nothing in what the fence orders (the soak never crashes that server).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use lease_conformance::env;
use lease_fence::FenceError;
use lease_fence::http::{FenceLayer, RESOURCE_HEADER, StampLayer};
use lease_fence::redis::RedisFence;
use lease_fence::sql::SqlFence;
use redis::aio::ConnectionManager;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

/// What a fenced resource (the model, or a real one) did with a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Written {
    /// Refused: a higher token had written. The fence doing its job.
    Refused,
    /// Accepted although a higher token had written: a violation.
    AcceptedStale,
    /// Accepted, no higher token had written.
    Accepted,
}

/// How long one write to one real resource may take (the PostgreSQL transaction: begin, fence
/// check, data row, commit; the Redis script; the HTTP request): a sixth of the lease, 250 ms
/// for the default 1.5 s (on a loaded two-core machine whose disk the soak's own servers
/// share, the test suites' PostgreSQL took up to 148 ms for a write). A section's writes run
/// side by side, so real fences add at most this to a section ([`Downstream::guard`]). Longer
/// is a failure of the run, with a message, never a wait.
pub(crate) fn write_timeout(lease: Duration) -> Duration {
    lease / 6
}

/// How long connecting to a server and creating the tables may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// How many messages of each kind a resource keeps in full.
const KEEP: usize = 10;

/// A real resource the soak writes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub(crate) enum Kind {
    /// A PostgreSQL table: [`SqlFence`] and the data row in one transaction.
    Postgres,
    /// A Redis key: [`RedisFence::set`].
    Redis,
    /// An HTTP service behind [`FenceLayer`], called through [`StampLayer`].
    Http,
}

impl Kind {
    /// The name used in output.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres table",
            Kind::Redis => "redis key",
            Kind::Http => "http service",
        }
    }

    /// The server's name in `LEASE_TEST_<NAME>_URL` and `LEASE_TEST_REQUIRE`.
    fn server(self) -> &'static str {
        match self {
            Kind::Postgres => "postgres",
            Kind::Redis => "redis",
            Kind::Http => "http",
        }
    }
}

/// A real resource that could not be set up for want of its server.
#[derive(Debug, Clone)]
pub(crate) struct Skipped {
    /// The resource.
    pub(crate) kind: Kind,
    /// Why.
    pub(crate) why: String,
    /// Whether `LEASE_TEST_REQUIRE` names its server (the skip then fails the soak).
    pub(crate) required: bool,
}

impl Skipped {
    fn new(kind: Kind, why: String) -> Skipped {
        Skipped {
            kind,
            why,
            required: env::required(kind.server()),
        }
    }

    /// The loud line printed once at the start.
    pub(crate) fn line(&self) -> String {
        format!(
            "SKIPPED {} (real fence): {}{}",
            self.kind.server(),
            self.why,
            if self.required {
                " — LEASE_TEST_REQUIRE names it, so the soak FAILS"
            } else {
                ""
            }
        )
    }
}

/// What the HTTP service's handler wrote, per resource: the service's own state.
type Served = Arc<Mutex<HashMap<String, String>>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The PostgreSQL table: its pool, its fence, and the data row's statements.
struct PgTarget {
    pool: PgPool,
    fence: SqlFence,
    upsert: String,
    select: String,
}

/// One real resource and how to reach it.
#[derive(Clone)]
enum Target {
    Postgres(Arc<PgTarget>),
    Redis {
        conn: ConnectionManager,
        fence: RedisFence,
        data_prefix: Arc<str>,
    },
    Http {
        addr: SocketAddr,
        served: Served,
    },
}

/// What a real resource answered to one write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Written.
    Accepted,
    /// Refused by the fence (typed `FenceError::Stale`, or HTTP 409), whose token is `fence`.
    Refused { fence: u64 },
    /// Any other failure.
    Failed(String),
    /// No answer within this ([`write_timeout`]).
    TimedOut(Duration),
}

impl Outcome {
    fn of(result: Result<(), FenceError>) -> Outcome {
        match result {
            Ok(()) => Outcome::Accepted,
            Err(FenceError::Stale(s)) => Outcome::Refused { fence: s.fence() },
            Err(e) => Outcome::Failed(e.to_string()),
        }
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Target {
    /// Writes `value` to `resource` under `token`, through the resource's fence.
    async fn write(&self, resource: &str, token: u64, value: &str) -> Outcome {
        match self {
            Target::Postgres(pg) => {
                let PgTarget {
                    pool,
                    fence,
                    upsert,
                    ..
                } = &**pg;
                let mut tx = match fence.begin(pool, resource, token).await {
                    Ok(tx) => tx,
                    Err(e) => return Outcome::of(Err(e)),
                };
                let row = sqlx::query(upsert)
                    .bind(resource)
                    .bind(value)
                    .execute(&mut *tx)
                    .await;
                if let Err(e) = row {
                    return Outcome::Failed(format!("writing the data row: {e}"));
                }
                match tx.commit().await {
                    Ok(()) => Outcome::Accepted,
                    Err(e) => Outcome::Failed(format!("commit: {e}")),
                }
            }
            Target::Redis {
                conn,
                fence,
                data_prefix,
            } => {
                let mut conn = conn.clone();
                let key = format!("{data_prefix}{resource}");
                Outcome::of(fence.set(&mut conn, resource, token, &key, value).await)
            }
            Target::Http { addr, .. } => match http_write(*addr, resource, token, value).await {
                Ok(outcome) => outcome,
                Err(e) => Outcome::Failed(e.to_string()),
            },
        }
    }

    /// What the resource holds for `resource` now (`None`: nothing written).
    async fn read(&self, resource: &str) -> Result<Option<String>, String> {
        match self {
            Target::Postgres(pg) => sqlx::query_scalar::<_, String>(&pg.select)
                .bind(resource)
                .fetch_optional(&pg.pool)
                .await
                .map_err(|e| e.to_string()),
            Target::Redis {
                conn, data_prefix, ..
            } => {
                let mut conn = conn.clone();
                redis::cmd("GET")
                    .arg(format!("{data_prefix}{resource}"))
                    .query_async::<Option<String>>(&mut conn)
                    .await
                    .map_err(|e| e.to_string())
            }
            Target::Http { served, .. } => Ok(lock(served).get(resource).cloned()),
        }
    }
}

/// One POST of `value` to the HTTP service, stamped with `resource` and `token`, on a new
/// connection: 200 is accepted, a 409 of the fence layer refused, anything else a failure.
async fn http_write(
    addr: SocketAddr,
    resource: &str,
    token: u64,
    value: &str,
) -> Result<Outcome, BoxError> {
    let client = tower::service_fn(move |request: Request<Full<Bytes>>| async move {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok::<_, BoxError>(sender.send_request(request).await?)
    });
    let stamp = match StampLayer::new(resource, token) {
        Ok(s) => s,
        Err(e) => return Ok(Outcome::of(Err(e))),
    };
    let request = Request::post("/write")
        .header("host", addr.to_string())
        .body(Full::new(Bytes::from(value.to_owned())))?;
    let response = stamp.layer(client).oneshot(request).await?;
    if let Some(stale) = lease_fence::http::refusal(&response) {
        return Ok(Outcome::Refused {
            fence: stale.fence(),
        });
    }
    let status = response.status();
    if status.is_success() {
        return Ok(Outcome::Accepted);
    }
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Outcome::Failed(format!(
        "answered {status}: {}",
        String::from_utf8_lossy(&body)
    )))
}

/// The HTTP service's handler: stores the body as the value of the request's resource.
async fn serve_write(
    State(served): State<Served>,
    headers: HeaderMap,
    body: String,
) -> &'static str {
    let resource = headers
        .get(RESOURCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    lock(&served).insert(resource, body);
    "written"
}

/// The real resources of one soak run, shared by its backends (each writes a resource name of
/// its own), under a namespace drawn at random per run: fence and data tables
/// `soak_fences_<ns>` / `soak_data_<ns>`, Redis keys `lease-soak:<ns>:…`, resource names
/// `soak-<ns>/<backend>`. So runs, even at the same time on the same servers, never see each
/// other's fences.
pub(crate) struct RealFences {
    namespace: String,
    targets: Vec<(Kind, Target)>,
    skipped: Vec<Skipped>,
    described: Vec<String>,
    server: Option<JoinHandle<()>>,
    tables: Option<(PgPool, [String; 2])>,
    resources: Mutex<Vec<String>>,
    keep: bool,
}

impl RealFences {
    /// No real resource (the model alone).
    pub(crate) fn none() -> RealFences {
        RealFences {
            namespace: String::new(),
            targets: Vec::new(),
            skipped: Vec::new(),
            described: Vec::new(),
            server: None,
            tables: None,
            resources: Mutex::default(),
            keep: false,
        }
    }

    /// Connects to PostgreSQL and Redis (the test suites' `LEASE_TEST_POSTGRES_URL` and
    /// `LEASE_TEST_REDIS_URL`; unset or unreachable: skipped), creates the tables, and starts
    /// the HTTP service. `broken(kind)`: that resource's fence built with its check left out
    /// (`--break-fencing`, `--break-real-fence`). An error is a server that answers but cannot
    /// be set up, or an HTTP service that cannot start.
    pub(crate) async fn setup(
        broken: impl Fn(Kind) -> bool,
        keep: bool,
    ) -> Result<RealFences, String> {
        let namespace = namespace();
        let mut fences = RealFences {
            namespace: namespace.clone(),
            keep,
            ..RealFences::none()
        };
        match postgres(&namespace, broken(Kind::Postgres)).await {
            Ok((target, pool, tables, url)) => {
                fences.described.push(format!(
                    "{}: {} (fence table {}) at {url}",
                    Kind::Postgres.name(),
                    tables[1],
                    tables[0]
                ));
                fences.targets.push((Kind::Postgres, target));
                fences.tables = Some((pool, tables));
            }
            Err(Setup::Skip(why)) => fences.skipped.push(Skipped::new(Kind::Postgres, why)),
            Err(Setup::Fail(why)) => return Err(why),
        }
        match redis_target(&namespace, broken(Kind::Redis)).await {
            Ok((target, url)) => {
                fences.described.push(format!(
                    "{}: lease-soak:{namespace}:data:<resource> (fence keys \
                     lease-soak:{namespace}:fence:<resource>) at {url}",
                    Kind::Redis.name()
                ));
                fences.targets.push((Kind::Redis, target));
            }
            Err(Setup::Skip(why)) => fences.skipped.push(Skipped::new(Kind::Redis, why)),
            Err(Setup::Fail(why)) => return Err(why),
        }
        let (target, server, addr) = http_service(broken(Kind::Http)).await?;
        fences.server = Some(server);
        fences.described.push(format!(
            "{}: POST http://{addr}/write behind FenceLayer, through StampLayer",
            Kind::Http.name()
        ));
        fences.targets.push((Kind::Http, target));
        fences.warm_up().await?;
        for (line, (kind, _)) in fences.described.iter_mut().zip(&fences.targets) {
            if broken(*kind) {
                line.push_str(" — its check BROKEN (break switch): it accepts stale tokens");
            }
        }
        Ok(fences)
    }

    /// One write to a resource of its own on each target, before the run: opens the pool's
    /// connections and loads the Redis script, so that no section pays for them (a cold first
    /// write can take longer than the write timeout on a loaded machine).
    async fn warm_up(&self) -> Result<(), String> {
        let resource = format!("soak-{}/warm-up", self.namespace);
        lock(&self.resources).push(resource.clone());
        for (kind, target) in &self.targets {
            let outcome =
                tokio::time::timeout(SETUP_TIMEOUT, target.write(&resource, 1, "warm-up"))
                    .await
                    .unwrap_or(Outcome::TimedOut(SETUP_TIMEOUT));
            if outcome != Outcome::Accepted {
                return Err(format!(
                    "the {}'s first write (token 1 on a new resource) was not accepted: \
                     {outcome:?}",
                    kind.name()
                ));
            }
        }
        Ok(())
    }

    /// One line per resource set up: what it is and where.
    pub(crate) fn described(&self) -> &[String] {
        &self.described
    }

    /// The resources skipped for want of a server.
    pub(crate) fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }

    /// Why the skips fail the soak (`LEASE_TEST_REQUIRE` names their servers).
    pub(crate) fn problems(&self) -> Vec<String> {
        self.skipped
            .iter()
            .filter(|s| s.required)
            .map(|s| {
                format!(
                    "real fence {}: skipped but required by LEASE_TEST_REQUIRE: {}",
                    s.kind.server(),
                    s.why
                )
            })
            .collect()
    }

    /// The writer of one backend: its own resource name on every real resource.
    pub(crate) fn for_backend(&self, label: &str, lease: Duration) -> Arc<Downstream> {
        let resource = format!("soak-{}/{label}", self.namespace);
        if !self.targets.is_empty() {
            lock(&self.resources).push(resource.clone());
        }
        Arc::new(Downstream::new(
            resource,
            self.targets.clone(),
            write_timeout(lease),
        ))
    }

    /// Drops the tables and keys of this run (unless `--keep`) and stops the HTTP service.
    pub(crate) async fn teardown(self) {
        if let Some(server) = &self.server {
            server.abort();
        }
        if self.keep {
            return;
        }
        if let Some((pool, tables)) = &self.tables {
            for table in tables {
                let drop = format!("DROP TABLE IF EXISTS {table}");
                let _ = tokio::time::timeout(SETUP_TIMEOUT, sqlx::query(&drop).execute(pool)).await;
            }
            pool.close().await;
        }
        let resources = lock(&self.resources).clone();
        for (_, target) in &self.targets {
            if let Target::Redis {
                conn,
                fence,
                data_prefix,
            } = target
            {
                let mut conn = conn.clone();
                let mut del = redis::cmd("DEL");
                for r in &resources {
                    del.arg(fence.key(r)).arg(format!("{data_prefix}{r}"));
                }
                if !resources.is_empty() {
                    let _ =
                        tokio::time::timeout(SETUP_TIMEOUT, del.query_async::<()>(&mut conn)).await;
                }
            }
        }
    }
}

/// The HTTP service on 127.0.0.1:0: axum, its `/write` behind a [`FenceLayer`] (`broken`: its
/// check left out), storing each request's body as its resource's value. Answers the target,
/// the server's task and its address.
async fn http_service(broken: bool) -> Result<(Target, JoinHandle<()>, SocketAddr), String> {
    let served = Served::default();
    let layer = if broken {
        FenceLayer::new().break_check_for_tests()
    } else {
        FenceLayer::new()
    };
    let app = Router::new()
        .route("/write", post(serve_write))
        .with_state(served.clone())
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("the HTTP service cannot listen on 127.0.0.1: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("the HTTP service's address: {e}"))?;
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            eprintln!("soak: the HTTP service stopped: {e}");
        }
    });
    Ok((Target::Http { addr, served }, server, addr))
}

/// A random namespace for this run: 12 hex digits.
fn namespace() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    format!("{:012x}", h.finish() & 0xffff_ffff_ffff)
}

/// Why a resource was not set up.
enum Setup {
    /// Its server is absent: skipped (loudly).
    Skip(String),
    /// Its server answered but the set-up failed: the soak fails.
    Fail(String),
}

/// The server URL of `kind` from the test suites' variable, or why not.
fn url_of(kind: Kind) -> Result<String, Setup> {
    let var = env::url_var(kind.server());
    match std::env::var(&var) {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => Err(Setup::Skip(format!(
            "{var} is not set; set it to a {} server to fence the soak's writes there",
            kind.server()
        ))),
    }
}

async fn postgres(
    namespace: &str,
    broken: bool,
) -> Result<(Target, PgPool, [String; 2], String), Setup> {
    let url = url_of(Kind::Postgres)?;
    let options = PgConnectOptions::from_str(&url)
        .map_err(|e| Setup::Fail(format!("LEASE_TEST_POSTGRES_URL {url:?}: {e}")))?
        .options([("synchronous_commit", "off")]);
    let pool = tokio::time::timeout(
        SETUP_TIMEOUT,
        PgPoolOptions::new()
            .min_connections(2)
            .max_connections(4)
            .acquire_timeout(SETUP_TIMEOUT)
            .connect_with(options),
    )
    .await
    .map_err(|_| Setup::Skip(format!("cannot connect to {url} within {SETUP_TIMEOUT:?}")))?
    .map_err(|e| Setup::Skip(format!("cannot connect to {url}: {e}")))?;
    let fences = format!("soak_fences_{namespace}");
    let data = format!("soak_data_{namespace}");
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        Setup::Fail(format!("the PostgreSQL real fence at {url}: {what}: {e}"))
    };
    let fence = SqlFence::new(&fences).map_err(|e| fail("fence table name", &e))?;
    tokio::time::timeout(SETUP_TIMEOUT, fence.ensure(&pool))
        .await
        .map_err(|e| fail("creating the fence table", &e))?
        .map_err(|e| fail("creating the fence table", &e))?;
    let create = format!("CREATE TABLE {data} (resource TEXT PRIMARY KEY, val TEXT NOT NULL)");
    tokio::time::timeout(SETUP_TIMEOUT, sqlx::query(&create).execute(&pool))
        .await
        .map_err(|e| fail("creating the data table", &e))?
        .map_err(|e| fail("creating the data table", &e))?;
    let fence = if broken {
        fence.break_check_for_tests()
    } else {
        fence
    };
    let target = Target::Postgres(Arc::new(PgTarget {
        pool: pool.clone(),
        fence,
        upsert: format!(
            "INSERT INTO {data} (resource, val) VALUES ($1, $2) \
             ON CONFLICT (resource) DO UPDATE SET val = EXCLUDED.val"
        ),
        select: format!("SELECT val FROM {data} WHERE resource = $1"),
    }));
    Ok((target, pool, [fences, data], url))
}

async fn redis_target(namespace: &str, broken: bool) -> Result<(Target, String), Setup> {
    let url = url_of(Kind::Redis)?;
    let client = redis::Client::open(url.as_str())
        .map_err(|e| Setup::Fail(format!("LEASE_TEST_REDIS_URL {url:?}: {e}")))?;
    let conn = tokio::time::timeout(SETUP_TIMEOUT, ConnectionManager::new(client))
        .await
        .map_err(|_| Setup::Skip(format!("cannot connect to {url} within {SETUP_TIMEOUT:?}")))?
        .map_err(|e| Setup::Skip(format!("cannot connect to {url}: {e}")))?;
    let fence = RedisFence::with_prefix(&format!("lease-soak:{namespace}:fence:"))
        .map_err(|e| Setup::Fail(format!("the Redis fence's key prefix: {e}")))?;
    let fence = if broken {
        fence.break_check_for_tests()
    } else {
        fence
    };
    let target = Target::Redis {
        conn,
        fence,
        data_prefix: format!("lease-soak:{namespace}:data:").into(),
    };
    Ok((target, url))
}

/// What one real resource saw during one backend's lease phase.
#[derive(Debug, Clone)]
pub(crate) struct RealReport {
    /// The resource.
    pub(crate) kind: Kind,
    /// Writes offered (sections' and zombies').
    pub(crate) writes: u64,
    /// Writes it accepted.
    pub(crate) accepted: u64,
    /// Writes its fence refused.
    pub(crate) refused: u64,
    /// Zombie writes offered.
    pub(crate) zombie_writes: u64,
    /// Zombie writes its fence refused.
    pub(crate) zombie_refused: u64,
    /// Zombie writes read back after the refusal and found unchanged.
    pub(crate) verified: u64,
    /// Writes accepted with a token lower than one it had accepted, and refused zombie writes
    /// that changed the data anyway: violations, in plain words (the first few).
    pub(crate) stale_accepted: Vec<String>,
    /// How many violations in all.
    pub(crate) stale_total: u64,
    /// Verdicts that differ from the model's (the first few).
    pub(crate) disagreements: Vec<String>,
    /// How many disagreements in all.
    pub(crate) disagreements_total: u64,
    /// Failed and timed-out writes and read-backs (the first few).
    pub(crate) errors: Vec<String>,
    /// How many in all.
    pub(crate) errors_total: u64,
    /// The slowest write.
    pub(crate) slowest: Duration,
    /// The highest token it accepted, as the soak saw it.
    highest: Option<u64>,
    /// The value of its last accepted write.
    last: Option<String>,
}

fn keep(list: &mut Vec<String>, total: &mut u64, line: String) {
    *total += 1;
    if list.len() < KEEP {
        list.push(line);
    }
}

impl RealReport {
    /// Nothing seen yet.
    pub(crate) fn new(kind: Kind) -> RealReport {
        RealReport {
            kind,
            writes: 0,
            accepted: 0,
            refused: 0,
            zombie_writes: 0,
            zombie_refused: 0,
            verified: 0,
            stale_accepted: Vec::new(),
            stale_total: 0,
            disagreements: Vec::new(),
            disagreements_total: 0,
            errors: Vec::new(),
            errors_total: 0,
            slowest: Duration::ZERO,
            highest: None,
            last: None,
        }
    }

    /// Judges one write: `who` offered `token` with `value`, the resource answered `outcome`
    /// after `took`, and the model (written after the resource) answered `model`.
    pub(crate) fn judge(
        &mut self,
        (who, token, value): (&str, u64, &str),
        zombie: bool,
        model: Written,
        outcome: &Outcome,
        took: Duration,
    ) {
        let name = self.kind.name();
        self.writes += 1;
        self.zombie_writes += u64::from(zombie);
        self.slowest = self.slowest.max(took);
        let above = self.highest.filter(|&h| token < h);
        match outcome {
            Outcome::Accepted => {
                self.accepted += 1;
                if let Some(h) = above {
                    let line = format!(
                        "{name}: stale write accepted: {who} wrote with token {token} after token \
                         {h} had written; it replaced {:?}",
                        self.last.as_deref().unwrap_or_default()
                    );
                    keep(&mut self.stale_accepted, &mut self.stale_total, line);
                } else if model == Written::Refused {
                    let line = format!(
                        "{name} accepted token {token} from {who}, which the model refused"
                    );
                    keep(&mut self.disagreements, &mut self.disagreements_total, line);
                }
                self.highest = Some(self.highest.map_or(token, |h| h.max(token)));
                self.last = Some(value.to_owned());
            }
            Outcome::Refused { fence } => {
                self.refused += 1;
                self.zombie_refused += u64::from(zombie);
                if model == Written::Accepted {
                    let line = format!(
                        "{name} refused token {token} from {who} (its fence holds {fence}), \
                         which the model accepted"
                    );
                    keep(&mut self.disagreements, &mut self.disagreements_total, line);
                }
            }
            Outcome::Failed(why) => {
                let line = format!("{name}: the write of token {token} by {who} failed: {why}");
                keep(&mut self.errors, &mut self.errors_total, line);
            }
            Outcome::TimedOut(bound) => {
                let line = format!(
                    "{name}: the write of token {token} by {who} did not finish within {} ms \
                     (each real write is bounded so that it never holds a section past its \
                     guard): the server is too slow or unreachable",
                    bound.as_millis()
                );
                keep(&mut self.errors, &mut self.errors_total, line);
            }
        }
    }

    /// Judges what the resource holds after a zombie's refused write: `read` (its value now),
    /// which must not be `value` (the zombie's) nor one written under a token below `before`
    /// (the highest it had accepted when the zombie wrote).
    pub(crate) fn verify(
        &mut self,
        (who, token, value): (&str, u64, &str),
        before: Option<u64>,
        read: Result<Option<String>, String>,
    ) {
        let name = self.kind.name();
        let held = match read {
            Err(e) => {
                let line = format!("{name}: reading back after {who}'s zombie write: {e}");
                keep(&mut self.errors, &mut self.errors_total, line);
                return;
            }
            Ok(held) => held,
        };
        let held_token = held.as_deref().and_then(token_of);
        let wrong = match (&held, before) {
            (Some(v), _) if v == value => Some("holds the zombie's value".to_owned()),
            (None, Some(b)) => Some(format!("holds nothing, though token {b} had written")),
            (Some(v), Some(b)) if held_token.is_none_or(|t| t < b) => Some(format!(
                "holds {v:?}, older than token {b} that had written"
            )),
            _ => None,
        };
        match wrong {
            Some(what) => {
                let line = format!(
                    "{name} refused {who}'s write with token {token}, yet {what}: the refusal \
                     changed the data"
                );
                keep(&mut self.stale_accepted, &mut self.stale_total, line);
            }
            None => self.verified += 1,
        }
    }

    /// Every reason this resource fails the run; `zombie_writes` is how many zombie writes the
    /// model saw.
    pub(crate) fn problems(&self, zombie_writes: u64) -> Vec<String> {
        let name = self.kind.name();
        let mut p = Vec::new();
        if self.stale_total > 0 {
            p.push(format!(
                "{name}: {} stale writes accepted (a zombie's old token got in after a higher \
                 one)",
                self.stale_total
            ));
        }
        if zombie_writes > 0 && self.zombie_refused == 0 {
            p.push(format!("{name} refused 0 of {zombie_writes} zombie writes"));
        }
        if self.disagreements_total > 0 {
            p.push(format!(
                "{name}: {} verdicts differ from the model's",
                self.disagreements_total
            ));
        }
        if self.errors_total > 0 {
            p.push(format!(
                "{name}: {} writes or read-backs failed or timed out",
                self.errors_total
            ));
        }
        p
    }

    /// The violations, disagreements and errors in full (the first few of each).
    pub(crate) fn evidence(&self) -> Vec<String> {
        let mut lines = self.stale_accepted.clone();
        lines.extend(self.disagreements.iter().cloned());
        lines.extend(self.errors.iter().cloned());
        lines
    }

    /// This resource's part of the report line.
    pub(crate) fn line(&self) -> String {
        format!(
            "{} {} writes, {} of {} zombie writes refused ({} read back unchanged), {} stale \
             accepted, slowest {} ms",
            self.kind.name(),
            self.writes,
            self.zombie_refused,
            self.zombie_writes,
            self.verified,
            self.stale_total,
            self.slowest.as_millis()
        )
    }
}

/// The token in a value the soak wrote: `<who>@<token>#<n>`.
fn token_of(value: &str) -> Option<u64> {
    let (_, rest) = value.rsplit_once('@')?;
    rest.split('#').next()?.parse().ok()
}

/// One backend's writer: its resource name on every real resource, the lock that makes each
/// write one step (real resources, then the model), and what each resource saw.
pub(crate) struct Downstream {
    resource: String,
    targets: Vec<(Kind, Target)>,
    turn: tokio::sync::Mutex<()>,
    timeout: Duration,
    reports: Mutex<Vec<RealReport>>,
    seq: AtomicU64,
}

impl std::fmt::Debug for Downstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Downstream")
            .field("resource", &self.resource)
            .field("targets", &self.targets.len())
            .finish()
    }
}

impl Downstream {
    fn new(resource: String, targets: Vec<(Kind, Target)>, timeout: Duration) -> Downstream {
        let reports = targets.iter().map(|(k, _)| RealReport::new(*k)).collect();
        Downstream {
            resource,
            targets,
            timeout,
            turn: tokio::sync::Mutex::new(()),
            reports: Mutex::new(reports),
            seq: AtomicU64::new(0),
        }
    }

    /// No real resource: the model alone.
    pub(crate) fn none() -> Downstream {
        Downstream::new(String::new(), Vec::new(), Duration::ZERO)
    }

    /// How long before its term's local deadline a section must start: `section_guard`, plus
    /// the write timeout when there are real resources (a section's writes run side by side;
    /// it never waits for a zombie's, which take no turn, and two holders' sections never
    /// meet unless the lease failed, which fails the run anyway).
    pub(crate) fn guard(&self, section_guard: Duration) -> Duration {
        if self.targets.is_empty() {
            section_guard
        } else {
            section_guard + self.timeout
        }
    }

    /// One write by `who` under `token`: every real resource first (side by side, each bounded
    /// by [`write_timeout`]), then `model`, as one step under this backend's lock (a
    /// section's; a zombie's takes none, see below); each resource's verdict is judged against
    /// the model's. A zombie's write (`zombie`) is then
    /// read back from each resource that refused it. Answers the model's verdict.
    pub(crate) async fn write(
        &self,
        who: &str,
        token: u64,
        zombie: bool,
        model: impl FnOnce() -> Written,
    ) -> Written {
        if self.targets.is_empty() {
            return model();
        }
        // A zombie takes no turn: it writes only once the model's fence (written last) is above
        // its token, so every real fence already holds a higher token, and a section's writes
        // beside it only raise them further — every order of the two gives the same verdicts.
        // So a section never waits for a zombie's writes (nor for their read-back).
        let turn = if zombie {
            None
        } else {
            Some(self.turn.lock().await)
        };
        let value = format!("{who}@{token}#{}", self.seq.fetch_add(1, Ordering::Relaxed));
        let bound = self.timeout;
        let tasks: Vec<JoinHandle<(Outcome, Duration)>> = self
            .targets
            .iter()
            .map(|(_, target)| {
                let (target, resource, value) =
                    (target.clone(), self.resource.clone(), value.clone());
                tokio::spawn(async move {
                    let began = Instant::now();
                    let outcome =
                        tokio::time::timeout(bound, target.write(&resource, token, &value))
                            .await
                            .unwrap_or(Outcome::TimedOut(bound));
                    (outcome, began.elapsed())
                })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(match task.await {
                Ok(done) => done,
                Err(e) => (
                    Outcome::Failed(format!("the write task: {e}")),
                    Duration::ZERO,
                ),
            });
        }
        let verdict = model();
        let mut befores = Vec::with_capacity(outcomes.len());
        {
            let mut reports = lock(&self.reports);
            for (report, (outcome, took)) in reports.iter_mut().zip(&outcomes) {
                befores.push(report.highest);
                report.judge((who, token, &value), zombie, verdict, outcome, *took);
            }
        }
        drop(turn);
        if zombie {
            for (i, ((_, target), (outcome, _))) in self.targets.iter().zip(&outcomes).enumerate() {
                if !matches!(outcome, Outcome::Refused { .. }) {
                    continue;
                }
                let read = tokio::time::timeout(bound, target.read(&self.resource))
                    .await
                    .unwrap_or_else(|_| Err(format!("no answer within {} ms", bound.as_millis())));
                if let Some(report) = lock(&self.reports).get_mut(i) {
                    report.verify(
                        (who, token, &value),
                        befores.get(i).copied().flatten(),
                        read,
                    );
                }
            }
        }
        verdict
    }

    /// What each real resource saw.
    pub(crate) fn reports(&self) -> Vec<RealReport> {
        lock(&self.reports).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_refused_zombie_agrees_with_the_model_and_counts() {
        let mut r = RealReport::new(Kind::Postgres);
        r.judge(
            ("contender-0", 3, "contender-0@3#0"),
            false,
            Written::Accepted,
            &Outcome::Accepted,
            MS,
        );
        r.judge(
            ("contender-1", 4, "contender-1@4#1"),
            false,
            Written::Accepted,
            &Outcome::Accepted,
            MS,
        );
        r.judge(
            ("zombie", 3, "zombie@3#2"),
            true,
            Written::Refused,
            &Outcome::Refused { fence: 4 },
            MS * 7,
        );
        r.verify(
            ("zombie", 3, "zombie@3#2"),
            Some(4),
            Ok(Some("contender-1@4#1".into())),
        );
        assert!(r.problems(1).is_empty(), "{:?}", r.problems(1));
        assert_eq!(
            (r.writes, r.zombie_writes, r.zombie_refused, r.verified),
            (3, 1, 1, 1)
        );
        assert_eq!(
            r.line(),
            "postgres table 3 writes, 1 of 1 zombie writes refused (1 read back unchanged), 0 \
             stale accepted, slowest 7 ms"
        );
    }

    #[test]
    fn a_stale_write_accepted_fails_and_names_the_resource() {
        // What `--break-fencing` makes of a zombie's write: the model accepts it stale, and so
        // does the broken real fence.
        let mut r = RealReport::new(Kind::Redis);
        r.judge(
            ("contender-1", 4, "contender-1@4#0"),
            false,
            Written::Accepted,
            &Outcome::Accepted,
            MS,
        );
        r.judge(
            ("zombie", 3, "zombie@3#1"),
            true,
            Written::AcceptedStale,
            &Outcome::Accepted,
            MS,
        );
        assert_eq!(
            r.problems(1),
            [
                "redis key: 1 stale writes accepted (a zombie's old token got in after a higher one)",
                "redis key refused 0 of 1 zombie writes"
            ]
        );
        assert_eq!(
            r.evidence(),
            [
                "redis key: stale write accepted: zombie wrote with token 3 after token 4 had \
              written; it replaced \"contender-1@4#0\""
            ]
        );
        // A phase without zombie writes needs no refusal.
        assert!(RealReport::new(Kind::Http).problems(0).is_empty());
    }

    #[test]
    fn a_disagreement_with_the_model_is_named() {
        let mut r = RealReport::new(Kind::Http);
        r.judge(
            ("contender-0", 5, "contender-0@5#0"),
            false,
            Written::Accepted,
            &Outcome::Refused { fence: 9 },
            MS,
        );
        assert_eq!(
            r.problems(0),
            ["http service: 1 verdicts differ from the model's"]
        );
        assert_eq!(
            r.evidence(),
            [
                "http service refused token 5 from contender-0 (its fence holds 9), which the model \
              accepted"
            ]
        );
        let mut r = RealReport::new(Kind::Http);
        r.judge(
            ("contender-0", 5, "contender-0@5#0"),
            false,
            Written::Refused,
            &Outcome::Accepted,
            MS,
        );
        assert!(
            r.evidence()[0].contains("accepted token 5 from contender-0, which the model refused")
        );
    }

    #[test]
    fn a_refusal_that_changed_the_data_fails() {
        let mut r = RealReport::new(Kind::Postgres);
        r.verify(
            ("zombie", 3, "zombie@3#2"),
            Some(4),
            Ok(Some("zombie@3#2".into())),
        );
        r.verify(("zombie", 3, "zombie@3#5"), Some(4), Ok(None));
        r.verify(
            ("zombie", 3, "zombie@3#6"),
            Some(4),
            Ok(Some("contender-0@2#0".into())),
        );
        // A newer value than the successor's is fine (a later holder wrote).
        r.verify(
            ("zombie", 3, "zombie@3#7"),
            Some(4),
            Ok(Some("contender-2@5#9".into())),
        );
        assert_eq!((r.stale_total, r.verified), (3, 1));
        assert!(
            r.stale_accepted[0].contains("yet holds the zombie's value"),
            "{:?}",
            r.stale_accepted
        );
        assert!(r.stale_accepted[1].contains("holds nothing, though token 4"));
        assert!(r.stale_accepted[2].contains("older than token 4"));
    }

    #[test]
    fn timeouts_and_failures_fail_with_a_message() {
        let mut r = RealReport::new(Kind::Redis);
        r.judge(
            ("contender-0", 5, "v"),
            false,
            Written::Accepted,
            &Outcome::TimedOut(MS * 50),
            MS * 50,
        );
        r.judge(
            ("contender-0", 5, "v"),
            false,
            Written::Accepted,
            &Outcome::Failed("refused".into()),
            MS,
        );
        r.verify(("zombie", 3, "z"), Some(5), Err("gone".into()));
        assert_eq!(
            r.problems(0),
            ["redis key: 3 writes or read-backs failed or timed out"]
        );
        assert!(
            r.errors[0].contains("did not finish within 50 ms"),
            "{}",
            r.errors[0]
        );
    }

    #[test]
    fn values_carry_their_token() {
        assert_eq!(token_of("contender-1@42#7"), Some(42));
        assert_eq!(token_of("a@b@9#1"), Some(9));
        assert_eq!(token_of("nothing"), None);
    }

    /// The writer on a real HTTP service: the zombie is refused 409 and the service keeps the
    /// successor's value; with the layer's check broken, the same zombie is a stale write
    /// accepted (so the check can fail).
    #[tokio::test]
    async fn a_zombie_through_the_http_service_is_refused_and_the_broken_one_is_caught() {
        for broken in [false, true] {
            let (target, server, _) = http_service(broken).await.unwrap();
            let timeout = write_timeout(Duration::from_millis(1500));
            assert_eq!(timeout, Duration::from_millis(250));
            let d = Downstream::new(
                "soak-test/memory".into(),
                vec![(Kind::Http, target)],
                timeout,
            );
            assert_eq!(
                d.guard(Duration::from_millis(100)),
                Duration::from_millis(350)
            );
            let model = |w| move || w;
            assert_eq!(
                d.write("contender-1", 4, false, model(Written::Accepted))
                    .await,
                Written::Accepted
            );
            let zombie = if broken {
                Written::AcceptedStale
            } else {
                Written::Refused
            };
            assert_eq!(d.write("zombie", 3, true, model(zombie)).await, zombie);
            let r = &d.reports()[0];
            assert_eq!((r.writes, r.zombie_writes), (2, 1), "{r:?}");
            if broken {
                assert_eq!((r.zombie_refused, r.stale_total), (0, 1), "{r:?}");
                assert_eq!(r.problems(1).len(), 2, "{:?}", r.problems(1));
            } else {
                assert_eq!(
                    (r.zombie_refused, r.verified, r.stale_total),
                    (1, 1, 0),
                    "{r:?}"
                );
                assert!(r.problems(1).is_empty(), "{:?}", r.problems(1));
            }
            server.abort();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn without_real_resources_only_the_model_writes() {
        let d = Downstream::none();
        assert_eq!(
            d.guard(Duration::from_millis(100)),
            Duration::from_millis(100)
        );
        assert_eq!(
            d.write("contender-0", 1, false, || Written::Accepted).await,
            Written::Accepted
        );
        assert!(d.reports().is_empty());
    }
}
