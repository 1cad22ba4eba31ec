//! [`NatsStore`]: the lease store on a JetStream KV bucket.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::connection::State;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{CreateStreamErrorKind, GetStreamErrorKind};
use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use async_nats::jetstream::{self, Context};
use bytes::Bytes;
use lease_core::LeaseStoreExt;
use lease_core::{
    Capabilities, Coordinator, CoordinatorBuilder, Error, ErrorKind, LeaseInfo, LeaseStore, Result,
    Timings,
    backend::{Grant, HolderToken, async_trait, validate_instance, validate_ttl},
};
use tracing::{debug, info};

use crate::codec::{MAX_NAME_BYTES, Record, encode_key};
use crate::config::{NatsConfig, TtlMismatch};
use crate::error::Site;

/// How often an operation looks again when the key changed under it before giving up with a
/// temporary error. Only concurrent writes to one lease by its own holder make it look again.
pub(crate) const MAX_TRIES: usize = 3;

/// How many recent writes a store remembers (see "Round trips" in the crate docs).
const MAX_KNOWN: usize = 4096;

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
    known: Mutex<HashMap<String, Known>>,
    /// The last write this store made per (group, partition), so batch renewals and releases
    /// can compare-and-set without reading first.
    pub(crate) parts: Mutex<HashMap<(String, u32), KnownPartition>>,
}

/// A partition write this store made: the owner, the revision it got, the epoch it carries.
#[derive(Debug, Clone)]
pub(crate) struct KnownPartition {
    pub(crate) owner: String,
    pub(crate) revision: u64,
    pub(crate) epoch: u64,
    /// When the write was sent: the server stamped the message later than this.
    pub(crate) sent_at: Instant,
}

/// A write this store made: the revision it got and what it wrote.
#[derive(Debug, Clone)]
struct Known {
    holder: HolderToken,
    revision: u64,
    term: u64,
    instance: String,
    /// When the write was sent: the server stamped the message later than this.
    sent_at: Instant,
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
    /// Opens the store on the caller's JetStream context: finds the bucket, or creates it
    /// when missing (unless [`NatsConfig::create_bucket`] is off), and checks that it can carry
    /// leases.
    ///
    /// A created bucket is the stream `KV_<bucket>` with the subjects `$KV.<bucket>.>`, file
    /// storage, one message per key, max age = the lease duration, direct get, rollup allowed,
    /// delete denied and discard-new — a KV bucket, created directly so that it works on
    /// nats-server 2.9, whose account info async-nats cannot parse.
    ///
    /// An existing bucket must keep one message per key, allow purge, have a max age, not be a
    /// mirror, and have a max age equal to the configured lease duration — or, with
    /// [`TtlMismatch::Adopt`], its max age becomes the store's lease duration. Otherwise this
    /// fails with an error that says what to change (`InvalidTimings` naming both durations for
    /// a max age that differs).
    pub async fn open(js: Context, config: NatsConfig) -> Result<NatsStore> {
        config.validate()?;
        let client = js.client();
        let server = config
            .server_label
            .clone()
            .unwrap_or_else(|| server_of(&client));
        let bucket = config.bucket.clone();
        let stream_name = format!("KV_{bucket}");
        let bound = config.op_timeout;
        let site = |connected| Site {
            op: "opening the lease bucket",
            name: "",
            server: &server,
            bucket: &bucket,
            connected,
        };
        let connected = || client.connection_state() == State::Connected;

        let found = tokio::time::timeout(bound, js.get_stream(&stream_name))
            .await
            .map_err(|_| site(connected()).timed_out(bound))?;
        let stream = match found {
            Ok(stream) => stream,
            Err(e) => match e.kind() {
                GetStreamErrorKind::JetStream(j)
                    if j.error_code() == ErrorCode::STREAM_NOT_FOUND =>
                {
                    if !config.create_bucket {
                        return Err(Error::new(
                            ErrorKind::Backend,
                            format!(
                                "the lease bucket {bucket} does not exist on NATS at {server} and \
                                 bucket creation is off; create it (stream {stream_name}, max age \
                                 {:?}) or enable create_bucket",
                                config.ttl
                            ),
                        ));
                    }
                    create_bucket(&js, &config, &site(true)).await?
                }
                GetStreamErrorKind::Request => {
                    return Err(Error::unavailable(format!(
                        "opening the lease bucket {bucket}: JetStream at {server} did not \
                         answer (is the server up, and JetStream enabled with -js?)"
                    ))
                    .with_source(e));
                }
                _ => return Err(site(connected()).backend(e, false)),
            },
        };
        let ttl = check_bucket(&stream.cached_info().config, &config, &server)?;

        let kv = tokio::time::timeout(bound, js.get_key_value(&bucket))
            .await
            .map_err(|_| site(connected()).timed_out(bound))?
            .map_err(|e| site(connected()).backend(e, true))?;
        Ok(NatsStore {
            inner: Arc::new(Inner {
                kv,
                client,
                js,
                subject_prefix: format!("$KV.{bucket}."),
                bucket,
                ttl,
                op_timeout: bound,
                server,
                known: Mutex::new(HashMap::new()),
                parts: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Connects to the NATS server(s) at `url` (e.g. `nats://127.0.0.1:4222`, or several
    /// separated by commas) and opens the store there.
    ///
    /// A URL that cannot be parsed, or a server that cannot be reached within the operation
    /// timeout, gives `Unavailable` naming the host and port (never a password); a bad URL or
    /// refused credentials are permanent, the rest temporary.
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
                    "cannot connect to NATS at {label}: no answer within {bound:?}"
                )));
            }
            Ok(Err(e)) => {
                use async_nats::ConnectErrorKind as K;
                let permanent = matches!(
                    e.kind(),
                    K::ServerParse | K::Authentication | K::AuthorizationViolation | K::Tls
                );
                return Err(
                    Error::unavailable(format!("cannot connect to NATS at {label}"))
                        .with_source(e)
                        .with_temporary(!permanent),
                );
            }
            Ok(Ok(client)) => client,
        };
        let config = match &config.server_label {
            Some(_) => config,
            None => config.server_label(label),
        };
        NatsStore::open(jetstream::new(client), config).await
    }

