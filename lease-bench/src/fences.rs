//! Fenced writes against the same writes unfenced, per resource: the cost of a downstream fence
//! (`lease-fence`) on a warm connection.
//!
//! Each resource has two subjects, a **plain** write and the **same write fenced**, measured side
//! by side as the cycle subjects are: one client loop, one write at a time, each subject on a
//! connection of its own, a warm-up first, then interleaved rounds in a new random order each
//! round. Every fenced write offers the same token ([`TOKEN`]): the fence is raised once, during
//! the warm-up, and every measured write is the steady state of one term — a holder writing
//! again under the token it already wrote with. Round trips are counted on the wire by the
//! conformance suite's [`FaultProxy`] for the resources with a server (files have none).

use std::future::poll_fn;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use lease_conformance::FaultProxy;
use lease_fence::etcd::EtcdFence;
use lease_fence::file::FileFence;
use lease_fence::http::{FenceLayer, StampLayer, Stamped};
use lease_fence::mongo::MongoFence;
use lease_fence::nats::NatsFence;
use lease_fence::redis::RedisFence;
use lease_fence::sql::SqlFence;
use mongodb::bson::{Document, doc};
use rand::seq::SliceRandom;
use tower_layer::Layer;
use tower_service::Service;

use crate::backends::{self, Env, REDIS_PREFIX};
use crate::cli::{Args, Backend};
use crate::stats::{Op, Samples, Summary, measure, warm_up};

/// The token every fenced write offers: one term's, so after the first write (in the warm-up)
/// each write meets a fence that already holds it.
pub(crate) const TOKEN: u64 = 7;

/// The value a key-value write stores (Redis, etcd, NATS KV), a file holds, an HTTP request
/// carries as its body: 64 bytes.
const VALUE: &[u8] = b"lease-bench fenced-write payload: sixty-four bytes of plain text";

/// The SQL data table (created when missing; the run's rows are deleted at the end).
const DATA_TABLE: &str = "lease_bench_fence_data";

/// The SQL fence table (created when missing; the run's rows are deleted at the end).
const FENCE_TABLE: &str = "lease_bench_fences";

/// Warm-up before measuring: at most this many writes…
const WARMUP_WRITES: u32 = 200;
/// … and at most this long.
const WARMUP_TIME: Duration = Duration::from_millis(300);

/// Writes run through the proxy before counting.
pub(crate) const WARM_WRITES: u32 = 5;
/// Writes counted through the proxy.
pub(crate) const COUNTED_WRITES: u32 = 20;

/// How long connecting to a resource and preparing it may take before it counts as absent.
const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

/// A resource a holder writes to, fenced by `lease-fence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resource {
    /// PostgreSQL, `SqlFence`.
    Postgres,
    /// MariaDB / MySQL, `SqlFence`.
    Mysql,
    /// SQLite, `SqlFence`.
    Sqlite,
    /// Redis, `RedisFence`.
    Redis,
    /// etcd, `EtcdFence`.
    Etcd,
    /// NATS JetStream KV, `NatsFence`.
    Nats,
    /// MongoDB (the project's wire emulator here), `MongoFence`.
    Mongodb,
    /// Files in a local directory, `FileFence`.
    Files,
    /// An in-process HTTP server, `FenceLayer`, with a `StampLayer` client.
    Http,
}

impl Resource {
    /// Every resource, in report order.
    pub(crate) const ALL: [Resource; 9] = [
        Resource::Postgres,
        Resource::Mysql,
        Resource::Sqlite,
        Resource::Redis,
        Resource::Etcd,
        Resource::Nats,
        Resource::Mongodb,
        Resource::Files,
        Resource::Http,
    ];

