//! Leases on Redis: one Lua script per operation, `TIME` as the clock.
//!
//! [`RedisStore`] implements [`lease_core::LeaseStore`] on the connection your service already
//! has — a `redis::aio::ConnectionManager`, or any `redis::aio::ConnectionLike + Clone + Send +
//! Sync` such as a cluster connection — so the `lease_core::Coordinator`, terms, `run_elected`
//! and the observer work on Redis.
//!
//! ```no_run
//! use std::time::Duration;
//! use lease_core::{Coordinator, LeaseStore, Timings};
//! use lease_redis::{RedisConfig, RedisStore};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Your own connection …
//! let client = redis::Client::open("redis://127.0.0.1:6379")?;
//! let config = RedisConfig::new().key_prefix("billing:lease:");
//! let manager =
//!     redis::aio::ConnectionManager::new_with_config(client, config.manager_config()).await?;
//! let store = RedisStore::with_client(manager, config)?;
//! // … or `RedisStore::connect("redis://127.0.0.1:6379", RedisConfig::from_env()?).await?`.
//!
//! // Fails fast when the server could lose lease records (see "Durability"); the store
//! // would otherwise run the same check before its first claim.
//! store.available().await?;
//!
//! let leases = Coordinator::builder(store)
//!     .instance("worker-1")
//!     .timings(Timings::from_lease(Duration::from_secs(15))?)
//!     .build()?;
//! let term = leases.try_acquire("invoice-run").await?;
//! // Fence downstream writes with `term.token()`.
//! term.resign().await?;
//! # Ok(()) }
//! ```
//!
//! # Operations
//!
//! Each operation is **one Lua script, one round trip**: `EVALSHA` with the script's SHA-1,
//! falling back to `EVAL` (a second round trip, once per script and server) when the server
//! answers `NOSCRIPT`; [`available`](lease_core::LeaseStore::available) loads every script so
//! even the first operations take one round trip. Every script that judges time reads "now"
//! from `redis.call('TIME')`, the server's clock in milliseconds: no process clock ever decides
//! whether a lease is live. The scheduler slot operations are in *Scheduler slots* below, the
//! partition and membership operations in *Partitions* and *Membership*.
//!
//! | operation | script does, atomically | reply |
//! |---|---|---|
//! | `claim` | free (missing, or expiry ≤ now)? term + 1, set holder, instance, expiry = now + ttl | `{term, ttl_ms}` or nil |
//! | `renew` | live and holder matches? expiry = now + ttl | `{term, ttl_ms}` or nil |
//! | `renew_many` | per name, as `renew`, up to 1,000 names a call (one `TIME`), the calls of a batch in one pipeline | per name: term, 0 (lost) or -1 (term not a number) |
//! | `verify` | live and holder matches? (writes nothing) | `{term, remaining_ms}` or nil |
//! | `release` | live and holder matches? expiry = now, term kept | 1 or 0 |
//! | `force_release` | live? expiry = now, term kept | 1 or 0 |
//! | `get` | read (writes nothing) | `{instance, term, live, remaining_ms}` or nil |
//!
//! A claim never extends a live lease, not even for its own holder; an expired lease is never
//! revived by renew, verify or release.
//!
//! # Scheduler slots
//!
//! [`RedisStore`] implements [`lease_core::backend::slots::SlotStore`] (capability `slots: true`)
//! with the rules of the [`lease_core::backend::slots`] module. A job's name is a lease name; its
//! instants (ms since the Unix epoch) are three more fields of the same hash: `slot_ms` (last),
//! `unfinished_ms` and `rerun_ms`, each absent until first set. One Lua script per operation, all
//! in `src/wire/scripts/`, each reading "now" from `TIME` (except `last_slot`, which judges
//! nothing):
//!
//! | operation | script does, atomically | round trips |
//! |---|---|---|
//! | `claim_slot` | lease live? `held`. instant ≤ `slot_ms`? `taken`. instant > now? `early`. Else term + 1, holder, instance, expiry = now + ttl, `slot_ms` = `unfinished_ms` = instant (`rerun_ms` kept); reply the previous `unfinished_ms` as superseded | 1 |
//! | `finish_slot` | held = live under this holder. `slot_ms` = instant? recorded; `HDEL unfinished_ms` if it is the instant; held and instant < passed ≤ now? `slot_ms` = passed. Held? expiry = now (term kept) | 1 |
//! | `unfinished` | per name: `unfinished_ms` set, = `slot_ms`, ≠ `rerun_ms`, lease not live? reply it (writes nothing) | 1 for all names |
//! | `claim_rerun` | `unfinished_ms` = `slot_ms` = instant, `rerun_ms` ≠ instant, lease not live? term + 1, holder, instance, expiry = now + ttl, `rerun_ms` = instant | 1 |
//! | `last_slot` | read the three fields (nil when the name has no record) | 1 |
//!
//! The SQL protocol's claim reads the row, then writes it with the term compared, so that of
//! several replicas that read the same row only one write matches. A Lua script runs atomically, so
//! here the read and the write are **one script, one round trip**, and nothing can change the
//! record between them: the first claim to run wins, the others find the lease live and get
//! [`SlotClaim::Held`](lease_core::backend::slots::SlotClaim::Held). `claim_slot` and `claim_rerun`
//! make terms as `claim` does ([`TermScheme`] included), so slot rounds are fenced like any lease.
//!
//! Instants are stored as decimal strings and compared as such (sign, length, digits), so every
//! `i64` is exact, even beyond the 2⁵³ a Lua number can hold.
//!
//! **`unfinished` for many names:** one script over all the names' keys would be one command,
//! but Redis Cluster refuses a script whose keys lie in different hash slots (and every name is
//! its own hash tag). So `unfinished` sends one small read-only script call per name, all in
//! **one pipeline: one round trip** on a single server (or a `ConnectionManager` /
//! `MultiplexedConnection` to it), one `EVALSHA` per name on the server; two round trips when
//! the server had not cached the script (the calls answered `NOSCRIPT` are sent again with
//! `EVAL`). Each name's answer is read atomically; the names are not read at one instant, which
//! the rules do not need (`claim_rerun` checks again, atomically). The `redis` crate's cluster
//! connection refuses a pipeline across hash slots (`CROSSSLOT`); the store then sends the calls
//! one per name, concurrently: one request per name, about one round trip of latency.
//!
//! Deleting a record ([`RedisStore::forget`], [`RedisStore::purge_expired`]) forgets its
//! instants too: the job then counts as never run.
//!
//! # Partitions
//!
//! [`RedisStore`] implements [`lease_core::backend::partitions::PartitionStore`] (capability
//! `partitions: true`) with the rules of the [`lease_core::backend::partitions`] module. A group's
//! partition leases are **one hash**, `<prefix>{<group>}:partitions`, with one field per partition:
//! the field is the partition number in decimal, its value `<epoch> <expires_at_ms> <owner>`
//! (server time, Unix milliseconds; the owner last, so it may hold spaces), e.g. `7 1732890000123
//! node-a@0f3c…`. One Lua script per operation, each reading "now" from `TIME`:
//!
//! | operation | script does, atomically | round trips |
//! |---|---|---|
//! | `acquire_partition` | live under another owner? nil. Live under this owner? epoch kept. Else (never seen, released, expired) epoch + 1 (first 1; see [`TermScheme`]). Expiry = now + ttl | 1 |
//! | `renew_partitions` | for each partition named (once each): live under this owner? expiry = now + ttl, one expiry for all; epoch kept | 1, however many (up to 10,000) |
//! | `release_partitions` | for each partition named: live under this owner? expiry = now, record and epoch kept | 1, however many |
//! | `owners` | `HGETALL`, keep the live ones (sorted by partition in the store) | 1 |
//!
//! A renewal or release sends every partition number as an argument of one `EVALSHA` on the group's
//! one key ([`BatchRenew::Fixed`](lease_core::backend::partitions::BatchRenew::Fixed) with one
//! round trip; two only when the server had not cached the script). The script reads and checks
//! every record first (`HMGET` in chunks of 1,000, Lua's `unpack` limit being about 8,000 values)
//! and only then writes (`HSET` in chunks), so a malformed record fails the whole call and changes
//! nothing. An empty slice does no I/O. Redis runs nothing else while a script runs: a renewal of
//! 1,000 partitions holds the server for about 2.5 ms, and `owners` of a 1,000-partition group
//! about 3 ms (server time from `INFO commandstats` on a loaded 2-vCPU test machine; about 30 ms
//! each for 10,000 partitions, the most one call takes), so keep groups to thousands of partitions,
//! not millions.
//!
//! Epochs are fencing tokens and are made exactly as lease terms are: [`TermScheme`] applies to
//! them too (with [`TermScheme::ClockFloor`] an epoch that goes up becomes at least the server's
//! clock in microseconds, so a lost group hash does not bring epochs back to 1), and they are
//! exactly as durable as the group's hash (see *Durability*). Released and expired partitions
//! keep their record and epoch for as long as the hash exists: **no key TTL is ever set on it**.
//! A `PEXPIRE` "far beyond the lease" would drop the epochs of a group left idle that long, and
//! under [`TermScheme::Counter`] the next owner would get epoch 1 again, below the epoch a
//! process that stalled for that long may still present to a fenced resource; on a server with
//! a `volatile-*` eviction policy it would also make the group evictable. Delete a retired
//! group on purpose with [`RedisStore::forget_group`] instead.
//!
//! **Redis Cluster:** a group's partitions share one key, so every operation, 1,000 partitions
//! or one, is one slot.
//!
//! # Membership
//!
//! [`RedisStore`] implements [`lease_core::backend::membership::MembershipStore`] (capability
//! `membership: true`). A service's members are **two keys under the service's hash tag**:
//!
//! - `<prefix>{<service>}:members`, a hash: node id → `<address>\n<groups>` (the groups one per
//!   line, as [`lease_core::backend::encode_groups`] writes them; addresses and names hold no
//!   control characters);
//! - `<prefix>{<service>}:members:expiry`, a sorted set: node id scored by its expiry (server
//!   time, Unix milliseconds).
//!
//! | operation | script does, atomically | round trips |
//! |---|---|---|
//! | `heartbeat` | drop up to 100 records of the service that expired by the server's clock; replace the node's record; expiry = now + ttl | 1 |
//! | `members` | node ids scored later than now (`ZRANGEBYSCORE`), their records (`HMGET`); writes nothing; sorted by node id (bytes) in the store | 1 |
//! | `leave` | delete the node's record (both keys); reply whether it was live | 1 |
//!
//! `members` never scans the keyspace, and reads only the live nodes of one service. Expired
//! records stay until a heartbeat of the same service drops them (at most 100 per heartbeat,
//! which bounds the script), so a service's keys hold its live nodes plus at most the nodes that
//! stopped since; a service whose every node stopped keeps its last records (a few dozen bytes
//! each) until one heartbeats again or someone deletes the two keys. Member records carry no
//! epoch, so losing them is harmless: nodes reappear at their next heartbeat.
//!
//! **Redis Cluster:** the two keys share the service's hash tag, so each script is one slot.
//!
//! # Counted leases
//!
//! [`RedisStore`] implements the permit operations of [`lease_core::LeaseStore`] (capability
//! `permits: true`) with the rules of the [`lease_core::backend::permits`] module. A counted name's
//! permits are one hash, `<prefix>{<name>}:permits`, apart from the name's lease record (so
//! holding a name plainly and by permit are two things): the field `term` holds the greatest
//! term issued for the name across its permits, and one field per permit, its index in decimal,
//! holds `<term> <expires_at_ms> <holder> <instance>`. One Lua script per operation, each one
//! round trip reading "now" from `TIME` (`replica_acks` applies as to every write):
//!
//! | operation | script does, atomically | round trips |
//! |---|---|---|
//! | `claim_permit` | count the permits live by the server's clock; fewer than N and none under this holder? the lowest permit below N not live gets term = greatest + 1 (`TermScheme` applies), holder, instance, expiry = now + ttl | 1 |
//! | `renew_permit` | the permit live under this holder? expiry = now + ttl, term kept | 1 |
//! | `release_permit` | the permit live under this holder? expiry = now, record and `term` kept | 1 |
//! | `verify_permit` | the permit live under this holder, found by its token (writes nothing) | 1 |
//! | `permits` | every permit record, live or not (writes nothing) | 1 |
//!
//! Counting and taking are one script, so racing claims never grant the (N+1)-th; a claim reads the
//! whole hash, at most [`MAX_PERMITS`](lease_core::backend::permits::MAX_PERMITS) fields and the
//! term. The hash never carries a key TTL: its terms are exactly as durable as lease records (see
//! *Durability*). `claim_permit` and `release_permit` publish `permits <key>` when they change
//! hands, which wakes the name's waiters (see *Hints*).
//!
//! # Hints
//!
//! [`LeaseStore::changes`](lease_core::LeaseStore::changes) answers hints that a name, a
//! group's partitions or a job's slots may have changed hands, so a waiter claims at once
//! instead of at its next retry. The scripts that change hands — `claim`, `release`,
//! `force_release`, `acquire_partition` (when the epoch goes up), `release_partitions`,
//! `claim_slot`, `finish_slot`, `claim_rerun`, `claim_permit` and `release_permit` — `PUBLISH`
//! `<kind> <key>` on the channel
//! `<prefix>changes` (e.g. `lease:changes`) inside the script, only when they changed the
//! record (`scripts/notify.lua`, joined to them at build time); renewals, reads and failed
//! claims publish nothing. **The lease scripts (`claim`, `release`, `force_release`) publish
//! only while someone waits on the name:** every store whose waiters (a campaign, an
//! `acquire`, an observer's watch, any subscriber of the name's
//! [`Topic::Lease`](lease_core::backend::notify::Topic::Lease)) wait on a name keeps the
//! name's mark `<prefix>{<name>}:waiting` set from its subscriber connection (`SET … PX 15000`
//! at once, again every 5 s while anyone waits, on every resubscription before it says it is
//! connected), and the scripts check it (`EXISTS`, `scripts/waited.lua`) before they publish.
//! So a claim and release nobody waits for — the common cycle — cost no `PUBLISH` and wake no
//! subscriber; a hand-over to a waiter costs one mark per waiting store per 5 s. The mark
//! reaches the server about a round trip after the waiter subscribed: a change in that window
//! is not hinted, and the waiter finds it at the holder's expiry or its poll, as with any lost
//! hint. A failed mark write ends the subscriber's session (hints disconnected, waiters poll)
//! until a new one has set the marks, so grant the store's user `SET` on its prefix. Membership changes (`heartbeat`, `leave`) publish nothing either: a
//! group worker finds a member that joined or left at its next poll of the members
//! (`lease_conformance::hints::member_changes_wake_the_group` is not run on Redis for that
//! reason). The store's own subscriber connection turns each message into a hint
//! ([`RedisStore::connect`] opens it from the URL; a store built with
//! [`RedisStore::with_client`] needs [`RedisStore::with_listener`] and a `redis::Client`,
//! otherwise its hints cover only its own operations and say so with
//! [`Wakeups::is_connected`](lease_core::backend::notify::Wakeups::is_connected) `false`).
//!
//! Guarantees and limits: **a hint decides nothing** — a woken waiter claims through the
//! scripts as usual. Pub/sub is at-most-once: a hint published while the subscriber is
//! reconnecting is lost, which is why the hints say they are disconnected from the moment the
//! connection is lost (a dropped socket at once, a silent one at the next ping, every 5 s,
//! within the operation timeout) until it has subscribed again (back-off from 100 ms to 5 s),
//! and every waiter is woken when it is back. An expiry publishes nothing (no script runs):
//! waiters wake at the expiry by their own clock. The subscriber is a RESP3 connection (Redis
//! 6 or later; on an older server the listener stops with a warning and hints stay local),
//! named `lease-hints-<hex>` ([`RedisStore::listener_name`]); it ends when the last clone of
//! the store is dropped. `capabilities().watch` is `true` with a subscriber connection. The
//! cost in the scripts is one `PUBLISH` per change of hands (of a lease, only while someone
//! waits on it; one `EXISTS` otherwise), nothing per renewal. **Redis
//! Cluster:** `PUBLISH` is broadcast to every node, so a subscriber on any node hears every
//! hint.
//!
//! **The user must be allowed to publish.** The scripts publish with `redis.pcall`, so that a
//! refused `PUBLISH` never fails a claim or release that took effect; but then its hint is lost,
//! and Redis 7 gives new ACL users no channel rights (`acl-pubsub-default resetchannels`). The
//! store's start-up check ([`available`](lease_core::LeaseStore::available), or the one before
//! its first claim) publishes once on the channel to find out: refused, it logs a warning, once,
//! and its hints say they are disconnected (so its waiters keep their polling pace, as they
//! must where no process of the same user can publish). A store of another process cannot know
//! that a publisher lacks the right: where its own subscriber is connected, its waiters then
//! learn of that publisher's releases only at their next poll, which is slower with hints
//! connected. So grant every user of the stores the channel and the commands (e.g. `ACL
//! SETUSER <user> &<prefix>changes +publish +subscribe`, and `&<prefix>replica-sync` with
//! [`RedisConfig::replica_acks`]).
//!
//! # Keys and data layout
//!
//! One hash per name, at `<prefix>{<name>}` (prefix `lease:` unless
//! [`RedisConfig::key_prefix`] says otherwise), with the fields `holder` (the holder token, 32
//! hex digits), `instance`, `term` and `expires_at_ms` (server time, Unix milliseconds), and,
//! for scheduler jobs, `slot_ms`, `unfinished_ms` and `rerun_ms` (see *Scheduler slots*).
//!
//! | key | type | holds |
//! |---|---|---|
//! | `<prefix>{<name>}` | hash | one lease (and its scheduler slot instants) |
//! | `<prefix>{<group>}:partitions` | hash | every partition lease of a group (see *Partitions*) |
//! | `<prefix>{<service>}:members` | hash | a service's member records (see *Membership*) |
//! | `<prefix>{<service>}:members:expiry` | sorted set | their expiries |
//! | `<prefix>{<name>}:permits` | hash | a counted name's permits and its greatest term (see *Counted leases*) |
//! | `<prefix>{<name>}:waiting` | string, 15 s TTL | the mark that someone waits on the name (see *Hints*); holds nothing else |
//!
//! Lease names, groups and services are escaped the same way (below). A lease key ends with the
//! `}` the store adds and the others never do, so no group or service key is ever taken for a
//! lease record, whatever the names (a lease, a group and a service may even share a name).
//!
//! **Redis Cluster:** the braces make the whole name the key's hash tag, so each operation touches
//! one slot (a lease script touches the record and the name's waiters' mark, under one tag). Names may hold `{` and `}`: the name is escaped inside the tag (`%` →
//! `%25`, `{` → `%7B`, `}` → `%7D`, nothing else changes), so the tag always ends at the closing
//! brace the store adds, and the prefix may not hold braces ([`RedisConfig::validate`]). For
//! example `orders{eu}` is stored at `lease:{orders%7Beu%7D}`, and a group of that name at
//! `lease:{orders%7Beu%7D}:partitions`. All the keys of a group, or of a service, share its tag, so
//! every partition and membership script is one slot. The one operation on many names,
//! [`SlotStore::unfinished`](lease_core::backend::slots::SlotStore::unfinished), sends one
//! single-key script per name (see *Scheduler slots*).
//!
//! Names, groups and services are at most [`MAX_NAME_BYTES`] (1024) bytes, checked with the
//! other name rules before any I/O (owners as instance labels, at most 128 bytes; node ids at
//! most 111, so that a group worker's owner id made of one fits).
//!
//! # Durability: when terms could repeat
//!
//! The term lives in the record, which never carries a key TTL (no `EXPIRE`/`PEXPIRE`): release
//! and expiry keep it, so terms keep growing. **Terms are exactly as durable as the records**,
//! and partition epochs exactly as durable as their group's hash, which never carries a key TTL
//! either: everything below about terms holds for epochs, with "the group's hash" for "the
//! record".
//! With the default [`TermScheme::Counter`], a name's term repeats — a fenced resource could
//! accept a stale holder — when its record is lost, that is when:
//!
//! - Redis restarts without AOF (`appendonly no`; RDB snapshots lose everything since the last
//!   one), or with `appendfsync everysec` when the host (not only the process) crashes and the
//!   last second of writes is lost;
//! - a failover promotes an asynchronous replica that had not received the last claims (Redis
//!   replication is asynchronous; `WAIT` is used only with [`RedisConfig::replica_acks`], which
//!   closes this case while the failover promotes a replica that acknowledged: see
//!   `tests/failover.rs`, which shows the repeated term without it and none with it);
//! - memory eviction removes records (`maxmemory-policy allkeys-*`; `noeviction` and the
//!   `volatile-*` policies never evict them, as they carry no TTL);
//! - someone deletes them (`DEL`, `FLUSHDB`, [`RedisStore::purge_expired`],
//!   [`RedisStore::forget`]).
//!
//! [`available`](lease_core::LeaseStore::available) therefore checks `CONFIG GET appendonly`
//! (must be `yes`), `appendfsync` (must be `always`: Redis's default `everysec` loses up to a
//! second of acknowledged claims when the host crashes) and `maxmemory-policy` (must not be
//! `allkeys-*`) and **fails with `Unsupported`** when a check fails or cannot be made (CONFIG
//! disabled or renamed), unless you opt in with [`RedisConfig::allow_volatile`] (every risk;
//! it then logs a warning), accept `appendfsync everysec` alone with
//! [`RedisConfig::allow_fsync_everysec`] (a warning too), or choose [`TermScheme::ClockFloor`].
//! It cannot see replication lag.
//!
//! **The check is never skipped:** a store runs it itself, once, before its first claim, acquire or
//! heartbeat, however it was built ([`RedisStore::connect`], [`RedisStore::with_client`]), so a
//! coordinator, group worker or scheduler over a volatile server refuses to start work (the
//! operation fails with the check's `Unsupported` error) instead of handing out terms that a
//! restart can repeat. Calling `available()` at start-up fails earlier, and spares the first claim
//! the check's round trips.
//!
//! [`TermScheme::ClockFloor`] makes a claim's term (and an acquire's new epoch) the larger of the
//! stored value + 1 and the server's clock in microseconds, so a lost record does not restart terms
//! at 1: the next term is still higher than every earlier term of the name **unless the clock of
//! the Redis serving the next claim reads no later than the clock of the Redis that issued the last
//! lost term did** (a clock stepped back, or a failover to a host whose clock is behind by more
//! than the time between the lost claim and the next one). Its terms are not consecutive and start
//! near 1.8 × 10¹⁵ (they stay below 2⁵³, exact in Lua's numbers, until the year 2255), which
//! departs from the contract's "starts at 1, +1 per claim" — that is why it is not the default.
//!
//! Expiry is judged by the server's clock: if that clock jumps forward (a step by NTP, a failover
//! to a host whose clock is ahead), live leases end early and another holder may claim while the
//! old one still works; keep server clocks disciplined (slewed, not stepped).
//!
//! # Clean-up of names no longer used
//!
//! Lease records and partition records are never removed by the store itself (member records
//! are: see *Membership*): a record is about 150 bytes plus the name (about 60 more with slot
//! instants), so a million retired names cost about 200 MB; a partition costs about 30 bytes
//! plus its owner id. Delete a retired group with [`RedisStore::forget_group`] (all its leases
//! ended long enough ago, re-checked atomically; one round trip); it then counts as never
//! seen, and under [`TermScheme::Counter`] its epochs start again at 1, with the same warning as
//! for names below. [`RedisStore::purge_expired`] never touches group or service keys, nor a
//! counted name's `:permits` hash (at most 1,024 permits of about 80 bytes plus the instance
//! label each): delete a retired one by hand with `DEL`, under the same warning, since its terms
//! start again at 1. Remove retired names on purpose with
//! [`RedisStore::forget`] (one name) or [`RedisStore::purge_expired`] (every record under the
//! prefix whose lease ended long enough ago; `SCAN`, one node), or by hand with
//! `redis-cli --scan --pattern 'lease:{*'` and `DEL`. Both helpers re-check the expiry
//! atomically and never delete a live lease, but **a deleted name that is used again starts again
//! at term 1** under [`TermScheme::Counter`]: purge only names that will not come back, or whose
//! fenced resources no longer hold tokens issued under them.
//!
//! # Timeouts and errors
//!
//! Every operation is bounded by [`RedisConfig::operation_timeout`] (5 s unless set) and then fails
//! with `Timeout`, outcome unknown, which the coordinator handles (it reads a claim back with
//! verify). That bound is the one timer of an operation: it covers the `EVALSHA`, the `EVAL` after
//! a `NOSCRIPT` and any wait for a reconnection, and [`RedisStore::connect`] arms no response
//! timeout of its own on the `ConnectionManager` (a second timer per request would only cost time).
//! The manager's connection timeout is [`RedisConfig::connect_timeout`] (2 s), so a stalled socket
//! never holds an operation beyond the bound and a dropped one is reconnected on the next request;
//! build your own manager the same way with [`RedisConfig::manager_config`]. A connection failure
//! (refused, reset, closed) is `Unavailable` (temporary); errors the server answers are `Backend`
//! with the Redis error as source (see the mapping in the source of `error.rs`). Every error
//! carries the operation and name (`Error::operation`, `Error::name`) and, when the store knows it
//! ([`RedisConfig::server_label`], set by [`RedisStore::connect`]), the server's host and port
//! (`Error::server`), never credentials; the message says only what went wrong. Names and durations
//! are refused (`InvalidName`, `InvalidTimings`) before any I/O; so are groups, owners, node ids,
//! addresses, group lists and partition batches (at most 10,000 per call).
//!
//! Requires Redis 5.0 or later (scripts replicated by effect, so `TIME` may precede writes);
//! tested on Redis 7.0.

mod config;
mod error;
mod hint_state;
mod hints;
mod leases;
mod membership;
mod partitions;
mod permits;
mod renewals;
#[cfg(feature = "sentinel")]
mod sentinel;
mod slots;
mod store;
mod url_params;
mod wire;

pub use config::{
    CONNECT_RETRIES, DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEY_PREFIX, DEFAULT_OPERATION_TIMEOUT,
    MAX_KEY_PREFIX_BYTES, RedisConfig, TermScheme,
};
pub use error::{RedisResultExt, classify};
#[cfg(feature = "sentinel")]
pub use sentinel::SentinelConnection;
pub use store::{MAX_NAME_BYTES, RedisStore};
pub use url_params::RedisUrlParams;

/// The `redis` crate this store is built on, re-exported so your connection's type matches.
pub use redis;
