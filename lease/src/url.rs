//! Which backend a URL names, and the options `lease` reads from its query: the one URL table.

use std::fmt;

use lease_core::backend::{ParamError, UrlParam};
use lease_core::telemetry::redact::redact_url;
use lease_core::{Error, ErrorKind};

use crate::registry;

/// The backends [`open`](crate::open) knows: the built-in ones, whether this build compiled
/// them in or not, and the schemes [registered](crate::registry::register_scheme) at run time.
///
/// ```
/// use lease::Backend;
///
/// assert_eq!(Backend::from_scheme("postgresql"), Some(Backend::Postgres));
/// assert_eq!(Backend::Redis.feature(), "redis");
/// assert!(Backend::Sqlite.is_compiled()); // a default feature
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// `sqlite://path` or `sqlite::memory:` (lease-sql; feature `sqlite`).
    Sqlite,
    /// `postgres://`, `postgresql://` (lease-sql; feature `postgres`).
    Postgres,
    /// `mysql://`, `mariadb://` (lease-sql; feature `mysql`).
    MySql,
    /// `redis://`, `rediss://` (lease-redis; feature `redis`).
    Redis,
    /// `nats://` (lease-nats; feature `nats`).
    Nats,
    /// `mongodb://`, `mongodb+srv://` (lease-mongo; feature `mongodb`).
    MongoDb,
    /// `etcd://host:port[,host:port…]` (lease-etcd; feature `etcd`).
    Etcd,
    /// `memory://`: a new in-process store for each call (lease-local; feature `memory`).
    Memory,
    /// A scheme [registered](crate::registry::register_scheme) at run time, as it was registered: a
    /// store of its registrant's own.
    Registered(&'static str),
}

/// Every scheme and the backend it names.
const SCHEMES: [(&str, Backend); 12] = [
    ("sqlite", Backend::Sqlite),
    ("postgres", Backend::Postgres),
    ("postgresql", Backend::Postgres),
    ("mysql", Backend::MySql),
    ("mariadb", Backend::MySql),
    ("redis", Backend::Redis),
    ("rediss", Backend::Redis),
    ("nats", Backend::Nats),
    ("mongodb", Backend::MongoDb),
    ("mongodb+srv", Backend::MongoDb),
    ("etcd", Backend::Etcd),
    ("memory", Backend::Memory),
];

impl Backend {
    /// Every built-in backend, in the order of the schemes' list.
    pub const ALL: [Backend; 8] = [
        Backend::Sqlite,
        Backend::Postgres,
        Backend::MySql,
        Backend::Redis,
        Backend::Nats,
        Backend::MongoDb,
        Backend::Etcd,
        Backend::Memory,
    ];

    /// The backend a URL scheme names (any case): a built-in one, compiled in or not, or a
    /// registered one; `None` for a scheme no backend takes.
    pub fn from_scheme(scheme: &str) -> Option<Backend> {
        Backend::built_in(scheme).or_else(|| registry::find(scheme).map(Backend::Registered))
    }

