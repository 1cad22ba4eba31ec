//! [`MongoStore`]: the [`LeaseStore`] on MongoDB.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use lease_core::LeaseStoreExt;
use lease_core::{
    Capabilities, Coordinator, CoordinatorBuilder, Error, LeaseInfo, LeaseStore, Result, SlotStore,
    backend::{
        Grant, HolderToken, SlotClaim, SlotFinish, SlotRecord, async_trait, ceil_millis,
        validate_instance,
    },
};
use mongodb::bson::{Document, doc};
use mongodb::error::Error as MongoError;
use mongodb::options::{
    Acknowledgment, ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReturnDocument,
    SelectionCriteria, WriteConcern,
};
use mongodb::{Client, Collection, Database, IndexModel};
use tokio::sync::OnceCell;

use crate::commands;
use crate::config::{DEFAULT_DATABASE, Ddl, MongoConfig};
use crate::error::{is_duplicate_id, map_error};

/// The longest lease name the store accepts, in bytes. A name is the document's `_id` (a
/// BSON string); MongoDB 4.2+ has no index key limit, so this is a sane bound, not the server's.
pub const MAX_NAME_BYTES: usize = 1024;

/// MongoDB's `NamespaceExists` error code, which `create` answers for an existing collection.
const NAMESPACE_EXISTS: i32 = 48;

/// MongoDB's `IndexOptionsConflict` error code, which `createIndexes` answers when an index on
/// the same keys exists under another name.
const INDEX_OPTIONS_CONFLICT: i32 = 85;

/// Leases on MongoDB: one document per name, every operation one command on the primary, every
/// "now" the server's `$$NOW`.
///
/// | operation | command (one round trip) |
/// |---|---|
/// | claim | `findAndModify` upsert, filter [`claim_filter`](crate::commands::claim_filter), conditional pipeline [`claim_update`](crate::commands::claim_update); held when the document comes back without this call's claim id, or on a duplicate `_id` |
/// | renew | `findAndModify`, filter [`held_filter`](crate::commands::held_filter), pipeline [`renew_update`](crate::commands::renew_update) |
/// | release | `findAndModify`, filter [`held_filter`](crate::commands::held_filter), update [`release_update`](crate::commands::release_update) |
/// | force release | `findAndModify`, filter [`live_filter`](crate::commands::live_filter), update [`release_update`](crate::commands::release_update) |
/// | verify | `aggregate` [`verify_pipeline`](crate::commands::verify_pipeline) |
/// | get | `aggregate` [`get_pipeline`](crate::commands::get_pipeline) |
///
/// Partition leases and membership records live in two more collections; their commands are
/// listed on the store's [`PartitionStore`](lease_core::PartitionStore) and
/// [`MembershipStore`](lease_core::MembershipStore) implementations (a batch renewal of
/// partitions takes two round trips, every other operation one).
///
/// Writes use write concern `{w: "majority", j: true}`, so an acknowledged claim survives a
/// failover and a crash; reads use read concern `majority` on the primary. Every call is
/// bounded by the [operation timeout](MongoConfig::op_timeout): on the client, and on the
/// server through `maxTimeMS` and `wtimeout`.
///
/// Cloning is cheap: clones share the client.
#[derive(Clone)]
pub struct MongoStore {
    client: Client,
    leases: Collection<Document>,
    /// Partition leases ([`PartitionStore`](lease_core::PartitionStore)).
    pub(crate) partitions: Collection<Document>,
    /// Membership records ([`MembershipStore`](lease_core::MembershipStore)).
    pub(crate) members: Collection<Document>,
    config: Arc<MongoConfig>,
    /// Set once the start-up check ([`LeaseStore::available`]) has passed; shared by clones.
    started: Arc<OnceCell<()>>,
}

impl fmt::Debug for MongoStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoStore")
            .field("server", &self.config.server())
            .field("database", &self.config.database_name())
            .field("collection", &self.config.collection_name())
            .field(
                "partition_collection",
                &self.config.partition_collection_name(),
            )
            .field("member_collection", &self.config.member_collection_name())
            .field("ddl", &self.config.ddl_mode())
            .field("op_timeout", &self.config.op_timeout_value())
            .finish()
    }
}

