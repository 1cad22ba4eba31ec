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
    Ok(connect(url, lease).await?.into())
}

/// Connects to the store `url` names, as [`open`] does, for its partition leases and membership
/// records: a store whose capabilities lack either gives [`Exit::StoreRefused`].
pub(crate) async fn open_group(url: &StoreUrl, lease: Duration) -> Result<Arc<Store>, CliError> {
    let store = connect(url, lease).await?;
    require_groups(url, &store.capabilities())?;
    Ok(Arc::new(store))
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
async fn connect(url: &StoreUrl, lease: Duration) -> Result<Store, CliError> {
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
    let options = OpenOptions::new().lease(lease);
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