    /// The built-in backend a URL scheme names (any case), compiled in or not.
    pub(crate) fn built_in(scheme: &str) -> Option<Backend> {
        SCHEMES
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(scheme))
            .map(|&(_, b)| b)
    }

    /// The schemes that name this backend.
    pub fn schemes(self) -> impl Iterator<Item = &'static str> {
        let registered = match self {
            Backend::Registered(scheme) => Some(scheme),
            _ => None,
        };
        SCHEMES
            .iter()
            .filter(move |(_, b)| *b == self)
            .map(|&(s, _)| s)
            .chain(registered)
    }

    /// The cargo feature of crate `lease` that compiles this backend in; for a registered
    /// scheme, which no feature compiles in, the scheme.
    pub fn feature(self) -> &'static str {
        match self {
            Backend::Registered(scheme) => scheme,
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
            Backend::Redis => "redis",
            Backend::Nats => "nats",
            Backend::MongoDb => "mongodb",
            Backend::Etcd => "etcd",
            Backend::Memory => "memory",
        }
    }

    /// `true` when this build has the backend (its feature is on, or it is registered).
    pub fn is_compiled(self) -> bool {
        match self {
            Backend::Registered(_) => true,
            Backend::Sqlite => cfg!(feature = "sqlite"),
            Backend::Postgres => cfg!(feature = "postgres"),
            Backend::MySql => cfg!(feature = "mysql"),
            Backend::Redis => cfg!(feature = "redis"),
            Backend::Nats => cfg!(feature = "nats"),
            Backend::MongoDb => cfg!(feature = "mongodb"),
            Backend::Etcd => cfg!(feature = "etcd"),
            Backend::Memory => cfg!(feature = "memory"),
        }
    }

    /// The backend's name in messages.
    fn label(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "PostgreSQL",
            Backend::MySql => "MySQL",
            Backend::Redis => "Redis",
            Backend::Nats => "NATS",
            Backend::MongoDb => "MongoDB",
            Backend::Etcd => "etcd",
            Backend::Memory => "memory",
            Backend::Registered(scheme) => scheme,
        }
    }

    /// A URL to copy, for messages.
    fn example(self) -> &'static str {
        match self {
            Backend::Sqlite => "sqlite:///path/to/leases.db",
            Backend::Postgres => "postgres://user:password@host:5432/database",
            Backend::MySql => "mysql://user:password@host:3306/database",
            Backend::Redis => "redis://[user:password@]host:6379[/db]",
            Backend::Nats => "nats://host:4222",
            Backend::MongoDb => "mongodb://user:password@host:27017/database",
            Backend::Etcd => "etcd://host:2379[,host:2379]",
            Backend::Memory => "memory://",
            Backend::Registered(scheme) => scheme,
        }
    }

    /// The query parameters `lease` itself reads for this backend, for messages: the list of
    /// the backend crate that reads them.
    fn parameters(self) -> &'static str {
        match self {
            #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
            Backend::Sqlite | Backend::Postgres | Backend::MySql => lease_sql::SqlUrlParams::NAMES,
            #[cfg(feature = "redis")]
            Backend::Redis => lease_redis::RedisUrlParams::NAMES,
            #[cfg(feature = "nats")]
            Backend::Nats => lease_nats::NatsUrlParams::NAMES,
            #[cfg(feature = "etcd")]
            Backend::Etcd => lease_etcd::EtcdUrlParams::NAMES,
            // MongoDB, memory and registered stores take none (a registered store's opener
            // reads its URL whole); a backend not compiled in never gets this far.
            _ => "none",
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.feature())
    }
}

/// Why a store URL or an option was refused before any I/O. [`open`](crate::open) returns it
/// as the source of an [`ErrorKind::InvalidArgument`] error ([`UrlError::of`] finds it); its
/// message says what to change. URLs in it are redacted (see
/// [`redact_url`](lease_core::telemetry::redact::redact_url)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlError {
    /// The URL has no `scheme://`.
    NoScheme {
        /// The URL, redacted.
        url: String,
    },
    /// No backend takes the scheme.
    UnknownScheme {
        /// The scheme, as written.
        scheme: String,
    },
    /// The backend the scheme names is not compiled into this build.
    NotCompiled {
        /// The URL, redacted.
        url: String,
        /// The backend it names.
        backend: Backend,
    },
    /// The URL names the backend but is malformed (host, port, or what its driver refused).
    Malformed {
        /// The URL, redacted.
        url: String,
        /// The backend it names.
        backend: Backend,
        /// What is wrong, and how to write it instead.
        problem: String,
    },
    /// A query parameter neither `lease` nor the backend's driver takes.
    UnknownParameter {
        /// The URL, redacted.
        url: String,
        /// The backend it names.
        backend: Backend,
        /// The parameter's name.
        name: String,
    },
    /// A query parameter of `lease` with a value it cannot take.
    BadParameter {
        /// The URL, redacted.
        url: String,
        /// The parameter's name.
        name: String,
        /// The value given.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// The URL and the [`OpenOptions`](crate::OpenOptions) set the same knob differently.
    Conflict {
        /// The URL, redacted.
        url: String,
        /// The query parameter.
        name: String,
        /// Its value in the URL.
        in_url: String,
        /// The value the options set.
        in_options: String,
    },
}