    /// The name shown in reports.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Resource::Postgres => "PostgreSQL",
            Resource::Mysql => "MariaDB",
            Resource::Sqlite => "SQLite",
            Resource::Redis => "Redis",
            Resource::Etcd => "etcd",
            Resource::Nats => "NATS KV",
            Resource::Mongodb => "MongoDB (wire emulator)",
            Resource::Files => "files",
            Resource::Http => "HTTP (in-process server)",
        }
    }

    /// The backend whose server (and `--only` name) the resource uses: `local` for the two
    /// in-process resources.
    pub(crate) fn backend(self) -> Backend {
        match self {
            Resource::Postgres => Backend::Postgres,
            Resource::Mysql => Backend::Mysql,
            Resource::Sqlite => Backend::Sqlite,
            Resource::Redis => Backend::Redis,
            Resource::Etcd => Backend::Etcd,
            Resource::Nats => Backend::Nats,
            Resource::Mongodb => Backend::Mongodb,
            Resource::Files | Resource::Http => Backend::Local,
        }
    }

    /// `true` when round trips are counted (a connection a proxy can sit on).
    pub(crate) fn networked(self) -> bool {
        !matches!(self, Resource::Sqlite | Resource::Files)
    }

    /// The plain write, exactly.
    pub(crate) fn plain(self) -> &'static str {
        match self {
            Resource::Postgres | Resource::Mysql | Resource::Sqlite => {
                "a transaction on one pooled connection: `BEGIN`, `UPDATE lease_bench_fence_data \
                 SET n = n + 1 WHERE name = ?` (one row, its primary key), `COMMIT`"
            }
            Resource::Redis => "`SET key <64 bytes>` on a multiplexed connection",
            Resource::Etcd => "`put key <64 bytes>` (one unary Put request)",
            Resource::Nats => "`put key <64 bytes>` on a KV bucket (history 1, file storage)",
            Resource::Mongodb => {
                "`update` of one document by `_id`, `{$inc: {n: 1}}`, upsert (one command)"
            }
            Resource::Files => {
                "write a temporary file in the directory, `fsync` it, rename it over the file, \
                 `fsync` the directory (on tokio's blocking pool)"
            }
            Resource::Http => {
                "`POST /write` with a 64-byte body on one keep-alive HTTP/1.1 connection to an \
                 axum server in the same process (same runtime), reading the whole answer"
            }
        }
    }

    /// The fenced write, exactly.
    pub(crate) fn fenced(self) -> &'static str {
        match self {
            Resource::Postgres | Resource::Mysql | Resource::Sqlite => {
                "the same transaction with `SqlFence::check` (the fence upsert on \
                 lease_bench_fences, one statement) before the `UPDATE`: `BEGIN`, check, \
                 `UPDATE`, `COMMIT`"
            }
            Resource::Redis => "`RedisFence::set` (one `EVALSHA` of the fence script)",
            Resource::Etcd => {
                "`EtcdFence::put` (one transaction: compare the fence key, put it and the key)"
            }
            Resource::Nats => {
                "`NatsFence::put` (read the key's entry, then `update` at that revision)"
            }
            Resource::Mongodb => {
                "`MongoFence::upsert_by_id` with the same update (one command; the filter \
                 admits the token, the update sets the fence field)"
            }
            Resource::Files => {
                "`FileFence::write` (the same temporary file and renames, plus the `flock` on \
                 the file's lock file and the read of its token file)"
            }
            Resource::Http => {
                "the same request through `StampLayer` (two headers) to a second server whose \
                 route is behind `FenceLayer` (per-resource lock and compare in memory)"
            }
        }
    }
}

/// One side of a resource's comparison: the plain write or the fenced one.
#[derive(Debug, Clone, Default)]
pub(crate) struct Side {
    /// Rate and latencies, when it ran.
    pub(crate) summary: Option<Summary>,
    /// Round trips per write, counted on the wire.
    pub(crate) round_trips: Option<f64>,
    /// Connections opened during the counted writes.
    pub(crate) connections: u64,
    /// Why it did not run or stopped.
    pub(crate) error: Option<String>,
    /// Why its round trips could not be counted.
    pub(crate) rt_error: Option<String>,
}

/// One resource's figures.
#[derive(Debug, Clone)]
pub(crate) struct FenceRow {
    /// The resource.
    pub(crate) resource: Resource,
    /// Why the resource was skipped (its server did not answer).
    pub(crate) skipped: Option<String>,
    /// What the run found about the resource's set-up (e.g. SQLite's journal mode).
    pub(crate) detail: Option<String>,
    /// The plain write.
    pub(crate) plain: Side,
    /// The fenced write.
    pub(crate) fenced: Side,
}

/// One write subject.
trait Writer: Send {
    /// One write; an error when it did not happen as it should.
    fn write(&mut self) -> BoxFuture<'_, Result<()>>;

