//! [`NatsStore`]: the store struct, how it is opened ([`NatsStore::connect`],
//! [`NatsStore::with_client`]), and the requests every operation shares. Opening finds, creates
//! and checks the buckets with `buckets.rs`, and names and checks the server with `server.rs`.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::connection::State;
use async_nats::jetstream::kv::{self, Operation as KvOperation, UpdateErrorKind};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use async_nats::jetstream::{self, Context};
use bytes::Bytes;
use futures::future::join_all;
use lease_core::backend::listen::Listener;
use lease_core::backend::notify::Hub;
use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind, Result, Timings};
use serde_json::Value;
use tracing::info;

use crate::buckets::{
    Kind, check_bucket, check_slot_bucket, create_bucket, find_stream, replicated,
};
use crate::config::NatsConfig;
use crate::error::Site;
use crate::hints::{Watched, hint_subject, listen};
use crate::known_writes::{KnownLeases, KnownPartitions, Recent};
use crate::leases::KNOWN_FLOOR;
use crate::partitions::KNOWN_PARTITIONS_FLOOR;
use crate::server::{check_replicas, reconnect_delay, server_of, url_label};
use crate::wire::codec::Record;

/// How often an operation looks again when the key changed under it before giving up with a
/// temporary error. Only concurrent writes to one lease by its own holder make it look again.
pub(crate) const MAX_TRIES: usize = 3;

/// How many requests one pipelined burst sends before awaiting their answers. Bursts of a
/// larger batch go one after the other, so one call never has more publishes awaiting their
/// acknowledgement than this (a JetStream context allows 5,000 by default).
const WINDOW: usize = 1000;

/// Runs `f` on every item, pipelined: each window of [`WINDOW`] futures runs concurrently (all
/// requests sent before any answer is awaited), windows one after the other. Answers in the
/// order of `items`.
pub(crate) async fn pipelined<'a, I, T, F, Fut>(items: &'a [I], f: F) -> Vec<T>
where
    F: Fn(&'a I) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let mut out = Vec::with_capacity(items.len());
    for window in items.chunks(WINDOW) {
        out.extend(join_all(window.iter().map(&f)).await);
    }
    out
}

/// A lease store on a NATS JetStream KV bucket whose max age is the lease duration.
///
/// One key per name; its value names the holder, the term and the instance. The server decides
/// expiry by removing the key once it is older than the bucket's max age, and decides every
/// change by compare-and-set on the key's revision. See the [crate docs](crate) for the whole
/// protocol, its guarantees and its round trips.
///
/// Cloning is cheap and shares the connection and the memory of recent writes.
#[derive(Clone)]
pub struct NatsStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) kv: kv::Store,
    /// The slot bucket (no max age); `None` when it was missing and creation is off.
    pub(crate) slots: Option<kv::Store>,
    /// The slot bucket's name.
    pub(crate) slot_bucket: String,
    /// For the JetStream API requests the KV API has no call for (listing a group's keys).
    pub(crate) js: Context,
    client: async_nats::Client,
    pub(crate) bucket: String,
    pub(crate) subject_prefix: String,
    pub(crate) ttl: Duration,
    op_timeout: Duration,
    server: String,
    /// The last write this store made per name, so renew and release can compare-and-set
    /// without reading first.
    pub(crate) known: Mutex<KnownLeases>,
    /// The last write this store made per (group, partition), so batch renewals and releases
    /// can compare-and-set without reading first.
    pub(crate) parts: Mutex<KnownPartitions>,
    /// The hints of [`LeaseStore::changes`](lease_core::LeaseStore::changes) (see `hints.rs`).
    pub(crate) hub: Hub,
    /// The core subject releases are hinted on.
    hint_subject: String,
    /// The client release hints are published on: the store's own, or the listener's once
    /// [`NatsStore::with_listener_client`] set one.
    hint_client: Mutex<async_nats::Client>,
    /// Feeds `hub`; ends when the last clone of the store drops it (or when replaced by
    /// [`NatsStore::with_listener_client`]).
    listener: Mutex<Listener>,
}

/// What a read of a key found (a lease record by default; partition and member records too).
pub(crate) enum Seen<R = Record> {
    /// No message: never claimed, released, or expired.
    Absent,
    /// A record this store wrote: live, since the server removes expired ones.
    Live {
        record: R,
        revision: u64,
        created_ns: i128,
    },
    /// A delete or purge marker written by another tool (this store writes none).
    Marker { revision: u64 },
    /// A value this store did not write.
    Foreign { revision: u64 },
}