    /// The lease duration: the bucket's max age, the only TTL this store accepts.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The bucket name.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// The server as errors name it (host:port).
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The protocol's timings for this store's lease duration ([`Timings::from_lease`]).
    pub fn timings(&self) -> Result<Timings> {
        Timings::from_lease(self.inner.ttl)
    }

    /// A coordinator builder over this store with [`timings`](Self::timings) already set:
    /// a coordinator's lease duration must equal the bucket's max age.
    pub fn coordinator_builder(&self) -> Result<CoordinatorBuilder> {
        Ok(Coordinator::builder(self.clone()).timings(self.timings()?))
    }

    pub(crate) fn site<'a>(&'a self, op: &'a str, name: &'a str) -> Site<'a> {
        Site {
            op,
            name,
            server: &self.inner.server,
            bucket: &self.inner.bucket,
            connected: self.inner.client.connection_state() == State::Connected,
        }
    }

    /// Runs `f` within the operation timeout.
    pub(crate) async fn bounded<T>(
        &self,
        op: &str,
        name: &str,
        f: impl Future<Output = T>,
    ) -> Result<T> {
        let bound = self.inner.op_timeout;
        tokio::time::timeout(bound, f)
            .await
            .map_err(|_| self.site(op, name).timed_out(bound))
    }

    /// Reads the key of `name`: one direct get.
    async fn read(&self, op: &str, name: &str, key: &str) -> Result<Seen> {
        self.read_as(op, name, key, Record::decode).await
    }

    /// Reads `key` (one direct get) and decodes a put's value with `decode`.
    pub(crate) async fn read_as<R>(
        &self,
        op: &str,
        name: &str,
        key: &str,
        decode: fn(&[u8]) -> Option<R>,
    ) -> Result<Seen<R>> {
        let entry = self
            .bounded(op, name, self.inner.kv.entry(key))
            .await?
            .map_err(|e| self.site(op, name).entry(e))?;
        let Some(entry) = entry else {
            return Ok(Seen::Absent);
        };
        let revision = entry.revision;
        if entry.operation != Operation::Put {
            return Ok(Seen::Marker { revision });
        }
        Ok(match decode(&entry.value) {
            Some(record) => Seen::Live {
                record,
                revision,
                created_ns: entry.created.unix_timestamp_nanos(),
            },
            None => Seen::Foreign { revision },
        })
    }

    /// The live lease `holder` has on `name`: (revision, term, instance).
    async fn read_own(
        &self,
        op: &str,
        name: &str,
        key: &str,
        holder: &HolderToken,
    ) -> Result<Option<(u64, u64, String)>> {
        Ok(match self.read(op, name, key).await? {
            Seen::Live {
                record, revision, ..
            } if record.holder == *holder => {
                Some((revision, record.term_at(revision), record.instance))
            }
            _ => None,
        })
    }

    /// Publishes `value` to the key if its last revision is `expected` (0: no message).
    /// `Ok(None)` when the revision differed.
    pub(crate) async fn write(
        &self,
        op: &str,
        name: &str,
        key: &str,
        value: Bytes,
        expected: u64,
    ) -> Result<Option<u64>> {
        let written = self
            .bounded(op, name, self.inner.kv.update(key, value, expected))
            .await?;
        match written {
            Ok(revision) => Ok(Some(revision)),
            Err(e) if e.kind() == UpdateErrorKind::WrongLastRevision => Ok(None),
            Err(e) => Err(self.site(op, name).update(e)),
        }
    }

    /// Removes the key's messages up to and including `revision`, so the key is gone if
    /// `revision` is still its last message. `true` when a message was removed.
    pub(crate) async fn purge_through(
        &self,
        op: &str,
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
        Ok(purged.purged > 0)
    }

    fn known_map(&self) -> MutexGuard<'_, HashMap<String, Known>> {
        self.inner.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn known(&self, name: &str) -> Option<Known> {
        self.known_map().get(name).cloned()
    }

    fn remember(&self, name: &str, known: Known) {
        let ttl = self.inner.ttl;
        let mut map = self.known_map();
        if map.len() >= MAX_KNOWN && !map.contains_key(name) {
            map.retain(|_, k| k.sent_at.elapsed() < ttl);
            if map.len() >= MAX_KNOWN {
                map.clear();
            }
        }
        map.insert(name.to_owned(), known);
    }

    fn forget(&self, name: &str) {
        self.known_map().remove(name);
    }

    /// Time left on a message this store sent at `sent_at`: the server stamped it later, so
    /// this never overstates.
    pub(crate) fn left_since(&self, sent_at: Instant) -> Duration {
        self.inner.ttl.saturating_sub(sent_at.elapsed())
    }

    /// Time left on a message read back: by the monotonic clock when this store wrote it,
    /// otherwise an estimate from the server's timestamp and this host's wall clock.
    fn left_of(&self, name: &str, revision: u64, created_ns: i128) -> Duration {
        if let Some(k) = self.known(name).filter(|k| k.revision == revision) {
            return self.left_since(k.sent_at);
        }
        self.estimate_left(created_ns)
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

    pub(crate) fn racing(&self, op: &str, name: &str) -> Error {
        Error::new(
            ErrorKind::Backend,
            format!(
                "{op} of '{name}': the key changed {MAX_TRIES} times under this operation on NATS \
                 at {} (concurrent operations on one lease); try again",
                self.inner.server
            ),
        )
        .with_temporary(true)
    }
}