    /// Removes what the subject wrote, best effort.
    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async {})
    }
}

impl Op for dyn Writer + '_ {
    fn once(&mut self) -> BoxFuture<'_, Result<()>> {
        self.write()
    }
}

/// A resource's two subjects, and the proxies they talk through when counting.
struct Built {
    plain: Box<dyn Writer>,
    fenced: Box<dyn Writer>,
    proxies: Vec<FaultProxy>,
    detail: Option<String>,
}

/// `true` when `resource` is to run under `--only`: every resource by default; files and HTTP
/// with `local`.
pub(crate) fn selected(args: &Args, resource: Resource) -> bool {
    args.only.is_empty() || args.only.contains(&resource.backend())
}

/// Measures `resource`: its plain and fenced writes in interleaved rounds, then their round
/// trips. `known_absent`: why its backend was already skipped in this run, if it was.
pub(crate) async fn run(
    args: &Args,
    env: &Env,
    resource: Resource,
    known_absent: Option<&str>,
) -> FenceRow {
    let mut row = FenceRow {
        resource,
        skipped: None,
        detail: None,
        plain: Side::default(),
        fenced: Side::default(),
    };
    if let Some(why) = known_absent {
        eprintln!("SKIPPED fences {}: {why}", resource.label());
        row.skipped = Some(why.to_owned());
        return row;
    }
    let built = match build_bounded(env, resource, "main", false).await {
        Ok(b) => b,
        Err(e) => {
            let why = crate::describe(&e);
            eprintln!("SKIPPED fences {}: {why}", resource.label());
            row.skipped = Some(why);
            return row;
        }
    };
    row.detail = built.detail.clone();
    measure_pair(args, built, &mut row).await;
    if resource.networked() {
        count_pair(env, resource, &mut row).await;
    }
    row
}

async fn build_bounded(env: &Env, resource: Resource, tag: &str, count: bool) -> Result<Built> {
    tokio::time::timeout(OPEN_TIMEOUT, build(env, resource, tag, count))
        .await
        .map_err(|_| anyhow!("no answer within {OPEN_TIMEOUT:?}"))?
}

/// One subject while measuring.
struct Running {
    writer: Option<Box<dyn Writer>>,
    samples: Samples,
    error: Option<String>,
}

impl Running {
    fn fail(&mut self, resource: Resource, what: &str, e: &anyhow::Error) {
        eprintln!(
            "lease-bench: fences {} {what} failed: {}",
            resource.label(),
            crate::describe(e)
        );
        self.error = Some(crate::describe(e));
        self.writer = None;
    }
}

async fn measure_pair(args: &Args, built: Built, row: &mut FenceRow) {
    let resource = row.resource;
    let names = ["plain", "fenced"];
    let mut subjects = [built.plain, built.fenced].map(|w| Running {
        writer: Some(w),
        samples: Samples::default(),
        error: None,
    });
    for (r, what) in subjects.iter_mut().zip(names) {
        if let Some(w) = r.writer.as_mut()
            && let Err(e) = warm_up(w.as_mut(), WARMUP_WRITES, WARMUP_TIME).await
        {
            r.fail(resource, what, &e);
        }
    }
    let rounds = args.rounds.max(1);
    let slot = Duration::from_secs_f64(args.seconds / f64::from(rounds));
    let mut order = [0usize, 1];
    for _ in 0..rounds {
        // A new random order each round, as the cycle subjects: neither write always runs first
        // or always right after the other (a durable commit's flush can spill over).
        order.shuffle(&mut rand::rng());
        for &i in &order {
            let (Some(r), Some(what)) = (subjects.get_mut(i), names.get(i)) else {
                continue;
            };
            let Some(w) = r.writer.as_mut() else {
                continue;
            };
            if let Err(e) = measure(w.as_mut(), &mut r.samples, slot, args.max_cycles).await {
                r.fail(resource, what, &e);
            }
        }
    }
    let [plain, fenced] = subjects;
    row.plain = finish(plain).await;
    row.fenced = finish(fenced).await;
}

async fn finish(r: Running) -> Side {
    if let Some(w) = r.writer {
        w.close().await;
    }
    Side {
        summary: (r.samples.count() > 0).then(|| r.samples.summary()),
        error: r.error,
        ..Side::default()
    }
}

