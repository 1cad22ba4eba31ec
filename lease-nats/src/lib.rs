//! Leases on NATS JetStream KV: server-side expiry, the stream sequence as the fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_nats::{NatsConfig, NatsStore};
//!
//! # async fn demo() -> lease_core::Result<()> {
//! // Leases of 15 s live in the bucket `leases_15000ms`, created when missing.
//! let config = NatsConfig::new(Duration::from_secs(15));
//! let store = NatsStore::connect("nats://127.0.0.1:4222", config).await?;
//!
//! // A coordinator's lease duration must be the bucket's max age: take the store's timings.
//! let coordinator = store.coordinator_builder()?.instance("api-1").build()?;
//! let term = coordinator.try_acquire("billing-leader").await?;
//! println!("leader, fencing token {}", term.token());
//! term.resign().await?;
//! # Ok(()) }
//! ```
//!
//! To ride the connection a service already has, pass its JetStream context instead:
//! `NatsStore::open(async_nats::jetstream::new(client), config)`.
//!
//! # The protocol
//!
//! One bucket holds the leases of one duration. Each lease name is one key (the name escaped,
//! see [Names](#names)); its value is `lease1;<holder token>;<term>;<instance>`. A key that
//! exists is a live lease; a key that does not is free.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `claim` | a publish to `$KV.<bucket>.<key>` with `Nats-Expected-Last-Subject-Sequence: 0` (create): stored → claimed, term = its stream sequence; error 10071 (wrong last sequence) → held | 1 |
//! | `renew` | a publish with `Nats-Expected-Last-Subject-Sequence: <revision of the holder's last write>` and the term copied into the value | 1 (2 when this store object did not make the last write: a read first) |
//! | `verify`, `get` | a direct get of the key's last message (`$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>`) | 1 |
//! | `release` | `$JS.API.STREAM.PURGE.KV_<bucket>` with `{"filter": "$KV.<bucket>.<key>", "seq": <revision> + 1}` | 1 (2 when this store object did not make the last write) |
//! | `force_release` | a direct get, then the purge up to the revision read | 2 |
//!
//! A claim followed by a release is two round trips; a claim over a released or expired name is
//! one, like any claim of a free name. The counts are asserted in the crate's tests twice: on the
//! wire by a proxy, and by the server itself (the stream's last sequence counts the messages
//! stored; the account's JetStream API counter counts the purges, and nothing else).
//!
//! **Why release purges instead of writing a delete marker.** The KV API's `delete` leaves a
//! marker message, and its `create` over a marker costs three round trips (a failed update, a
//! get, an update at the marker's revision), measured in the tests. A purge limited to the
//! subject and to sequences up to the holder's revision removes the holder's message only if it
//! is still the key's last one — a compare-and-set on the revision, like the KV
//! `delete_expect_revision` — and leaves no marker, so the next claim is a plain create.
//!
//! **Why renew and release usually need no read.** The store remembers, per name, the revision
//! of the last message it wrote (a claim or a renewal) and compares-and-sets against it. When
//! the key changed since (the lease expired, someone else claimed it, another store object
//! renewed it), the write or purge misses, the store reads the key, and acts only if the key
//! still holds this holder's live lease. A keeper that claims and renews through one store
//! object pays one round trip per operation.
//!
//! # Expiry: the server's clock
//!
//! The bucket's max age is the lease duration. The server removes a message once it is older
//! than the max age (2.9 runs a timer for the oldest message; removal came within a few
//! milliseconds of the max age in our measurements), so a lease expires by the server's clock
//! alone. A renewal is a new message, stamped by the server, which starts the age again. No
//! process clock decides whether a lease is live: live means the key exists.
//!
//! An expired lease is never revived: a renewal is a compare-and-set on the revision of the
//! holder's last message, which the server has removed, so it fails, and the store answers
//! `None` (lost).
//!
//! **Time left** (`expires_in`): after a claim or renewal, the lease duration minus the time
//! since the request was sent (by the monotonic clock). The server stamped the message after
//! that, so the figure never overstates. `verify` and `get` answer the same way for a message
//! this store object wrote; for one it did not write they estimate from the message's server
//! timestamp and this host's wall clock, clamped to the lease duration — off by the difference
//! between the two clocks. Nothing decides on that estimate; it is for display.
//!
//! # One lease duration per bucket
//!
//! Max age applies to a whole bucket, and per-message TTLs need a newer server than 2.9, so a
//! store keeps every lease for exactly its bucket's max age. It reports that duration in
//! [`Capabilities::fixed_ttl`](lease_core::Capabilities::fixed_ttl) and refuses any other with
//! `InvalidTimings`, before any I/O. For several durations, open one store per duration:
//! [`NatsConfig::new`] names the bucket after the duration ([`bucket_for_ttl`], e.g.
//! `leases_15000ms`), so processes that use the same duration share a bucket and the others do
//! not collide.
//!
//! **When the bucket's max age and the lease duration differ** (the bucket exists, made with
//! another max age): [`NatsStore::open`] refuses by default with `InvalidTimings` naming both
//! durations ([`TtlMismatch::Refuse`]). A max age shorter than the coordinator's lease would let
//! the server hand the name to someone else while the holder still believes it holds it; a
//! longer one makes every take-over after a crash slower than the timings promise. With
//! [`TtlMismatch::Adopt`], the store takes the bucket's max age as its lease duration instead;
//! build the coordinator with [`NatsStore::timings`] (or [`NatsStore::coordinator_builder`]),
//! since a coordinator whose lease differs from the store's fixed TTL is refused.
//!
//! # The fencing token
//!
//! The term is the stream sequence of the claim's message. The sequence of a stream never goes
//! back — expiry and purges keep it, and with file storage it survives a server restart (checked
//! on nats-server 2.9.10 with a stream emptied by expiry) — so each claim gets a higher term than
//! every earlier one, across release and expiry. A renewal writes a new message with a new
//! sequence, so the value carries the term: the claim writes `0` ("my own sequence"), and each
//! renewal copies the claim's sequence.
//!
//! The limits, in plain words:
//!
//! - Terms strictly increase but are **not consecutive and do not start at 1** per name: all the
//!   names of a bucket share one sequence.
//! - **Deleting and re-creating the bucket restarts the sequence at 1**, so terms repeat: a
//!   fenced resource then refuses the new holders until their terms pass the old ones. Do not
//!   delete a lease bucket in use; if you must, use a new bucket name (or have the fenced
//!   resources forget the old terms).
//! - The term is as durable as the stream: with one replica, losing the server's storage loses
//!   it. In a cluster, create the bucket with [`NatsConfig::replicas`] of 3.
//! - **A lease that ended leaves no record**: once released or expired, the key is gone, and
//!   [`get`](lease_core::LeaseStore::get) answers `None` for it as for a name never claimed
//!   (other stores keep the last holder and term). The next claim still gets a higher term.
//!
//! # Names
//!
//! A KV key holds only `[-/_=.a-zA-Z0-9]`. The store escapes a lease name into a key: ASCII
//! letters, digits, `-`, `_` and `/` stay as they are; every other byte becomes `=` and two
//! hex digits (`orders.daily` → `orders=2Edaily`). The escape is one-to-one, so every name the
//! contract allows works and names are compared byte for byte. Names are at most
//! [`MAX_NAME_BYTES`] (255) bytes, which escape to at most 765 key characters.
//!
//! # The bucket
//!
//! Created when missing (unless [`NatsConfig::create_bucket`] is off) as the stream
//! `KV_<bucket>`: subjects `$KV.<bucket>.>`, file storage, one message per key, max age = the
//! lease duration, direct get, rollup allowed, delete denied, discard new — a KV bucket, made
//! directly because async-nats 0.51 cannot parse nats-server 2.9's account info, which
//! `create_key_value` reads. An existing bucket must keep one message per key, allow purge,
//! have a max age and not be a mirror; otherwise opening fails and says what to change.
//! [`LeaseStore::available`](lease_core::LeaseStore::available) checks the same again.
//!
//! Keep other writers out of a lease bucket. A value this store did not write blocks its name
//! until it expires, and `get` reports it as an error; a delete marker written with
//! `nats kv del` blocks the name for up to one lease duration. `force_release` clears both.
//!
//! # Errors
//!
//! A server that does not answer (a refused connection, a timeout, a client reconnecting) gives
//! `Unavailable`, temporary, naming the server by host and port; every operation is bounded by
//! [`NatsConfig::op_timeout`]. An error the server answered with gives `Backend` with the
//! driver's error as its source. A name or duration the store cannot keep gives `InvalidName` or
//! `InvalidTimings` before any I/O.
//!
//! # Cancel safety
//!
//! As the store contract says: an operation that timed out may or may not have taken effect.
//! The async-nats client also buffers what it sends while it reconnects, so a claim that timed
//! out may still land later; it then holds the name, under a holder token nobody uses, until the
//! bucket's max age removes it.
//!
//! # Capabilities
//!
//! Leases with expiry, fencing and force release. Partitions, membership and scheduler slots
//! are not offered: on NATS only the lease store is provided, and expiry by max age would drop
//! their durable state. No watch.
//!
//! # Servers
//!
//! nats-server 2.9 and newer, with JetStream. Tested on 2.9.10. Nothing here needs a feature of
//! a newer server (no per-message TTL, no subject delete markers).

mod backend;
mod codec;
mod config;
mod error;

pub use backend::NatsStore;
pub use codec::MAX_NAME_BYTES;
pub use config::{
    DEFAULT_BUCKET_PREFIX, DEFAULT_OP_TIMEOUT, DEFAULT_TTL, NatsConfig, TtlMismatch, bucket_for_ttl,
};