impl UrlError {
    /// The `UrlError` behind an error of [`open`](crate::open) or
    /// [`check_url`](crate::check_url), if the URL or an option was the cause.
    pub fn of(error: &Error) -> Option<&UrlError> {
        std::error::Error::source(error)?.downcast_ref::<UrlError>()
    }
}

impl fmt::Display for UrlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UrlError::NoScheme { url } => write!(
                f,
                "store URL '{url}' has no scheme; write e.g. sqlite:///path/to/leases.db or \
                 postgres://user@host:5432/db"
            ),
            UrlError::UnknownScheme { scheme } => {
                write!(f, "store scheme '{scheme}' is not supported; use ")?;
                let compiled: Vec<String> = SCHEMES
                    .iter()
                    .filter(|(_, b)| b.is_compiled())
                    .map(|(s, _)| *s)
                    .chain(registry::schemes())
                    .map(|s| format!("{s}://"))
                    .collect();
                if compiled.is_empty() {
                    f.write_str(
                        "a backend: this build has none (enable a feature of crate `lease`)",
                    )
                } else {
                    f.write_str(&compiled.join(", "))
                }
            }
            UrlError::NotCompiled { url, backend } => write!(
                f,
                "store URL '{url}': the {backend} backend is not compiled in: enable feature \
                 `{}` of crate `lease`",
                backend.feature()
            ),
            UrlError::Malformed { url, problem, .. } => write!(f, "store URL '{url}' {problem}"),
            UrlError::UnknownParameter { url, backend, name } => write!(
                f,
                "store URL '{url}': unknown {} option '{name}'; the ones lease takes are: {}",
                backend.label(),
                backend.parameters()
            ),
            UrlError::BadParameter {
                url,
                name,
                value,
                expected,
            } => write!(
                f,
                "store URL '{url}': {name} takes {expected}, not '{value}'"
            ),
            UrlError::Conflict {
                url,
                name,
                in_url,
                in_options,
            } => write!(
                f,
                "store URL '{url}' sets {name}={in_url} but the OpenOptions set {in_options}; \
                 set it in one place"
            ),
        }
    }
}

impl std::error::Error for UrlError {}

impl From<UrlError> for Error {
    fn from(e: UrlError) -> Error {
        Error::new(ErrorKind::InvalidArgument, e.to_string()).with_source(e)
    }
}

/// `lease`'s own query parameters of a URL (taken out before the driver sees it), as the
/// backend crate that reads them holds them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Params {
    /// SQL: `table=NAME`, `hints=on|off`, `allow_async_replication=1`.
    #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
    pub(crate) sql: lease_sql::SqlUrlParams,
    /// Redis: `allow_volatile`, `allow_fsync_everysec`, `terms`, `key_prefix`.
    #[cfg(feature = "redis")]
    pub(crate) redis: lease_redis::RedisUrlParams,
    /// NATS: `bucket=NAME`.
    #[cfg(feature = "nats")]
    pub(crate) nats: lease_nats::NatsUrlParams,
    /// etcd: `prefix=PREFIX`.
    #[cfg(feature = "etcd")]
    pub(crate) etcd: lease_etcd::EtcdUrlParams,
}

impl Params {
    /// Hands `param` to the backend crate that reads `backend`'s parameters: `Ok(true)` when
    /// it took it, `Ok(false)` when the parameter is not one of its own (always, in a build
    /// whose backends take none).
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
    fn take(&mut self, backend: Backend, param: UrlParam<'_>) -> Result<bool, ParamError> {
        match backend {
            #[cfg(any(feature = "sqlite", feature = "postgres", feature = "mysql"))]
            Backend::Sqlite | Backend::Postgres | Backend::MySql => self.sql.take(param),
            #[cfg(feature = "redis")]
            Backend::Redis => self.redis.take(param),
            #[cfg(feature = "nats")]
            Backend::Nats => self.nats.take(param),
            #[cfg(feature = "etcd")]
            Backend::Etcd => self.etcd.take(param),
            _ => Ok(false),
        }
    }
}