#[async_trait]
impl LeaseStore for NatsStore {
    fn backend(&self) -> &'static str {
        "nats"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            expiry: true,
            fencing: true,
            // The term is the stream sequence of the claim: strictly increasing, with gaps.
            consecutive_terms: false,
            // The server removes an expired entry, and release purges it.
            keeps_ended_records: false,
            verify_in_transaction: false,
            watch: false,
            partitions: true,
            membership: true,
            slots: false,
            force_release: true,
            max_name_bytes: MAX_NAME_BYTES,
            // No multi-key operation: one compare-and-set per partition, all sent before any
            // answer is awaited.
            batch_renew: lease_core::backend::BatchRenew::Pipelined,
            fixed_ttl: Some(self.inner.ttl),
        }
    }

    async fn available(&self) -> Result<()> {
        let op = "checking the lease bucket";
        let mut stream = self.inner.kv.stream.clone();
        let info = self
            .bounded(op, "", stream.info())
            .await?
            .map_err(|e| match e.kind() {
                async_nats::jetstream::context::RequestErrorKind::TimedOut
                | async_nats::jetstream::context::RequestErrorKind::NoResponders => {
                    self.site(op, "").unavailable(Some(Box::new(e)))
                }
                _ => self.site(op, "").backend(e, true),
            })?;
        let config = NatsConfig::new(self.inner.ttl).bucket(self.inner.bucket.clone());
        check_bucket(&info.config, &config, &self.inner.server)?;
        Ok(())
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
        let key = encode_key(name);
        let record = Record {
            holder: holder.clone(),
            term: 0,
            instance: instance.to_owned(),
        };
        let sent_at = Instant::now();
        let Some(revision) = self.write("claim", name, &key, record.encode(), 0).await? else {
            return Ok(None);
        };
        self.remember(
            name,
            Known {
                holder: holder.clone(),
                revision,
                term: revision,
                instance: record.instance,
                sent_at,
            },
        );
        debug!(name, term = revision, "claimed");
        Ok(Some(Grant {
            term: revision,
            expires_in: self.left_since(sent_at),
        }))
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        let key = encode_key(name);
        let mut target = self
            .known(name)
            .filter(|k| k.holder == *holder)
            .map(|k| (k.revision, k.term, k.instance));
        for _ in 0..MAX_TRIES {
            let (revision, term, instance) = match target.take() {
                Some(t) => t,
                None => match self.read_own("renew", name, &key, holder).await? {
                    Some(t) => t,
                    None => {
                        self.forget_holder(name, holder);
                        return Ok(None);
                    }
                },
            };
            let record = Record {
                holder: holder.clone(),
                term,
                instance,
            };
            let sent_at = Instant::now();
            if let Some(new) = self
                .write("renew", name, &key, record.encode(), revision)
                .await?
            {
                self.remember(
                    name,
                    Known {
                        holder: holder.clone(),
                        revision: new,
                        term,
                        instance: record.instance,
                        sent_at,
                    },
                );
                return Ok(Some(Grant {
                    term,
                    expires_in: self.left_since(sent_at),
                }));
            }
            debug!(
                name,
                revision, "renewal found the key changed; reading it again"
            );
        }
        Err(self.racing("renew", name))
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.validate_name(name)?;
        let key = encode_key(name);
        let mut target = self
            .known(name)
            .filter(|k| k.holder == *holder)
            .map(|k| k.revision);
        for _ in 0..MAX_TRIES {
            let revision = match target.take() {
                Some(r) => r,
                None => match self.read_own("release", name, &key, holder).await? {
                    Some((r, _, _)) => r,
                    None => {
                        self.forget_holder(name, holder);
                        return Ok(false);
                    }
                },
            };
            if self.purge_through("release", name, &key, revision).await? {
                self.forget(name);
                return Ok(true);
            }
        }
        Err(self.racing("release", name))
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        let key = encode_key(name);
        Ok(match self.read("verify", name, &key).await? {
            Seen::Live {
                record,
                revision,
                created_ns,
            } if record.holder == *holder => Some(Grant {
                term: record.term_at(revision),
                expires_in: self.left_of(name, revision, created_ns),
            }),
            _ => None,
        })
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.validate_name(name)?;
        let key = encode_key(name);
        match self.read("get", name, &key).await? {
            Seen::Absent | Seen::Marker { .. } => Ok(None),
            Seen::Foreign { .. } => Err(self.site("get", name).foreign_value(&key)),
            Seen::Live {
                record,
                revision,
                created_ns,
            } => Ok(Some(LeaseInfo {
                name: name.to_owned(),
                term: record.term_at(revision),
                instance: record.instance,
                live: true,
                expires_in: self.left_of(name, revision, created_ns),
            })),
        }
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.validate_name(name)?;
        let key = encode_key(name);
        for _ in 0..MAX_TRIES {
            let (revision, live) = match self.read("force release", name, &key).await? {
                Seen::Absent => {
                    self.forget(name);
                    return Ok(false);
                }
                Seen::Live { revision, .. } | Seen::Foreign { revision } => (revision, true),
                Seen::Marker { revision } => (revision, false),
            };
            if self
                .purge_through("force release", name, &key, revision)
                .await?
            {
                self.forget(name);
                return Ok(live);
            }
        }
        Err(self.racing("force release", name))
    }
}