/// Counts the round trips per write of both subjects, on fresh subjects through proxies; a
/// failure goes to the side it happened on (both when the subjects could not be built).
async fn count_pair(env: &Env, resource: Resource, row: &mut FenceRow) {
    let built = match build_bounded(env, resource, "rt", true).await {
        Ok(b) => b,
        Err(e) => {
            let why = crate::describe(&e);
            eprintln!(
                "lease-bench: fences {} round trips: {why}",
                resource.label()
            );
            row.plain.rt_error = Some(why.clone());
            row.fenced.rt_error = Some(why);
            return;
        }
    };
    let mut plain = built.plain;
    let mut fenced = built.fenced;
    for (side, w, what) in [
        (&mut row.plain, plain.as_mut(), "plain"),
        (&mut row.fenced, fenced.as_mut(), "fenced"),
    ] {
        match count(&built.proxies, w).await {
            Ok((rts, connections)) => {
                (side.round_trips, side.connections) = (Some(rts), connections)
            }
            Err(e) => {
                let why = crate::describe(&e);
                eprintln!(
                    "lease-bench: fences {} {what} round trips: {why}",
                    resource.label()
                );
                side.rt_error = Some(why);
            }
        }
    }
    plain.close().await;
    fenced.close().await;
}

/// Round trips per write of `w` and the connections opened, over every proxy.
async fn count(proxies: &[FaultProxy], w: &mut dyn Writer) -> Result<(f64, u64)> {
    for _ in 0..WARM_WRITES {
        w.write().await?;
    }
    for p in proxies {
        p.reset_stats();
    }
    for _ in 0..COUNTED_WRITES {
        w.write().await?;
    }
    let (mut rts, mut conns) = (0, 0);
    for p in proxies {
        let s = p.stats();
        rts += s.round_trips;
        conns += s.connections_accepted;
    }
    Ok((rts as f64 / f64::from(COUNTED_WRITES), conns))
}

/// The URL of `backend`'s server for the subjects: through a new counting proxy when `count`.
async fn server_url(
    env: &Env,
    backend: Backend,
    count: bool,
    proxies: &mut Vec<FaultProxy>,
) -> Result<String> {
    if count {
        let (proxy, url) = backends::proxy(env, backend).await?;
        proxies.push(proxy);
        Ok(url)
    } else {
        Ok(env.url(backend))
    }
}

