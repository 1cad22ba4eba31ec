//! Which store a URL names, the default store's file, and the URL's secrets.
//!
//! The store is chosen by URL (`--store` or `LEASE_STORE`); without one it is SQLite on one
//! fixed per-user file under the XDG state directory, so runs from any directory exclude each
//! other. Parsing registers the URL's password with [`redact`] before anything
//! can print it.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::exit::{CliError, Exit};
use crate::redact;

/// The environment variable that names the store when `--store` is not given.
pub(crate) const STORE_VAR: &str = "LEASE_STORE";

/// The kinds of store a URL can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scheme {
    /// `sqlite://` (lease-sql).
    Sqlite,
    /// `postgres://`, `postgresql://` (lease-sql).
    Postgres,
    /// `mysql://`, `mariadb://` (lease-sql).
    MySql,
    /// `redis://`, `rediss://` (lease-redis).
    Redis,
    /// `mongodb://`, `mongodb+srv://` (lease-mongo).
    MongoDb,
    /// `nats://` (lease-nats; `?bucket=NAME` picks the bucket).
    Nats,
}

impl Scheme {
    fn from_name(name: &str) -> Option<Scheme> {
        Some(match name {
            "sqlite" => Scheme::Sqlite,
            "postgres" | "postgresql" => Scheme::Postgres,
            "mysql" | "mariadb" => Scheme::MySql,
            "redis" | "rediss" => Scheme::Redis,
            "mongodb" | "mongodb+srv" => Scheme::MongoDb,
            "nats" => Scheme::Nats,
            _ => return None,
        })
    }
}

/// Options of the Redis store that `lease` reads from the URL's query (and strips before the
/// URL reaches the driver).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RedisOptions {
    /// `allow_volatile=1`: accept a server that could lose lease records.
    pub(crate) allow_volatile: bool,
    /// `allow_fsync_everysec=1`: accept AOF with `appendfsync everysec` (a crash can lose
    /// the last second of claims and so repeat a `Counter` term).
    pub(crate) allow_fsync_everysec: bool,
    /// `terms=clock_floor`: terms that keep growing even if a record is lost.
    pub(crate) clock_floor: bool,
}

/// A parsed store URL. Its `Debug` and `Display` forms never show the password.
#[derive(Clone)]
pub(crate) struct StoreUrl {
    scheme: Scheme,
    /// The URL handed to the driver; it may hold a password.
    driver_url: String,
    shown: String,
    default_file: Option<PathBuf>,
    redis: RedisOptions,
}

impl StoreUrl {
    /// The store named by `--store`/`LEASE_STORE` (`given`), or the default one when it is
    /// absent or empty.
    pub(crate) fn choose(given: Option<&str>) -> Result<StoreUrl, CliError> {
        match given {
            Some(url) if !url.trim().is_empty() => StoreUrl::parse(url),
            _ => {
                let file =
                    default_store_file().map_err(|why| CliError::new(Exit::StateDir, why))?;
                StoreUrl::sqlite_file(&file)
            }
        }
    }

    /// The SQLite store on `file` (an absolute path), created when missing.
    pub(crate) fn sqlite_file(file: &Path) -> Result<StoreUrl, CliError> {
        let Some(path) = file.to_str() else {
            return Err(CliError::new(
                Exit::StateDir,
                format!(
                    "the default store's path {} is not UTF-8; choose a store with --store or \
                     {STORE_VAR}",
                    file.display()
                ),
            ));
        };
        let mut encoded = String::with_capacity(path.len());
        for c in path.chars() {
            match c {
                '%' => encoded.push_str("%25"),
                '?' => encoded.push_str("%3F"),
                '#' => encoded.push_str("%23"),
                c => encoded.push(c),
            }
        }
        Ok(StoreUrl {
            scheme: Scheme::Sqlite,
            driver_url: format!("sqlite://{encoded}"),
            shown: format!("sqlite://{path}"),
            default_file: Some(file.to_owned()),
            redis: RedisOptions::default(),
        })
    }