impl NatsStore {
    fn forget_holder(&self, name: &str, holder: &HolderToken) {
        let mut map = self.known_map();
        if map.get(name).is_some_and(|k| k.holder == *holder) {
            map.remove(name);
        }
    }
}

/// Creates the bucket's stream as a KV bucket for leases of `config.ttl`.
async fn create_bucket(
    js: &Context,
    config: &NatsConfig,
    site: &Site<'_>,
) -> Result<stream::Stream> {
    let bucket = &config.bucket;
    let stream_config = stream::Config {
        name: format!("KV_{bucket}"),
        description: Some(format!(
            "lease-nats: leases of {:?} (max age = lease duration)",
            config.ttl
        )),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        max_age: config.ttl,
        storage: StorageType::File,
        allow_direct: true,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        discard: DiscardPolicy::New,
        num_replicas: config.replicas,
        ..Default::default()
    };
    let bound = config.op_timeout;
    let created = tokio::time::timeout(bound, js.create_stream(stream_config))
        .await
        .map_err(|_| site.timed_out(bound))?;
    match created {
        Ok(s) => {
            info!(bucket = %bucket, ttl = ?config.ttl, server = site.server, "created the lease bucket");
            Ok(s)
        }
        Err(e) => match e.kind() {
            // Another process created it first, with another configuration: look at it.
            CreateStreamErrorKind::JetStream(j)
                if j.error_code() == ErrorCode::STREAM_NAME_EXIST =>
            {
                tokio::time::timeout(bound, js.get_stream(format!("KV_{bucket}")))
                    .await
                    .map_err(|_| site.timed_out(bound))?
                    .map_err(|e| site.backend(e, true))
            }
            CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => {
                Err(site.unavailable(Some(Box::new(e))))
            }
            _ => Err(site.backend(e, false)),
        },
    }
}