/// Removes the password from a MongoDB URL, for messages.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<not a mongodb:// URL>".to_owned();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hosts}{tail}")
        }
        None => url.to_owned(),
    }
}

/// The hosts of a MongoDB URL (no user, no password), for messages.
pub(crate) fn hosts_of_url(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    if hosts.is_empty() {
        "<no host>".to_owned()
    } else {
        hosts.to_owned()
    }
}

/// The password of a MongoDB URL, if any, to keep it out of messages.
fn password_of_url(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (userinfo, _) = rest[..end].rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    (!password.is_empty()).then_some(password)
}

impl MongoStore {
    /// A store on the user's `client`, leases in `database`, with the default options (see
    /// [`MongoConfig::new`]). No I/O; the start-up check runs before the first claim (see
    /// [`with_config`](MongoStore::with_config)).
    ///
    /// # Errors
    ///
    /// `InvalidName` when MongoDB cannot hold a database of that name.
    pub fn new(client: Client, database: impl Into<String>) -> Result<MongoStore> {
        MongoStore::with_config(client, MongoConfig::new(database))
    }

    /// A store on the user's `client` with `config`. No I/O.
    ///
    /// **The start-up check is never skipped.** The store runs
    /// [`available`](LeaseStore::available) itself, once, before its first operation that hands
    /// out a term or joins a group (`claim`, `claim_slot`, `claim_rerun`, `acquire_partition`,
    /// `heartbeat`), so a coordinator, group worker or scheduler built over it never works on a
    /// server or collection the check refuses (a server older than 4.2, a view, a collation
    /// that does not compare names byte for byte, majority reads off). While the check fails,
    /// each of those operations fails with the check's error and tries again next time; once
    /// it has passed (or an explicit `available()` call passed) it is not run again. Call
    /// `available()` at start-up anyway, to fail there.
    ///
    /// The store sets its own concerns on its collection handle (majority write concern,
    /// journaled; majority read concern; primary), whatever the client's defaults are.
    ///
    /// # Errors
    ///
    /// `InvalidName` / `InvalidTimings` when `config` does not [validate](MongoConfig::validate).
    pub fn with_config(client: Client, config: MongoConfig) -> Result<MongoStore> {
        config.validate()?;
        let write_concern = WriteConcern::builder()
            .w(Acknowledgment::Majority)
            .journal(true)
            .w_timeout(config.op_timeout_value())
            .build();
        let options = CollectionOptions::builder()
            .write_concern(write_concern)
            .read_concern(ReadConcern::majority())
            .selection_criteria(SelectionCriteria::ReadPreference(
                mongodb::options::ReadPreference::Primary,
            ))
            .build();
        let db = client.database(config.database_name());
        let leases = db.collection_with_options(config.collection_name(), options.clone());
        let partitions =
            db.collection_with_options(&config.partition_collection_name(), options.clone());
        let members = db.collection_with_options(&config.member_collection_name(), options);
        Ok(MongoStore {
            client,
            leases,
            partitions,
            members,
            config: Arc::new(config),
            started: Arc::new(OnceCell::new()),
        })
    }

    /// Connects to `url`, leases in the URL's database (`mongodb://host/<database>`) or
    /// [`DEFAULT_DATABASE`], default options otherwise, and checks the server with
    /// [`available`](LeaseStore::available).
    ///
    /// # Errors
    ///
    /// See [`connect_with`](MongoStore::connect_with).
    pub async fn connect(url: &str) -> Result<MongoStore> {
        MongoStore::connect_inner(url, None).await
    }

    /// Connects to `url` with `config`, and checks the server with
    /// [`available`](LeaseStore::available).
    ///
    /// When the URL sets no `serverSelectionTimeoutMS`, it becomes half the operation timeout,
    /// so an unreachable server is reported as `Unavailable` rather than a timeout.
    ///
    /// # Errors
    ///
    /// `Unavailable` naming the hosts (never the password) for a URL that cannot be parsed
    /// (permanent), an unreachable server (temporary) or refused credentials (permanent);
    /// `Unsupported` for a server older than 4.2; the config's own errors.
    pub async fn connect_with(url: &str, config: MongoConfig) -> Result<MongoStore> {
        MongoStore::connect_inner(url, Some(config)).await
    }