async fn build(env: &Env, resource: Resource, tag: &str, count: bool) -> Result<Built> {
    let mut proxies = Vec::new();
    let name = |side: &str| env.name(&format!("fence-{tag}-{side}"));
    let (plain, fenced, detail): (Box<dyn Writer>, Box<dyn Writer>, Option<String>) = match resource
    {
        Resource::Postgres => {
            let url = server_url(env, Backend::Postgres, count, &mut proxies).await?;
            let opts = sqlx::postgres::PgConnectOptions::from_str(&url)
                .context("parsing the PostgreSQL URL")?;
            let pool = || {
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect_with(opts.clone())
            };
            let (p, f) = (pool().await?, pool().await?);
            let (plain, fenced) = PgWrite::pair(p, f, name("plain"), name("fenced"), env).await?;
            (Box::new(plain), Box::new(fenced), None)
        }
        Resource::Mysql => {
            let url = server_url(env, Backend::Mysql, count, &mut proxies).await?;
            let opts = sqlx::mysql::MySqlConnectOptions::from_str(&url)
                .context("parsing the MariaDB URL")?;
            let pool = || {
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect_with(opts.clone())
            };
            let (p, f) = (pool().await?, pool().await?);
            let (plain, fenced) =
                MySqlWrite::pair(p, f, name("plain"), name("fenced"), env).await?;
            (Box::new(plain), Box::new(fenced), None)
        }
        Resource::Sqlite => {
            let file = sqlite_file(env);
            let opts = sqlx::sqlite::SqliteConnectOptions::new()
                .filename(&file)
                .create_if_missing(true);
            let pool = || {
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect_with(opts.clone())
            };
            let (p, f) = (pool().await?, pool().await?);
            let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
                .fetch_one(&p)
                .await?;
            let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
                .fetch_one(&p)
                .await?;
            let detail = format!(
                "a file on the temporary folder's filesystem, sqlx's defaults: journal_mode \
                     = {journal}, synchronous = {sync} (0 off, 1 normal, 2 full, 3 extra)"
            );
            let (plain, fenced) =
                SqliteWrite::pair(p, f, name("plain"), name("fenced"), env).await?;
            (Box::new(plain), Box::new(fenced), Some(detail))
        }
        Resource::Redis => {
            let url = server_url(env, Backend::Redis, count, &mut proxies).await?;
            let client = redis::Client::open(url.as_str()).context("parsing the Redis URL")?;
            let connect = || client.get_multiplexed_async_connection();
            let fence = RedisFence::with_prefix(&format!("{REDIS_PREFIX}fence:"))?;
            let plain = RedisWrite {
                conn: connect().await.context("connecting to Redis")?,
                key: format!("{REDIS_PREFIX}{}", name("plain")),
                fence: None,
            };
            let fenced = RedisWrite {
                conn: connect().await.context("connecting to Redis")?,
                key: format!("{REDIS_PREFIX}{}", name("fenced")),
                fence: Some((fence, name("fenced"))),
            };
            (Box::new(plain), Box::new(fenced), None)
        }
        Resource::Etcd => {
            let url = server_url(env, Backend::Etcd, count, &mut proxies).await?;
            let endpoint = url
                .strip_prefix("etcd://")
                .with_context(|| format!("not an etcd:// URL: {url}"))?
                .trim_end_matches('/')
                .to_owned();
            let connect = || etcd_client::Client::connect([format!("http://{endpoint}")], None);
            let fence = EtcdFence::with_prefix("lease-bench/fence/")?;
            let plain = EtcdWrite {
                client: connect().await.context("connecting to etcd")?,
                key: format!("lease-bench/{}", name("plain")),
                fence: None,
            };
            let fenced = EtcdWrite {
                client: connect().await.context("connecting to etcd")?,
                key: format!("lease-bench/{}", name("fenced")),
                fence: Some((fence, name("fenced"))),
            };
            let detail = "gRPC over HTTP/2: the proxy counts each burst the client sends \
                              that the server answers, so HTTP/2's own frames (window updates, \
                              pings) count as exchanges too, for both writes alike; a put and a \
                              transaction are one request each";
            (Box::new(plain), Box::new(fenced), Some(detail.to_owned()))
        }
        Resource::Nats => {
            let url = server_url(env, Backend::Nats, count, &mut proxies).await?;
            let plain = NatsWrite::open(&url, &name("plain"), false).await?;
            let fenced = NatsWrite::open(&url, &name("fenced"), true).await?;
            (Box::new(plain), Box::new(fenced), None)
        }
        Resource::Mongodb => {
            let url = server_url(env, Backend::Mongodb, count, &mut proxies).await?;
            let plain = MongoWrite::open(&url, &name("plain"), false).await?;
            let fenced = MongoWrite::open(&url, &name("fenced"), true).await?;
            (Box::new(plain), Box::new(fenced), None)
        }
        Resource::Files => {
            let dir = files_dir(env, tag);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            let plain = FileWrite {
                dir: dir.clone(),
                file: "plain.dat".to_owned(),
                fence: None,
            };
            let fenced = FileWrite {
                dir: dir.clone(),
                file: "fenced.dat".to_owned(),
                fence: Some(FileFence::new(&dir)),
            };
            (Box::new(plain), Box::new(fenced), None)
        }
        Resource::Http => {
            let (plain_addr, plain_server) = serve(None).await?;
            let (fenced_addr, fenced_server) = serve(Some(FenceLayer::new())).await?;
            let (plain_addr, fenced_addr) = if count {
                let p = FaultProxy::start(plain_addr).await?;
                let f = FaultProxy::start(fenced_addr).await?;
                let addrs = (p.local_addr(), f.local_addr());
                proxies.extend([p, f]);
                addrs
            } else {
                (plain_addr, fenced_addr)
            };
            let plain = HttpWrite {
                conn: HttpConn::connect(plain_addr).await?,
                server: plain_server,
            };
            let stamp = StampLayer::new(&name("fenced"), TOKEN)?;
            let fenced = StampedHttpWrite {
                conn: stamp.layer(HttpConn::connect(fenced_addr).await?),
                server: fenced_server,
            };
            (Box::new(plain), Box::new(fenced), None)
        }
    };
    Ok(Built {
        plain,
        fenced,
        proxies,
        detail,
    })
}

