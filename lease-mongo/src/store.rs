//! [`MongoStore`]: the store struct, how it is made ([`MongoStore::connect`],
//! [`MongoStore::with_client`]), its start-up check
//! ([`available`](lease_core::LeaseStore::available)), and the command helpers every operation
//! shares.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use lease_core::backend::ceil_millis;
use lease_core::layer::Operation;
use lease_core::telemetry::redact::redact_url;
use lease_core::{Error, ErrorKind, Result};
use mongodb::bson::{Document, doc};
use mongodb::error::Error as MongoError;
use mongodb::options::{
    Acknowledgment, ClientOptions, CollectionOptions, IndexOptions, ReadConcern, ReturnDocument,
    SelectionCriteria, WriteConcern,
};
use mongodb::{Client, Collection, Database, IndexModel};
use tokio::sync::OnceCell;

use crate::config::{Ddl, MongoConfig};
use crate::error::map_error;
use crate::wire;

/// The longest lease name the store accepts, in bytes. A name is the document's `_id` (a
/// BSON string); MongoDB 4.2+ has no index key limit, so this is a sane bound, not the server's.
pub const MAX_NAME_BYTES: usize = 1024;

/// MongoDB's `NamespaceExists` error code, which `create` answers for an existing collection.
const NAMESPACE_EXISTS: i32 = 48;

/// MongoDB's `IndexOptionsConflict` error code, which `createIndexes` answers when an index on
/// the same keys exists under another name.
const INDEX_OPTIONS_CONFLICT: i32 = 85;

/// The batch size of reads whose answer has no known bound (owners, members): the first batch
/// then holds everything up to the server's 16 MiB reply limit, so one round trip answers
/// unless the answer is larger (tens of thousands of records).
pub(crate) const READ_BATCH: u32 = 1_000_000;

/// Leases on MongoDB: one document per name, every operation one command on the primary (but
/// `renew_many`: two), every "now" the server's `$$NOW`.
///
/// | operation | command (one round trip unless said) |
/// |---|---|
/// | claim | `findAndModify` upsert, filter `claim_filter`, conditional pipeline `claim_update`; held when the document comes back without this call's claim id, or on a duplicate `_id` |
/// | renew | `findAndModify`, filter `held_filter`, pipeline `renew_update` |
/// | renew_many | `update` of one statement per name (filter `held_filter` each, pipeline: expiry `$$NOW` + TTL and a fresh random `renewal_id`), then, when it matched any, `aggregate` `renewed_many_pipeline` reading back the documents carrying that renewal id (holder compared on the client), in one causally consistent session: two round trips per 8 MiB of statements |
/// | release | `findAndModify`, filter `held_filter`, update `release_update` |
/// | force release | `findAndModify`, filter `live_filter`, update `release_update` |
/// | verify | `aggregate` `verify_pipeline` |
/// | get | `aggregate` `get_pipeline` |
///
/// Partition leases and membership records live in two more collections; their commands are listed
/// on the store's [`PartitionStore`](lease_core::backend::partitions::PartitionStore) and
/// [`MembershipStore`](lease_core::backend::membership::MembershipStore) implementations (a batch
/// renewal of partitions takes two round trips, every other operation one).
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
    /// Leases ([`LeaseStore`](lease_core::LeaseStore)) and their scheduler slots.
    pub(crate) leases: Collection<Document>,
    /// Partition leases ([`PartitionStore`](lease_core::backend::partitions::PartitionStore)).
    pub(crate) partitions: Collection<Document>,
    /// Membership records ([`MembershipStore`](lease_core::backend::membership::MembershipStore)).
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