    /// [`connect_with`](MongoStore::connect_with) the URL in `LEASE_MONGODB_URL` and the
    /// config from [`MongoConfig::from_env`].
    ///
    /// # Errors
    ///
    /// `Unavailable` when `LEASE_MONGODB_URL` is unset, and as
    /// [`connect_with`](MongoStore::connect_with).
    pub async fn connect_from_env() -> Result<MongoStore> {
        let var = crate::config::env::URL;
        let url = std::env::var(var)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .ok_or_else(|| {
                Error::unavailable(format!("{var} is not set; give the MongoDB server's URL"))
                    .with_temporary(false)
            })?;
        MongoStore::connect_with(&url, MongoConfig::from_env()?).await
    }

    async fn connect_inner(url: &str, config: Option<MongoConfig>) -> Result<MongoStore> {
        let hosts = hosts_of_url(url);
        let shown = redact_url(url);
        let scrub = |s: String| match password_of_url(url) {
            Some(p) => s.replace(p, "***"),
            None => s,
        };
        let bad_url = |e: MongoError| {
            // The driver's message may quote the URL; keep the password out of it.
            Error::unavailable(format!(
                "cannot use the MongoDB URL {shown} (hosts {hosts}): {}",
                scrub(e.kind.to_string())
            ))
            .with_temporary(false)
        };
        let bound = config
            .as_ref()
            .map_or(crate::config::DEFAULT_OP_TIMEOUT, |c| c.op_timeout_value());
        let parsed = tokio::time::timeout(bound, ClientOptions::parse(url).into_future()).await;
        let mut options = match parsed {
            Ok(Ok(o)) => o,
            // SRV and TXT look-ups failing: the hosts are unreachable, not the URL wrong.
            Ok(Err(e)) if matches!(*e.kind, mongodb::error::ErrorKind::DnsResolve { .. }) => {
                return Err(Error::unavailable(format!(
                    "cannot resolve the MongoDB hosts {hosts}: {}",
                    scrub(e.kind.to_string())
                )));
            }
            Ok(Err(e)) => return Err(bad_url(e)),
            Err(_) => {
                return Err(Error::timeout(
                    format!("resolving the MongoDB hosts {hosts}"),
                    bound,
                ));
            }
        };
        let mut config = match config {
            Some(c) => c,
            None => MongoConfig::new(
                options
                    .default_database
                    .clone()
                    .unwrap_or_else(|| DEFAULT_DATABASE.to_owned()),
            ),
        };
        if !config.has_server_label() {
            let label = options
                .hosts
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",");
            config = config.server_label(if label.is_empty() {
                hosts.clone()
            } else {
                label
            });
        }
        config.validate()?;
        if options.server_selection_timeout.is_none() {
            options.server_selection_timeout = Some(config.op_timeout_value() / 2);
        }
        let client = Client::with_options(options).map_err(bad_url)?;
        let store = MongoStore::with_config(client, config)?;
        store.available().await?;
        Ok(store)
    }

    /// The checks of [`LeaseStore::available`].
    async fn start_up_check(&self) -> Result<()> {
        let op = "availability check";
        let db = self.database();
        let build_info = db.run_command(commands::build_info_command()).into_future();
        let reply = self
            .bounded(op, "", build_info)
            .await?
            .map_err(|e| self.map(op, "", e))?;
        commands::check_build_info(&reply, self.server())?;
        self.ensure_schema().await?;
        let names = [
            self.config.collection_name().to_owned(),
            self.config.partition_collection_name(),
            self.config.member_collection_name(),
        ];
        let list = async {
            let specs = db
                .list_collections()
                .filter(doc! { "name": { "$in": names.as_slice() } })
                .await?;
            specs.try_collect::<Vec<_>>().await
        };
        let specs = self
            .bounded(op, "", list)
            .await?
            .map_err(|e| self.map("collection check", "", e))?;
        for spec in specs {
            commands::check_collection(
                &spec.name,
                matches!(spec.collection_type, mongodb::results::CollectionType::View),
                spec.options.collation.as_ref().map(|c| c.locale.as_str()),
                self.server(),
            )?;
        }
        // A majority read of a name no lease can have: refused where majority reads are off.
        let probe = self
            .leases
            .find_one(doc! { "_id": "" })
            .max_time(self.op_timeout())
            .into_future();
        self.bounded(op, "", probe)
            .await?
            .map_err(|e| self.map("majority read check", "", e))?;
        Ok(())
    }

    /// Runs the start-up check once, before the first operation that hands out a term or joins
    /// a group; see [`with_config`](MongoStore::with_config). A failed check is not remembered:
    /// the next such operation runs it again.
    pub(crate) async fn started(&self) -> Result<()> {
        if self.started.initialized() {
            return Ok(());
        }
        self.started
            .get_or_try_init(|| self.start_up_check())
            .await
            .map(|_| ())
    }

    /// The user's client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The options the store runs with.
    pub fn config(&self) -> &MongoConfig {
        &self.config
    }

    /// A coordinator builder over this store.
    pub fn coordinator(&self) -> CoordinatorBuilder {
        Coordinator::builder(self.clone())
    }

    /// Creates what the store needs when it is missing: the three collections (lease,
    /// partition, membership; the `_id` index, which MongoDB makes with each collection, is the
    /// only index leases need), and the indexes
    /// [`PARTITION_INDEX`](commands::PARTITION_INDEX) `{"_id.g": 1, "_id.p": 1}` on the
    /// partition collection (for `owners`) and [`MEMBER_INDEX`](commands::MEMBER_INDEX)
    /// `{"_id.s": 1, "_id.n": 1}` on the membership collection (for `members`). An index on the
    /// same keys under another name counts as present. Does nothing under [`Ddl::None`].
    /// [`available`](LeaseStore::available) calls it.
    ///
    /// # Errors
    ///
    /// As any call: `Unavailable`, `Timeout`, or `Backend` (e.g. the user may not run
    /// `create` or `createIndexes`: choose [`Ddl::None`] and create the collections and indexes
    /// as an administrator).
    pub async fn ensure_schema(&self) -> Result<()> {
        if self.config.ddl_mode() == Ddl::None {
            return Ok(());
        }
        let db = self.database();
        for name in [
            self.config.collection_name().to_owned(),
            self.config.partition_collection_name(),
            self.config.member_collection_name(),
        ] {
            let create = db
                .create_collection(&name)
                .write_concern(WriteConcern::majority())
                .into_future();
            match self.bounded("create collection", &name, create).await? {
                Ok(()) => {}
                Err(e) if code_of(&e) == Some(NAMESPACE_EXISTS) => {}
                Err(e) => return Err(self.map("create collection", &name, e)),
            }
        }
        let indexes = [
            (
                &self.partitions,
                commands::PARTITION_INDEX,
                commands::partition_index_keys(),
            ),
            (
                &self.members,
                commands::MEMBER_INDEX,
                commands::member_index_keys(),
            ),
        ];
        for (collection, index, keys) in indexes {
            let model = IndexModel::builder()
                .keys(keys)
                .options(IndexOptions::builder().name(index.to_owned()).build())
                .build();
            let create = collection
                .create_index(model)
                .max_time(self.op_timeout())
                .into_future();
            let what = format!("{}.{index}", collection.name());
            match self.bounded("create index", &what, create).await? {
                Ok(_) => {}
                // The same keys under another name (an administrator's index): present.
                Err(e) if code_of(&e) == Some(INDEX_OPTIONS_CONFLICT) => {}
                Err(e) => return Err(self.map("create index", &what, e)),
            }
        }
        Ok(())
    }

    fn database(&self) -> Database {
        self.client.database(self.config.database_name())
    }

    pub(crate) fn server(&self) -> &str {
        self.config.server()
    }

    pub(crate) fn op_timeout(&self) -> Duration {
        self.config.op_timeout_value()
    }

    pub(crate) fn map(&self, op: &str, name: &str, err: MongoError) -> Error {
        map_error(err, op, name, self.server())
    }

    /// Runs `fut` within the operation timeout. The outer error is the timeout; the inner
    /// result is the driver's, for the caller to read (a claim looks for the duplicate key).
    pub(crate) async fn bounded<T>(
        &self,
        op: &str,
        name: &str,
        fut: impl Future<Output = mongodb::error::Result<T>>,
    ) -> Result<mongodb::error::Result<T>> {
        let bound = self.op_timeout();
        tokio::time::timeout(bound, fut).await.map_err(|_| {
            let what = if name.is_empty() {
                format!("MongoDB {op} at {}", self.server())
            } else {
                format!("MongoDB {op} of '{name}' at {}", self.server())
            };
            Error::timeout(what, bound)
        })
    }

    /// One `findAndModify` without upsert: the document after the update, or `None` when the
    /// filter matched nothing.
    async fn modify(
        &self,
        op: &str,
        name: &str,
        filter: Document,
        update: impl Into<mongodb::options::UpdateModifications>,
        projection: Document,
    ) -> Result<Option<Document>> {
        let fut = self
            .leases
            .find_one_and_update(filter, update)
            .return_document(ReturnDocument::After)
            .projection(projection)
            .max_time(self.op_timeout())
            .into_future();
        self.bounded(op, name, fut)
            .await?
            .map_err(|e| self.map(op, name, e))
    }

    /// One `aggregate` whose answer is at most one document (the first batch holds it, so the
    /// cursor is closed by the server and no `getMore` or `killCursors` follows).
    async fn read_one(
        &self,
        op: &str,
        name: &str,
        pipeline: Vec<Document>,
    ) -> Result<Option<Document>> {
        let fut = async {
            let mut cursor = self
                .leases
                .aggregate(pipeline)
                .max_time(self.op_timeout())
                .await?;
            cursor.try_next().await
        };
        self.bounded(op, name, fut)
            .await?
            .map_err(|e| self.map(op, name, e))
    }
}