/// The SQLite database of the fenced writes, in the run's temporary folder.
fn sqlite_file(env: &Env) -> PathBuf {
    env.sqlite_file.with_file_name("fences.db")
}

/// The directory of the file writes, in the run's temporary folder.
fn files_dir(env: &Env, tag: &str) -> PathBuf {
    env.sqlite_file.with_file_name(format!("fence-files-{tag}"))
}

/// The data table's DDL, per dialect.
const PG_DATA: &str = "CREATE TABLE IF NOT EXISTS lease_bench_fence_data \
                       (name TEXT PRIMARY KEY, n BIGINT NOT NULL)";
const MYSQL_DATA: &str = "CREATE TABLE IF NOT EXISTS lease_bench_fence_data \
                          (name VARCHAR(191) PRIMARY KEY, n BIGINT NOT NULL) ENGINE = InnoDB";
const SQLITE_DATA: &str = "CREATE TABLE IF NOT EXISTS lease_bench_fence_data \
                           (name TEXT PRIMARY KEY, n INTEGER NOT NULL)";

/// A SQL write subject on one dialect: `$name` over `$db`, its data table made by `$ddl`, `$p`
/// its first bind placeholder.
macro_rules! sql_writer {
    ($name:ident, $db:ty, $ddl:expr, $p:literal) => {
        struct $name {
            pool: sqlx::Pool<$db>,
            /// The data row's name (and, when fenced, the fence's resource).
            row: String,
            update: String,
            fence: Option<SqlFence>,
            /// The run's prefix, for the clean-up.
            like: String,
        }

        impl $name {
            /// The plain and the fenced subject, on pools of one connection each; creates the
            /// tables when missing and the two rows.
            async fn pair(
                plain: sqlx::Pool<$db>,
                fenced: sqlx::Pool<$db>,
                plain_row: String,
                fenced_row: String,
                env: &Env,
            ) -> Result<($name, $name)> {
                sqlx::query($ddl)
                    .execute(&plain)
                    .await
                    .context("creating the data table")?;
                let fence = SqlFence::new(FENCE_TABLE)?;
                fence.ensure(&fenced).await?;
                let insert = format!("INSERT INTO {DATA_TABLE} (name, n) VALUES ({}, 0)", $p);
                for row in [&plain_row, &fenced_row] {
                    sqlx::query(&insert)
                        .bind(row)
                        .execute(&plain)
                        .await
                        .context("inserting the data row")?;
                }
                let update = format!("UPDATE {DATA_TABLE} SET n = n + 1 WHERE name = {}", $p);
                let like = format!("{}-%", env.prefix);
                Ok((
                    $name {
                        pool: plain,
                        row: plain_row,
                        update: update.clone(),
                        fence: None,
                        like: like.clone(),
                    },
                    $name {
                        pool: fenced,
                        row: fenced_row,
                        update,
                        fence: Some(fence),
                        like,
                    },
                ))
            }
        }

        impl Writer for $name {
            fn write(&mut self) -> BoxFuture<'_, Result<()>> {
                Box::pin(async move {
                    let mut tx = self.pool.begin().await?;
                    if let Some(fence) = &self.fence {
                        fence.check(&mut tx, &self.row, TOKEN).await?;
                    }
                    let done = sqlx::query(&self.update)
                        .bind(&self.row)
                        .execute(&mut *tx)
                        .await?;
                    ensure!(
                        done.rows_affected() == 1,
                        "the UPDATE changed {} rows, not 1",
                        done.rows_affected()
                    );
                    tx.commit().await?;
                    Ok(())
                })
            }

            fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
                Box::pin(async move {
                    let data = format!("DELETE FROM {DATA_TABLE} WHERE name LIKE {}", $p);
                    let _ = sqlx::query(&data)
                        .bind(&self.like)
                        .execute(&self.pool)
                        .await;
                    let fences = format!("DELETE FROM {FENCE_TABLE} WHERE resource LIKE {}", $p);
                    let _ = sqlx::query(&fences)
                        .bind(&self.like)
                        .execute(&self.pool)
                        .await;
                    self.pool.close().await;
                })
            }
        }
    };
}