    /// Parses a store URL, registering its secrets for redaction first.
    pub(crate) fn parse(raw: &str) -> Result<StoreUrl, CliError> {
        redact::add_secrets(secrets_of(raw));
        let shown = redact::scrub(raw);
        let (scheme_name, rest) = match raw.split_once("://") {
            Some((s, rest)) => (s.to_ascii_lowercase(), Some(rest)),
            None if raw.to_ascii_lowercase().starts_with("sqlite:") => ("sqlite".to_owned(), None),
            None => {
                return Err(CliError::new(
                    Exit::BadUrl,
                    format!(
                        "store URL '{shown}' has no scheme; write e.g. sqlite:///path/to/leases.db \
                         or postgres://user@host:5432/db"
                    ),
                ));
            }
        };
        let Some(scheme) = Scheme::from_name(&scheme_name) else {
            return Err(CliError::new(
                Exit::UnsupportedStore,
                format!(
                    "store scheme '{scheme_name}' is not supported; use sqlite://, postgres://, \
                     mysql://, mariadb://, redis://, mongodb:// or nats://"
                ),
            ));
        };
        let mut driver_url = raw.to_owned();
        let mut redis = RedisOptions::default();
        if let Some(rest) = rest {
            if scheme != Scheme::Sqlite {
                check_authority(rest, scheme, &shown)?;
            }
            if scheme_name == "mariadb" {
                driver_url = format!("mysql://{rest}");
            }
            if scheme == Scheme::Redis {
                let (url, options) = take_redis_options(&driver_url, &shown)?;
                driver_url = url;
                redis = options;
            }
        }
        Ok(StoreUrl {
            scheme,
            driver_url,
            shown,
            default_file: None,
            redis,
        })
    }

    /// The kind of store.
    pub(crate) fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The URL for the driver. It may hold a password: never print it.
    pub(crate) fn driver_url(&self) -> &str {
        &self.driver_url
    }

    /// The default store's file, when this is the default store.
    pub(crate) fn default_file(&self) -> Option<&Path> {
        self.default_file.as_deref()
    }

    /// Options of the Redis store from the URL.
    pub(crate) fn redis_options(&self) -> RedisOptions {
        self.redis
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreUrl")
            .field("scheme", &self.scheme)
            .field("url", &self.shown)
            .finish()
    }
}

/// The default store's file: `$XDG_STATE_HOME/lease/leases.db`, else
/// `$HOME/.local/state/lease/leases.db`. Relative values of either variable are ignored, as
/// the XDG specification says.
pub(crate) fn default_store_file() -> Result<PathBuf, String> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Ok(state.join("lease").join("leases.db"));
    }
    if let Some(home) = absolute("HOME") {
        return Ok(home.join(".local/state/lease/leases.db"));
    }
    Err(format!(
        "cannot place the default store: neither XDG_STATE_HOME nor HOME is an absolute path; \
         set one, or choose a store with --store or {STORE_VAR}"
    ))
}

/// How the default store is described in `--help`.
pub(crate) fn default_store_help() -> String {
    match default_store_file() {
        Ok(file) => format!("sqlite://{}", file.display()),
        Err(_) => "sqlite://$XDG_STATE_HOME/lease/leases.db (XDG_STATE_HOME and HOME are unset \
                   here: give --store)"
            .to_owned(),
    }
}

/// Everything in `raw` that may be a secret: the password (also when the URL is malformed)
/// and the values of password-like query parameters, raw and percent-decoded.
fn secrets_of(raw: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut push = |s: &str| {
        if !s.is_empty() {
            out.push(s.to_owned());
            let decoded = percent_decode(s);
            if decoded != s {
                out.push(decoded);
            }
        }
    };
    let rest = raw.split_once("://").map_or(raw, |(_, r)| r);
    let before_query = rest.split(['?', '#']).next().unwrap_or_default();
    if let Some((userinfo, _)) = before_query.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        push(password);
    }
    // A password holding '?' or '#' unencoded: everything up to the last '@'.
    if let Some((userinfo, _)) = rest.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        push(password);
    }
    if let Some((_, query)) = rest.split_once('?') {
        for pair in query.split(['&', '#']) {
            if let Some((key, value)) = pair.split_once('=') {
                let key = key.to_ascii_lowercase();
                if ["pass", "pwd", "secret", "token"]
                    .iter()
                    .any(|k| key.contains(k))
                {
                    push(value);
                }
            }
        }
    }
    out
}

