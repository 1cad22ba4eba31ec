//! What [`open`](crate::open) takes besides the URL.

use std::time::Duration;

use crate::url::{Target, UrlError};

/// Settings for [`open`](crate::open) that a URL does not carry, or that code would rather
/// set: a small builder, every knob unset by default (the backend's own default then holds).
///
/// Each knob belongs to some backends and is ignored by the others, so one `OpenOptions` can
/// serve whatever URL a user configures. A knob that the URL's query also sets (see
/// [`open`](crate::open)) must agree with it: a different value is refused
/// ([`UrlError::Conflict`]), never silently overridden either way.
///
/// ```
/// use std::time::Duration;
/// use lease::OpenOptions;
///
/// let options = OpenOptions::new()
///     .lease(Duration::from_secs(10))
///     .op_timeout(Duration::from_secs(2))
///     .sql_table("app_leases");
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenOptions {
    pub(crate) lease: Option<Duration>,
    pub(crate) op_timeout: Option<Duration>,
    pub(crate) sql_table: Option<String>,
    pub(crate) redis_key_prefix: Option<String>,
    pub(crate) redis_allow_volatile: Option<bool>,
    pub(crate) redis_allow_fsync_everysec: Option<bool>,
    pub(crate) redis_clock_floor: Option<bool>,
    pub(crate) nats_bucket: Option<String>,
    pub(crate) hints: Option<bool>,
}

impl OpenOptions {
    /// No knob set: every backend's defaults.
    pub fn new() -> OpenOptions {
        OpenOptions::default()
    }

    /// The lease duration the store will be used with. NATS keeps every lease in a bucket for
    /// its max age, so it opens the bucket for this duration (`leases_<ms>ms`, created when
    /// missing; unset: lease-nats's default, 15 s). The other backends take any duration per
    /// call and ignore this.
    pub fn lease(mut self, lease: Duration) -> OpenOptions {
        self.lease = Some(lease);
        self
    }

    /// The bound on each store operation, for the backends that bound their requests
    /// themselves: Redis (each operation, and each connection attempt), NATS and MongoDB. The
    /// SQL backends ignore it (their pools bound the wait for a connection, 5 s).
    pub fn op_timeout(mut self, bound: Duration) -> OpenOptions {
        self.op_timeout = Some(bound);
        self
    }

    /// SQL backends: the lease table (`schema.table` allowed; its partition and member tables
    /// are named after it). URL parameter: `table=NAME`.
    pub fn sql_table(mut self, table: impl Into<String>) -> OpenOptions {
        self.sql_table = Some(table.into());
        self
    }

    /// Redis: the prefix of every key the store writes. URL parameter: `key_prefix=PREFIX`.
    pub fn redis_key_prefix(mut self, prefix: impl Into<String>) -> OpenOptions {
        self.redis_key_prefix = Some(prefix.into());
        self
    }

    /// Redis: accept a server that could lose lease records (no AOF, or eviction on). URL
    /// parameter: `allow_volatile=1`.
    pub fn redis_allow_volatile(mut self, allow: bool) -> OpenOptions {
        self.redis_allow_volatile = Some(allow);
        self
    }

    /// Redis: accept AOF with `appendfsync everysec` (a crash can lose the last second of
    /// claims and so repeat a term). URL parameter: `allow_fsync_everysec=1`.
    pub fn redis_allow_fsync_everysec(mut self, allow: bool) -> OpenOptions {
        self.redis_allow_fsync_everysec = Some(allow);
        self
    }

    /// Redis: terms taken from the server's clock floor, which keep growing even if a record
    /// is lost (`true`), or the counter (`false`, lease-redis's default). URL parameter:
    /// `terms=clock_floor` or `terms=counter`.
    pub fn redis_clock_floor(mut self, clock_floor: bool) -> OpenOptions {
        self.redis_clock_floor = Some(clock_floor);
        self
    }

    /// NATS: the bucket, instead of the one named after the lease duration. The bucket's max
    /// age must then equal the lease duration, or opening fails naming both. URL parameter:
    /// `bucket=NAME`, which instead takes the named bucket whatever its max age (the store
    /// then reports that age as its `fixed_ttl`).
    pub fn nats_bucket(mut self, bucket: impl Into<String>) -> OpenOptions {
        self.nats_bucket = Some(bucket.into());
        self
    }

