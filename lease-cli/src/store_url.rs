//! Which store a URL names, the default store's file, and the URL's secrets.
//!
//! The store is chosen by URL (`--store` or `LEASE_STORE`); without one it is SQLite on one
//! fixed per-user file under the XDG state directory, so runs from any directory exclude each
//! other. Parsing registers the URL's password with [`redact`] before anything
//! can print it; which backend a URL names, and whether it is well formed, is for
//! [`lease::check_url`] to say.

use std::fmt;
use std::path::{Path, PathBuf};

use lease::{Backend, OpenOptions, UrlError};

use crate::exit::{CliError, Exit};
use crate::redact;

/// The environment variable that names the store when `--store` is not given.
pub(crate) const STORE_VAR: &str = "LEASE_STORE";

/// A parsed store URL. Its `Debug` and `Display` forms never show the password.
#[derive(Clone)]
pub(crate) struct StoreUrl {
    backend: Backend,
    /// The URL handed to [`lease::open`]; it may hold a password.
    driver_url: String,
    shown: String,
    default_file: Option<PathBuf>,
    /// Say on stderr, when the store is opened, that the default store is not shared.
    note_default: bool,
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
            backend: Backend::Sqlite,
            driver_url: format!("sqlite://{encoded}"),
            shown: format!("sqlite://{path}"),
            default_file: Some(file.to_owned()),
            note_default: false,
        })
    }

    /// Parses a store URL, registering its secrets for redaction first. A URL that names no
    /// backend of this build gives [`Exit::UnsupportedStore`], a malformed one [`Exit::BadUrl`].
    pub(crate) fn parse(raw: &str) -> Result<StoreUrl, CliError> {
        redact::add_secrets(lease::telemetry::redact::secrets(raw));
        let shown = lease::telemetry::redact::redact_url(raw);
        let backend = lease::check_url(raw, &OpenOptions::new()).map_err(|e| {
            let exit = match UrlError::of(&e) {
                Some(UrlError::UnknownScheme { .. } | UrlError::NotCompiled { .. }) => {
                    Exit::UnsupportedStore
                }
                _ => Exit::BadUrl,
            };
            CliError::new(exit, e.message())
        })?;
        if backend == Backend::Memory {
            // Whether or not the `memory` feature of `lease` is compiled in (another crate of
            // a workspace can turn it on): a store inside one process coordinates nothing
            // between `lease` commands.
            return Err(CliError::new(
                Exit::UnsupportedStore,
                format!(
                    "{shown}: a memory store lives inside one process, so it cannot coordinate \
                     `lease` commands; give a store they share (sqlite://, postgres://, mysql://, \
                     redis://, nats://, mongodb://, etcd://)"
                ),
            ));
        }
        Ok(StoreUrl {
            backend,
            driver_url: raw.to_owned(),
            shown,
            default_file: None,
            note_default: false,
        })
    }

    /// The backend the URL names.
    pub(crate) fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL for the driver. It may hold a password: never print it.
    pub(crate) fn driver_url(&self) -> &str {
        &self.driver_url
    }

    /// The default store's file, when this is the default store.
    pub(crate) fn default_file(&self) -> Option<&Path> {
        self.default_file.as_deref()
    }

    /// The same URL; when it is the default store and `note` is true, opening it says on
    /// stderr that it excludes only this user on this host (see [`StoreUrl::note_default`]).
    pub(crate) fn noting_default(mut self, note: bool) -> StoreUrl {
        self.note_default = note;
        self
    }

    /// Says on stderr, in one line, that the default store is this user's on this host alone
    /// (the same command on another host, or by another user, is not excluded): when this is
    /// the default store and [`noting_default`](Self::noting_default) asked for it.
    pub(crate) fn note_default(&self) {
        if self.note_default && self.default_file.is_some() {
            redact::eprintln_scrubbed(&format!(
                "lease: the default store {self} excludes only this user on this host; to \
                 exclude across hosts and users, give them all one shared store with --store or \
                 {STORE_VAR} (see `lease help stores`; --quiet leaves this line out)"
            ));
        }
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
            .field("backend", &self.backend)
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

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use lease::sql::sqlx;

    use super::*;

    #[test]
    fn schemes() {
        assert_eq!(
            StoreUrl::parse("postgresql://u@h/db").unwrap().backend(),
            Backend::Postgres
        );
        let m = StoreUrl::parse("mariadb://root@127.0.0.1:3306/test").unwrap();
        assert_eq!(m.backend(), Backend::MySql);
        assert_eq!(
            StoreUrl::parse("sqlite::memory:").unwrap().backend(),
            Backend::Sqlite
        );
        assert_eq!(
            StoreUrl::parse("ftp://x").unwrap_err().exit(),
            Exit::UnsupportedStore
        );
        // A store inside one process is refused, compiled in or not: as unsupported as an
        // unknown scheme.
        assert_eq!(
            StoreUrl::parse("memory://").unwrap_err().exit(),
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
    fn redis_options_are_checked() {
        // lease's own options are read (and taken out) by `lease::open`; a bad one is a bad URL.
        assert!(
            StoreUrl::parse("redis://127.0.0.1:6379/0?allow_volatile=1&protocol=resp3").is_ok()
        );
        let e = StoreUrl::parse("redis://127.0.0.1:6379/0?allow_fsync_everysec=2").unwrap_err();
        assert_eq!(e.exit(), Exit::BadUrl);
        assert!(
            e.message().contains("allow_fsync_everysec takes 1 or 0"),
            "{e}"
        );
        let e = StoreUrl::parse("redis://h?terms=sometimes").unwrap_err();
        assert_eq!(e.exit(), Exit::BadUrl);
        assert!(
            e.message().contains("terms takes counter or clock_floor"),
            "{e}"
        );
    }

    #[test]
    fn default_file_is_encoded() {
        let u = StoreUrl::sqlite_file(Path::new("/tmp/a?b#c%d/leases.db")).unwrap();
        assert_eq!(u.driver_url(), "sqlite:///tmp/a%3Fb%23c%25d/leases.db");
        // The driver reads back the file's own name.
        let options = sqlx::sqlite::SqliteConnectOptions::from_str(u.driver_url()).unwrap();
        assert_eq!(options.get_filename(), Path::new("/tmp/a?b#c%d/leases.db"));
        assert_eq!(
            lease::check_url(u.driver_url(), &OpenOptions::new()).unwrap(),
            Backend::Sqlite
        );
    }
}
