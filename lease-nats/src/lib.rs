//! Leases on NATS JetStream KV: server-side expiry, the stream sequence as the fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_core::Coordinator;
//! use lease_nats::{NatsConfig, NatsStore};
//!
//! # async fn demo() -> lease_core::Result<()> {
//! // Leases of 15 s live in the bucket `leases_15000ms`, created when missing.
//! let config = NatsConfig::new(Duration::from_secs(15));
//! let store = NatsStore::connect("nats://127.0.0.1:4222", config).await?;
//!
//! // A coordinator's lease duration must be the bucket's max age: take the store's timings.
//! let coordinator = Coordinator::builder(store.clone())
//!     .timings(store.timings()?)
//!     .instance("api-1")
//!     .build()?;
//! let term = coordinator.try_acquire("billing-leader").await?;
//! println!("leader, fencing token {}", term.token());
//! term.resign().await?;
//! # Ok(()) }
//! ```
//!
//! To ride the connection a service already has, pass its client instead:
//! `NatsStore::with_client(client, config)`. [`NatsConfig::from_env`] reads the lease duration
//! and the bucket from `LEASE_NATS_TTL_MS` and `LEASE_NATS_BUCKET` (and the slot bucket from
//! `LEASE_NATS_SLOT_BUCKET`).
//!
//! Scheduler slots ([`SlotStore`](lease_core::backend::slots::SlotStore)) keep their records in a
//! second bucket with no max age ([`slot_bucket_for`], e.g. `leases_15000ms_slots`), created at
//! connect like the lease bucket; see [Scheduler slots](#scheduler-slots). Hints for waiters come
//! from a KV watch (see [Hints](#hints)); every capability is listed in
//! [Capabilities](#capabilities).
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
//! | `renew_many` | each name as `renew`, pipelined: the direct gets of the names whose last write this store object did not make, all sent before any answer is awaited, then the updates likewise (bursts of at most 1,000 requests); `capabilities().renew_many` is `true` | one burst of N updates (a coordinator's renewals); two (gets, then updates) through a store object that did not make the last writes |
//! | `verify`, `get` | a direct get of the key's last message (`$JS.API.DIRECT.GET.KV_<bucket>.$KV.<bucket>.<key>`; on a replicated bucket `$JS.API.STREAM.MSG.GET`, see [Clusters](#clusters)) | 1 (`verify` of a job's lease: 2, see [Scheduler slots](#scheduler-slots)) |
//! | `release` | `$JS.API.STREAM.PURGE.KV_<bucket>` with `{"filter": "$KV.<bucket>.<key>", "seq": <revision> + 1}` | 1 (2 when this store object did not make the last write) |
//! | `force_release` | a direct get, then the purge up to the revision read | 2 |
//!
//! A release (or forced release, or a partition release) that purged a message then publishes
//! the key on the hint subject (see [Hints](#hints)): one message, no answer waited for, so no
//! round trip in the counts here (a proxy on the wire sees it as one more exchange).
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
//! object pays one round trip per operation, however many names it holds: the memory drops a
//! write only once it is older than a lease (then its lease has expired or another store object
//! renews it), when it reaches a mark that doubles with what it keeps.
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
//! Max age applies to a whole bucket, and per-message TTLs need a newer server than 2.9, so a store
//! keeps every lease for exactly its bucket's max age. It reports that duration in
//! [`Capabilities::fixed_ttl`](lease_core::backend::Capabilities::fixed_ttl) and refuses any other
//! with `InvalidTimings`, before any I/O. For several durations, open one store per duration:
//! [`NatsConfig::new`] names the bucket after the duration ([`bucket_for_ttl`], e.g.
//! `leases_15000ms`), so processes that use the same duration share a bucket and the others do not
//! collide.
//!
//! **When the bucket's max age and the lease duration differ** (the bucket exists, made with
//! another max age): [`NatsStore::connect`] and [`NatsStore::with_client`] refuse by default with
//! `InvalidTimings` naming both durations ([`TtlMismatch::Refuse`]). A max age shorter than the
//! coordinator's lease would let the server hand the name to someone else while the holder still
//! believes it holds it; a longer one makes every take-over after a crash slower than the timings
//! promise. With [`TtlMismatch::Adopt`], the store takes the bucket's max age as its lease duration
//! instead; build the coordinator with [`NatsStore::timings`] (as in the example above), since a
//! coordinator whose lease differs from the store's fixed TTL is refused.
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
//!   it. In a cluster, create the bucket with [`NatsConfig::replicas`] of 3, on nats-server
//!   2.12.0 or newer: on older servers the replicas of a lease bucket can diverge, and terms go
//!   back after a leader change (see [Clusters](#clusters)).
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
//! **The slot bucket** (`<bucket>_slots` unless [`NatsConfig::slot_bucket`] names another) is
//! looked up together with the lease bucket and created the same way, with **no max age**. An
//! existing one must keep one message per key, have no max age and not be a mirror; a max age
//! is refused, since it would drop a job's last instant and let it run again. With creation off
//! and the slot bucket missing, the store opens and only its slot operations fail, naming the
//! bucket to create. Opening a store therefore makes two streams on a fresh server.
//!
//! Keep other writers out of a lease bucket. A value this store did not write blocks its name
//! until it expires, and `get` reports it as an error; a delete marker written with
//! `nats kv del` blocks the name for up to one lease duration. `force_release` clears both.
//! Under a partition or member key, a foreign value makes `acquire_partition`, `owners` and
//! `members` fail with an error naming the key; a delete marker there counts as free.
//!
//! # Errors
//!
//! Every operation is bounded by [`NatsConfig::op_timeout`]. A request that was sent and got no
//! answer within that bound gives `Timeout`, temporary: its outcome is unknown. A server that
//! cannot be reached (a refused or closed connection, a client that is not connected and
//! reconnecting, no JetStream answering) gives `Unavailable`, temporary. Both name the server
//! by host and port, never a password. A write that fails as `Unavailable` may still land as
//! well (see *Cancel safety*). An error the server answered with gives `Backend` with
//! the driver's error as its source. A name or duration the store cannot keep gives
//! `InvalidName` or `InvalidTimings` before any I/O.
//!
//! # Cancel safety
//!
//! As the store contract says: an operation that timed out may or may not have taken effect.
//! The async-nats client also buffers what it sends while it reconnects, so a claim that timed
//! out may still land later; it then holds the name, under a holder token nobody uses, until the
//! bucket's max age removes it.
//!
//! # Partitions
//!
//! [`PartitionStore`](lease_core::backend::partitions::PartitionStore): one key per `(group,
//! partition)` in the same bucket, `part.<group escaped>.<partition>`, value
//! `part1;<epoch>;<owner>`. A lease key is a single subject token, these are three, so they never
//! collide; the group is escaped as lease names are. A key that exists is a live lease; the
//! bucket's max age expires it by the server's clock, as it does a lease — so partition leases have
//! the store's one fixed duration too, and any other TTL is refused with `InvalidTimings` before
//! any I/O.
//!
//! **The epoch is a stream sequence**, like a lease's term. An acquisition that changes hands
//! (a free, released or expired partition, or the owner coming back after its lease lapsed) is
//! a create, and its own stream sequence is the new epoch (written as `0`: "this message's
//! sequence"). Re-acquiring one's own live lease and renewing it write the epoch explicitly and
//! keep it. Sequences never go back, also after the server removed the key, so the epoch
//! strictly increases every time the partition changes hands — with gaps, and not from 1
//! (`consecutive_terms: false` holds for epochs as well). Deleting and re-creating the bucket
//! restarts the sequence, exactly as for terms.
//!
//! **Release removes the key** (a purge, as for a lease), so an ended partition lease leaves no
//! record (`keeps_ended_records: false`) — yet the epoch continues: the next acquisition is a
//! create whose sequence is higher than every earlier one. No delete marker is left, so that
//! create is one round trip, and a release + acquire cycle stays at two.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `acquire_partition` | a create (`Nats-Expected-Last-Subject-Sequence: 0`); when it fails, a direct get, then an update at the revision read if the lease is the owner's own (the epoch kept) | 1 when free (never held, released or expired); 2 when another owner holds it; 1 for the owner's own live lease whose last write this store object made (an update at that revision), 3 otherwise (create, get, update) |
//! | `renew_partitions` | one update per partition at the revision of its last write, pipelined (all sent before any answer is awaited); the revisions this store object does not know are read first, also pipelined | one burst of N updates; two (N gets, N updates) through a store object that did not make the last writes |
//! | `release_partitions` | one purge per partition, limited to the key and to the owner's revision (a compare-and-set that leaves no marker, as for a lease), pipelined; unknown revisions read first | one burst of N purges; two (gets, purges) otherwise |
//! | `owners` | one `$JS.API.STREAM.INFO` with the subject filter `$KV.<bucket>.part.<group>.>` (the keys, no values; one more request per 100,000 keys), then a direct get per key, pipelined | 2 bursts; 1 when the group has no key |
//!
//! NATS has no multi-key write, so a batch renewal is **pipelined**
//! ([`BatchRenew::Pipelined`](lease_core::backend::partitions::BatchRenew::Pipelined)), not one
//! round trip: each partition's update is its own compare-and-set, atomic on its own, and the
//! partitions of one call may be renewed or found lost independently. How many round trips a burst
//! costs on the wire depends on how the client's writes and the server's answers interleave;
//! measured through a proxy on loopback, 100 updates took 1–21 and 1,000 renewals through a store
//! object that had to read first (2,000 requests) 80–110 — never one per partition. Renewals and
//! releases compare-and-set against the revision this store object remembers from its own last
//! write (the last 40,000 partitions); when the key changed since (another store object renewed it,
//! it expired, someone else took it), the write misses, the partition is read and written again if
//! it is still the owner's live lease. A renewal never revives an expired lease: the server removed
//! the message it compares against. `expires_in` of a renewal is measured from the start of the
//! call, one expiry for the whole batch, never overstated.
//!
//! A batch touches every partition named, so a batch's cost grows with its size (a request per
//! partition, at most 10,000 per call), sent in bursts of at most 1,000 requests, one burst
//! after the other, so one call never has more than 1,000 publishes awaiting acknowledgement
//! (a JetStream context allows 5,000 by default, `max_ack_inflight`).
//!
//! `owners` is not a snapshot: a partition acquired or released while the listing runs may be
//! missed or included, as with two separate reads. Time left on a lease this store object did
//! not write is an estimate from the server's timestamp and this host's clock, as for `get`.
//!
//! # Counted leases
//!
//! The permit operations of [`LeaseStore`](lease_core::LeaseStore) (capability `permits: true`,
//! the rules of [`lease_core::backend::permits`]): one key per permit of a counted name in the same
//! bucket, `permit.<name escaped>.<permit>`, apart from the name's lease key (three subject
//! tokens, like partition keys), value a lease record `lease1;<holder>;<term>;<instance>`. A key
//! that exists is a live permit; the bucket's max age expires it by the server's clock, so
//! permits have the store's one fixed duration too.
//!
//! **The term is the stream sequence of the create that took the permit**, so terms strictly
//! increase per name across all its permits (the stream's sequence is shared by the whole
//! bucket: with gaps, and never repeated after a release or an expiry removed the key). Renewal
//! copies the term into the value and keeps it.
//!
//! A claim **scans** the name's permits — one `$JS.API.STREAM.INFO` with the subject filter
//! `$KV.<bucket>.permit.<name>.>` lists the keys, a direct get per key (pipelined) reads them —
//! and answers "full" (`None`) when the holder already holds one, or when N or more are live
//! (those above N too, left from a larger N). Otherwise it creates (`Nats-Expected-Last-Subject-
//! Sequence: 0`) the lowest free permit below N. A create that fails (another claim took the
//! permit since the scan) counts that permit live and tries the next free one, until N are
//! counted: each permit key has one holder at a time by compare-and-set, and the keys below N
//! are N, so racing claims never grant the (N+1)-th. The count and the take are therefore not
//! one request but are bounded: one scan, then at most N creates.
//!
//! **Claims with different N** (N being changed while holders come and go) are where two steps
//! could count wrong: a claim for 3 that counted 0 and 1 live may create permit 2 just after a
//! claim for 5, which counted 0, 1 and 2 live, created permit 3 — 3 others live when the claim
//! for 3 takes its permit. So after its create a claim lists the name's keys again and, when one
//! at or above its N exists, reads them: with N or more others live it purges its permit (at
//! its revision) and answers full; a permit whose purge fails is answered full too and left to
//! expire under a token nobody uses. The conformance case
//! `claims_of_different_counts_keep_each_claims_limit` races claims for 3 and 5 for 4 s: it
//! found 19 claims for 3 granted with 3 others live before the re-count (65 in 8 s in another
//! run), none since.
//!
//! **A claim whose outcome is unknown** — its create's answer lost, or the claim cut by a
//! timeout between its create and the end of its re-count or of its take-back — is read back by
//! the coordinator with `read_back_permit`, which knows the claim's N: the scan that finds the
//! permit by its holder token counts the others, and with N or more live the permit is not
//! adopted (it expires under a token nobody uses). Otherwise the permit is renewed by an
//! update at the revision the scan read, and adopted only when that lands: a take-back purge
//! still on its way then either landed first (the update fails, nothing is adopted) or purges
//! only up to the superseded revision and leaves the adopted permit alone. `verify_permit`,
//! which a term uses to check its own permit, counts nothing: a permit granted by the re-count
//! stays held when a claim with a larger N takes one above it. `tests/unknown_permits.rs`
//! builds both interleavings through a proxy that holds back the create or the purge: before,
//! the read-back adopted a claim of 3 on permit 2 while permits 0, 1 and 3 were live, and a
//! purge landing after the adoption let a claim of 5 take the adopted permit 2.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `claim_permit` | the scan, then a create per free permit tried, then the re-count's listing | 3 for a name with no live permit (the listing, the create, the listing); 4 otherwise (listing, gets, create, listing), + 1 per create lost to a racing claim, + 1 (the gets) when a key at or above N exists; 2 when full |
//! | `renew_permit` | a direct get of the permit's key, an update at its revision (term copied) | 2 |
//! | `release_permit` | a direct get, a purge up to its revision (no marker; hinted as a lease release is) | 2 |
//! | `verify_permit`, `permits` | the scan | 2 (1 when the name has no permit key) |
//! | `read_back_permit` | the scan, then an update of the permit found at its revision (term copied) | 3 when adopted; 2 when not found or too many others are live |
//!
//! A scan's gets are one burst: one exchange on the wire, or a few as the answers interleave
//! with the requests (measured through a proxy: 1 or 2 for two keys), never one per key in
//! turn.
//!
//! Released and expired permits leave no key, so `permits` lists the live ones only. Time left
//! read back by `verify_permit` and `permits` is an estimate from the server's timestamp and
//! this host's clock, clamped to the lease duration, as for `get`. A permit claimed or released
//! hints the name's lease topic (the KV watch sees the create; a release publishes its key).
//!
//! # Membership
//!
//! [`MembershipStore`](lease_core::backend::membership::MembershipStore): one key per `(service,
//! node)`, `member.<service escaped>.<node escaped>`, value `member1`, the address and the groups
//! on separate lines. A heartbeat is one unconditional put (it replaces the record and starts its
//! age again: 1 round trip); the bucket's max age expires a member that stops heartbeating, so the
//! heartbeat TTL is the store's fixed TTL too. `members` lists the service's keys with one
//! `STREAM.INFO` and reads them with pipelined direct gets (2 bursts; 1 when there is none), sorted
//! by node id byte for byte. `leave` purges the key (1 round trip) and answers whether a record was
//! there — a live member, since the server removes expired ones.
//!
//! # Scheduler slots
//!
//! [`SlotStore`](lease_core::backend::slots::SlotStore), with the rules of
//! [`lease_core::backend::slots`]. A job's name is a lease name; its lease lives in the lease
//! bucket like any other (expired by the max age), and its **slot record** in the slot bucket
//! ([`NatsConfig::slot_bucket_name`]), a KV bucket with **no max age**, so the record outlives
//! every lease: one key per job (the name escaped as a lease key), value
//! `slots1;<last>;<unfinished>;<rerun>;<term>;<holder>;<write>` — the three instants, the term and
//! holder of the lease that made the last claim or rerun, and a token minted for each write. The
//! server's clock is the timestamp it gives a message.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `claim_slot` | a direct get of the record; unless taken, a create of the job's lease (`job1;…`, expecting no message, as a claim); a direct get of that lease for its server timestamp (the server's clock); unless early, the record written with `Nats-Expected-Last-Subject-Sequence: <revision read>` (`last` = `unfinished` = the instant, this lease's term and holder) | 4 when claimed; 1 when taken; 2 when held; 4 when early (the lease given back: a purge) |
//! | `finish_slot` | direct gets of the lease and the record, together; the record written at the revision read (unfinished cleared, `passed` as the last instant); the lease purged through the revision read | 3; 2 when the record needs no change or the lease is no longer held; 2 more when `passed` is later than the lease's last server timestamp (a renewal and its read, for a fresh clock) |
//! | `unfinished` | two direct gets per name (its lease and its record), pipelined | one burst of 2N gets (bursts of 1,000 names) |
//! | `claim_rerun` | a direct get of the record; a create of the job's lease; the record written at the revision read (`rerun` = the instant, this lease's term and holder) | 3; 1 when not eligible; 2 when the lease is held |
//! | `last_slot` | a direct get of the record | 1 |
//! | `verify` of a job's lease | the lease's direct get, then the record's | 2 |
//!
//! When the record changed between the read and the write, the write misses, the record is read
//! again and the decision made again (two more round trips each time, at most three times). A
//! claim that finds the instant taken after it created the lease, or early, gives the lease back
//! (a purge limited to its own revision).
//!
//! **Why it is safe.** NATS 2.9 has no write across two keys, so no single operation can both
//! check the lease and write the record. Safety rests on the record alone instead:
//!
//! 1. *The record changes only by compare-and-set on its revision.* Stream sequences only grow,
//!    so a write that expects revision `r` lands only while `r` is the record's last message,
//!    and of writers that read the same revision at most one lands.
//! 2. *`last` never decreases.* A claim writes `last = i` only over the record it read with
//!    `last < i` (and, by 1, unchanged since); a finish writes `last = passed` only with
//!    `passed > last`; a rerun keeps it.
//! 3. *Each instant is claimed once.* `Claimed` for instant `i` means a write moved `last` from
//!    below `i` to `i`; by 1 and 2 every other claim of `i` then reads `last ≥ i` (`Taken`) or
//!    misses and reads it on its next look — whatever the claimers' leases did meanwhile.
//! 4. *A round cut short reruns once.* A rerun moves `rerun` to `i` over a record with
//!    `unfinished = last = i` and `rerun ≠ i`; `rerun` changes again only with a rerun of a
//!    later instant, which needs `last` past `i`, so `i` never becomes eligible again.
//! 5. *No future instant is claimed.* The record is written after the server stamped the
//!    claimer's new lease message, and only when the instant is not later than that stamp. A
//!    finish takes `passed` along only when it is not later than the server's stamp on the
//!    holder's latest lease message, renewing the lease once for a fresh stamp when needed.
//! 6. *Only the holder of the instant's lease writes what needs the lease.* A claim or rerun
//!    writes the record only after creating the job's lease — which fails while any lease on the
//!    name is live — and writes that lease's term into the record. A finish takes `passed` along
//!    and gives the lease back only when it read the holder's live lease and the record names
//!    it. The check comes one round trip before the write, and the write is a compare-and-set
//!    on the revision the check was made against. So a **stale holder**, whose lease expired
//!    before its write landed: gets its claim in only if no other write reached the record
//!    since its read — it is then the one claim of that instant (3), on a lease already gone,
//!    which its keeper finds lost at the next renewal, and the instant is rerun once, as after a
//!    crash right after a claim; takes `passed` along only if it read its lease live and no
//!    other replica claimed an instant since (that claim would have moved the record, and this
//!    write would miss) — the same outcome as the finish landing just before the expiry, and
//!    `passed` is never later than the server's clock (5); records a round's end only while
//!    `last` is still its instant — which the contract allows even after the lease was lost: the
//!    round did run to its end — and then neither takes `passed` along nor gives anything back;
//!    and never gives back another's lease (a purge limited to its own revision).
//!
//! **A job's lease is a term only once the record names it.** The lease (value tag `job1`) is
//! created before the record is written. When that write's answer is lost, the coordinator
//! reads the claim back with `verify` — which, for a job's lease, also reads the record and
//! answers held only if the record names this lease's term and holder. So a lease whose record
//! write never landed is never run as a round; if that write lands later (a client that
//! buffered it while reconnecting), the instant is claimed by a lease nobody runs, is
//! unfinished when the lease expires, and is rerun once.
//!
//! **A write whose answer was lost is read back, never sent again blindly.** Each record write
//! carries a fresh token. After a `Timeout` or `Unavailable`, the record is read: carrying the
//! token, the write landed; moved on to another revision, it never will; still at the revision
//! expected, the very same compare-and-set is sent once more, and of the two at most one can
//! land (the answer, or one more read, says which). A lease create whose answer was lost is
//! returned as the error it is: if it lands, the record does not name it, so it is no term, and
//! it blocks the name until the bucket's max age removes it.
//!
//! The limits: `unfinished` reads each lease and record separately, not as a snapshot (a hint;
//! `claim_rerun` decides). A lease claimed on a job's name with plain
//! [`claim`](lease_core::LeaseStore::claim) blocks its slot claims (`Held`) until released or
//! expired, and a finish by its holder gives nothing back. **Keep other writers out of the slot
//! bucket**: a record deleted with `nats kv del` (a delete marker) or purged is a job that never
//! ran, so its instants may run again. Deleting and re-creating the lease bucket restarts its
//! sequence, so the terms on record must be forgotten as well (delete the slot bucket with it,
//! which loses the schedule's history), or use new bucket names.
//!
//! # Hints
//!
//! [`LeaseStore::changes`](lease_core::LeaseStore::changes) answers hints from a KV watch on
//! the lease bucket (claims: puts whose term or epoch is `0`; delete and purge markers), a KV
//! watch on the slot bucket (every slot record change), and the core subject
//! `_LEASE_HINTS.<bucket>`, on which a store publishes each key it purged (releases leave no
//! trace a watch sees). Membership changes are not hinted (member keys are not watched): a
//! group worker finds a member that joined or left at its next poll of the members. Renewals
//! and expiries wake nobody (nats-server 2.9 removes an expired
//! message silently: waiters wake at the expiry by their own clock). A hint decides nothing.
//! While the client is not connected the hints say so (`is_connected() == false`, checked every
//! 200 ms) until the listener has subscribed again. Publishing the release hint needs the
//! publish permission on that subject; without it releases are hinted only within the process.
//!
//! # Capabilities
//!
//! Leases with expiry, fencing and force release; partitions and membership, with the bucket's
//! fixed TTL; scheduler slots, in the slot bucket (the lease of a round has the fixed TTL too);
//! counted leases (permits), with the fixed TTL; hints (`watch`), from the KV watches above.
//!
//! # Clusters
//!
//! In a JetStream cluster, create the buckets with [`NatsConfig::replicas`] of 3 (or 5): each
//! claim, renewal and release is then answered once a majority of the stream's replicas stored
//! it, so the loss of one server (of 3) loses no lease and no term. What the store does for it,
//! and what it needs:
//!
//! - **Reads go to the stream's leader.** On a bucket of more than one replica every read
//!   (`verify`, `get`, the reads before a renewal or release this store object did not write,
//!   partition, member and slot reads) is a `$JS.API.STREAM.MSG.GET` for the key's last
//!   message, which only the stream's leader answers, instead of a direct get, which any
//!   replica answers from what it has applied so far: behind the leader by the replication lag,
//!   by seconds while it catches up after a restart. Same round trips; the leader does the
//!   work of every read. A leader cut off from the others still answers reads until it notices
//!   it lost its quorum, so a read can be that much stale; no promise rests on a read alone:
//!   claims, renewals and releases are compare-and-sets that the stream's Raft group orders,
//!   and a holder stops at its local deadline.
//! - **nats-server 2.12.0 or newer.** Up to 2.11, a follower checks a message's
//!   `Nats-Expected-Last-Subject-Sequence` again when it applies it, against its own store, and
//!   each node removes expired messages by its own timer: a follower that still holds a key's
//!   expired message (one replaying what it missed while it was down always does) refuses a
//!   claim the leader accepted. From then on its stream is a message short, and once it leads
//!   it hands out stream sequences — terms — that were already handed out. Shown on 2.10.27
//!   by the workspace's `ci/cluster/nats-replica-check.py` (a claim given sequence 4 after 6);
//!   nats-server 2.12.0 has followers apply what the leader accepted
//!   (nats-io/nats-server#7119). The store refuses to open a replicated bucket on an
//!   older server (`Unsupported`) unless [`NatsConfig::allow_diverging_replicas`] accepts the
//!   risk, and then logs a warning once per process: the hazard needs a follower that still
//!   holds a key's expired message when a claim of that key reaches it, which a node's restart
//!   makes likely and which is otherwise a race between the nodes' expiry timers. Such a
//!   cluster makes no promise across node failures.
//! - **A leader change takes a Raft election**: nats-server's election timeout is several
//!   seconds, and no claim or renewal is answered meanwhile. A holder whose renewals stall past
//!   its local deadline loses its term and campaigns again. In the soak under node kills (3
//!   nodes on loopback, lease 1.5 s) a holder worked again 1.6–8.0 s after the leader's
//!   SIGKILL (median 5.1 s).
//! - **Expiry runs on each node's clock** against the timestamp the leader gave the message: a
//!   new leader whose clock runs ahead of the old one's removes a lease early by the difference.
//!   Keep the servers' clocks synchronised well within the margin between the lease and the
//!   holders' local deadline.
//!
//! Tested by `lease-soak --cluster nats` on `ci/cluster/nats.sh`'s 3-node cluster (nats-server
//! 2.15.1, bucket R3; in CI): the stream leader SIGKILLed twice and the whole cluster restarted
//! once per run, 0 overlaps and 0 term regressions in ten runs (figures in BENCHMARKS.md,
//! "Soak under node kills").
//!
//! # Servers
//!
//! nats-server 2.9 and newer, with JetStream (2.12.0 or newer for a replicated bucket: see
//! [Clusters](#clusters)). Tested on 2.9.10 (one server) and 2.15.1 (a 3-node cluster).
//! Nothing here needs a feature of a newer server (no per-message TTL, no subject delete
//! markers).
//!
//! # The crate's files
//!
//! `config.rs` ([`NatsConfig`]), `error.rs` (async-nats errors as lease errors), `store.rs`
//! ([`NatsStore`]: connect, with_client, the requests every operation shares), `buckets.rs`
//! (the buckets looked up, created and checked when the store opens), `server.rs` (the
//! server's label in errors, the reconnect pause, the version check for replicated buckets),
//! `known_writes.rs` (the memory of this store object's own last writes), `hints.rs` (the
//! listener behind `changes`), `leases.rs` (`LeaseStore`), `permits.rs` (its permit
//! operations), `partitions.rs` (`PartitionStore`), `membership.rs` (`MembershipStore`),
//! `slots.rs` (`SlotStore`), and `wire/` (`keys.rs`: names as KV keys; `codec.rs`: the records
//! as KV values).

mod buckets;
mod config;
mod error;
mod hints;
mod known_writes;
mod leases;
mod membership;
mod partitions;
mod permits;
mod server;
mod slots;
mod store;
mod url_params;
mod wire;

pub use config::{
    DEFAULT_BUCKET_PREFIX, DEFAULT_OP_TIMEOUT, DEFAULT_TTL, NatsConfig, TtlMismatch,
    bucket_for_ttl, slot_bucket_for,
};
pub use store::NatsStore;
pub use url_params::NatsUrlParams;
pub use wire::keys::MAX_NAME_BYTES;