    /// SQL backends: whether the store pushes hints of changes to other processes (default
    /// on; see `lease_sql::SqlConfig::hints`: PostgreSQL `LISTEN`/`NOTIFY`, SQLite's
    /// `data_version` poller, no effect on MySQL). Off, waiters poll at the retry pace; turn
    /// it off e.g. behind PgBouncer in transaction mode. URL parameter: `hints=on|off`. The
    /// other backends have no such switch and ignore it (their listeners are always on).
    pub fn hints(mut self, on: bool) -> OpenOptions {
        self.hints = Some(on);
        self
    }
}

/// The options of one opening: the URL's parameters and the [`OpenOptions`], agreed. Each
/// backend's part is its crate's own parameter type, holding the URL's values and the options'
/// that agree with them; the backend crate then sets them on its config.
#[derive(Debug, Clone, Default)]
// Some knobs are read by backends a build may leave out.
#[allow(dead_code)]
pub(crate) struct Resolved {
    pub(crate) lease: Option<Duration>,
    pub(crate) op_timeout: Option<Duration>,
    /// SQL: the table and the hints switch.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    pub(crate) sql: lease_sql::SqlUrlParams,
    /// Redis: the key prefix, the two server checks and the term scheme.
    #[cfg(feature = "redis")]
    pub(crate) redis: lease_redis::RedisUrlParams,
    /// NATS: the bucket the URL names, taken whatever its max age.
    #[cfg(feature = "nats")]
    pub(crate) nats: lease_nats::NatsUrlParams,
    /// NATS: the bucket the options name (when the URL names none), whose max age must be the
    /// lease duration.
    #[cfg(feature = "nats")]
    pub(crate) nats_bucket: Option<String>,
    /// etcd: the key prefix, from the URL's `prefix=`.
    #[cfg(feature = "etcd")]
    pub(crate) etcd: lease_etcd::EtcdUrlParams,
}

/// One knob set in the URL and maybe in the options: the URL's value when they agree.
#[cfg_attr(
    not(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "mysql",
        feature = "redis",
        feature = "nats"
    )),
    allow(dead_code)
)]
fn agree<T: Clone + PartialEq + ToString>(
    target: &Target,
    name: &str,
    in_url: &Option<T>,
    in_options: &Option<T>,
    url_form: impl Fn(&T) -> String,
) -> Result<Option<T>, UrlError> {
    match (in_url, in_options) {
        (Some(u), Some(o)) if u != o => Err(UrlError::Conflict {
            url: target.shown.clone(),
            name: name.to_owned(),
            in_url: url_form(u),
            in_options: o.to_string(),
        }),
        (Some(u), _) => Ok(Some(u.clone())),
        (None, o) => Ok(o.clone()),
    }
}