/// A URL parsed and checked, without I/O.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) backend: Backend,
    /// The URL for the driver: `lease`'s parameters taken out, `mariadb://` as `mysql://`. It
    /// may hold a password: never show it.
    pub(crate) driver_url: String,
    /// The URL, redacted.
    pub(crate) shown: String,
    /// Read by the backends that take parameters.
    #[cfg_attr(
        not(any(
            feature = "sqlite",
            feature = "postgres",
            feature = "mysql",
            feature = "redis",
            feature = "nats",
            feature = "etcd"
        )),
        allow(dead_code)
    )]
    pub(crate) params: Params,
}

impl Target {
    /// Parses `raw`: its scheme, host and port, and `lease`'s own query parameters.
    pub(crate) fn parse(raw: &str) -> Result<Target, UrlError> {
        let shown = redact_url(raw);
        let lower = raw.to_ascii_lowercase();
        let (scheme, rest) = match raw.split_once("://") {
            Some((s, rest)) => (s.to_ascii_lowercase(), Some(rest)),
            None if lower.starts_with("sqlite:") => ("sqlite".to_owned(), None),
            None if lower.starts_with("memory:") => ("memory".to_owned(), None),
            None => return Err(UrlError::NoScheme { url: shown }),
        };
        let Some(backend) = Backend::from_scheme(&scheme) else {
            return Err(UrlError::UnknownScheme { scheme });
        };
        if !backend.is_compiled() {
            return Err(UrlError::NotCompiled {
                url: shown,
                backend,
            });
        }
        if let Backend::Registered(_) = backend {
            // Its opener judges the URL, whole.
            return Ok(Target {
                backend,
                driver_url: raw.to_owned(),
                shown,
                params: Params::default(),
            });
        }
        let mut driver_url = raw.to_owned();
        if let Some(rest) = rest {
            match backend {
                Backend::Sqlite | Backend::Registered(_) => {}
                Backend::Memory => {
                    let host = rest.split(['?', '#']).next().unwrap_or_default();
                    if !host.is_empty() {
                        return Err(UrlError::Malformed {
                            url: shown,
                            backend,
                            problem: format!(
                                "names '{host}', but a memory store lives in this process \
                                 only; write memory://"
                            ),
                        });
                    }
                }
                _ => check_authority(rest, backend, &shown)?,
            }
            if scheme == "mariadb" {
                driver_url = format!("mysql://{rest}");
            }
        }
        let (driver_url, params) = take_params(&driver_url, backend, &shown)?;
        Ok(Target {
            backend,
            driver_url,
            shown,
            params,
        })
    }
}

/// Checks the host and port part of a server URL (`rest` is the URL after `scheme://`).
fn check_authority(rest: &str, backend: Backend, shown: &str) -> Result<(), UrlError> {
    let before_query = rest.split(['?', '#']).next().unwrap_or_default();
    let after_userinfo = before_query
        .rsplit_once('@')
        .map_or(before_query, |(_, h)| h);
    let hosts = after_userinfo.split('/').next().unwrap_or_default();
    let bad = |why: String| UrlError::Malformed {
        url: shown.to_owned(),
        backend,
        problem: format!("{why}; write e.g. {}", backend.example()),
    };
    if hosts.is_empty() {
        return Err(bad("names no host".to_owned()));
    }
    for host in hosts.split(',') {
        let port = if let Some(v6) = host.strip_prefix('[') {
            match v6.split_once(']') {
                Some((_, after)) => after.strip_prefix(':'),
                None => return Err(bad(format!("has an unclosed IPv6 address '{host}'"))),
            }
        } else {
            host.split_once(':').map(|(_, p)| p)
        };
        if let Some(port) = port
            && (port.is_empty()
                || !port.bytes().all(|b| b.is_ascii_digit())
                || port.parse::<u16>().map_or(true, |p| p == 0))
        {
            return Err(bad(format!("has a bad port '{port}' (give 1-65535)")));
        }
    }
    Ok(())
}

