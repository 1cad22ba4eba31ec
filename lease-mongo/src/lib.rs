//! Leases on MongoDB: one conditional pipeline upsert per claim, `$$NOW` as the clock.
//!
//! ```no_run
//! use lease_core::{Coordinator, ErrorKind};
//! use lease_mongo::{MongoConfig, MongoStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! // Leases in the URL's database (`app`), default collections; checks the server (4.2+).
//! let store = MongoStore::connect(
//!     "mongodb://db1:27017/app?replicaSet=rs0",
//!     MongoConfig::default(),
//! )
//! .await?;
//!
//! let coordinator = Coordinator::builder(store).instance("worker-1").build()?;
//! match coordinator.try_acquire("orders/compactor").await {
//!     Ok(term) => {
//!         // Fence downstream writes with term.token().
//!         term.resign().await?;
//!     }
//!     Err(e) if e.is(ErrorKind::Held) => {}
//!     Err(e) => return Err(e),
//! }
//! coordinator.close().await?;
//! # Ok(()) }
//! ```
//!
//! On the client the service already has: `MongoStore::with_client(client,
//! MongoConfig::new("app").server_label("db1:27017"))` (no I/O; the store runs its start-up
//! check itself before its first claim, or call
//! [`available`](lease_core::LeaseStore::available) to fail at start-up). The options from the
//! environment: [`MongoConfig::from_env`]; the URL is the caller's to read, e.g.
//! `MongoStore::connect(&std::env::var(env::URL)?, MongoConfig::from_env()?)`.
//!
//! # Status
//!
//! **No run of this backend against a real MongoDB server is recorded yet**: the machines the
//! project is built on cannot run MongoDB. CI runs its conformance suite and round-trip tests
//! through the driver against the mongoeco MongoDB wire emulator (the repository's
//! `ci/mongo-emulator/`), which checks the commands, the pipeline updates, `$$NOW`, terms and
//! epochs, slots, partitions and membership against an independent implementation of MongoDB's
//! query and update language. It cannot check write-conflict races and duplicate-key retries
//! under real concurrency, majority write concern, or replica-set failover. Without any server,
//! the exact filter, pipeline and update documents it sends are checked against expected BSON,
//! with the reading of replies, name and TTL validation, error mapping, and connection
//! failures. The suites run wherever `LEASE_TEST_MONGODB_URL` names a server, and print a
//! `SKIPPED mongodb` line otherwise.
//!
//! # Requirements
//!
//! **MongoDB 4.2 or newer**: updates with an aggregation pipeline and `$$NOW` came in 4.2.
//! [`available`](lease_core::LeaseStore::available) refuses an older server. The server must
//! serve `majority` reads (the default; on 4.x a PSA replica set may turn them off).
//!
//! # How it works
//!
//! One document per lease name in one collection (default `leases`):
//! `{_id: name, holder, instance, epoch, expires_at, claim_id}`, plus, once a scheduler slot
//! was claimed, `{slot_ms, unfinished_ms, rerun_ms, last_finish}`. The term is `epoch`; the
//! expiry is a BSON date set from the server's `$$NOW`. The exact commands are in the crate's
//! `wire` module, one file per operation family.
//!
//! - **Claim** is one `findAndModify` with `upsert: true` on `{_id: name}` whose update is a
//!   pipeline: when the document is free by `$$NOW` (`expires_at <= $$NOW`, or no document
//!   yet) it sets the holder, the instance, a fresh random `claim_id`, `epoch` = stored + 1
//!   (1 for a new document) and `expires_at` = `$$NOW` + TTL; otherwise every field keeps its
//!   value and the document is left as it was. The claim won when the document comes back with its
//!   own `claim_id`; held otherwise (`Ok(None)`).
//!   Why not the textbook "filter admits only an expired document, a live one collides on the
//!   unique `_id`": MongoDB refuses `$expr` (needed for `$$NOW` in a filter) in the query of
//!   an upsert (error 224, SERVER-59704), and a filter on the caller's clock is what this
//!   design avoids. The duplicate key error (E11000) on `_id` still means held: it is how two
//!   upserts racing to insert a missing document end on servers that do not retry the loser
//!   themselves (from 4.2 the server usually retries the loser as an update, which then finds
//!   the winner's live lease and leaves it as it was).
//!   A claim never extends a live lease, not even the same holder's (renew does; only a
//!   partition's acquire keeps the epoch of its owner's live lease), so the epoch always grows
//!   by one.
//! - **Renew**, **release** and **verify** act only on the document live by `$$NOW` under the
//!   caller's holder token. Release sets `expires_at` to 1970 and keeps the document, so the
//!   epoch continues. **Force release** does the same for whoever holds the name live.
//! - **Renew many** (`renew_many`, `capabilities().renew_many`): one `update` command carrying
//!   one statement per name, each with its own holder check (the renew's filter) and the same
//!   pipeline (`expires_at` = `$$NOW` + TTL) plus a fresh random `renewal_id` per call; then,
//!   when it matched any, one `aggregate` reading back the documents of the batch carrying that
//!   `renewal_id` and live by `$$NOW`, with their holder tokens (a name counts as renewed only
//!   under the holder its item named), in one causally consistent session. Two round trips per
//!   8 MiB of statements (one command for 10,000 names of up to about 300 bytes); a statement
//!   the server failed answers its item's error, a write concern error fails the call.
//! - **Time left** is always the server's: claim and renew set `expires_at` = `$$NOW` + TTL and
//!   report the TTL; verify and get compute `expires_at − $$NOW` in the aggregation.
//!
//! - **Scheduler slots** ([`SlotStore`](lease_core::backend::slots::SlotStore)) keep their instants
//!   on the same document as numbers (milliseconds since the Unix epoch), compared with `$$NOW` in
//!   milliseconds (`{$toLong: "$$NOW"}`): - *claim slot* reads, then writes with the term compared
//!   (two round trips; one when the read refuses). The read is an `aggregate` whose `$facet`
//!   answers even for a name with no document, with `now_ms` = `$$NOW` and the record's `epoch`,
//!   `slot_ms`, `unfinished_ms` and liveness; it decides held, taken or early in the contract's
//!   order. The write is a `findAndModify` whose filter pins `epoch` to the term read and, with
//!   `$expr`, checks again that the lease is free, `slot_ms` before the instant and the instant not
//!   after `$$NOW`; it sets holder, instance, `epoch` + 1, `expires_at` = `$$NOW` + TTL, `slot_ms`
//!   = `unfinished_ms` = instant, and returns the document *before* the update: a document back
//!   means the write applied (the filter is the condition), its `unfinished_ms` is the superseded
//!   instant and its `epoch` + 1 the term; nothing back means another replica's claim matched first
//!   (held). For a name with no document yet the write is an upsert on `{_id, epoch: {$exists:
//!   false}}` (no `$expr`: error 224), and a competitor's insert makes it collide on `_id` (E11000:
//!   held). - *finish slot* is one `findAndModify` whose single `$set` stage applies each rule
//!   under `$cond` (held by `$$NOW`; recorded when `slot_ms` is the instant; `passed` taken when
//!   held, recorded and not after `$$NOW`), releases by setting `expires_at` to 1970 when held, and
//!   writes `last_finish: {id, recorded, passed_taken, released}` with a fresh random `id` when
//!   anything applied: the document after the update carries this call's id exactly when it changed
//!   it. - *claim rerun* is one `findAndModify` (filter `unfinished_ms` = `slot_ms` = instant,
//!   `rerun_ms` ≠ instant, free by `$$NOW`); *unfinished* one `aggregate` over `_id: {$in: names}`;
//!   *last slot* one `find`.
//!
//! - **Partition leases** ([`PartitionStore`](lease_core::backend::partitions::PartitionStore)) are
//!   one document per `(group, partition)` in their own collection (default `<lease
//!   collection>_partitions`): `{_id: {g: group, p: partition}, owner, epoch, expires_at,
//!   renewal_id}`. - *acquire* is one `findAndModify` upsert on `{_id: {g, p}}` (again no `$expr`
//!   in the filter: error 224) whose pipeline admits the document only when it is expired by
//!   `$$NOW` (or released, or new) or already the acquirer's: it then sets the owner, the expiry
//!   `$$NOW` + TTL and the epoch, kept when the acquirer still held it live and + 1 otherwise (1
//!   for a new document); any other document is left as it was. Acquired when the document after
//!   the update names the acquirer; a duplicate `_id` (two inserts racing) means held. - *renew* is
//!   an `update` of many documents (filter: `_id` among the batch, the owner, live by `$$NOW`;
//!   pipeline: expiry `$$NOW` + TTL and a fresh random `renewal_id`), then an `aggregate` reading
//!   back the documents carrying that `renewal_id` with the time left computed by the server, in
//!   one causally consistent session: **two round trips** however many partitions
//!   (`capabilities().batch_renew` is `Fixed { round_trips: 2 }`), one when nothing was renewed. -
//!   *release* is one `update` of many documents setting `expires_at` to 1970 (document and epoch
//!   kept); *owners* one `aggregate`.
//! - **Membership records** ([`MembershipStore`](lease_core::backend::membership::MembershipStore))
//!   are one document per `(service, node)` (default collection `<lease collection>_members`):
//!   `{_id: {s: service, n: node}, address, groups: [..], expires_at}`. *Heartbeat* is one
//!   `findAndModify` upsert replacing address, groups and expiry (`$$NOW` + TTL); *members* one
//!   `aggregate` of the live records by `$$NOW`, sorted by node id (byte order); *leave* one
//!   `update` setting `expires_at` to 1970 where live.
//! - **Counted leases** (the permit operations of [`LeaseStore`](lease_core::LeaseStore), `permits:
//!   true`, the rules of [`lease_core::backend::permits`]) are one document per counted name in the
//!   lease collection, `{_id: {c: name}, epoch, permits: [{p, holder, instance, epoch, expires_at,
//!   op_id}, ..]}`, apart from the name's lease document (a string `_id`). *claim permit* is one
//!   `findAndModify` upsert whose update pipeline counts the permits live by `$$NOW`, and when
//!   fewer than N are live and none under this holder, raises the name's `epoch` by one and writes
//!   the lowest free permit below N with it: counting and taking are one atomic update; the call
//!   won when the document after it carries its fresh `op_id`. *renew* and *release* are one
//!   `findAndModify` each (the permit's expiry `$$NOW` + TTL, or 1970, where it is live under the
//!   holder; element and term kept); *verify* and *permits* one `aggregate` (time left by `$$NOW`).
//!   One round trip each; the name's `epoch` never goes back, so tokens strictly increase per name
//!   across all its permits.
//! - Under [`Ddl::Auto`] the store creates the partition index `{"_id.g": 1, "_id.p": 1}`
//!   and the membership index `{"_id.s": 1, "_id.n": 1}` (for `owners` and `members`);
//!   renew and release go through the `_id` index.
//!
//! Each lease operation is one command, one round trip on a warm connection (the driver may
//! retry a write once after a network error; retryable writes make that retry apply at most
//! once), `renew_many` two. A batch renewal of partitions takes two; every other partition or membership
//! operation one.
//!
//! # Guarantees and their limits
//!
//! - Expiry is decided by the clock of the **primary** that runs the command. After a
//!   failover the new primary's clock decides: keep the members' clocks in sync (NTP), since
//!   a skew of *s* between them moves every expiry by *s* across a failover.
//! - Writes are acknowledged by a majority, journaled (`{w: "majority", j: true}`), so an
//!   acknowledged claim is not rolled back by a failover and the epoch never goes back. Reads
//!   use read concern `majority` on the primary.
//! - If a write concern error or a timeout hides whether a write took effect, the error says
//!   the outcome is unknown, and the engine reads back with verify.
//! - Every call is bounded by the [operation timeout](MongoConfig::op_timeout) (default 5 s).
//! - Terms are as durable as the collection: dropping it, or deleting a document, restarts
//!   that name's epoch at 1. Documents of names no longer used stay (a few hundred bytes each);
//!   delete them only when nothing fenced by their terms remains.
//! - The collections must use the simple (binary) collation, so names compare byte for byte
//!   ([`available`](lease_core::LeaseStore::available) checks it), and have no unique index
//!   other than `_id`: a duplicate key on another index is reported as an error, never as
//!   held.
//! - Partition epochs, like terms, are as durable as their collection, and continue across
//!   release and expiry (the document stays).
//! - Names, groups and services are up to [`MAX_NAME_BYTES`] bytes; they, owners, nodes,
//!   addresses, TTLs and batch sizes are checked before any I/O. Each command of a batch
//!   renewal or release carries the batch once (an `$in` array of `_id`s): 10,000 partitions
//!   of a 1 KiB group name (about 10.5 MB) stay under MongoDB's 16 MiB command limit.

//!
//! # The crate's files
//!
//! `config.rs` ([`MongoConfig`]), `error.rs` (driver errors as lease errors), `store.rs`
//! ([`MongoStore`]: connect, with_client, the start-up check, the command helpers), `leases.rs`
//! (`LeaseStore`), `permits.rs` (its permit operations), `slots.rs` (`SlotStore`), `partitions.rs`
//! (`PartitionStore`), `membership.rs` (`MembershipStore`), and `wire/` (the documents each of them
//! sends and how the replies are read: `leases.rs`, `permits.rs`, `slots.rs`, `partitions.rs`,
//! `membership.rs`, and `schema.rs` for the start-up check and the indexes; tested offline in
//! `wire/tests/`).

mod config;
mod error;
mod leases;
mod membership;
mod partitions;
mod permits;
mod slots;
mod store;
mod wire;

pub use config::{DEFAULT_COLLECTION, DEFAULT_DATABASE, DEFAULT_OP_TIMEOUT, Ddl, MongoConfig, env};
pub use error::{DUPLICATE_KEY, MongoResultExt, classify, is_duplicate_id, map_error};
pub use store::{MAX_NAME_BYTES, MongoStore};

/// Re-exported so users name the same driver version as the store.
pub use mongodb;