impl Resolved {
    /// Agrees the URL's parameters with `options`. Only the URL's backend can have parameters
    /// set, so only its knobs can disagree.
    #[cfg_attr(
        not(any(
            feature = "sqlite",
            feature = "postgres",
            feature = "mysql",
            feature = "redis",
            feature = "nats",
            feature = "etcd"
        )),
        allow(unused_variables)
    )]
    pub(crate) fn of(target: &Target, options: &OpenOptions) -> Result<Resolved, UrlError> {
        // A build with no backend that takes parameters sets nothing more.
        #[allow(unused_mut, clippy::needless_update)]
        let mut resolved = Resolved {
            lease: options.lease,
            op_timeout: options.op_timeout,
            ..Resolved::default()
        };
        #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
        {
            let url = &target.params.sql;
            let sql = &mut resolved.sql;
            sql.table = agree(
                target,
                "table",
                &url.table,
                &options.sql_table,
                String::clone,
            )?;
            sql.hints = agree(target, "hints", &url.hints, &options.hints, |b: &bool| {
                if *b { "on" } else { "off" }.to_owned()
            })?;
            // URL only: no option of its own (OpenOptions has none for it).
            sql.allow_async_replication = url.allow_async_replication;
        }
        #[cfg(feature = "redis")]
        {
            use lease_redis::TermScheme;
            let one = |b: &bool| if *b { "1" } else { "0" }.to_owned();
            let url = &target.params.redis;
            let redis = &mut resolved.redis;
            redis.key_prefix = agree(
                target,
                "key_prefix",
                &url.key_prefix,
                &options.redis_key_prefix,
                String::clone,
            )?;
            redis.allow_volatile = agree(
                target,
                "allow_volatile",
                &url.allow_volatile,
                &options.redis_allow_volatile,
                one,
            )?;
            redis.allow_fsync_everysec = agree(
                target,
                "allow_fsync_everysec",
                &url.allow_fsync_everysec,
                &options.redis_allow_fsync_everysec,
                one,
            )?;
            // The options say `true` for clock-floor terms; the URL names the scheme.
            let clock_floor = url.terms.map(|t| t == TermScheme::ClockFloor);
            redis.terms = agree(
                target,
                "terms",
                &clock_floor,
                &options.redis_clock_floor,
                |b: &bool| if *b { "clock_floor" } else { "counter" }.to_owned(),
            )?
            .map(|b| {
                if b {
                    TermScheme::ClockFloor
                } else {
                    TermScheme::Counter
                }
            });
        }
        #[cfg(feature = "nats")]
        {
            let url = &target.params.nats;
            let bucket = agree(
                target,
                "bucket",
                &url.bucket,
                &options.nats_bucket,
                String::clone,
            )?;
            if url.bucket.is_some() {
                resolved.nats = url.clone();
            } else {
                resolved.nats_bucket = bucket;
            }
        }
        #[cfg(feature = "etcd")]
        {
            resolved.etcd = target.params.etcd.clone();
        }
        Ok(resolved)
    }
}

#[cfg(all(test, any(feature = "sqlite", feature = "redis")))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[cfg(feature = "sqlite")]
    #[test]
    fn the_url_and_the_options_must_agree() {
        let target = Target::parse("sqlite:///tmp/x.db?table=jobs").unwrap();
        let r = Resolved::of(&target, &OpenOptions::new()).unwrap();
        assert_eq!(r.sql.table.as_deref(), Some("jobs"));
        let r = Resolved::of(&target, &OpenOptions::new().sql_table("jobs")).unwrap();
        assert_eq!(r.sql.table.as_deref(), Some("jobs"));
        let e = Resolved::of(&target, &OpenOptions::new().sql_table("other")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "store URL 'sqlite:///tmp/x.db?table=jobs' sets table=jobs but the OpenOptions set \
             other; set it in one place"
        );
        let plain = Target::parse("sqlite:///tmp/x.db").unwrap();
        let r = Resolved::of(&plain, &OpenOptions::new().sql_table("other")).unwrap();
        assert_eq!(r.sql.table.as_deref(), Some("other"));
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn hints_default_on_and_agree() {
        let hints = |target: &Target, options: OpenOptions| {
            let r = Resolved::of(target, &options).unwrap();
            let config = r.sql.apply(lease_sql::SqlConfig::default()).unwrap();
            config.hints_enabled()
        };
        let plain = Target::parse("sqlite:///tmp/x.db").unwrap();
        assert!(hints(&plain, OpenOptions::new()));
        assert!(!hints(&plain, OpenOptions::new().hints(false)));
        let off = Target::parse("sqlite:///tmp/x.db?hints=off").unwrap();
        assert_eq!(off.driver_url, "sqlite:///tmp/x.db");
        assert!(!hints(&off, OpenOptions::new()));
        assert!(!hints(&off, OpenOptions::new().hints(false)));
        let e = Resolved::of(&off, &OpenOptions::new().hints(true)).unwrap_err();
        assert!(matches!(e, UrlError::Conflict { ref name, .. } if name == "hints"));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_flags_must_agree() {
        let target = Target::parse("redis://h?allow_volatile=1").unwrap();
        let e = Resolved::of(&target, &OpenOptions::new().redis_allow_volatile(false)).unwrap_err();
        assert!(matches!(e, UrlError::Conflict { ref name, .. } if name == "allow_volatile"));
        let r = Resolved::of(&target, &OpenOptions::new().redis_allow_volatile(true)).unwrap();
        assert_eq!(r.redis.allow_volatile, Some(true));
        assert_eq!(r.redis.allow_fsync_everysec, None);
    }
}