sql_writer!(PgWrite, sqlx::Postgres, PG_DATA, "$1");
sql_writer!(MySqlWrite, sqlx::MySql, MYSQL_DATA, "?");
sql_writer!(SqliteWrite, sqlx::Sqlite, SQLITE_DATA, "?");

struct RedisWrite {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    /// The fence and its resource, when fenced.
    fence: Option<(RedisFence, String)>,
}

impl Writer for RedisWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            match &self.fence {
                None => {
                    redis::cmd("SET")
                        .arg(&self.key)
                        .arg(VALUE)
                        .query_async::<()>(&mut self.conn)
                        .await?;
                }
                Some((fence, resource)) => {
                    fence
                        .set(&mut self.conn, resource, TOKEN, &self.key, VALUE)
                        .await?;
                }
            }
            Ok(())
        })
    }

    fn close(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut del = redis::cmd("DEL");
            del.arg(&self.key);
            if let Some((fence, resource)) = &self.fence {
                del.arg(fence.key(resource));
            }
            let _ = del.query_async::<()>(&mut self.conn).await;
        })
    }
}

struct EtcdWrite {
    client: etcd_client::Client,
    key: String,
    fence: Option<(EtcdFence, String)>,
}

impl Writer for EtcdWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            match &self.fence {
                None => {
                    self.client.put(self.key.as_str(), VALUE, None).await?;
                }
                Some((fence, resource)) => {
                    fence
                        .put(&mut self.client, resource, TOKEN, self.key.as_str(), VALUE)
                        .await?;
                }
            }
            Ok(())
        })
    }

    fn close(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = self.client.delete(self.key.as_str(), None).await;
            if let Some((fence, resource)) = &self.fence {
                let _ = self.client.delete(fence.key(resource), None).await;
            }
        })
    }
}

struct NatsWrite {
    js: async_nats::jetstream::Context,
    kv: async_nats::jetstream::kv::Store,
    bucket: String,
    fence: Option<NatsFence>,
}

/// The key of the NATS subjects' writes, in a bucket of their own.
const NATS_KEY: &str = "data";

impl NatsWrite {
    /// A bucket of its own for one subject, named after `name`.
    async fn open(url: &str, name: &str, fenced: bool) -> Result<NatsWrite> {
        let client = async_nats::connect(url)
            .await
            .context("connecting to NATS")?;
        let js = async_nats::jetstream::new(client);
        let bucket = name.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
        let kv = lease_fence::nats::create_bucket(&js, &bucket)
            .await
            .with_context(|| format!("creating the KV bucket {bucket}"))?;
        Ok(NatsWrite {
            js,
            kv,
            bucket,
            fence: fenced.then(NatsFence::new),
        })
    }
}

impl Writer for NatsWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            match &self.fence {
                None => {
                    self.kv.put(NATS_KEY, Bytes::from_static(VALUE)).await?;
                }
                Some(fence) => {
                    fence.put(&self.kv, NATS_KEY, TOKEN, VALUE).await?;
                }
            }
            Ok(())
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = self.js.delete_stream(format!("KV_{}", self.bucket)).await;
        })
    }
}

struct MongoWrite {
    coll: mongodb::Collection<Document>,
    fence: Option<MongoFence>,
}

impl MongoWrite {
    /// A collection of its own for one subject, named after `name`; one document.
    async fn open(url: &str, name: &str, fenced: bool) -> Result<MongoWrite> {
        let mut options = mongodb::options::ClientOptions::parse(url)
            .await
            .context("parsing the MongoDB URL")?;
        // The server as given (a proxy's address when counting), not the hosts it announces.
        options.direct_connection = Some(true);
        options.server_selection_timeout = Some(Duration::from_secs(5));
        let client = mongodb::Client::with_options(options)?;
        let db = client
            .default_database()
            .unwrap_or_else(|| client.database("lease_bench"));
        let coll = db.collection::<Document>(&name.replace('-', "_"));
        Ok(MongoWrite {
            coll,
            fence: fenced.then(MongoFence::new),
        })
    }
}