/// The server's error code, when the error carries one.
fn code_of(err: &MongoError) -> Option<i32> {
    match err.kind.as_ref() {
        mongodb::error::ErrorKind::Command(c) => Some(c.code),
        _ => None,
    }
}

pub(crate) fn ttl_millis(ttl: Duration) -> i64 {
    i64::try_from(ceil_millis(ttl)).unwrap_or(i64::MAX)
}

#[async_trait]
impl LeaseStore for MongoStore {
    fn backend(&self) -> &'static str {
        "mongodb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            force_release: true,
            slots: true,
            partitions: true,
            membership: true,
            max_name_bytes: MAX_NAME_BYTES,
            // The multi-document `update`, then the `aggregate` that reads back the documents
            // carrying this renewal's id: two round trips however many partitions.
            batch_renew: lease_core::backend::BatchRenew::Fixed { round_trips: 2 },
            ..Capabilities::default()
        }
    }

    /// Checks that the server answers and runs MongoDB 4.2 or newer; under [`Ddl::Auto`]
    /// creates the three collections and the two indexes when missing
    /// ([`ensure_schema`](MongoStore::ensure_schema)); checks that none of the three
    /// collections is a view and that each compares names byte for byte (simple collation);
    /// and that majority reads are served. A few commands (eight under [`Ddl::Auto`], three
    /// under [`Ddl::None`]), at start-up only.
    async fn available(&self) -> Result<()> {
        self.start_up_check().await?;
        // Later operations need not check again.
        let _ = self.started.set(());
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
        self.started().await?;
        // 128 fresh random bits per call: the document comes back with them only if this
        // call's update took the lease.
        let claim_id = HolderToken::mint().to_hex();
        let fut = self
            .leases
            .find_one_and_update(
                commands::claim_filter(name),
                commands::claim_update(&holder.to_hex(), instance, ttl_millis(ttl), &claim_id),
            )
            .upsert(true)
            .return_document(ReturnDocument::After)
            .projection(commands::claim_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded("claim", name, fut).await? {
            Ok(Some(doc)) => {
                let grant = commands::grant_from_claim(&doc, &claim_id, ttl)?;
                if grant.is_none() {
                    tracing::debug!(name, "mongodb claim: held");
                }
                Ok(grant)
            }
            Ok(None) => Err(Error::new(
                lease_core::ErrorKind::Backend,
                format!(
                    "MongoDB at {} answered an upsert of '{name}' with no document",
                    self.server()
                ),
            )),
            // Two upserts raced to insert a missing document and the other one won (servers
            // that do not retry the upsert themselves answer this way): held.
            Err(e) if is_duplicate_id(&e) => {
                tracing::debug!(name, "mongodb claim: held (duplicate _id)");
                Ok(None)
            }
            Err(e) => Err(self.map("claim", name, e)),
        }
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        let doc = self
            .modify(
                "renew",
                name,
                commands::held_filter(name, &holder.to_hex()),
                commands::renew_update(ttl_millis(ttl)),
                commands::grant_projection(),
            )
            .await?;
        doc.map(|d| commands::grant_from_update(&d, ttl))
            .transpose()
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        self.validate_name(name)?;
        let doc = self
            .modify(
                "release",
                name,
                commands::held_filter(name, &holder.to_hex()),
                commands::release_update(),
                commands::release_projection(),
            )
            .await?;
        Ok(doc.is_some())
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        let doc = self
            .read_one(
                "verify",
                name,
                commands::verify_pipeline(name, &holder.to_hex()),
            )
            .await?;
        match doc {
            Some(d) => commands::grant_from_verify(&d),
            None => Ok(None),
        }
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        self.validate_name(name)?;
        let doc = self
            .read_one("get", name, commands::get_pipeline(name))
            .await?;
        doc.map(|d| commands::info_from_get(name, &d)).transpose()
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        self.validate_name(name)?;
        let doc = self
            .modify(
                "force release",
                name,
                commands::live_filter(name),
                commands::release_update(),
                commands::release_projection(),
            )
            .await?;
        Ok(doc.is_some())
    }
}