/// Checks that an existing bucket can carry leases of `config.ttl`; returns the lease duration.
fn check_bucket(cfg: &stream::Config, config: &NatsConfig, server: &str) -> Result<Duration> {
    let bucket = &config.bucket;
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::Backend,
            format!("the NATS bucket {bucket} on {server} cannot carry leases: {why}"),
        ))
    };
    if cfg.mirror.is_some() {
        return refuse("it is a mirror; use the origin bucket".into());
    }
    let subject = format!("$KV.{bucket}.>");
    if !cfg.subjects.contains(&subject) {
        return refuse(format!("its stream does not take the subjects {subject}"));
    }
    if cfg.max_messages_per_subject != 1 {
        return refuse(format!(
            "it keeps {} messages per key; leases need a history of 1",
            cfg.max_messages_per_subject
        ));
    }
    if cfg.deny_purge {
        return refuse("it denies purge, which release needs".into());
    }
    if cfg.max_age.is_zero() {
        return refuse("it has no max age, so leases in it would never expire".into());
    }
    if cfg.max_age == config.ttl {
        return Ok(config.ttl);
    }
    match config.on_mismatch {
        TtlMismatch::Refuse => Err(Error::invalid_timings(format!(
            "the NATS bucket {bucket} on {server} expires keys after {:?} (its max age), but the \
             lease duration is {:?}; the server decides expiry by the bucket's max age, so they \
             must be equal: use a bucket per lease duration (see bucket_for_ttl), or adopt the \
             bucket's max age (TtlMismatch::Adopt)",
            cfg.max_age, config.ttl
        ))),
        TtlMismatch::Adopt => {
            validate_ttl(cfg.max_age)?;
            info!(bucket = %bucket, max_age = ?cfg.max_age, asked = ?config.ttl,
                "adopting the bucket's max age as the lease duration");
            Ok(cfg.max_age)
        }
    }
}

/// host:port of the server a client is connected to.
fn server_of(client: &async_nats::Client) -> String {
    let info = client.server_info();
    if info.host.is_empty() {
        "(unknown NATS server)".to_owned()
    } else {
        format!("{}:{}", info.host, info.port)
    }
}

/// host:port of every server in a URL list, without credentials.
fn url_label(url: &str) -> Result<String> {
    let mut labels = Vec::new();
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<async_nats::ServerAddr>() {
            Ok(addr) => labels.push(format!("{}:{}", addr.host(), addr.port())),
            Err(e) => {
                let shown = part.rsplit('@').next().unwrap_or(part);
                return Err(Error::unavailable(format!(
                    "cannot connect to NATS: {shown:?} is not a NATS server URL"
                ))
                .with_source(e)
                .with_temporary(false));
            }
        }
    }
    if labels.is_empty() {
        return Err(
            Error::unavailable("cannot connect to NATS: the URL is empty").with_temporary(false),
        );
    }
    Ok(labels.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_labels_hide_credentials() {
        assert_eq!(
            url_label("nats://user:secret@10.1.2.3:4333").unwrap(),
            "10.1.2.3:4333"
        );
        assert_eq!(url_label("localhost").unwrap(), "localhost:4222");
        assert_eq!(url_label("nats://a:1, nats://b:2").unwrap(), "a:1,b:2");
        let e = url_label("nats://u:secret@[bad").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(!e.is_temporary());
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(url_label("").is_err());
    }
}

/// The pause before reconnect attempt `attempts` (counted from 1): none for the first, then
/// 50 ms doubling up to 500 ms.
fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let exp = u32::try_from(attempts.saturating_sub(2).min(4)).unwrap_or(4);
    Duration::from_millis(50 * 2u64.pow(exp)).min(Duration::from_millis(500))
}

#[cfg(test)]
mod reconnect_tests {
    use super::*;

    #[test]
    fn reconnect_pauses_stay_short() {
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), Duration::from_millis(50));
        assert_eq!(reconnect_delay(3), Duration::from_millis(100));
        assert_eq!(reconnect_delay(100), Duration::from_millis(500));
    }
}