impl Writer for MongoWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let update = doc! { "$inc": { "n": 1_i64 } };
            let done = match &self.fence {
                None => {
                    self.coll
                        .update_one(doc! { "_id": 1_i64 }, update)
                        .upsert(true)
                        .await?
                }
                Some(fence) => fence.upsert_by_id(&self.coll, 1_i64, update, TOKEN).await?,
            };
            ensure!(
                done.matched_count == 1 || done.upserted_id.is_some(),
                "the update matched no document and inserted none"
            );
            Ok(())
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let _ = self.coll.drop().await;
        })
    }
}

struct FileWrite {
    dir: PathBuf,
    file: String,
    fence: Option<FileFence>,
}

impl Writer for FileWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            match &self.fence {
                None => {
                    let (dir, file) = (self.dir.clone(), self.file.clone());
                    tokio::task::spawn_blocking(move || replace(&dir, &file, VALUE)).await??;
                }
                Some(fence) => fence.write(&self.file, TOKEN, VALUE).await?,
            }
            Ok(())
        })
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            // The folder goes with the run's temporary folder; the fenced side removes it
            // now so the round-trip pass (files have none) leaves nothing.
            if self.fence.is_some() {
                let _ = std::fs::remove_dir_all(&self.dir);
            }
        })
    }
}

/// The plain file write: a temporary file in `dir`, flushed, renamed over `dir/file`, the
/// directory flushed — the steps a `FileFence` write takes on the data, without its lock and
/// token file.
fn replace(dir: &Path, file: &str, contents: &[u8]) -> Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{file}.{:016x}.tmp", rand::random::<u64>()));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(contents)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(file))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// An in-process HTTP server on 127.0.0.1 whose `POST /write` answers `written`, behind `layer`
/// when given; its address and its task (aborted when the subject closes).
async fn serve(layer: Option<FenceLayer>) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    async fn write(body: Bytes) -> &'static str {
        if body.len() == VALUE.len() {
            "written"
        } else {
            "short"
        }
    }
    let router = axum::Router::new().route("/write", axum::routing::post(write));
    let router = match layer {
        Some(layer) => router.layer(layer),
        None => router,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router).await {
            eprintln!("lease-bench: fences HTTP server: {e}");
        }
    });
    Ok((addr, server))
}

/// One keep-alive HTTP/1.1 connection as a tower service (what `StampLayer` wraps).
struct HttpConn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
}

type HttpFuture =
    Pin<Box<dyn std::future::Future<Output = hyper::Result<Response<Incoming>>> + Send>>;

impl HttpConn {
    async fn connect(addr: SocketAddr) -> Result<HttpConn> {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .with_context(|| format!("connecting to the HTTP server at {addr}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(connection);
        Ok(HttpConn { sender })
    }
}

impl Service<Request<Full<Bytes>>> for HttpConn {
    type Response = Response<Incoming>;
    type Error = hyper::Error;
    type Future = HttpFuture;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), hyper::Error>> {
        self.sender.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> HttpFuture {
        Box::pin(self.sender.send_request(request))
    }
}

/// The request of both HTTP subjects.
fn http_request() -> Result<Request<Full<Bytes>>> {
    Ok(Request::post("/write")
        .header(http::header::HOST, "127.0.0.1")
        .body(Full::new(Bytes::from_static(VALUE)))?)
}

/// Sends one request on `service` and checks the answer is `200 written`.
async fn http_write<S>(service: &mut S) -> Result<()>
where
    S: Service<Request<Full<Bytes>>, Response = Response<Incoming>, Error = hyper::Error>,
{
    poll_fn(|cx| service.poll_ready(cx)).await?;
    let response = service.call(http_request()?).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    ensure!(
        status == StatusCode::OK && &body[..] == b"written",
        "the server answered {status}: {}",
        String::from_utf8_lossy(&body)
    );
    Ok(())
}

struct HttpWrite {
    conn: HttpConn,
    server: tokio::task::JoinHandle<()>,
}

impl Writer for HttpWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(http_write(&mut self.conn))
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        self.server.abort();
        Box::pin(async {})
    }
}

struct StampedHttpWrite {
    conn: Stamped<HttpConn>,
    server: tokio::task::JoinHandle<()>,
}

impl Writer for StampedHttpWrite {
    fn write(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(http_write(&mut self.conn))
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        self.server.abort();
        Box::pin(async {})
    }
}