/// Scheduler slots on the lease document: `slot_ms`, `unfinished_ms` and `rerun_ms` (numbers,
/// milliseconds since the Unix epoch), compared with the server's `$$NOW`.
///
/// | operation | commands (round trips) |
/// |---|---|
/// | claim slot | `aggregate` [`slot_read_pipeline`](crate::commands::slot_read_pipeline) (the record and `$$NOW`), decided by [`slot_plan`](crate::commands::slot_plan); then, unless held, taken or early, `findAndModify` filter [`slot_claim_filter`](crate::commands::slot_claim_filter) (term compared), pipeline [`slot_claim_update`](crate::commands::slot_claim_update), returning the document before the update (2) |
/// | finish slot | `findAndModify`, filter [`name_filter`](crate::commands::name_filter), conditional pipeline [`finish_update`](crate::commands::finish_update) (1) |
/// | unfinished | `aggregate` [`unfinished_pipeline`](crate::commands::unfinished_pipeline) over `_id: {$in: names}` (1; none for no names) |
/// | claim rerun | `findAndModify`, filter [`rerun_filter`](crate::commands::rerun_filter), pipeline [`rerun_update`](crate::commands::rerun_update) (1) |
/// | last slot | `find` [`name_filter`](crate::commands::name_filter), projection [`last_slot_projection`](crate::commands::last_slot_projection) (1) |
///
/// Each command is bounded by the operation timeout, so a slot claim takes at most two.
#[async_trait]
impl SlotStore for MongoStore {
    async fn claim_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<SlotClaim> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
        self.started().await?;
        let op = "slot claim";
        let read = self
            .read_one(op, name, commands::slot_read_pipeline(name))
            .await?
            .ok_or_else(|| {
                Error::new(
                    lease_core::ErrorKind::Backend,
                    format!(
                        "MongoDB at {} answered the slot read of '{name}' with no document",
                        self.server()
                    ),
                )
            })?;
        let term = match commands::slot_plan(&read, instant_ms)? {
            commands::SlotPlan::Refuse(refused) => return Ok(refused),
            commands::SlotPlan::Write { term } => term,
        };
        let fut = self
            .leases
            .find_one_and_update(
                commands::slot_claim_filter(name, term, instant_ms),
                commands::slot_claim_update(
                    &holder.to_hex(),
                    instance,
                    ttl_millis(ttl),
                    instant_ms,
                ),
            )
            .upsert(term.is_none())
            .return_document(ReturnDocument::Before)
            .projection(commands::slot_claim_projection())
            .max_time(self.op_timeout())
            .into_future();
        match self.bounded(op, name, fut).await? {
            Ok(Some(before)) => commands::slot_claimed(Some(&before), ttl),
            // The upsert inserted the document: there was nothing before it.
            Ok(None) if term.is_none() => commands::slot_claimed(None, ttl),
            // The term moved (another replica's claim matched first) or the record changed.
            Ok(None) => {
                tracing::debug!(name, instant_ms, "mongodb slot claim: lost the race");
                Ok(SlotClaim::Held)
            }
            // Another replica inserted the first record meanwhile.
            Err(e) if is_duplicate_id(&e) => {
                tracing::debug!(name, instant_ms, "mongodb slot claim: held (duplicate _id)");
                Ok(SlotClaim::Held)
            }
            Err(e) => Err(self.map(op, name, e)),
        }
    }

    async fn finish_slot(
        &self,
        name: &str,
        holder: &HolderToken,
        instant_ms: i64,
        passed_ms: Option<i64>,
    ) -> Result<SlotFinish> {
        self.validate_name(name)?;
        // Fresh per call: the document comes back with it only if this finish changed it.
        let finish_id = HolderToken::mint().to_hex();
        let doc = self
            .modify(
                "slot finish",
                name,
                commands::name_filter(name),
                commands::finish_update(&holder.to_hex(), instant_ms, passed_ms, &finish_id),
                commands::finish_projection(),
            )
            .await?;
        Ok(commands::finish_from_reply(doc.as_ref(), &finish_id))
    }

    async fn unfinished(&self, names: &[String]) -> Result<Vec<(String, i64)>> {
        for name in names {
            self.validate_name(name)?;
        }
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let op = "unfinished slots";
        // One more than the answer can hold, so the first batch ends the cursor: no getMore
        // (unless the answer passes 16 MiB).
        let batch = u32::try_from(names.len().saturating_add(1)).unwrap_or(u32::MAX);
        let fut = async {
            let cursor = self
                .leases
                .aggregate(commands::unfinished_pipeline(names))
                .batch_size(batch)
                .max_time(self.op_timeout())
                .await?;
            cursor.try_collect::<Vec<Document>>().await
        };
        let replies = self
            .bounded(op, "", fut)
            .await?
            .map_err(|e| self.map(op, "", e))?;
        commands::unfinished_from_replies(names, &replies)
    }

    async fn claim_rerun(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
        instant_ms: i64,
    ) -> Result<Option<Grant>> {
        self.validate_name(name)?;
        self.validate_ttl(ttl)?;
        validate_instance(instance)?;
        self.started().await?;
        let doc = self
            .modify(
                "slot rerun claim",
                name,
                commands::rerun_filter(name, instant_ms),
                commands::rerun_update(&holder.to_hex(), instance, ttl_millis(ttl), instant_ms),
                commands::grant_projection(),
            )
            .await?;
        doc.map(|d| commands::grant_from_update(&d, ttl))
            .transpose()
    }

    async fn last_slot(&self, name: &str) -> Result<Option<SlotRecord>> {
        self.validate_name(name)?;
        let op = "last slot";
        let fut = self
            .leases
            .find_one(commands::name_filter(name))
            .projection(commands::last_slot_projection())
            .max_time(self.op_timeout())
            .into_future();
        let doc = self
            .bounded(op, name, fut)
            .await?
            .map_err(|e| self.map(op, name, e))?;
        doc.map(|d| commands::slot_record_from(&d)).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_their_password() {
        let url = "mongodb://app:s3cret@db1:27017,db2:27018/app?replicaSet=rs0";
        assert_eq!(
            redact_url(url),
            "mongodb://app:***@db1:27017,db2:27018/app?replicaSet=rs0"
        );
        assert_eq!(hosts_of_url(url), "db1:27017,db2:27018");
        assert_eq!(password_of_url(url), Some("s3cret"));
        assert_eq!(redact_url("mongodb://db1/x"), "mongodb://db1/x");
        assert_eq!(hosts_of_url("mongodb://db1"), "db1");
        assert_eq!(password_of_url("mongodb://u@db1"), None);
        assert_eq!(
            hosts_of_url("mongodb+srv://u:p@cluster0.example.net/?x=1"),
            "cluster0.example.net"
        );
        assert!(!redact_url("nonsense:p@ss").contains("p@ss"));
    }

    #[test]
    fn ttls_are_kept_in_whole_milliseconds_rounded_up() {
        assert_eq!(ttl_millis(Duration::from_millis(600)), 600);
        assert_eq!(ttl_millis(Duration::from_micros(1500)), 2);
    }
}
