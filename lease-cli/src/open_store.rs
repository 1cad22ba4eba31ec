//! Opening the store a URL names, with bad URLs told apart from stores that cannot be reached.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use lease::{
    Backend, Error, ErrorKind, LeaseStore, OpenOptions, Store, UrlError, backend::Capabilities,
};
use tokio::time::Instant;

use crate::exit::{CliError, Exit};
use crate::store_url::StoreUrl;

/// How long opening a SQLite file is retried while another process holds it locked (two
/// processes creating the same new file at once).
const SQLITE_BUSY_FOR: Duration = Duration::from_secs(5);

/// Connects to the store `url` names and checks that it can carry leases.
///
/// The URL was checked when parsed (see [`StoreUrl::parse`]); [`lease::open`] checks it again,
/// with the store's own driver: one it refuses gives [`Exit::BadUrl`].
/// Then the default store's directory is created when missing ([`Exit::StateDir`] when it
/// cannot be), and the store is opened: a store that cannot be reached or refuses the
/// connection gives [`Exit::Unavailable`], one that cannot carry leases as configured
/// [`Exit::StoreRefused`].
///
/// `lease` is the lease duration the store will be used with: a NATS store keeps every lease for
/// its bucket's max age, so it opens the bucket for that duration.
pub(crate) async fn open(url: &StoreUrl, lease: Duration) -> Result<Arc<dyn LeaseStore>, CliError> {
    // As a lease store it is the backend's store itself.
    Ok(connect(url, lease, Use::Claim).await?.into())
}

/// Opens the store as [`open`] does, for a command that claims nothing (`status`, `watch`,
/// `release`): a Redis server that may lose lease records is not refused, since the risk is
/// terms handed out twice, and this process hands out none (see [`Use::Read`]).
pub(crate) async fn open_to_read(
    url: &StoreUrl,
    lease: Duration,
) -> Result<Arc<dyn LeaseStore>, CliError> {
    Ok(connect(url, lease, Use::Read).await?.into())
}

/// Connects to the store `url` names, as [`open_to_read`] does (`members` and `owners` claim
/// nothing), for its partition leases and membership records: a store whose capabilities lack
/// either gives [`Exit::StoreRefused`].
pub(crate) async fn open_group_to_read(
    url: &StoreUrl,
    lease: Duration,
) -> Result<Arc<Store>, CliError> {
    let store = connect(url, lease, Use::Read).await?;
    require_groups(url, &store.capabilities())?;
    Ok(Arc::new(store))
}

/// What a command does with the store, for the Redis durability check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Use {
    /// It claims (`run`, `elect`): a Redis server that may lose lease records is refused
    /// unless the URL accepts it, as by the library.
    Claim,
    /// It only reads, or breaks a lease without issuing a term (`status`, `watch`, `members`,
    /// `owners`, `release`). Those calls never run the check (lease-redis runs it before a
    /// claim, acquire or heartbeat, and `lease::open` at the start): the store is opened with
    /// clock-floor terms, which pass the check with a log line at info level only, and change
    /// nothing but the terms of claims, which these commands never make. A URL that already
    /// names a term scheme keeps it, and `allow_volatile` is taken instead (its warning is
    /// then shown), unless the URL names that too.
    Read,
}

/// The names of the query parameters of `url` (before any `=`).
fn query_keys(url: &str) -> Vec<&str> {
    let Some((_, query)) = url.split_once('?') else {
        return Vec::new();
    };
    let query = query.split('#').next().unwrap_or("");
    query
        .split('&')
        .map(|pair| pair.split('=').next().unwrap_or(""))
        .collect()
}

/// The options for `url` used as `how`.
fn options_for(url: &StoreUrl, lease: Duration, how: Use) -> OpenOptions {
    let options = OpenOptions::new().lease(lease);
    if how != Use::Read || url.backend() != Backend::Redis {
        return options;
    }
    let keys = query_keys(url.driver_url());
    if !keys.contains(&"terms") {
        options.redis_clock_floor(true)
    } else if !keys.contains(&"allow_volatile") {
        options.redis_allow_volatile(true)
    } else {
        options
    }
}

