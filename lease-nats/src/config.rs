//! How a [`NatsStore`](crate::NatsStore) is set up: the bucket, the lease duration, and the
//! bounds on each call.

use std::time::Duration;

use lease_core::{
    Error, Result,
    backend::{ceil_millis, validate_ttl},
};

/// The lease duration when none is given: 15 s, as the protocol's defaults.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15);

/// The bound on one store operation when none is given.
pub const DEFAULT_OP_TIMEOUT: Duration = Duration::from_secs(5);

/// The start of the bucket name [`NatsConfig::new`] derives from the lease duration.
pub const DEFAULT_BUCKET_PREFIX: &str = "leases";

/// The bucket name for leases of `ttl`: `<prefix>_<milliseconds>ms`, e.g. `leases_15000ms`.
///
/// A bucket's max age is the lease duration of every lease in it, so leases of different
/// durations live in different buckets. Deriving the name from the duration gives each duration
/// its own bucket and lets every process that uses the same duration find the same one.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(lease_nats::bucket_for_ttl("leases", Duration::from_secs(15)), "leases_15000ms");
/// assert_eq!(lease_nats::bucket_for_ttl("jobs", Duration::from_millis(1500)), "jobs_1500ms");
/// ```
pub fn bucket_for_ttl(prefix: &str, ttl: Duration) -> String {
    format!("{prefix}_{}ms", ceil_millis(ttl))
}

/// The slot bucket's name for the lease bucket `bucket`: `<bucket>_slots`, e.g.
/// `leases_15000ms_slots`. It keeps the scheduler's slot records, which must outlive every
/// lease, so it has no max age; see the crate docs, *Scheduler slots*.
///
/// ```
/// assert_eq!(lease_nats::slot_bucket_for("leases_15000ms"), "leases_15000ms_slots");
/// ```
pub fn slot_bucket_for(bucket: &str) -> String {
    format!("{bucket}_slots")
}

/// What to do when the bucket already exists with a max age other than the configured TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TtlMismatch {
    /// Refuse to open the store, with an error that names both durations. The default: a
    /// coordinator whose timings assume one lease duration must not run on a bucket that
    /// expires leases at another (a shorter max age would let the server hand the name to
    /// someone else while the holder still believes it holds it).
    #[default]
    Refuse,
    /// Take the bucket's max age as the store's lease duration. The store then reports that
    /// duration in [`Capabilities::fixed_ttl`](lease_core::backend::Capabilities::fixed_ttl),
    /// refuses every other one, and a coordinator must be built with timings for it (see
    /// [`NatsStore::timings`](crate::NatsStore::timings)).
    Adopt,
}

/// The settings of a [`NatsStore`](crate::NatsStore).
///
/// ```
/// use std::time::Duration;
/// use lease_nats::NatsConfig;
///
/// let config = NatsConfig::new(Duration::from_secs(10)).op_timeout(Duration::from_secs(2));
/// assert_eq!(config.bucket_name(), "leases_10000ms");
/// assert_eq!(config.ttl(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsConfig {
    pub(crate) bucket: String,
    /// The slot bucket, when not derived from the lease bucket ([`slot_bucket_for`]).
    pub(crate) slot_bucket: Option<String>,
    pub(crate) ttl: Duration,
    pub(crate) on_mismatch: TtlMismatch,
    pub(crate) create_bucket: bool,
    pub(crate) replicas: usize,
    pub(crate) op_timeout: Duration,
    pub(crate) server_label: Option<String>,
    pub(crate) allow_diverging_replicas: bool,
}

impl Default for NatsConfig {
    /// Leases of [`DEFAULT_TTL`] in the bucket `leases_15000ms`.
    fn default() -> Self {
        NatsConfig::new(DEFAULT_TTL)
    }
}

impl NatsConfig {
    /// Leases of `ttl`, in the bucket [`bucket_for_ttl`]`("leases", ttl)`, created when missing,
    /// each operation bounded by [`DEFAULT_OP_TIMEOUT`].
    pub fn new(ttl: Duration) -> Self {
        NatsConfig {
            bucket: bucket_for_ttl(DEFAULT_BUCKET_PREFIX, ttl),
            slot_bucket: None,
            ttl,
            on_mismatch: TtlMismatch::Refuse,
            create_bucket: true,
            replicas: 1,
            op_timeout: DEFAULT_OP_TIMEOUT,
            server_label: None,
            allow_diverging_replicas: false,
        }
    }

    /// Settings from the environment, over the defaults: `LEASE_NATS_TTL_MS` (the lease
    /// duration in milliseconds), `LEASE_NATS_BUCKET` (the bucket name; derived from the
    /// duration when unset) and `LEASE_NATS_SLOT_BUCKET` (the slot bucket; derived from the
    /// bucket's name when unset).
    pub fn from_env() -> Result<Self> {
        let ttl = match std::env::var("LEASE_NATS_TTL_MS") {
            Ok(v) => {
                let ms: u64 = v.trim().parse().map_err(|_| {
                    Error::invalid_timings(format!(
                        "LEASE_NATS_TTL_MS must be a whole number of milliseconds; got {v:?}"
                    ))
                })?;
                Duration::from_millis(ms)
            }
            Err(_) => DEFAULT_TTL,
        };
        let mut config = NatsConfig::new(ttl);
        if let Ok(bucket) = std::env::var("LEASE_NATS_BUCKET")
            && !bucket.trim().is_empty()
        {
            config = config.bucket(bucket.trim());
        }
        if let Ok(slots) = std::env::var("LEASE_NATS_SLOT_BUCKET")
            && !slots.trim().is_empty()
        {
            config = config.slot_bucket(slots.trim());
        }
        config.validate()?;
        Ok(config)
    }

