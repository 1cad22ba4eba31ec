//! Downstream fences: the resource a holder writes to refuses a write whose token is lower than
//! the highest it has accepted, in the same atomic operation as the write.
//!
//! A lease cannot stop a holder that was paused — a GC pause, a stopped VM, a slow disk — from
//! waking up and writing after its term passed to someone else. Only the resource it writes to
//! can. A **fence** is the highest token a resource has accepted, kept per resource name next
//! to the data, and checked in the same atomic operation as the write:
//!
//! - a token **lower** than the fence is refused with [`FenceError::Stale`] (the resource, the
//!   offered token, the fence's token; "stop working under that term"), and nothing changes;
//! - an **equal** token writes: one term may write many times;
//! - a **higher** token raises the fence and writes.
//!
//! The token is the term's [`Term::token`](lease_core::Term::token), from a lease on any
//! backend: a lease on Redis or etcd can fence rows in PostgreSQL.
//!
//! ```
//! use lease_core::Coordinator;
//! use lease_fence::sql::SqlFence;
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("lease-fence-lib-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir)?;
//! # let url = format!("sqlite://{}/app.db?mode=rwc", dir.display());
//! // The application's own pool, and a fence table in the same database.
//! let pool = sqlx::SqlitePool::connect(&url).await?;
//! # sqlx::query("CREATE TABLE IF NOT EXISTS invoices (id INTEGER PRIMARY KEY, total INTEGER)")
//! #     .execute(&pool).await?;
//! let fence = SqlFence::new("lease_fences")?;
//! fence.ensure(&pool).await?;
//!
//! let leases = Coordinator::builder(MemoryStore::new()).instance("biller").build()?;
//! let first = leases.try_acquire("billing").await?;
//! let stale_token = first.token();
//! first.resign().await?; // as if it had been paused past its lease …
//! let second = leases.try_acquire("billing").await?; // … and a successor took over
//!
//! // The successor writes: the fence check is the transaction's first statement.
//! let mut tx = fence.begin(&pool, "invoices", second.token()).await?;
//! sqlx::query("INSERT OR REPLACE INTO invoices (id, total) VALUES (1, 200)")
//!     .execute(&mut *tx)
//!     .await?;
//! tx.commit().await?;
//!
//! // The first holder wakes up and writes under its old token: refused, nothing written.
//! let refused = fence.begin(&pool, "invoices", stale_token).await.unwrap_err();
//! let stale = refused.stale().expect("a refusal");
//! assert_eq!((stale.offered(), stale.fence()), (stale_token, second.token()));
//! let total: i64 = sqlx::query_scalar("SELECT total FROM invoices WHERE id = 1")
//!     .fetch_one(&pool)
//!     .await?;
//! assert_eq!(total, 200);
//! # second.resign().await?;
//! # leases.close().await?;
//! # pool.close().await;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(()) }
//! ```
//!
//! # Resources
//!
//! | module | feature | mechanism | round trips per fenced write |
//! |---|---|---|---|
//! | [`sql`] | `postgres`, `mysql`, `sqlite` | a fence table; one upsert in the application's own sqlx transaction checks and raises, and locks the fence row until commit | one statement, inside the caller's transaction (begin and commit are the caller's) |
//! | [`redis`] | `redis` | one Lua script: read the fence key, run the command, raise the key | one (`EVALSHA`; `EVAL` once per server before the script is cached) |
//! | [`etcd`] | `etcd` | one transaction: `IF value(fence) > token THEN get fence ELSE put fence, your operations` (tokens zero-padded to 20 digits, so byte order is numeric order) | one |
//! | [`nats`] | `nats` | the token in the key's own value (`<20 digits>\n<bytes>`); read the entry, refuse a lower token, `update` at the revision read (a compare-and-set; again on a conflict) | two (a read and the compare-and-set) |
//! | [`mongo`] | `mongodb` | a fence field in the document: the caller's filter plus "fence ≤ token or missing", the caller's update plus `$set` of the fence, one `update` command (upsert by `_id`: a refusal meets the existing `_id`) | one (a read more when nothing matched, to tell a refusal from no document) |
//! | [`http`](mod@http) | `http` | a tower layer for servers: per resource an async lock and the highest token, in the server process's memory; the check and raise, then the inner service, under the lock; a stale token is answered 409 without calling the service. For several replicas, first a check and raise in a shared book of fences (Redis: the script above without a command; SQL: the upsert in a short transaction; or your own `FenceBook`), whose failure is answered 503. A tower layer for clients stamps `Lease-Fence-Resource` and `Lease-Fence-Token` | none more without a book (the fence is in the server's memory); with one, one on Redis, three on SQL (begin, the upsert, commit) |
//! | [`file`](mod@file) | `file` | write a temporary file, then under an `flock` on the file's lock file check, raise the fence (a rename) and rename the file into place | — (local filesystem; four `fsync`s when the fence is raised, two otherwise) |
//!
//! What each guarantees, and what it cannot, is in its module's docs and the README's
//! "Fencing downstream writes".
//!
//! # Which tokens a fence compares
//!
//! A token orders the terms of **one lease name**: tokens of two names are unrelated numbers.
//! So guard each resource with one lease name, and fence its writes with that name's terms
//! only. Tokens strictly increase per name on every backend (by exactly one on the SQL stores
//! and Redis's default scheme, with gaps on NATS, etcd and Redis's `ClockFloor`); a fence needs
//! only that they increase.
//!
//! **Counted leases** (a name with N permits) hand out tokens from one sequence for the name,
//! across all its permits, so N live holders have N different tokens and a single fence would
//! refuse all but the newest one. Fence **per permit** instead: give each permit its own
//! resource, such as [`per_permit`]`("import", &term)` = `import#permit-2`, and let each permit
//! own its share of the data. A zombie of permit 2 is then refused once the next holder of
//! permit 2 (whose token is higher: one sequence) has written, while the holders of the other
//! permits write on. A per-permit fence does not stop the holder of permit 2 from writing data
//! that permit 3 owns: that split is the application's.
//!
//! # Errors
//!
//! Every fenced write answers `Result<_, FenceError>`: [`FenceError::Stale`] for a refusal (the
//! fence doing its job: stop), [`FenceError::Other`] with a [`lease_core::Error`] for
//! everything else — a token of 0 (`InvalidArgument`), an empty, oversized or control-character
//! resource name (`InvalidName`), both refused before any I/O; a fence table of another shape
//! (`Schema`, saying what to change); the resource's own failures, temporary or not as the
//! backend crates judge their own. `?` into a `lease_core::Result` makes a refusal `Lost`, so
//! [`Term::run`](lease_core::Term::run) and `run_elected` step down.
//!
//! # Features
//!
//! One per resource: `postgres`, `mysql`, `sqlite` (each pulls only its sqlx driver), `redis`,
//! `etcd` (etcd-client's build needs `protoc`), `nats`, `mongodb`, `file`, `http`; all on by
//! default. To build one only:
//! `lease-fence = { version = "0.1", default-features = false, features = ["postgres"] }`.

// The crate docs link every resource's module; a build with some features has only their
// modules, so the other links cannot resolve there (docs.rs builds with every feature).
#![cfg_attr(
    not(all(
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite",
        feature = "redis",
        feature = "file",
        feature = "etcd",
        feature = "nats",
        feature = "mongodb",
        feature = "http"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]
// Without a resource feature the crate is its errors and nothing uses the checks.
#![cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite",
        feature = "redis",
        feature = "file",
        feature = "etcd",
        feature = "nats",
        feature = "mongodb",
        feature = "http"
    )),
    allow(dead_code)
)]

mod check;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
#[cfg(feature = "file")]
pub mod file;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "mongodb")]
pub mod mongo;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub mod sql;

pub use check::MAX_RESOURCE_BYTES;
pub use error::{FenceError, Stale};

/// The resource name of `resource`'s share owned by the permit of `term`, for fencing under a
/// counted lease: `<resource>#permit-<n>`; `resource` itself for a term of a plain lease (see
/// "Which tokens a fence compares" in the crate docs).
pub fn per_permit(resource: &str, term: &lease_core::Term) -> String {
    match term.permit() {
        Some(permit) => format!("{resource}#permit-{permit}"),
        None => resource.to_owned(),
    }
}
