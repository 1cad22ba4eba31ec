//! How an [`EtcdStore`](crate::EtcdStore) is set up: the key prefix, the bound on each call,
//! and how many operations one transaction may carry.

use std::time::Duration;

use lease_core::{Error, Result};

/// The key prefix when none is given: every key this store writes starts with it.
pub const DEFAULT_PREFIX: &str = "lease/";

/// The bound on one store operation when none is given.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// How many operations one transaction carries when none is given: etcd's own default limit
/// (`--max-txn-ops`, 128). Releases of partitions are split by it.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;

/// The settings of an [`EtcdStore`](crate::EtcdStore).
///
/// ```
/// use std::time::Duration;
/// use lease_etcd::EtcdConfig;
///
/// let config = EtcdConfig::new().prefix("jobs/").op_timeout(Duration::from_secs(2));
/// assert_eq!(config.key_prefix(), "jobs/");
/// assert!(config.validate().is_ok());
/// assert!(EtcdConfig::new().prefix("").validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    pub(crate) prefix: String,
    pub(crate) op_timeout: Duration,
    pub(crate) max_txn_ops: usize,
    pub(crate) server_label: Option<String>,
}

impl Default for EtcdConfig {
    /// Keys under [`DEFAULT_PREFIX`], each operation bounded by [`DEFAULT_OP_TIMEOUT`],
    /// transactions of at most [`DEFAULT_MAX_TXN_OPS`] operations.
    fn default() -> Self {
        EtcdConfig::new()
    }
}

impl EtcdConfig {
    /// The defaults: see [`Default`].
    pub fn new() -> Self {
        EtcdConfig {
            prefix: DEFAULT_PREFIX.to_owned(),
            op_timeout: DEFAULT_OP_TIMEOUT,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            server_label: None,
        }
    }

    /// Settings from the environment, over the defaults: `LEASE_ETCD_PREFIX` (the key prefix)
    /// and `LEASE_ETCD_OP_TIMEOUT_MS` (the bound on one operation, in milliseconds).
    pub fn from_env() -> Result<Self> {
        let mut config = EtcdConfig::new();
        if let Ok(prefix) = std::env::var("LEASE_ETCD_PREFIX")
            && !prefix.trim().is_empty()
        {
            config = config.prefix(prefix.trim());
        }
        if let Ok(v) = std::env::var("LEASE_ETCD_OP_TIMEOUT_MS") {
            let ms: u64 = v.trim().parse().map_err(|_| {
                Error::invalid_timings(format!(
                    "LEASE_ETCD_OP_TIMEOUT_MS must be a whole number of milliseconds; got {v:?}"
                ))
            })?;
            config = config.op_timeout(Duration::from_millis(ms));
        }
        config.validate()?;
        Ok(config)
    }

    /// Keeps every key under `prefix` (e.g. `jobs/`); stores with different prefixes never
    /// see each other's leases. Keep other writers out of it.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Bounds every store operation; past it the operation fails with `Timeout` and its
    /// outcome is unknown. The coordinator bounds its attempts as well, by its own timings.
    pub fn op_timeout(mut self, bound: Duration) -> Self {
        self.op_timeout = bound;
        self
    }

    /// The most operations one transaction carries: the server's `--max-txn-ops` (128 unless
    /// the server was started with another value). A release of partitions is sent as
    /// transactions of half this many nested transactions each (etcd counts a nested
    /// transaction's operations against what its parent leaves), all at once.
    pub fn max_txn_ops(mut self, ops: usize) -> Self {
        self.max_txn_ops = ops;
        self
    }

    /// How errors name the server (e.g. `etcd-1:2379`). By default the endpoints given to
    /// [`connect`](crate::EtcdStore::connect), by host and port.
    pub fn server_label(mut self, label: impl Into<String>) -> Self {
        self.server_label = Some(label.into());
        self
    }

    /// Checks the settings; no I/O.
    pub fn validate(&self) -> Result<()> {
        if self.prefix.is_empty() || self.prefix.chars().any(char::is_control) {
            return Err(Error::invalid_argument(format!(
                "etcd key prefix {:?} is not valid: give a non-empty prefix of printable \
                 characters, e.g. \"lease/\"",
                self.prefix
            )));
        }
        if self.op_timeout.is_zero() {
            return Err(Error::invalid_timings(
                "the etcd operation timeout must be positive",
            ));
        }
        if self.max_txn_ops == 0 {
            return Err(Error::invalid_argument(
                "max_txn_ops must be at least 1 (etcd's default limit is 128)",
            ));
        }
        Ok(())
    }
}