/// Takes `lease`'s own parameters for `backend` out of the query of `url`, pair by pair in
/// the query's order (the backend crate reads each). The rest is left for the driver, except
/// where the driver takes none (NATS, etcd, memory): there it is refused.
fn take_params(url: &str, backend: Backend, shown: &str) -> Result<(String, Params), UrlError> {
    let mut params = Params::default();
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), params));
    };
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let param = UrlParam::parse(pair);
        let taken = params
            .take(backend, param)
            .map_err(|e| UrlError::BadParameter {
                url: shown.to_owned(),
                name: e.name,
                value: e.value,
                expected: e.expected,
            })?;
        if taken {
            continue;
        }
        if matches!(backend, Backend::Nats | Backend::Etcd | Backend::Memory) {
            return Err(UrlError::UnknownParameter {
                url: shown.to_owned(),
                backend,
                name: param.name.to_owned(),
            });
        }
        kept.push(pair);
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, params))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parse(url: &str) -> Result<Target, UrlError> {
        Target::parse(url)
    }

    #[test]
    fn every_scheme_names_one_backend() {
        for (scheme, backend) in SCHEMES {
            assert_eq!(Backend::from_scheme(scheme), Some(backend));
            assert_eq!(Backend::from_scheme(&scheme.to_uppercase()), Some(backend));
            assert!(backend.schemes().any(|s| s == scheme));
        }
        for backend in Backend::ALL {
            assert!(backend.schemes().next().is_some(), "{backend}");
        }
        assert_eq!(Backend::from_scheme("ftp"), None);
    }

    #[test]
    fn bad_urls_say_what_to_change() {
        let e = parse("no-scheme-here").unwrap_err();
        assert!(matches!(e, UrlError::NoScheme { .. }), "{e}");
        assert!(e.to_string().contains("no scheme"), "{e}");
        let e = parse("user:hunter3@host").unwrap_err();
        assert!(!e.to_string().contains("hunter3"), "{e}");
        let e = parse("ftp://example/x").unwrap_err();
        assert_eq!(
            e,
            UrlError::UnknownScheme {
                scheme: "ftp".to_owned()
            }
        );
        assert!(e.to_string().contains("'ftp' is not supported"), "{e}");
        assert!(e.to_string().contains("sqlite://"), "{e}");
        let e = parse("postgres://user:s3cr3t@db.example:notaport/x").unwrap_err();
        if Backend::Postgres.is_compiled() {
            assert!(e.to_string().contains("bad port 'notaport'"), "{e}");
            assert!(e.to_string().contains("user:***@"), "{e}");
        }
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
    }

    #[test]
    fn a_backend_not_compiled_in_names_its_feature() {
        for backend in Backend::ALL.into_iter().filter(|b| !b.is_compiled()) {
            let scheme = backend.schemes().next().unwrap();
            let e = parse(&format!("{scheme}://u:pw@host:1/x")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "store URL '{scheme}://u:***@host:1/x': the {backend} backend is not \
                     compiled in: enable feature `{}` of crate `lease`",
                    backend.feature()
                )
            );
            let error = Error::from(e.clone());
            assert_eq!(error.kind(), ErrorKind::InvalidArgument);
            assert_eq!(UrlError::of(&error), Some(&e));
        }
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn sqlite_urls() {
        let t = parse("sqlite::memory:").unwrap();
        assert_eq!(t.backend, Backend::Sqlite);
        let t = parse("sqlite:///tmp/x.db?table=jobs&mode=rwc").unwrap();
        assert_eq!(t.params.sql.table.as_deref(), Some("jobs"));
        assert_eq!(t.driver_url, "sqlite:///tmp/x.db?mode=rwc");
        let e = parse("sqlite:///tmp/x.db?table=").unwrap_err();
        assert!(
            e.to_string().contains("table takes a non-empty value"),
            "{e}"
        );
        let t = parse("sqlite:///tmp/x.db?hints=off&mode=rwc").unwrap();
        assert_eq!(t.params.sql.hints, Some(false));
        assert_eq!(t.driver_url, "sqlite:///tmp/x.db?mode=rwc");
        assert_eq!(
            parse("sqlite:///tmp/x.db?hints=on")
                .unwrap()
                .params
                .sql
                .hints,
            Some(true)
        );
        let e = parse("sqlite:///tmp/x.db?hints=maybe").unwrap_err();
        assert!(matches!(e, UrlError::BadParameter { ref name, .. } if name == "hints"));
        assert_eq!(
            e.to_string(),
            "store URL 'sqlite:///tmp/x.db?hints=maybe': hints takes on or off, not 'maybe'"
        );
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn mariadb_is_mysql() {
        let t = parse("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(t.backend, Backend::MySql);
        assert_eq!(t.driver_url, "mysql://root@127.0.0.1:3306/test");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_options_are_taken_out() {
        let t = parse("redis://127.0.0.1:6379/0?allow_volatile=1&protocol=resp3").unwrap();
        assert_eq!(t.params.redis.allow_volatile, Some(true));
        assert_eq!(t.params.redis.allow_fsync_everysec, None);
        assert_eq!(t.driver_url, "redis://127.0.0.1:6379/0?protocol=resp3");
        let t = parse("redis://127.0.0.1:6379/0?allow_fsync_everysec=1").unwrap();
        assert_eq!(t.params.redis.allow_fsync_everysec, Some(true));
        assert_eq!(t.driver_url, "redis://127.0.0.1:6379/0");
        let e = parse("redis://127.0.0.1:6379/0?allow_fsync_everysec=2").unwrap_err();
        assert_eq!(
            e.to_string(),
            "store URL 'redis://127.0.0.1:6379/0?allow_fsync_everysec=2': allow_fsync_everysec \
             takes 1 or 0, not '2'"
        );
        let t = parse("redis://h?terms=clock_floor&key_prefix=app:").unwrap();
        assert_eq!(
            t.params.redis.terms,
            Some(lease_redis::TermScheme::ClockFloor)
        );
        assert_eq!(t.params.redis.key_prefix.as_deref(), Some("app:"));
        assert_eq!(t.driver_url, "redis://h");
        assert!(parse("redis://h?terms=random").is_err());
        assert!(parse("redis://[::1]:6379").is_ok());
    }

    #[cfg(feature = "nats")]
    #[test]
    fn nats_takes_only_a_bucket() {
        let t = parse("nats://127.0.0.1:4222?bucket=jobs").unwrap();
        assert_eq!(t.params.nats.bucket.as_deref(), Some("jobs"));
        assert_eq!(t.driver_url, "nats://127.0.0.1:4222");
        let e = parse("nats://user:s3cr3t@127.0.0.1:4222?colour=blue").unwrap_err();
        assert!(matches!(&e, UrlError::UnknownParameter { name, .. } if name == "colour"));
        let shown = e.to_string();
        assert!(shown.contains("unknown NATS option 'colour'"), "{shown}");
        assert!(shown.contains("bucket=NAME"), "{shown}");
        assert!(shown.contains("user:***@"), "{shown}");
        assert!(!shown.contains("s3cr3t"), "{shown}");
    }

    #[cfg(feature = "mongodb")]
    #[test]
    fn mongodb_takes_several_hosts() {
        assert!(parse("mongodb://a:1,b:2/db").is_ok());
        assert!(parse("mongodb://a:1,b:0/db").is_err());
    }

    #[cfg(feature = "memory")]
    #[test]
    fn memory_urls() {
        assert!(parse("memory://").is_ok());
        assert!(parse("memory:").is_ok());
        assert!(parse("memory://elsewhere").is_err());
        let e = parse("memory://?x=1").unwrap_err();
        assert!(e.to_string().contains("unknown memory option 'x'"), "{e}");
    }
}
