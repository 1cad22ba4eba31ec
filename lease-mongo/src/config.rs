//! Options of a [`MongoStore`](crate::MongoStore): database, collection, DDL switch, timeouts.

use std::time::Duration;

use lease_core::{Error, Result};

/// The collection leases live in unless told otherwise.
pub const DEFAULT_COLLECTION: &str = "leases";

/// The database of a config that names none ([`MongoConfig::default`]) when the URL given to
/// [`connect`](crate::MongoStore::connect) names none either, and on
/// [`with_client`](crate::MongoStore::with_client).
pub const DEFAULT_DATABASE: &str = "lease";

/// The bound on every call unless told otherwise.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// Environment variables read by [`MongoConfig::from_env`].
pub mod env {
    /// The server URL. The store does not read it: pass it to
    /// [`MongoStore::connect`](crate::MongoStore::connect), e.g.
    /// `MongoStore::connect(&std::env::var(env::URL)?, MongoConfig::from_env()?)`.
    pub const URL: &str = "LEASE_MONGODB_URL";
    /// The database name.
    pub const DATABASE: &str = "LEASE_MONGODB_DATABASE";
    /// The lease collection's name.
    pub const COLLECTION: &str = "LEASE_MONGODB_COLLECTION";
    /// The partition lease collection's name.
    pub const PARTITION_COLLECTION: &str = "LEASE_MONGODB_PARTITION_COLLECTION";
    /// The membership collection's name.
    pub const MEMBER_COLLECTION: &str = "LEASE_MONGODB_MEMBER_COLLECTION";
    /// The DDL switch: `auto` or `none`.
    pub const DDL: &str = "LEASE_MONGODB_DDL";
    /// The operation timeout in milliseconds.
    pub const OP_TIMEOUT_MS: &str = "LEASE_MONGODB_OP_TIMEOUT_MS";
}

/// Whether the store creates what it needs on the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ddl {
    /// [`available`](lease_core::LeaseStore::available) creates the collections and the
    /// indexes the store needs when they are missing. This is the default.
    #[default]
    Auto,
    /// The store never issues DDL: an administrator creates the collections and indexes
    /// (MongoDB also creates a collection on its first write, without the secondary indexes).
    /// Use it where the application's user may not run `create` or `createIndexes`.
    None,
}

impl Ddl {
    /// Parses `auto` or `none` (any case).
    pub fn parse(s: &str) -> Option<Ddl> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Ddl::Auto),
            "none" => Some(Ddl::None),
            _ => None,
        }
    }
}

/// Where leases live and how long a call may take.
///
/// Three collections: the lease collection (default [`DEFAULT_COLLECTION`]), and, for
/// partition leases and membership records, `<lease collection>_partitions` and
/// `<lease collection>_members` unless named otherwise.
///
/// ```
/// use std::time::Duration;
/// use lease_mongo::{Ddl, MongoConfig};
///
/// let config = MongoConfig::new("app")
///     .collection("app_leases")
///     .ddl(Ddl::None)
///     .op_timeout(Duration::from_secs(2));
/// assert_eq!(config.collection_name(), "app_leases");
/// assert_eq!(config.partition_collection_name(), "app_leases_partitions");
/// assert_eq!(config.member_collection_name(), "app_leases_members");
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MongoConfig {
    /// `None`: the URL's database on `connect`, else [`DEFAULT_DATABASE`].
    database: Option<String>,
    collection: String,
    partition_collection: Option<String>,
    member_collection: Option<String>,
    ddl: Ddl,
    op_timeout: Duration,
    server_label: Option<String>,
}

impl Default for MongoConfig {
    /// Leases in the database the URL names (`mongodb://host/<database>`) when given to
    /// [`connect`](crate::MongoStore::connect), else in [`DEFAULT_DATABASE`]; the other
    /// options as [`MongoConfig::new`].
    fn default() -> MongoConfig {
        MongoConfig {
            database: None,
            ..MongoConfig::new(DEFAULT_DATABASE)
        }
    }
}

impl MongoConfig {
    /// Leases in `database`, collection [`DEFAULT_COLLECTION`], DDL [`Ddl::Auto`], operation
    /// timeout [`DEFAULT_OP_TIMEOUT`].
    pub fn new(database: impl Into<String>) -> MongoConfig {
        MongoConfig {
            database: Some(database.into()),
            collection: DEFAULT_COLLECTION.to_owned(),
            partition_collection: None,
            member_collection: None,
            ddl: Ddl::Auto,
            op_timeout: DEFAULT_OP_TIMEOUT,
            server_label: None,
        }
    }