/// Refuses a store that keeps no partition leases or no membership records.
fn require_groups(url: &StoreUrl, caps: &Capabilities) -> Result<(), CliError> {
    let missing: Vec<&str> = [
        (!caps.partitions).then_some("partition leases"),
        (!caps.membership).then_some("membership records"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(CliError::new(
        Exit::StoreRefused,
        format!(
            "store '{url}' keeps no {}; `lease members` and `lease owners` need a store that \
             keeps both: choose another --store",
            missing.join(" and no ")
        ),
    ))
}

/// Connects to the store `url` names (see [`open`]) through [`lease::open`]: a
/// [`lease::Store`] carries leases and reaches partitions and membership through its accessors,
/// so the callers use the one object for what they need.
async fn connect(url: &StoreUrl, lease: Duration, how: Use) -> Result<Store, CliError> {
    url.note_default();
    if let Some(file) = url.default_file()
        && let Some(dir) = file.parent()
    {
        std::fs::create_dir_all(dir).map_err(|e| {
            CliError::new(
                Exit::StateDir,
                format!(
                    "cannot create the default store's directory {}: {e}; fix its permissions \
                     or choose a store with --store",
                    dir.display()
                ),
            )
        })?;
    }
    let options = options_for(url, lease, how);
    let store = match url.backend() {
        Backend::Sqlite => open_sqlite(url, &options).await?,
        _ => lease::open(url.driver_url(), &options)
            .await
            .map_err(|e| connect_error(url, &e))?,
    };
    Ok(store)
}

/// Opens a SQLite store, waiting while another process holds the new file locked.
async fn open_sqlite(url: &StoreUrl, options: &OpenOptions) -> Result<Store, CliError> {
    let until = Instant::now() + SQLITE_BUSY_FOR;
    loop {
        match lease::open(url.driver_url(), options).await {
            Ok(store) => return Ok(store),
            Err(e) if lease::sql::is_sqlite_busy(&e) && Instant::now() < until => {
                tracing::debug!(error = %e, "the SQLite file is locked; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(match url.default_file() {
                    Some(file)
                        if e.kind() != ErrorKind::Unsupported && UrlError::of(&e).is_none() =>
                    {
                        CliError::new(
                            Exit::StateDir,
                            format!("cannot open the default store {}: {e}", file.display()),
                        )
                    }
                    _ => connect_error(url, &e),
                });
            }
        }
    }
}

/// The exit code and message for an error of [`lease::open`].
fn connect_error(url: &StoreUrl, e: &Error) -> CliError {
    if let Some(refused) = UrlError::of(e) {
        let exit = match refused {
            UrlError::UnknownScheme { .. } | UrlError::NotCompiled { .. } => Exit::UnsupportedStore,
            _ => Exit::BadUrl,
        };
        return CliError::new(exit, e.message());
    }
    let exit = match e.kind() {
        ErrorKind::Unsupported | ErrorKind::Schema => Exit::StoreRefused,
        // MongoDB's URL is parsed only when connecting.
        ErrorKind::Unavailable | ErrorKind::InvalidName
            if url.backend() == Backend::MongoDb && !e.is_temporary() =>
        {
            Exit::BadUrl
        }
        ErrorKind::InvalidName => Exit::BadUrl,
        _ => Exit::Unavailable,
    };
    if let Some(message) = redis_refusal(url, e) {
        return CliError::new(exit, message);
    }
    if exit == Exit::Unavailable
        && url.backend() == Backend::Sqlite
        && let Some(dir) = missing_sqlite_dir(url)
    {
        return CliError::new(
            Exit::BadUrl,
            format!(
                "store '{url}': the directory {} does not exist; create it, or give a file in \
                 a directory that exists (the file itself is created when missing)",
                dir.display()
            ),
        );
    }
    let hint = match exit {
        Exit::BadUrl => "; check the store URL",
        Exit::Unavailable if url.backend() == Backend::Sqlite => {
            "; check the file's path and that this user may read and write it and its directory"
        }
        Exit::Unavailable => {
            "; check that the store runs and the URL's host, port, path and credentials"
        }
        _ => "",
    };
    CliError::new(exit, format!("store '{url}': {e}{hint}"))
}

/// The message for a Redis server refused because it may lose lease records, for a command
/// line user: once, in terms of the URL's parameters, saying which is safe. `None` for any
/// other error.
///
/// lease-redis says why (the server's settings) between "could repeat: " and ". Turn on" of
/// its own message, which goes on in terms of its Rust API; the facade appends the URL
/// parameters, in its own words. The source chain is searched too, for an error that comes
/// wrapped.
fn redis_refusal(url: &StoreUrl, e: &Error) -> Option<String> {
    if url.backend() != Backend::Redis || e.kind() != ErrorKind::Unsupported {
        return None;
    }
    let mut messages = vec![e.message().to_owned()];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        messages.push(s.to_string());
        source = s.source();
    }
    let text = messages
        .iter()
        .find(|m| m.contains("may lose lease records"))?;
    let why = text
        .split_once("could repeat: ")
        .and_then(|(_, rest)| rest.split_once(". Turn on").map(|(why, _)| why))
        .unwrap_or("its persistence settings could not be confirmed");
    let why = condense(why);
    let everysec = why.contains("appendfsync is everysec");
    let fsync_hint = if everysec {
        " ?allow_fsync_everysec=1 accepts exactly this server's appendfsync everysec, which can \
         lose the last second of claims in a crash."
    } else {
        ""
    };
    Some(format!(
        "store '{url}' may lose lease records: {why}. A lost record starts its terms again at \
         1, so a fencing token could be handed out twice; lease claims nothing on such a server \
         unless the URL accepts it. Safe: turn on AOF synced on every write on the server \
         (appendonly yes, appendfsync always; maxmemory-policy noeviction or volatile-*). \
         Safe on the URL while the server's clock never steps back: ?terms=clock_floor (terms \
         from the server's clock, which keep growing after a loss).{fsync_hint} Unsafe: \
         ?allow_volatile=1 accepts any server, and tokens may repeat after a restart. \
         Commands that claim nothing (status, watch, members, owners, release) need none of \
         this."
    ))
}