    /// Uses the bucket `name` (letters, digits, `-` and `_`). The stream behind it is
    /// `KV_<name>`.
    pub fn bucket(mut self, name: impl Into<String>) -> Self {
        self.bucket = name.into();
        self
    }

    /// Keeps the scheduler's slot records in the bucket `name` (letters, digits, `-` and `_`;
    /// not the lease bucket) instead of [`slot_bucket_for`] the lease bucket. The stream behind
    /// it is `KV_<name>`, with no max age. Processes that run one scheduler must name the same
    /// slot bucket (and the same lease bucket).
    pub fn slot_bucket(mut self, name: impl Into<String>) -> Self {
        self.slot_bucket = Some(name.into());
        self
    }

    /// The slot bucket's name: the one given with [`slot_bucket`](Self::slot_bucket), or
    /// [`slot_bucket_for`] the lease bucket.
    pub fn slot_bucket_name(&self) -> String {
        match &self.slot_bucket {
            Some(name) => name.clone(),
            None => slot_bucket_for(&self.bucket),
        }
    }

    /// The lease duration, which is also the bucket's max age.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The bucket name.
    pub fn bucket_name(&self) -> &str {
        &self.bucket
    }

    /// What to do when the bucket exists with another max age; see [`TtlMismatch`].
    pub fn on_ttl_mismatch(mut self, what: TtlMismatch) -> Self {
        self.on_mismatch = what;
        self
    }

    /// Whether to create the bucket and the slot bucket when they are missing (the default).
    /// When `false`, a missing lease bucket is an error at start-up, and a missing slot bucket
    /// makes every slot operation fail with an error naming it (leases, partitions and
    /// membership work without it).
    pub fn create_bucket(mut self, create: bool) -> Self {
        self.create_bucket = create;
        self
    }

    /// How many replicas a created bucket keeps in a cluster (1 by default; 3 or 5 for a
    /// cluster that should keep leases across the loss of a server). Not checked on an existing
    /// bucket.
    pub fn replicas(mut self, replicas: usize) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    /// Accepts a replicated bucket on a nats-server older than 2.12.0 (default `false`: the
    /// store refuses to open it with `Unsupported`). On those servers a follower can refuse a
    /// claim its leader accepted, and once it leads, fencing terms go back (see the crate
    /// documentation, *Clusters*). Set it only when nothing is fenced by the term and a second
    /// holder after a node failure cannot hurt; the store then logs the risk as a warning.
    pub fn allow_diverging_replicas(mut self, allow: bool) -> Self {
        self.allow_diverging_replicas = allow;
        self
    }

    /// Bounds every store operation; past it the operation fails with `Unavailable` and its
    /// outcome is unknown. The coordinator bounds its attempts as well, by its own timings.
    pub fn op_timeout(mut self, bound: Duration) -> Self {
        self.op_timeout = bound;
        self
    }

    /// How errors name the server (e.g. `nats-1:4222`). By default the host and port the
    /// connection reports; never a password.
    pub fn server_label(mut self, label: impl Into<String>) -> Self {
        self.server_label = Some(label.into());
        self
    }

    /// Checks the settings; no I/O.
    pub fn validate(&self) -> Result<()> {
        validate_bucket_name(&self.bucket)?;
        let slots = self.slot_bucket_name();
        validate_bucket_name(&slots)?;
        if slots == self.bucket {
            return Err(Error::invalid_name(format!(
                "the NATS slot bucket must not be the lease bucket {slots:?}: the lease bucket's \
                 max age would expire the slot records; name another (or leave it unset)"
            )));
        }
        validate_ttl(self.ttl)?;
        if self.op_timeout.is_zero() {
            return Err(Error::invalid_timings(
                "the NATS operation timeout must be positive",
            ));
        }
        Ok(())
    }
}

/// A bucket name: non-empty, letters, digits, `-` and `_` only (the KV rules).
pub(crate) fn validate_bucket_name(bucket: &str) -> Result<()> {
    let ok = !bucket.is_empty()
        && bucket
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_name(format!(
            "NATS bucket name {bucket:?} is not valid: use letters, digits, '-' and '_' only"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_names() {
        let c = NatsConfig::default();
        assert_eq!(c.bucket_name(), "leases_15000ms");
        assert_eq!(c.ttl(), DEFAULT_TTL);
        assert_eq!(c.slot_bucket_name(), "leases_15000ms_slots");
        assert_eq!(
            NatsConfig::default().bucket("jobs").slot_bucket_name(),
            "jobs_slots"
        );
        assert_eq!(
            NatsConfig::default().slot_bucket("s").slot_bucket_name(),
            "s"
        );
        assert!(c.validate().is_ok());
        let same = NatsConfig::default().bucket("b").slot_bucket("b");
        assert_eq!(
            same.validate().unwrap_err().kind(),
            lease_core::ErrorKind::InvalidName
        );
        assert!(NatsConfig::default().slot_bucket("a.b").validate().is_err());
        assert_eq!(
            bucket_for_ttl("x", Duration::from_micros(1500)),
            "x_2ms",
            "rounded up to whole milliseconds"
        );
        for bad in ["", "a.b", "a b", "a>", "é"] {
            assert!(
                NatsConfig::default().bucket(bad).validate().is_err(),
                "{bad:?}"
            );
        }
        assert!(
            NatsConfig::new(Duration::ZERO).validate().is_err(),
            "zero ttl"
        );
        assert!(
            NatsConfig::default()
                .op_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
    }
}