impl<R> Seen<R> {
    /// What a key's last message says: its stream sequence `revision`, whether it is a delete
    /// or purge `marker`, its `value` (decoded with `decode`) and its server timestamp.
    fn of(
        revision: u64,
        marker: bool,
        value: &[u8],
        created_ns: i128,
        decode: fn(&[u8]) -> Option<R>,
    ) -> Self {
        if marker {
            return Seen::Marker { revision };
        }
        match decode(value) {
            Some(record) => Seen::Live {
                record,
                revision,
                created_ns,
            },
            None => Seen::Foreign { revision },
        }
    }
}

impl fmt::Debug for NatsStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsStore")
            .field("server", &self.inner.server)
            .field("bucket", &self.inner.bucket)
            .field("ttl", &self.inner.ttl)
            .finish_non_exhaustive()
    }
}

impl NatsStore {
    /// Connects to the NATS server(s) at `url` (e.g. `nats://127.0.0.1:4222`, or several
    /// separated by commas) and opens the store there, as [`with_client`](Self::with_client)
    /// does on a client of the caller's.
    ///
    /// The client this makes pauses at most 500 ms between reconnect attempts (async-nats
    /// backs off up to 4 s by default), so a holder is back within a renewal period or two, and
    /// errors name the servers by the URL's hosts and ports.
    ///
    /// # Errors
    ///
    /// A URL that cannot be parsed, or a server that cannot be reached within the operation
    /// timeout, gives `Unavailable` naming the host and port (never a password); a bad URL or
    /// refused credentials are permanent, the rest temporary. Then as
    /// [`with_client`](Self::with_client).
    pub async fn connect(url: &str, config: NatsConfig) -> Result<NatsStore> {
        config.validate()?;
        let label = url_label(url)?;
        let bound = config.op_timeout;
        // async-nats backs off up to 4 s between reconnect attempts by default; a lease holder
        // must be back within a renewal period or two, so the pause is capped far lower.
        let connecting = async_nats::ConnectOptions::new()
            .connection_timeout(bound)
            .reconnect_delay_callback(reconnect_delay)
            .connect(url);
        let client = match tokio::time::timeout(bound, connecting).await {
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "cannot connect to NATS: no answer within {bound:?}"
                ))
                .at_server(label));
            }
            Ok(Err(e)) => {
                use async_nats::ConnectErrorKind as K;
                let permanent = matches!(
                    e.kind(),
                    K::ServerParse | K::Authentication | K::AuthorizationViolation | K::Tls
                );
                return Err(Error::unavailable("cannot connect to NATS")
                    .with_source(e)
                    .with_temporary(!permanent)
                    .at_server(label));
            }
            Ok(Ok(client)) => client,
        };
        let config = match &config.server_label {
            Some(_) => config,
            None => config.server_label(label),
        };
        NatsStore::with_client(client, config).await
    }

    /// Opens the store on the caller's client: finds the bucket, or creates it when missing
    /// (unless [`NatsConfig::create_bucket`] is off), and checks that it can carry leases.
    /// The store shares the client (and its connection) with the application and keeps the
    /// client's own options, reconnect back-off included; errors name the server the client is
    /// connected to unless [`NatsConfig::server_label`] says otherwise.
    ///
    /// A created bucket is the stream `KV_<bucket>` with the subjects `$KV.<bucket>.>`, file
    /// storage, one message per key, max age = the lease duration, direct get, rollup allowed,
    /// delete denied and discard-new — a KV bucket, created directly so that it works on
    /// nats-server 2.9, whose account info async-nats cannot parse.
    ///
    /// An existing bucket must keep one message per key, allow purge, have a max age, not be a
    /// mirror, and have a max age equal to the configured lease duration — or, with
    /// [`TtlMismatch::Adopt`](crate::TtlMismatch::Adopt), its max age becomes the store's lease
    /// duration. Otherwise this fails with an error that says what to change (`InvalidTimings`
    /// naming both durations for a max age that differs).
    ///
    /// The slot bucket ([`NatsConfig::slot_bucket_name`], `<bucket>_slots` by default) is looked
    /// up at the same time and created the same way, but with **no max age**: it keeps the
    /// scheduler's slot records, which must outlive every lease. An existing one must keep one
    /// message per key, have no max age and not be a mirror. When it is missing and creation is
    /// off, the store opens all the same and only its slot operations fail, naming the bucket.
    ///
    /// # Errors
    ///
    /// The config's own errors (no I/O); `Timeout` when JetStream does not answer within the
    /// operation timeout; `Unavailable` when the client is not connected or no JetStream
    /// answers the request (is it enabled, `-js`?); `Backend` for a bucket that cannot carry
    /// leases (or a slot bucket that cannot keep slot records), or a lease bucket missing while
    /// creation is off; `InvalidTimings` as above.
    pub async fn with_client(client: async_nats::Client, config: NatsConfig) -> Result<NatsStore> {
        config.validate()?;
        let js = jetstream::new(client.clone());
        let server = config
            .server_label
            .clone()
            .unwrap_or_else(|| server_of(&client));
        let bucket = config.bucket.clone();
        let stream_name = format!("KV_{bucket}");
        let bound = config.op_timeout;
        let site = |connected| Site {
            op: None,
            name: "",
            server: &server,
            bucket: &bucket,
            connected,
        };
        let connected = || client.connection_state() == State::Connected;

        let slot_bucket = config.slot_bucket_name();
        let slot_site = |connected| Site {
            bucket: &slot_bucket,
            ..site(connected)
        };
        // The lease bucket and the slot bucket are looked up at once.
        let slot_stream_name = format!("KV_{slot_bucket}");
        let (found, found_slots) = futures::join!(
            find_stream(&js, &stream_name, bound, &site, &connected),
            find_stream(&js, &slot_stream_name, bound, &slot_site, &connected),
        );
        let stream = match found? {
            Some(stream) => stream,
            None if !config.create_bucket => {
                return Err(Error::new(
                    ErrorKind::Backend,
                    format!(
                        "the lease bucket {bucket} does not exist and bucket creation is off; \
                         create it (stream {stream_name}, max age {:?}) or enable create_bucket",
                        config.ttl
                    ),
                )
                .at_server(server));
            }
            None => create_bucket(&js, &config, Kind::Leases, &site(true)).await?,
        };
        let ttl = check_bucket(&stream.cached_info().config, &config, &server)?;
        let slot_stream = match found_slots? {
            Some(stream) => Some(stream),
            None if !config.create_bucket => {
                info!(bucket = %slot_bucket, server = %server,
                    "the slot bucket does not exist and bucket creation is off: slot operations \
                     will fail until it is created");
                None
            }
            None => Some(create_bucket(&js, &config, Kind::Slots, &slot_site(true)).await?),
        };
        if let Some(s) = &slot_stream {
            check_slot_bucket(&s.cached_info().config, &slot_bucket, &server)?;
        }
        let replicas = slot_stream
            .iter()
            .map(|s| s.cached_info().config.num_replicas)
            .fold(stream.cached_info().config.num_replicas, usize::max);
        check_replicas(
            &bucket,
            replicas,
            &client.server_info().version,
            &server,
            config.allow_diverging_replicas,
        )?;

        let open_kv = |name: String| {
            let js = js.clone();
            async move {
                tokio::time::timeout(bound, js.get_key_value(name))
                    .await
                    .map_err(|_| site(connected()).timed_out(bound))?
                    .map_err(|e| site(connected()).backend(e, true))
            }
        };
        let (kv, slots) = futures::join!(open_kv(bucket.clone()), async {
            match slot_stream {
                Some(_) => open_kv(slot_bucket.clone()).await.map(Some),
                None => Ok(None),
            }
        });
        let (kv, slots) = (kv?, slots?);
        let hub = Hub::new();
        let subject = hint_subject(&bucket);
        let listener = listen(
            &hub,
            Watched {
                client: client.clone(),
                leases: kv.clone(),
                slots: slots.clone(),
                subject: subject.clone(),
                server: server.clone(),
            },
        )?;
        let hint_client = client.clone();
        Ok(NatsStore {
            inner: Arc::new(Inner {
                kv,
                slots,
                slot_bucket: slot_bucket.clone(),
                client,
                js,
                subject_prefix: format!("$KV.{bucket}."),
                bucket,
                ttl,
                op_timeout: bound,
                server,
                known: Mutex::new(Recent::new(KNOWN_FLOOR)),
                parts: Mutex::new(Recent::new(KNOWN_PARTITIONS_FLOOR)),
                hub,
                hint_subject: subject,
                hint_client: Mutex::new(hint_client),
                listener: Mutex::new(listener),
            }),
        })
    }

    /// Runs this store's hint listener (see the crate docs, *Hints*) on `client` instead of
    /// the store's own: e.g. straight to the server when the store's requests go through a
    /// proxy that counts them. The client must reach the same JetStream domain and account.
    /// Replaces the running listener of this store (and of its clones); until the new one has
    /// watched the buckets, the hints say they are disconnected. The store's releases publish
    /// their hints on `client` too, so a proxy in front of the store's own client sees only
    /// the requests the operations wait for.
    ///
    /// # Errors
    ///
    /// `Timeout` or `Unavailable` when the buckets cannot be opened through `client` within
    /// the operation timeout; `Unsupported` outside a tokio runtime.
    pub async fn with_listener_client(self, client: async_nats::Client) -> Result<NatsStore> {
        let js = jetstream::new(client.clone());
        let bound = self.inner.op_timeout;
        let open = |name: String| {
            let js = js.clone();
            async move {
                tokio::time::timeout(bound, js.get_key_value(name.clone()))
                    .await
                    .map_err(|_| {
                        Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "opening bucket {name} for the hint listener took over {bound:?}"
                            ),
                        )
                    })?
                    .map_err(|e| {
                        Error::unavailable(format!(
                            "the hint listener cannot open bucket {name}: {e}"
                        ))
                    })
            }
        };
        let leases = open(self.inner.bucket.clone()).await?;
        let slots = match self.inner.slots {
            Some(_) => Some(open(self.inner.slot_bucket.clone()).await?),
            None => None,
        };
        let listener = listen(
            &self.inner.hub,
            Watched {
                client: client.clone(),
                leases,
                slots,
                subject: self.inner.hint_subject.clone(),
                server: self.inner.server.clone(),
            },
        )?;
        *self
            .inner
            .listener
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = listener;
        *self
            .inner
            .hint_client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = client;
        Ok(self)
    }

    /// The lease duration: the bucket's max age, the only TTL this store accepts.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// The slot bucket's name (the scheduler's slot records; no max age).
    pub fn slot_bucket(&self) -> &str {
        &self.inner.slot_bucket
    }

    /// The server as errors name it (host:port).
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The protocol's timings for this store's lease duration ([`Timings::from_lease`]).
    ///
    /// A coordinator over this store must use them: its lease duration must be the bucket's
    /// max age, and a coordinator whose lease differs from the store's fixed TTL is refused.
    ///
    /// ```no_run
    /// # async fn demo(store: lease_nats::NatsStore) -> lease_core::Result<()> {
    /// let coordinator = lease_core::Coordinator::builder(store.clone())
    ///     .timings(store.timings()?)
    ///     .instance("api-1")
    ///     .build()?;
    /// # drop(coordinator); Ok(()) }
    /// ```
    pub fn timings(&self) -> Result<Timings> {
        Timings::from_lease(self.inner.ttl)
    }

    pub(crate) fn site<'a>(&'a self, op: Operation, name: &'a str) -> Site<'a> {
        self.site_in(op, name, &self.inner.bucket)
    }

    /// Where an operation on `bucket` (the lease or the slot bucket) ran.
    pub(crate) fn site_in<'a>(&'a self, op: Operation, name: &'a str, bucket: &'a str) -> Site<'a> {
        Site {
            op: Some(op),
            name,
            server: &self.inner.server,
            bucket,
            connected: self.inner.client.connection_state() == State::Connected,
        }
    }

    /// Runs `f` within the operation timeout.
    pub(crate) async fn bounded<T>(
        &self,
        op: Operation,
        name: &str,
        f: impl Future<Output = T>,
    ) -> Result<T> {
        let bound = self.inner.op_timeout;
        tokio::time::timeout(bound, f)
            .await
            .map_err(|_| self.site(op, name).timed_out(bound))
    }

    /// Reads `key` (one direct get) and decodes a put's value with `decode`.
    pub(crate) async fn read_as<R>(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        decode: fn(&[u8]) -> Option<R>,
    ) -> Result<Seen<R>> {
        self.read_in(&self.inner.kv, op, name, key, decode).await
    }

    /// [`read_as`](Self::read_as) in the bucket `kv` (the lease or the slot bucket).
    ///
    /// On a replicated bucket the read is a `$JS.API.STREAM.MSG.GET` for the key's last
    /// message, which only the stream's leader answers; otherwise a direct get. A direct get
    /// may be answered by any replica, and a follower answers from what it has applied so far:
    /// behind the leader by the replication lag, by seconds while it catches up after a restart
    /// — a lease the leader has renewed can read there as expired, one released as still held.
    pub(crate) async fn read_in<R>(
        &self,
        kv: &kv::Store,
        op: Operation,
        name: &str,
        key: &str,
        decode: fn(&[u8]) -> Option<R>,
    ) -> Result<Seen<R>> {
        if replicated(kv) {
            let subject = format!("{}{key}", kv.prefix);
            let got = self
                .bounded(
                    op,
                    name,
                    kv.stream.get_last_raw_message_by_subject(&subject),
                )
                .await?;
            let message = match got {
                Ok(message) => message,
                Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {
                    return Ok(Seen::Absent);
                }
                Err(e) => return Err(self.site_in(op, name, &kv.name).last_message(e)),
            };
            // A KV delete or purge marker carries `KV-Operation: DEL` or `PURGE`.
            return Ok(Seen::of(
                message.sequence,
                message.headers.get("KV-Operation").is_some(),
                &message.payload,
                message.time.unix_timestamp_nanos(),
                decode,
            ));
        }
        let entry = self
            .bounded(op, name, kv.entry(key))
            .await?
            .map_err(|e| self.site_in(op, name, &kv.name).entry(e))?;
        let Some(entry) = entry else {
            return Ok(Seen::Absent);
        };
        Ok(Seen::of(
            entry.revision,
            entry.operation != KvOperation::Put,
            &entry.value,
            entry.created.unix_timestamp_nanos(),
            decode,
        ))
    }

    /// Publishes `value` to the key if its last revision is `expected` (0: no message).
    /// `Ok(None)` when the revision differed.
    pub(crate) async fn write(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        value: Bytes,
        expected: u64,
    ) -> Result<Option<u64>> {
        self.write_in(&self.inner.kv, op, name, key, value, expected)
            .await
    }

    /// [`write`](Self::write) in the bucket `kv` (the lease or the slot bucket).
    pub(crate) async fn write_in(
        &self,
        kv: &kv::Store,
        op: Operation,
        name: &str,
        key: &str,
        value: Bytes,
        expected: u64,
    ) -> Result<Option<u64>> {
        let written = self
            .bounded(op, name, kv.update(key, value, expected))
            .await?;
        match written {
            Ok(revision) => Ok(Some(revision)),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(self.site_in(op, name, &kv.name).update(e)),
        }
    }

    /// Removes the key's messages up to and including `revision`, so the key is gone if
    /// `revision` is still its last message. `true` when a message was removed.
    pub(crate) async fn purge_through(
        &self,
        op: Operation,
        name: &str,
        key: &str,
        revision: u64,
    ) -> Result<bool> {
        let subject = format!("{}{key}", self.inner.subject_prefix);
        let purge = self
            .inner
            .kv
            .stream
            .purge()
            .filter(subject)
            .sequence(revision.saturating_add(1));
        let purged = self
            .bounded(op, name, async move { purge.await })
            .await?
            .map_err(|e| self.site(op, name).purge(e))?;
        let removed = purged.purged > 0;
        if removed {
            self.hint_release(key).await;
        }
        Ok(removed)
    }

    /// Hints that `key` was released: at once to this process's waiters, and on the hint
    /// subject to every store's listener (a purge leaves nothing a KV watch sees). Fire and
    /// forget: the publish is buffered by the client, never awaited by the server, and a
    /// failure only costs waiters their hint.
    async fn hint_release(&self, key: &str) {
        if let Some(topic) = crate::wire::keys::topic_of(key) {
            self.inner.hub.notify(&topic);
        }
        let client = self
            .inner
            .hint_client
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let published = client
            .publish(
                self.inner.hint_subject.clone(),
                Bytes::copy_from_slice(key.as_bytes()),
            )
            .await;
        if let Err(e) = published {
            tracing::debug!(error = %e, key, "could not publish a release hint");
        }
    }

    /// Time left on a message this store sent at `sent_at`: the server stamped it later, so
    /// this never overstates.
    pub(crate) fn left_since(&self, sent_at: Instant) -> Duration {
        self.inner.ttl.saturating_sub(sent_at.elapsed())
    }

    /// Time left on a message the server stamped at `created_ns` (ns since the Unix epoch), by
    /// this host's wall clock: an estimate, clamped to the lease duration, for display only.
    pub(crate) fn estimate_left(&self, created_ns: i128) -> Duration {
        let now_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
            .unwrap_or(0);
        let age = u64::try_from(now_ns.saturating_sub(created_ns).max(0)).unwrap_or(u64::MAX);
        self.inner.ttl.saturating_sub(Duration::from_nanos(age))
    }

    pub(crate) fn racing(&self, op: Operation, name: &str) -> Error {
        Error::new(
            ErrorKind::Backend,
            format!(
                "the key changed {MAX_TRIES} times under this operation (concurrent operations \
                 on one lease); try again"
            ),
        )
        .with_temporary(true)
        .during(op, name)
        .at_server(self.inner.server.clone())
    }

    /// The checks of [`LeaseStore::available`](lease_core::LeaseStore::available): the bucket
    /// answers and can still carry leases of this store's duration.
    pub(crate) async fn check_available(&self) -> Result<()> {
        let op = Operation::Available;
        let mut stream = self.inner.kv.stream.clone();
        let mut slots = self.inner.slots.as_ref().map(|kv| kv.stream.clone());
        let (info, slot_info) = futures::join!(self.bounded(op, "", stream.info()), async {
            match slots.as_mut() {
                Some(s) => Some(self.bounded(op, "", s.info()).await),
                None => None,
            }
        });
        let info = info?.map_err(|e| self.site(op, "").request(e))?;
        let config = NatsConfig::new(self.inner.ttl).bucket(self.inner.bucket.clone());
        check_bucket(&info.config, &config, &self.inner.server).map_err(|e| e.during(op, ""))?;
        if let Some(slot_info) = slot_info {
            let bucket = &self.inner.slot_bucket;
            let slot_info = slot_info?.map_err(|e| self.site_in(op, "", bucket).request(e))?;
            check_slot_bucket(&slot_info.config, bucket, &self.inner.server)
                .map_err(|e| e.during(op, ""))?;
        }
        Ok(())
    }

    /// The keys under `prefix` (a key prefix ending with `.`), without the prefix: one
    /// `$JS.API.STREAM.INFO` request with a subject filter (one more per 100,000 keys).
    pub(crate) async fn list_keys(
        &self,
        op: Operation,
        name: &str,
        prefix: &str,
    ) -> Result<Vec<String>> {
        self.list_matching(op, name, prefix, ">").await
    }

    /// The keys under `prefix` that the subject filter `filter` (wildcards `*` and `>`) matches
    /// after it, without the prefix: one `$JS.API.STREAM.INFO` request (one more per 100,000
    /// keys). Every key with a message shows: the store releases by purging, so that is every
    /// record the store keeps (and a marker another tool wrote).
    pub(crate) async fn list_matching(
        &self,
        op: Operation,
        name: &str,
        prefix: &str,
        filter: &str,
    ) -> Result<Vec<String>> {
        let api = format!("STREAM.INFO.KV_{}", self.inner.bucket);
        let subject_prefix = format!("{}{prefix}", self.inner.subject_prefix);
        let filter = format!("{subject_prefix}{filter}");
        let mut keys = Vec::new();
        let mut offset = 0usize;
        loop {
            let request = serde_json::json!({ "subjects_filter": filter, "offset": offset });
            let reply: Value = self
                .bounded(op, name, self.inner.js.request(api.clone(), &request))
                .await?
                .map_err(|e| self.site(op, name).request(e))?;
            if let Some(error) = reply.get("error") {
                let description = error
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("an error without a description")
                    .to_owned();
                return Err(self.site(op, name).backend(description, true));
            }
            let subjects = reply.pointer("/state/subjects").and_then(Value::as_object);
            let page = subjects.map_or(0, serde_json::Map::len);
            if let Some(subjects) = subjects {
                keys.extend(
                    subjects
                        .keys()
                        .filter_map(|s| s.strip_prefix(&subject_prefix))
                        .map(str::to_owned),
                );
            }
            offset += page;
            let total = reply.get("total").and_then(Value::as_u64).unwrap_or(0);
            if page == 0 || u64::try_from(offset).unwrap_or(u64::MAX) >= total {
                return Ok(keys);
            }
        }
    }

    /// A key under a partition or member prefix that holds a value this store did not write.
    pub(crate) fn foreign_key(&self, op: Operation, name: &str, key: &str) -> Error {
        self.site(op, name).foreign_value(key)
    }
}
