//! Leases on etcd v3: expiry by etcd's lease TTL (the server's clock), claims as transactions
//! comparing revisions, the key's create revision as the fencing token.
//!
//! ```no_run
//! use lease_core::Coordinator;
//! use lease_etcd::{EtcdConfig, EtcdStore};
//!
//! # async fn demo() -> lease_core::Result<()> {
//! let store = EtcdStore::connect("etcd://127.0.0.1:2379", EtcdConfig::new()).await?;
//! let coordinator = Coordinator::builder(store).instance("api-1").build()?;
//! let term = coordinator.try_acquire("billing-leader").await?;
//! println!("leader, fencing token {}", term.token());
//! term.resign().await?;
//! # Ok(()) }
//! ```
//!
//! To ride a client a service already has, pass it instead:
//! `EtcdStore::with_client(client, config)`. [`EtcdConfig::from_env`] reads the key prefix
//! and the operation timeout from `LEASE_ETCD_PREFIX` and `LEASE_ETCD_OP_TIMEOUT_MS`.
//!
//! What this backend lacks: scheduler slots ([`SlotStore`](lease_core::backend::slots::SlotStore))
//! — a slot claim refuses an instant that is still in the future *by the server's clock*, and
//! etcd's API has no wall clock to read; see [Capabilities](#capabilities).
//!
//! # The protocol
//!
//! Each lease name is one key, `<prefix>l/<name>` (the name as it is: etcd keys are bytes),
//! whose value is `lease1;<holder token>;<instance>`. A key that exists is a live lease; a key
//! that does not is free. Each claim grants an etcd lease and hangs the key on it, so etcd
//! deletes the key when that lease ends.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `claim` | `LeaseGrant(TTL)`, then `Txn(if create_revision(key) == 0 then put(key, value, lease))`: succeeded → claimed, term = the transaction's revision (the key's create revision); failed → held, and the unused etcd lease is revoked in the background | 2 |
//! | `renew` | a keep-alive of the claim's etcd lease and a read of the key (is it still on that lease?), sent together | 1 (2 when this store object did not make the claim: a read first; 3 when the keep-alive stream of the etcd lease is not open yet and this store did not grant it) |
//! | `release` | `Txn(if lease(key) == claim's lease then delete(key))`, then `LeaseRevoke` in the background | 1 (2 when this store object did not make the claim: a read first, and the compare is on the mod revision read) |
//! | `verify` | a read of the key | 1 (2 when this store object did not make the claim: `LeaseTimeToLive` for the time left) |
//! | `get` | a read of the key | as `verify` |
//! | `force_release` | `DeleteRange(key, prev_kv)`, then `LeaseRevoke` of the holder's etcd lease, so its next keep-alive fails | 2 |
//!
//! Every read is linearizable (etcd's default): it goes through the leader's quorum, so no
//! member answers from a stale copy.
//!
//! # Expiry: the server's clock
//!
//! A lease ends when etcd's lease ends: the leader counts the TTL from the grant or the last
//! keep-alive it took, deletes the key when it runs out, and refuses a keep-alive of an expired
//! lease even before the key is gone — an expired lease is never revived. No process clock
//! decides whether a lease is live: live means the key exists.
//!
//! **TTLs are whole seconds on etcd.** A requested TTL is kept on the server rounded **up** to
//! whole seconds, and a server raises a TTL below its minimum (1.5 election timeouts, rounded
//! up: 2 s with etcd's default settings, 1 s with `--election-timeout 500`) to that minimum.
//! The server's expiry is thus at or after the requested TTL, never before. The holder's time
//! (`expires_in`, and so the coordinator's local deadline) counts the **requested** TTL from a
//! moment before the request was sent, so the holder steps down before the server lets anyone
//! else in. The cost: a holder that crashed frees the name up to the rounding (under a second,
//! or up to the server's minimum) later than the TTL asked, plus etcd's expiry sweep, which runs
//! every 500 ms. A leader change in the etcd cluster extends every lease by an election
//! timeout (etcd does so on purpose): later, never sooner.
//!
//! **Time left** (`expires_in`) after a claim or renewal is the requested TTL (or the server's,
//! if shorter) minus the time since the request was sent, by the boot clock: it never
//! overstates. `verify` and `get` answer the same way for a claim this store object made; for
//! another's they ask etcd (`LeaseTimeToLive`), which answers whole seconds rounded down — so
//! the expiry lies up to a second later, and a watch judging a release against it would take
//! one in the lease's last second for an expiry. `get` narrows that second when this store's
//! watch (see *Hints*) saw the key put on its etcd lease (the claim, or a renewal's move onto a
//! longer one): the lease was granted before that moment, so its TTL as granted runs out
//! before that moment plus the TTL; `get` answers that bound when it lies within etcd's
//! second (else a keep-alive moved the expiry since, and the whole seconds stand). It may
//! exceed the server's time left by the time between the grant and the put reaching the watch
//! (milliseconds; never more than etcd's second); `verify`, which a holder's deadline may rest
//! on, keeps the whole seconds. A
//! keep-alive that moved the expiry by less than a second may go unnoticed; then `get` is
//! early by up to a second, as without the watch.
//!
//! A renewal asking a longer TTL than the claim's etcd lease has moves the key onto a new etcd
//! lease of that TTL (`Txn(if lease(key) == old then put(key, ignore_value, new lease))`: the
//! key, and so its create revision and the term, stay). A shorter one keeps the longer etcd
//! lease: the server's expiry is later than asked, the holder's deadline is not.
//!
//! # The fencing token
//!
//! The term is the key's create revision: the cluster's revision at the claim. etcd's revision
//! counts every change to the whole key space and never goes back — compaction keeps it, a
//! leader change keeps it, a restart keeps it (it is in the write-ahead log and the snapshots
//! of every member) — so each claim gets a higher term than every earlier one, across release
//! and expiry, cluster-wide. A renewal keeps the key (keep-alives do not touch it; a move to a
//! longer etcd lease is a put on the existing key), so the term stays.
//!
//! The limits, in plain words:
//!
//! - Terms strictly increase but are **not consecutive and do not start at 1** per name: every
//!   write to the cluster moves the revision.
//! - **Restoring the cluster from a backup** (`etcdctl snapshot restore`) takes the revision
//!   back to the backup's: terms issued since repeat. Fenced resources then refuse the new
//!   holders until the revision passes the old terms.
//! - **A lease that ended leaves no record**: once released or expired, the key is gone, and
//!   [`get`](lease_core::LeaseStore::get) answers `None` as for a name never claimed. The next
//!   claim still gets a higher term.
//!
//! # Names
//!
//! Names are kept byte for byte after the prefix (default [`DEFAULT_PREFIX`], `lease/`), up to
//! the contract's 255 bytes. Keep other writers out of the prefix: a value this store did not
//! write blocks its name (until its etcd lease, if any, ends), and `get` reports it as an error;
//! `force_release` clears it.
//!
//! # Errors
//!
//! Every operation is bounded by [`EtcdConfig::op_timeout`]. A request that got no answer in
//! time gives `Timeout`, temporary: its outcome is unknown (the engine reads a claim back with
//! `verify`, never claims blindly again). A member that cannot be reached, or has no leader,
//! gives `Unavailable`, temporary. Both name the endpoints by host and port. Any other refusal
//! gives `Backend` with the client's error as its source. A name or duration the store cannot
//! keep gives `InvalidName` or `InvalidTimings` before any I/O.
//!
//! etcd's "requested lease not found" — the etcd lease a request hung a key on ended (ran out,
//! or was revoked) before the request landed, so etcd refused it whole and nothing was written
//! — is `Backend`, temporary. A claim takes a new etcd lease and sends its transaction again at
//! once: a plain claim up to 3 times before answering that error, a counted claim within its
//! 16 tries (see *Counted leases*).
//!
//! # Cancel safety
//!
//! As the store contract says: a claim whose transaction was sent and whose answer was lost
//! may have taken effect. The store remembers the etcd lease it granted for the claim before
//! sending the transaction, so a `verify` that finds the key on that lease answers the time
//! left from before the lease started. A keep-alive stream whose exchange was cut short is
//! dropped, never reused, so no answer is ever taken for a later request's.
//!
//! # Partitions
//!
//! [`PartitionStore`](lease_core::backend::partitions::PartitionStore): one key per `(group,
//! partition)`, `<prefix>p/<group>\0<partition, 10 digits>`, value `part1;<owner>`. A group is
//! closed by a NUL byte (no name holds one), so group `a`'s keys never share a prefix with group
//! `a/b`'s.
//!
//! Each owner gets one etcd lease per TTL from a store object, its **session** (as etcd's own
//! `concurrency.Session`), and every partition it acquires hangs on it. The epoch is the key's
//! create revision, like a term: it goes up every time the partition changes hands — a free,
//! released or expired partition is a create — and stays while the owner holds it live.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `acquire_partition` | `Txn(if create_revision(key) == 0 then put(key, owner, session) else get(key))` and a keep-alive of the session, together (a new session: `LeaseGrant` first); for the owner's key on another etcd lease of its, a keep-alive of that lease, then `Txn(if value and lease unchanged then put(key, ignore_value, session))` | 1 (2 for an owner's first acquisition with a TTL; +2 for a move) |
//! | `renew_partitions` | a range read of the group and, together with it, a keep-alive of each etcd lease the last renewal through this store object found the owner's keys on (one: the session); then a keep-alive of any other etcd lease the read found | 1 (2 for the first renewal of a group through a store object), however many partitions |
//! | `release_partitions` | one transaction of nested transactions `if value(key) == owner then delete(key)`, half of [`EtcdConfig::max_txn_ops`] per transaction (etcd counts nested operations against the parent's limit), all sent together | 1 burst |
//! | `owners` | a range read of the group, then `LeaseTimeToLive` per etcd lease found, together | 2 |
//!
//! **What the session means.** A keep-alive renews a whole session, so a renewal extends every
//! live partition the owner holds on it, named or not (the group worker always renews all it
//! holds). A partition is reported renewed only if it was named, is the owner's, and its
//! session's keep-alive succeeded. A crashed owner's partitions end together. A partition on an
//! etcd lease shorter than the renewal's TTL (acquired with a shorter TTL) is left out of the
//! answer — it cannot be counted on for the longer TTL; acquiring it again with the new TTL
//! moves it onto that session, its epoch kept.
//!
//! **A lapse is a lapse, whenever etcd sweeps.** An etcd lease whose TTL ran out keeps its keys
//! until etcd's expiry sweep revokes it (every 500 ms, later on a busy server), and no
//! transaction compare can tell such a key from a live one. So an acquisition keeps the epoch
//! only on proof that the owner's etcd lease is live: its session's keep-alive, sent with the
//! transaction, was accepted (etcd refuses a keep-alive of an expired lease even before the
//! sweep), or — for a key on another etcd lease of the owner's (another TTL, another store
//! object) — a keep-alive of that lease was accepted and the move onto the session answered
//! within the TTL it gave (2 more round trips). Otherwise the acquisition looks again, and
//! the owner gets a new epoch once the sweep deleted the key; a move that answered too late
//! is taken back (the key deleted). A renewal moving a lease or permit onto a longer etcd lease
//! follows the same rule, so an expired lease is never revived.
//!
//! # Counted leases
//!
//! The permit operations of [`LeaseStore`](lease_core::LeaseStore) (capability `permits: true`,
//! the rules of [`lease_core::backend::permits`]): one key per permit of a counted name,
//! `<prefix>c/<name>\0<permit, 10 digits>`, apart from the name's lease key, value
//! `lease1;<holder>;<instance>`, each hung on an etcd lease granted for its claim, so etcd
//! deletes it when the TTL runs out by the server's clock (and released permits are deleted):
//! `permits` lists the live ones only. **The term is the permit key's create revision**, the
//! cluster's revision at the claim: it strictly increases across the cluster, so per name across
//! all its permits, and never repeats after a release or an expiry.
//!
//! A claim reads the name's permit keys (a range read, sent together with the `LeaseGrant` of
//! the claim's etcd lease) and answers "full" (`None`) when the holder holds one or N or more are
//! live (those above N too, left from a larger N); otherwise it sends `Txn(if
//! mod_revision(every key under the name's permit prefix) < read revision + 1 and
//! create_revision(key of the lowest free permit below N) == 0 then put(key, holder, etcd
//! lease) else range read)`. **Counting and taking are one transaction**: any permit created or
//! rewritten after the read fails it, and the failed transaction carries the new read to decide
//! again on (at most 16 times, then a temporary error; every failure means another claim or
//! release landed).
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `claim_permit` | `LeaseGrant` and the range read together, then the transaction | 2 (+ 1 per transaction lost to a racing claim) |
//! | `renew_permit` | a read of the permit's key, then a keep-alive of its etcd lease (a move onto a longer etcd lease when the server's TTL is shorter than asked) | 2 |
//! | `release_permit` | a read of the permit's key, then `Txn(if mod_revision(key) == read then delete(key))`; the etcd lease revoked in the background | 2 |
//! | `verify_permit` | a range read, then `LeaseTimeToLive` of the holder's etcd lease | 2 |
//! | `permits` | a range read, then `LeaseTimeToLive` of every etcd lease found, together | 2 |
//!
//! A permit key created or deleted (a claim, a release, an expiry) hints the name's lease topic
//! through the watch (see *Hints*).
//!
//! # Membership
//!
//! [`MembershipStore`](lease_core::backend::membership::MembershipStore): one key per `(service,
//! node)`, `<prefix>m/<service>\0<node>`, value `member1`, the address and the groups on separate
//! lines. A heartbeat grants an etcd lease and puts the record on it (2 round trips), then revokes
//! the previous record's etcd lease in the background. `members` is a range read and a
//! `LeaseTimeToLive` per member, together (2 round trips); `leave` deletes the key (1).
//!
//! # Capabilities
//!
//! Leases with expiry, fencing (`consecutive_terms: false`, `keeps_ended_records: false`) and force
//! release; counted leases (permits); partitions and membership (batch renewal in at most 2
//! exchanges one after the other; declared as `BatchRenew::Fixed { round_trips: 3 }`, since
//! HTTP/2's control frames — the PING acknowledgements gRPC servers ask for, window updates — can
//! add one more on the wire, where the suite's proxy counts them: 1–3 measured for 10 and 1,000
//! partitions). No scheduler slots (see above). Watch: hints from an etcd watch (below).
//!
//! # Hints
//!
//! [`LeaseStore::changes`](lease_core::LeaseStore::changes) answers hints from one etcd watch
//! on the store's prefix (`Watch(prefix, prev_kv)`), opened on the first wait on the store's
//! client (or [`EtcdStore::with_watch_client`]'s) and kept until the last clone of the store is
//! dropped. A lease key created or deleted — a claim, a release, a forced release, or **etcd
//! deleting the key when its etcd lease ran out**, so an expiry is hinted too (within etcd's
//! 500 ms expiry sweep) — hints the name; a partition key created or deleted, and a member key
//! created or deleted, hint the group (a member's: each group in its record). Renewals
//! (keep-alives, or a put moving the key onto a longer etcd lease), heartbeats and an owner's
//! own re-acquire wake nobody. Measured on etcd 3.4, one member: another store's release
//! wakes a waiter about 10 ms after the release was sent.
//!
//! The watch is run by [`lease_core::backend::listen`]: it asks etcd for a progress report
//! every 5 s and takes a watch that did not answer the last one, one etcd canceled
//! (compaction) or a failed stream as lost; while it is lost the hints say so
//! (`is_connected() == false`) and waiters keep their polling pace; it comes back with a
//! jittered back-off (0.1 s doubling to 5 s), waking every waiter. Refused credentials or
//! permissions stop it with one warning. Limits: each store's watch receives every change
//! under the prefix (member heartbeats included), so many stores on one busy prefix cost etcd
//! one event stream each; a hint is never the basis of a decision.
//!
//! # Servers
//!
//! etcd 3.4 and newer (the v3 gRPC API; nested transactions and `ignore_value` need 3.3).
//! Tested on 3.4.23, one member.
//!
//! # The crate's files
//!
//! `config.rs` ([`EtcdConfig`]), `error.rs` (etcd-client errors as lease errors), `store.rs`
//! ([`EtcdStore`]: connect, with_client, grants, keep-alives, reads and transactions),
//! `known_leases.rs` (the memory of this store's own claims), `sessions.rs` (the owners'
//! partition sessions), `hint_state.rs` (the hub and the watch's state the store holds),
//! `leases.rs` (`LeaseStore`), `permits.rs` (its permit operations), `hints.rs` (the watch
//! behind `changes`), `partitions.rs` (`PartitionStore`), `membership.rs`
//! (`MembershipStore`), and `wire/` (`keys.rs`: names as etcd keys; `codec.rs`: the records
//! as values). No `slots.rs`: etcd offers no scheduler slots here (see above).

mod config;
mod error;
mod hint_state;
mod hints;
mod known_leases;
mod leases;
mod membership;
mod partitions;
mod permits;
mod sessions;
mod store;
#[cfg(test)]
mod tests;
mod url_params;
mod wire;

pub use config::{DEFAULT_MAX_TXN_OPS, DEFAULT_OP_TIMEOUT, DEFAULT_PREFIX, EtcdConfig};
pub use error::classify;
pub use store::EtcdStore;
pub use url_params::EtcdUrlParams;

/// The etcd client crate this store is built on, for [`EtcdStore::with_client`].
pub use etcd_client;