/// Checks the host and port part of a server URL (`rest` is the URL after `scheme://`).
fn check_authority(rest: &str, scheme: Scheme, shown: &str) -> Result<(), CliError> {
    let before_query = rest.split(['?', '#']).next().unwrap_or_default();
    let after_userinfo = before_query
        .rsplit_once('@')
        .map_or(before_query, |(_, h)| h);
    let hosts = after_userinfo.split('/').next().unwrap_or_default();
    let bad = |why: String| {
        CliError::new(
            Exit::BadUrl,
            format!("store URL '{shown}' {why}; write e.g. {}", example(scheme)),
        )
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

fn example(scheme: Scheme) -> &'static str {
    match scheme {
        Scheme::Sqlite => "sqlite:///path/to/leases.db",
        Scheme::Postgres => "postgres://user:password@host:5432/database",
        Scheme::MySql => "mysql://user:password@host:3306/database",
        Scheme::Redis => "redis://[user:password@]host:6379[/db]",
        Scheme::MongoDb => "mongodb://user:password@host:27017/database",
        Scheme::Nats => "nats://host:4222",
    }
}

/// A yes/no query option.
fn flag(key: &str, value: &str, shown: &str) -> Result<bool, CliError> {
    match value {
        "1" | "true" | "yes" | "" => Ok(true),
        "0" | "false" | "no" => Ok(false),
        _ => Err(CliError::new(
            Exit::BadUrl,
            format!("store URL '{shown}': {key} takes 1 or 0, not '{value}'"),
        )),
    }
}

/// Takes `lease`'s own Redis options out of the query of `url`.
fn take_redis_options(url: &str, shown: &str) -> Result<(String, RedisOptions), CliError> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), RedisOptions::default()));
    };
    let mut options = RedisOptions::default();
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "allow_volatile" => options.allow_volatile = flag(key, value, shown)?,
            "allow_fsync_everysec" => options.allow_fsync_everysec = flag(key, value, shown)?,
            "terms" => {
                options.clock_floor = match value {
                    "clock_floor" => true,
                    "counter" => false,
                    _ => {
                        return Err(CliError::new(
                            Exit::BadUrl,
                            format!("store URL '{shown}': terms takes counter or clock_floor"),
                        ));
                    }
                };
            }
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, options))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(
            StoreUrl::parse("postgresql://u@h/db").unwrap().scheme(),
            Scheme::Postgres
        );
        let m = StoreUrl::parse("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(m.scheme(), Scheme::MySql);
        assert_eq!(m.driver_url(), "mysql://root@127.0.0.1:3306/test");
        assert_eq!(
            StoreUrl::parse("sqlite::memory:").unwrap().scheme(),
            Scheme::Sqlite
        );
        assert_eq!(
            StoreUrl::parse("ftp://x").unwrap_err().exit(),
            Exit::UnsupportedStore
        );
        assert_eq!(
            StoreUrl::parse("nonsense").unwrap_err().exit(),
            Exit::BadUrl
        );
        assert_eq!(
            StoreUrl::parse("postgres://u@h:99999/db")
                .unwrap_err()
                .exit(),
            Exit::BadUrl
        );
        assert_eq!(
            StoreUrl::parse("postgres:///db").unwrap_err().exit(),
            Exit::BadUrl
        );
        assert!(StoreUrl::parse("mongodb://a:1,b:2/db").is_ok());
        assert!(StoreUrl::parse("redis://[::1]:6379").is_ok());
    }

    #[test]
    fn passwords_never_show() {
        let u = StoreUrl::parse("postgres://user:s3cr%21t@host:5432/db?sslpassword=k3y").unwrap();
        for shown in [u.to_string(), format!("{u:?}")] {
            assert!(!shown.contains("s3cr"), "{shown}");
            assert!(!shown.contains("k3y"), "{shown}");
        }
        assert!(!redact::scrub("x s3cr!t y").contains("s3cr!t"));
        let e = StoreUrl::parse("postgres://user:pa?ss@host:bad/db").unwrap_err();
        assert!(!e.to_string().contains("pa?ss"), "{e}");
        let e = StoreUrl::parse("user:hunter3@host").unwrap_err();
        assert!(!e.to_string().contains("hunter3"), "{e}");
    }

    #[test]
    fn redis_options_are_taken_out() {
        let u =
            StoreUrl::parse("redis://127.0.0.1:6379/0?allow_volatile=1&protocol=resp3").unwrap();
        assert!(u.redis_options().allow_volatile);
        assert!(!u.redis_options().allow_fsync_everysec);
        assert_eq!(u.driver_url(), "redis://127.0.0.1:6379/0?protocol=resp3");
        let u = StoreUrl::parse("redis://127.0.0.1:6379/0?allow_fsync_everysec=1").unwrap();
        assert!(u.redis_options().allow_fsync_everysec);
        assert_eq!(u.driver_url(), "redis://127.0.0.1:6379/0");
        assert!(StoreUrl::parse("redis://127.0.0.1:6379/0?allow_fsync_everysec=2").is_err());
        let u = StoreUrl::parse("redis://h?terms=clock_floor").unwrap();
        assert!(u.redis_options().clock_floor);
        assert_eq!(u.driver_url(), "redis://h");
    }

    #[test]
    fn default_file_is_encoded() {
        let u = StoreUrl::sqlite_file(Path::new("/tmp/a?b#c%d/leases.db")).unwrap();
        assert_eq!(u.driver_url(), "sqlite:///tmp/a%3Fb%23c%25d/leases.db");
        assert_eq!(percent_decode("a%3Fb%23c%25d"), "a?b#c%d");
    }
}