    /// Reads `LEASE_MONGODB_DATABASE` (default [`DEFAULT_DATABASE`], also when the URL names
    /// another: the database is always set),
    /// `LEASE_MONGODB_COLLECTION`, `LEASE_MONGODB_PARTITION_COLLECTION`,
    /// `LEASE_MONGODB_MEMBER_COLLECTION`, `LEASE_MONGODB_DDL` (`auto` / `none`) and
    /// `LEASE_MONGODB_OP_TIMEOUT_MS`; unset variables keep their defaults.
    ///
    /// # Errors
    ///
    /// `InvalidTimings` for a timeout that is not a positive number of milliseconds,
    /// `Unsupported` for a DDL value other than `auto` or `none`, `InvalidName` for a database
    /// or collection name MongoDB cannot hold.
    pub fn from_env() -> Result<MongoConfig> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let mut config = MongoConfig::new(var(env::DATABASE).unwrap_or(DEFAULT_DATABASE.into()));
        if let Some(c) = var(env::COLLECTION) {
            config = config.collection(c);
        }
        if let Some(c) = var(env::PARTITION_COLLECTION) {
            config = config.partition_collection(c);
        }
        if let Some(c) = var(env::MEMBER_COLLECTION) {
            config = config.member_collection(c);
        }
        if let Some(d) = var(env::DDL) {
            let ddl = Ddl::parse(&d).ok_or_else(|| {
                Error::unsupported(format!("{} is {d:?}; give \"auto\" or \"none\"", env::DDL))
            })?;
            config = config.ddl(ddl);
        }
        if let Some(ms) = var(env::OP_TIMEOUT_MS) {
            let ms: u64 = ms.trim().parse().map_err(|_| {
                Error::invalid_timings(format!(
                    "{} is {ms:?}; give a positive number of milliseconds",
                    env::OP_TIMEOUT_MS
                ))
            })?;
            config = config.op_timeout(Duration::from_millis(ms));
        }
        config.validate()?;
        Ok(config)
    }

    /// Sets the lease collection's name.
    pub fn collection(mut self, name: impl Into<String>) -> Self {
        self.collection = name.into();
        self
    }

    /// Sets the partition lease collection's name (default `<lease collection>_partitions`).
    pub fn partition_collection(mut self, name: impl Into<String>) -> Self {
        self.partition_collection = Some(name.into());
        self
    }

    /// Sets the membership collection's name (default `<lease collection>_members`).
    pub fn member_collection(mut self, name: impl Into<String>) -> Self {
        self.member_collection = Some(name.into());
        self
    }

    /// Sets the DDL switch.
    pub fn ddl(mut self, ddl: Ddl) -> Self {
        self.ddl = ddl;
        self
    }

    /// Sets the bound on every call: the client gives up after it (`Timeout`, outcome unknown),
    /// and the server is told the same bound (`maxTimeMS`, and `wtimeout` for the majority
    /// acknowledgement).
    pub fn op_timeout(mut self, timeout: Duration) -> Self {
        self.op_timeout = timeout;
        self
    }

    /// Sets how errors name the server, e.g. `"db1.example.com:27017"`. A `Client` does not
    /// tell its hosts, so a store built on one names the server only when told;
    /// [`connect`](crate::MongoStore::connect) sets it from the URL's hosts. Never put a
    /// password here.
    pub fn server_label(mut self, label: impl Into<String>) -> Self {
        self.server_label = Some(label.into());
        self
    }

    /// The database name: as set, or [`DEFAULT_DATABASE`] for a config that names none (which
    /// [`connect`](crate::MongoStore::connect) replaces with the URL's database, when it names
    /// one).
    pub fn database_name(&self) -> &str {
        self.database.as_deref().unwrap_or(DEFAULT_DATABASE)
    }

    /// `database` when the config names none and `database` is `Some`; otherwise unchanged.
    pub(crate) fn or_database(mut self, database: Option<String>) -> Self {
        if self.database.is_none() {
            self.database = database;
        }
        self
    }

    /// The lease collection's name.
    pub fn collection_name(&self) -> &str {
        &self.collection
    }

    /// The partition lease collection's name: as set, or `<lease collection>_partitions`.
    pub fn partition_collection_name(&self) -> String {
        self.partition_collection
            .clone()
            .unwrap_or_else(|| format!("{}_partitions", self.collection))
    }

    /// The membership collection's name: as set, or `<lease collection>_members`.
    pub fn member_collection_name(&self) -> String {
        self.member_collection
            .clone()
            .unwrap_or_else(|| format!("{}_members", self.collection))
    }

    /// The DDL switch.
    pub fn ddl_mode(&self) -> Ddl {
        self.ddl
    }

    /// The bound on every call.
    pub fn op_timeout_value(&self) -> Duration {
        self.op_timeout
    }

    /// How errors name the server.
    pub fn server(&self) -> &str {
        self.server_label.as_deref().unwrap_or("the client's hosts")
    }

    pub(crate) fn has_server_label(&self) -> bool {
        self.server_label.is_some()
    }

    /// Checks the names and the timeout; no I/O.
    ///
    /// # Errors
    ///
    /// `InvalidName` for a database name that is empty, longer than 63 bytes or holds one of
    /// `/\. "$*<>:|?` or NUL; for a collection name (lease, partition or membership) that is
    /// empty, holds `$` or NUL, or starts with `system.`, and for two of the three that are the
    /// same. `InvalidTimings` for a zero timeout or one over an hour.
    pub fn validate(&self) -> Result<()> {
        let db = self.database_name();
        if db.is_empty() || db.len() > 63 {
            return Err(Error::invalid_name(format!(
                "MongoDB database name {db:?} must be 1 to 63 bytes long"
            )));
        }
        if let Some(c) = db.chars().find(|c| "/\\. \"$*<>:|?\0".contains(*c)) {
            return Err(Error::invalid_name(format!(
                "MongoDB database name {db:?} holds {c:?}, which MongoDB refuses"
            )));
        }
        let names = [
            self.collection.clone(),
            self.partition_collection_name(),
            self.member_collection_name(),
        ];
        for coll in &names {
            if coll.is_empty() || coll.contains(['$', '\0']) || coll.starts_with("system.") {
                return Err(Error::invalid_name(format!(
                    "MongoDB collection name {coll:?} must be non-empty, hold no '$' or NUL and \
                     not start with \"system.\""
                )));
            }
        }
        if names[0] == names[1] || names[0] == names[2] || names[1] == names[2] {
            return Err(Error::invalid_name(format!(
                "the lease, partition and membership collections must be three different \
                 collections; they are {:?}, {:?} and {:?}",
                names[0], names[1], names[2]
            )));
        }
        if self.op_timeout.is_zero() || self.op_timeout > Duration::from_secs(3600) {
            return Err(Error::invalid_timings(format!(
                "operation timeout {:?} must be above zero and at most an hour",
                self.op_timeout
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lease_core::ErrorKind;

    #[test]
    fn defaults_and_setters() {
        let c = MongoConfig::new("app");
        assert_eq!(c.database_name(), "app");
        assert_eq!(c.collection_name(), DEFAULT_COLLECTION);
        assert_eq!(c.partition_collection_name(), "leases_partitions");
        assert_eq!(c.member_collection_name(), "leases_members");
        let named = c.clone().partition_collection("p").member_collection("m");
        assert_eq!(
            (
                named.partition_collection_name(),
                named.member_collection_name()
            ),
            ("p".to_owned(), "m".to_owned())
        );
        assert_eq!(c.ddl_mode(), Ddl::Auto);
        assert_eq!(c.op_timeout_value(), DEFAULT_OP_TIMEOUT);
        assert_eq!(c.server(), "the client's hosts");
        let c = c.server_label("db1:27017").ddl(Ddl::None);
        assert_eq!((c.server(), c.ddl_mode()), ("db1:27017", Ddl::None));
        assert_eq!(Ddl::parse(" AUTO "), Some(Ddl::Auto));
        assert_eq!(Ddl::parse("none"), Some(Ddl::None));
        assert_eq!(Ddl::parse("sometimes"), None);
        let d = MongoConfig::default();
        assert_eq!(d.database_name(), DEFAULT_DATABASE);
        assert_eq!(
            d.clone().or_database(Some("app".into())).database_name(),
            "app"
        );
        assert_eq!(d.or_database(None).database_name(), DEFAULT_DATABASE);
        let named = MongoConfig::new("mine").or_database(Some("app".into()));
        assert_eq!(
            named.database_name(),
            "mine",
            "a named database wins over the URL's"
        );
    }

    #[test]
    fn bad_names_and_timeouts_are_refused() {
        for db in ["", "a.b", "a b", "a/b", "a$", &"d".repeat(64)] {
            let e = MongoConfig::new(db).validate().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{db:?}");
        }
        for coll in ["", "a$b", "system.leases", "a\0b"] {
            let e = MongoConfig::new("app")
                .collection(coll)
                .validate()
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{coll:?}");
        }
        assert!(MongoConfig::new("app").collection("x.y").validate().is_ok());
        for (p, m) in [("a$b", "m"), ("p", ""), ("leases", "m"), ("same", "same")] {
            let e = MongoConfig::new("app")
                .partition_collection(p)
                .member_collection(m)
                .validate()
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{p:?} {m:?}");
        }
        let e = MongoConfig::new("app")
            .op_timeout(Duration::ZERO)
            .validate()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidTimings);
    }
}