impl MongoStore {
    /// Connects to `url` with `config`, and checks the server with
    /// [`available`](lease_core::LeaseStore::available).
    ///
    /// Leases live in the config's database; for a config that names none
    /// ([`MongoConfig::default`]), in the URL's (`mongodb://host/<database>`), or
    /// [`DEFAULT_DATABASE`](crate::DEFAULT_DATABASE) when the URL names none either. Errors name
    /// the URL's hosts unless [`MongoConfig::server_label`] says otherwise. When the URL sets no
    /// `serverSelectionTimeoutMS`, it becomes half the operation timeout, so an unreachable
    /// server is reported as `Unavailable` rather than as a timeout.
    ///
    /// The URL and the options from the environment:
    ///
    /// ```no_run
    /// use lease_mongo::{MongoConfig, MongoStore, env};
    ///
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = MongoStore::connect(&std::env::var(env::URL)?, MongoConfig::from_env()?).await?;
    /// # drop(store); Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// `Unavailable` naming the hosts (never the password) for a URL that cannot be parsed
    /// (permanent), hosts that cannot be resolved or reached (temporary) or refused credentials
    /// (permanent); `Unsupported` for a server older than 4.2; the config's own errors.
    pub async fn connect(url: &str, config: MongoConfig) -> Result<MongoStore> {
        config.validate()?;
        let hosts = hosts_of_url(url);
        let shown = redact_url(url);
        let scrub = |s: String| lease_core::telemetry::redact::scrub(&s, url);
        let bad_url = |e: MongoError| {
            // The driver's message may quote the URL; keep the password out of it.
            Error::unavailable(format!(
                "cannot use the MongoDB URL {shown} (hosts {hosts}): {}",
                scrub(e.kind.to_string())
            ))
            .with_temporary(false)
        };
        let bound = config.op_timeout_value();
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
            // Nothing was sent to MongoDB yet: its hosts cannot be found, so it is unreachable.
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "cannot resolve the MongoDB hosts {hosts}: no answer within {bound:?}"
                )));
            }
        };
        let mut config = config.or_database(options.default_database.clone());
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
        let store = MongoStore::with_client(client, config)?;
        store.check_available().await?;
        Ok(store)
    }

    /// A store on the application's own `client` with `config` (leases in the config's
    /// database, [`DEFAULT_DATABASE`](crate::DEFAULT_DATABASE) for [`MongoConfig::default`]).
    /// No I/O.
    ///
    /// **The start-up check is never skipped.** The store runs
    /// [`available`](lease_core::LeaseStore::available) itself, once, before its first operation
    /// that hands out a term or joins a group (`claim`, `claim_slot`, `claim_rerun`,
    /// `acquire_partition`, `heartbeat`), so a coordinator, group worker or scheduler built over
    /// it never works on a server or collection the check refuses (a server older than 4.2, a
    /// view, a collation that does not compare names byte for byte, majority reads off). While
    /// the check fails, each of those operations fails with the check's error and tries again
    /// next time; once it has passed (or an explicit `available()` call passed) it is not run
    /// again. Call `available()` at start-up anyway, to fail there.
    ///
    /// The store sets its own concerns on its collection handle (majority write concern,
    /// journaled; majority read concern; primary), whatever the client's defaults are. A
    /// `Client` does not tell its hosts: give [`MongoConfig::server_label`] for errors to name
    /// the server.
    ///
    /// # Errors
    ///
    /// `InvalidName` / `InvalidTimings` when `config` does not [validate](MongoConfig::validate).
    pub fn with_client(client: Client, config: MongoConfig) -> Result<MongoStore> {
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

    /// The user's client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The options the store runs with.
    pub fn config(&self) -> &MongoConfig {
        &self.config
    }

    /// The checks of [`LeaseStore::available`](lease_core::LeaseStore::available); the call
    /// that passes is remembered, so [`started`](Self::started) need not run them again.
    pub(crate) async fn check_available(&self) -> Result<()> {
        self.start_up_check().await?;
        // Later operations need not check again.
        let _ = self.started.set(());
        Ok(())
    }

    /// The checks themselves; see [`check_available`](Self::check_available).
    async fn start_up_check(&self) -> Result<()> {
        let op = Operation::Available;
        let db = self.database();
        let build_info = db.run_command(wire::build_info_command()).into_future();
        let reply = self
            .bounded(op, "", build_info)
            .await?
            .map_err(|e| self.map_step("availability check", e))?;
        wire::check_build_info(&reply, self.server()).map_err(|e| e.during(op, ""))?;
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
            .map_err(|e| self.map_step("collection check", e))?;
        for spec in specs {
            wire::check_collection(
                &spec.name,
                matches!(spec.collection_type, mongodb::results::CollectionType::View),
                spec.options.collation.as_ref().map(|c| c.locale.as_str()),
                self.server(),
            )
            .map_err(|e| e.during(op, ""))?;
        }
        // A majority read of a name no lease can have: refused where majority reads are off.
        let probe = self
            .leases
            .find_one(doc! { "_id": "" })
            .max_time(self.op_timeout())
            .into_future();
        self.bounded(op, "", probe)
            .await?
            .map_err(|e| self.map_step("majority read check", e))?;
        Ok(())
    }

    /// Runs the start-up check once, before the first operation that hands out a term or joins
    /// a group; see [`with_client`](MongoStore::with_client). A failed check is not remembered:
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

    /// Creates what the store needs when it is missing: the three collections (lease,
    /// partition, membership; the `_id` index, which MongoDB makes with each collection, is the
    /// only index leases need), and the indexes `group_partition` `{"_id.g": 1, "_id.p": 1}` on
    /// the partition collection (for `owners`) and `service_node` `{"_id.s": 1, "_id.n": 1}` on
    /// the membership collection (for `members`). An index on the same keys under another name
    /// counts as present. Does nothing under [`Ddl::None`].
    /// [`available`](lease_core::LeaseStore::available) calls it.
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
            match self.bounded(Operation::Available, "", create).await? {
                Ok(()) => {}
                Err(e) if code_of(&e) == Some(NAMESPACE_EXISTS) => {}
                Err(e) => return Err(self.map_step(&format!("create collection {name}"), e)),
            }
        }
        let indexes = [
            (
                &self.partitions,
                wire::PARTITION_INDEX,
                wire::partition_index_keys(),
            ),
            (&self.members, wire::MEMBER_INDEX, wire::member_index_keys()),
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
            match self.bounded(Operation::Available, "", create).await? {
                Ok(_) => {}
                // The same keys under another name (an administrator's index): present.
                Err(e) if code_of(&e) == Some(INDEX_OPTIONS_CONFLICT) => {}
                Err(e) => return Err(self.map_step(&format!("create index {what}"), e)),
            }
        }
        Ok(())
    }

    pub(crate) fn database(&self) -> Database {
        self.client.database(self.config.database_name())
    }

    pub(crate) fn server(&self) -> &str {
        self.config.server()
    }

    pub(crate) fn op_timeout(&self) -> Duration {
        self.config.op_timeout_value()
    }

    /// A driver error met during `op` on `name`, with its context attached.
    pub(crate) fn map(&self, op: Operation, name: &str, err: MongoError) -> Error {
        map_error(err, op, name, self.server())
    }

    /// A driver error met in `step` of the start-up check.
    fn map_step(&self, step: &str, err: MongoError) -> Error {
        crate::error::classified(err, crate::error::Said::Step(step))
            .during(Operation::Available, "")
            .at_server(self.server())
    }

    /// Runs `fut` within the operation timeout. The outer error is the timeout; the inner
    /// result is the driver's, for the caller to read (a claim looks for the duplicate key).
    pub(crate) async fn bounded<T>(
        &self,
        op: Operation,
        name: &str,
        fut: impl Future<Output = mongodb::error::Result<T>>,
    ) -> Result<mongodb::error::Result<T>> {
        let bound = self.op_timeout();
        tokio::time::timeout(bound, fut).await.map_err(|_| {
            Error::timeout("the MongoDB command", bound)
                .during(op, name)
                .at_server(self.server())
        })
    }

    /// One `findAndModify` without upsert: the document after the update, or `None` when the
    /// filter matched nothing.
    pub(crate) async fn modify(
        &self,
        op: Operation,
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
    pub(crate) async fn read_one(
        &self,
        op: Operation,
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

    /// An upsert answered with no document, which a `findAndModify` upsert never does.
    pub(crate) fn no_document(&self, op: Operation, what: &str) -> Error {
        Error::new(
            ErrorKind::Backend,
            "MongoDB answered an upsert with no document",
        )
        .during(op, what)
        .at_server(self.server())
    }

    /// One `aggregate` on `collection` whose documents all come back in the first batch when
    /// they are fewer than `batch` (then the server closes the cursor: no `getMore`, no
    /// `killCursors`).
    pub(crate) async fn read_all(
        &self,
        collection: &mongodb::Collection<Document>,
        op: Operation,
        name: &str,
        pipeline: Vec<Document>,
        batch: u32,
    ) -> Result<Vec<Document>> {
        let fut = async {
            let cursor = collection
                .aggregate(pipeline)
                .batch_size(batch)
                .max_time(self.op_timeout())
                .await?;
            cursor.try_collect::<Vec<Document>>().await
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

/// How a partition or member is named in errors: `group/partition`, `service/node`.
pub(crate) fn label(first: &str, second: impl std::fmt::Display) -> String {
    format!("{first}/{second}")
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
        assert_eq!(lease_core::telemetry::redact::secrets(url), ["s3cret"]);
        assert_eq!(redact_url("mongodb://db1/x"), "mongodb://db1/x");
        assert_eq!(hosts_of_url("mongodb://db1"), "db1");
        assert!(lease_core::telemetry::redact::secrets("mongodb://u@db1").is_empty());
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
