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
//! whose value is `lease2;<TTL in ms>;<holder token>;<instance>` (the TTL the term counts; an
//! earlier version wrote `lease1;<holder token>;<instance>`, still read). A key that exists is a live lease; a key
//! that does not is free. Every key claimed through a store object hangs on that store
//! object's **session** (see *Sessions* below): one etcd lease per TTL, so etcd
//! deletes the key when the session ends, and the store deletes it when its own term ends first.
//!
//! | operation | what is sent | round trips |
//! |---|---|---|
//! | `claim` | `Txn(if create_revision(key) == 0 then put(key, value, lease = session) else get(key))` and a keep-alive of the session, together: succeeded and the session kept alive → claimed, term = the transaction's revision (the key's create revision); failed → held | 1 (2 on the store object's first claim of a TTL, or after its session was lost: `LeaseGrant` first) |
//! | `renew` | a keep-alive of the session and a read of the key (still this term's, on the session?), together — shared by every renewal of the session's names that joins it | 1, shared (2 when this store object did not make the claim: a read first, then a keep-alive of the key's etcd lease) |
//! | `release` | `Txn(if create_revision(key) == term then delete(key))`; the session is not revoked | 1 (2 when this store object did not make the claim: a read first) |
//! | `verify` | a read of the key (a claim of unknown outcome: a keep-alive of the session with it) | 1 (2 when this store object did not make the claim: `LeaseTimeToLive` for the time left) |
//! | `get` | a read of the key | as `verify` |
//! | `force_release` | `DeleteRange(key, prev_kv)`; the holder's etcd lease is not revoked (other names hang on it): its next renewal reads the key and finds it gone | 1 |
//!
//! Every read is linearizable (etcd's default): it goes through the leader's quorum, so no
//! member answers from a stale copy.
//!
//! # Expiry: the server's clock
//!
//! A lease ends when its session (etcd lease) ends: the leader counts the TTL from the grant or the last
//! keep-alive it took, deletes the key when it runs out, and refuses a keep-alive of an expired
//! lease even before the key is gone — an expired lease is never revived. No process clock
//! makes a lease live: live means the key exists. (A name's own deadline can only end it
//! sooner, while its session lives on: see *Sessions*.)
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
//! overstates. `verify` and `get` answer the same way for a claim this store object made. For
//! another's, `verify` asks etcd (`LeaseTimeToLive`), which answers whole seconds rounded down
//! — the expiry lies up to a second later. `get`, which an observer's watch judges releases
//! against (a key that vanished before the time left last read was released, after it
//! expired), must answer the *name's* time left, and the key hangs on its holder's session,
//! which may be longer than the name's TTL and kept alive by its other names while the
//! holder's store deletes the key at the name's own deadline (see *Sessions*). So a claim
//! writes its TTL into the value, this store's watch (see *Hints*) remembers when it saw the
//! last put of each lease key, and `get` answers the least of: that TTL counted from when the
//! watch saw the put that wrote the key as read (etcd took the put before; the holder counts
//! from before it sent it), while that has not run out; else the session's whole seconds less
//! what the session's TTL exceeds the name's, at most the TTL; and in any case the session's
//! whole seconds plus etcd's second, less that excess (the key never outlives its session).
//! The holder's store deletes an unrenewed key a round trip after the name's deadline, so an
//! observer sees an expiry after the time it counted, and a release in the name's last second
//! before it. Limits: renewals write nothing, so a name renewed since the put and then left
//! unrenewed while its session's other names keep the session alive is answered the
//! session's time left, and its expiry may be reported as a release; a key moved onto a longer
//! session keeps its value and counts its older TTL (early: a release may be reported as an
//! expiry); an observer whose watch lags the put by more than a round trip beyond the delete
//! may still report an expiry as a release.
//!
//! A renewal asking a longer TTL than the name's session has moves the key onto the store's
//! session of that TTL (`Txn(if create_revision(key) == term and lease(key) == old then put(key,
//! ignore_value, new session))`: the key, and so its create revision and the term, stay). A
//! shorter one keeps the longer session: the server's expiry is later than asked, the holder's
//! deadline is not.
//!
//! # Sessions
//!
//! A store object keeps, for each TTL (in etcd's whole seconds), one etcd lease its claims hang
//! on, whatever their holder token (the coordinator mints one per claim), as etcd's own
//! `concurrency.Session` does for a client: granted on the first claim of that TTL, kept while
//! it lives and carries fewer than 10,000 names (the next claim then opens another). So a claim is one transaction, and renewing every name of a session is one
//! keep-alive. Every keep-alive of a session is a **flight**: the keep-alive, one read of the
//! keys of the names that asked (read-only transactions of
//! [`max_txn_ops`](EtcdConfig::max_txn_ops) gets each, all sent at once) and the deletes of the
//! keys whose term ended (below), sent together. A claim or renewal joins the session's flight
//! that has not left yet, and at most one flight per session is in the air: concurrent renewals
//! share one round trip. Each name's answer is still its own: a renewal answers `Some` only when
//! the keep-alive was accepted, the key is still its term's (same create revision) on the
//! session, and the term's own deadline had not passed — a key released, forced out or taken
//! by another since answers `None`, though the session lives.
//!
//! A claim's keep-alive goes out with its transaction, after the claim's start: the session then
//! lives at least its TTL from before the claim was sent, which is what the holder's deadline
//! counts on. A claim does not attach to a session whose last proof (a stamp before its last
//! accepted keep-alive or its grant, plus its TTL) is within a second (or a quarter of the TTL)
//! of running out: it grants a new one. A claim that landed on a session its keep-alive found
//! gone deletes the key it made (nothing is held) and claims again on a new session, up to 3
//! times before a temporary error.
//!
//! **What a session's loss means.** A session ends when no keep-alive reached etcd for its TTL
//! (the holder's process stopped, or was cut off from etcd) or someone revoked it; etcd then
//! deletes all its keys at once: **all its names end together**. A keep-alive answering TTL ≤ 0
//! marks the session lost; every term on it answers `None` to renew and verify, and the next
//! claim grants a new session. **Each name's own deadline is honoured**: its term
//! ends when no claim or renewal of it succeeded within its TTL (counted from before the
//! request was sent), even while its siblings keep the session alive: the session's sweeper (a
//! task per session that carries names, asleep until the earliest of their deadlines) deletes
//! its key then (`if create_revision == term`), as does any flight after it, and a renewal of it
//! answers `None`. The delete counts the TTL from when the answer of the claim or last renewal
//! arrived, a round trip after the holder's deadline, so that another store's observer, which
//! counts it from when its watch saw the put, sees an expiry after the deadline it counts (see
//! *Expiry: the server's clock*). Otherwise a name nobody renews any more would stay held as long as the
//! session lives.
//!
//! **A release that fails** (no answer, no connection) leaves a term that ended but whose key
//! may still hang on the living session: the store remembers it and deletes it at each of the
//! session's flights until etcd answers. A claim of unknown outcome the engine never adopts is
//! deleted likewise once its deadline passed (its create revision read first). Limits: the
//! deletes of failed releases and of unknown claims ride the session's next flight (or the
//! sweeper's next wake) — if none comes, the session, and the key, end by their TTL; a delete
//! that fails keeps the name held until one succeeds or the session ends; and a renewal through
//! another store object of a claim this one made keeps this one's whole session alive.
//!
//! [`EtcdConfig::session_slack`] (off by default) grants sessions longer than the TTL asked, so
//! a claim within the slack of the session's last keep-alive sends none; crashed holders' names
//! then free up to the slack later.
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
//! may have taken effect. The store remembers the claim (its session, the stamp before it was
//! sent) before sending the transaction, so a `verify` reads it back: a keep-alive of the
//! session and a read of the key together, adopting it only when the session lives and the key
//! is this holder's on it, and answering the time left from before the claim was sent. A keep-alive stream whose exchange was cut short is
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
//! `holder_sessions.rs` (the holders' sessions and their flights),
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
mod holder_sessions;
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