/// lease-redis's reasons, with the failed `CONFIG GET`s said once: each failure repeats the
/// connection's context and a hint about script permissions that does not apply to CONFIG, so
/// they become `CONFIG GET appendonly and maxmemory-policy failed (CAUSE)`, CAUSE being the
/// server's last word.
fn condense(why: &str) -> String {
    let Some((risks, unknown)) = why.split_once("durability cannot be checked: ") else {
        return why.to_owned();
    };
    let params: Vec<&str> = unknown
        .split("CONFIG GET ")
        .filter_map(|part| part.split_once(" failed: ").map(|(param, _)| param))
        .filter(|param| !param.contains(' '))
        .collect();
    if params.is_empty() {
        return why.to_owned();
    }
    let cause = unknown
        .rsplit(": ")
        .next()
        .unwrap_or("")
        .trim_end_matches([';', ' ', '.']);
    format!(
        "{risks}its persistence cannot be checked: CONFIG GET {} failed ({cause})",
        params.join(" and ")
    )
}

/// The directory of a SQLite store's file when it does not exist (SQLite creates a missing
/// file, never its directory); `None` when it exists or the URL names no file.
fn missing_sqlite_dir(url: &StoreUrl) -> Option<PathBuf> {
    use lease::sql::sqlx::sqlite::SqliteConnectOptions;
    // lease's own options (`?table=…`) are no concern of the driver's parser.
    let bare = url.driver_url().split('?').next()?;
    let options = SqliteConnectOptions::from_str(bare).ok()?;
    let dir = options.get_filename().parent()?;
    (!dir.as_os_str().is_empty() && !dir.exists()).then(|| dir.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_config_reads_are_said_once() {
        let hint = "the server answered with an error; the Redis user needs EVAL (…) on the \
                    lease keys: NoPerm: this user has no permissions to run the 'config|get' \
                    command";
        let why = format!(
            "durability cannot be checked: CONFIG GET appendonly failed: at h:6379: CONFIG GET \
             appendonly: {hint}; CONFIG GET maxmemory-policy failed: at h:6379: CONFIG GET \
             maxmemory-policy: {hint}"
        );
        assert_eq!(
            condense(&why),
            "its persistence cannot be checked: CONFIG GET appendonly and maxmemory-policy \
             failed (this user has no permissions to run the 'config|get' command)"
        );
        let off = "appendonly is off, so a restart loses every lease record";
        assert_eq!(condense(off), off);
    }

    #[test]
    fn query_keys_are_the_parameters_names() {
        assert_eq!(
            query_keys("redis://u:p@h:6379/0?terms=counter&allow_volatile=1#x"),
            ["terms", "allow_volatile"]
        );
        assert!(query_keys("redis://h:6379").is_empty());
    }

    #[test]
    fn stores_without_partitions_or_membership_are_refused() {
        let url = StoreUrl::parse("sqlite:///tmp/x.db").unwrap();
        let both = Capabilities {
            partitions: true,
            membership: true,
            ..Capabilities::default()
        };
        assert!(require_groups(&url, &both).is_ok());
        let e = require_groups(&url, &Capabilities::default()).unwrap_err();
        assert_eq!(e.exit(), Exit::StoreRefused);
        assert!(
            e.message()
                .contains("keeps no partition leases and no membership records"),
            "{}",
            e.message()
        );
        let e = require_groups(
            &url,
            &Capabilities {
                partitions: true,
                ..Capabilities::default()
            },
        )
        .unwrap_err();
        assert!(
            e.message().contains("keeps no membership records;"),
            "{}",
            e.message()
        );
        assert!(
            e.message()
                .ends_with("need a store that keeps both: choose another --store"),
            "{}",
            e.message()
        );
    }
}
