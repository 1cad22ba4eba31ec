//! `lease fence sql|redis|file`: a script's write under a fence of lease-fence, refused with
//! [`Exit::Stale`] when a newer term has written to the resource.
//!
//! The token defaults to `LEASE_TERM` and the resource to `LEASE_NAME` (with `#permit-N` under
//! `LEASE_PERMIT`, as lease-fence's `per_permit` names it), which `lease run` and `lease elect`
//! export, so a script under them names only where it writes. Token and resource are checked
//! before any I/O (and before stdin is read).

use std::path::Path;
use std::time::Duration;

use lease::fence::FenceError;
use lease::fence::file::{FENCE_DIR, FileFence, MAX_FILE_NAME_BYTES};
use lease::fence::redis::RedisFence;
use lease::fence::sql::{FenceDb, SqlFence};
use lease::fence::{MAX_RESOURCE_BYTES, Stale};
use lease::redis::redis;
use lease::sql::sqlx::{self, Executor, Pool};
use tokio::io::AsyncReadExt;

use crate::cli::{FenceArgs, FenceCommand, FenceFileArgs, FenceOf, FenceRedisArgs, FenceSqlArgs};
use crate::cli::{RedisWrite, TokenArg};
use crate::duration::{human, parse_duration};
use crate::exit::{CliError, Exit};
use crate::redact;

/// The variable `lease run` sets to the term's fencing token.
const TERM_VAR: &str = "LEASE_TERM";
/// The variable `lease run` sets to the lease name.
const NAME_VAR: &str = "LEASE_NAME";
/// The variable `lease run --permits` sets to the permit held.
const PERMIT_VAR: &str = "LEASE_PERMIT";

/// `lease fence …`: exit code 0 when the write was made.
pub(crate) async fn fence(args: FenceArgs) -> Result<u8, CliError> {
    match args.what {
        FenceCommand::Sql(args) => sql(args).await,
        FenceCommand::Redis(args) => redis(args).await,
        FenceCommand::File(args) => file(args).await,
    }
}

/// The token to write under: `--token`, else `LEASE_TERM`.
fn token(arg: &TokenArg) -> Result<u64, CliError> {
    let (text, from) = match &arg.token {
        Some(t) => (t.clone(), "--token"),
        None => match std::env::var(TERM_VAR) {
            Ok(t) if !t.is_empty() => (t, TERM_VAR),
            _ => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!(
                        "no fencing token: give --token TOKEN (the term you write under), or \
                         run this inside `lease run NAME -- …`, which sets {TERM_VAR}"
                    ),
                ));
            }
        },
    };
    let token: u64 = text.trim().parse().map_err(|_| {
        CliError::new(
            Exit::Usage,
            format!(
                "{from} {text:?} is not a fencing token: give the term's token, a whole number \
                 from 1 (what `lease run` puts in {TERM_VAR})"
            ),
        )
    })?;
    if token == 0 {
        return Err(CliError::new(
            Exit::Usage,
            format!(
                "{from} 0 is not a fencing token: every term's token is at least 1; give the \
                 token of the term you write under ({TERM_VAR} inside `lease run`), not a \
                 default or unset value"
            ),
        ));
    }
    Ok(token)
}

/// The resource to fence: `--resource`, else `LEASE_NAME` (`#permit-N` under `LEASE_PERMIT`).
fn resource(of: &FenceOf) -> Result<String, CliError> {
    let resource = match &of.resource {
        Some(r) => r.clone(),
        None => match std::env::var(NAME_VAR) {
            Ok(name) if !name.is_empty() => match std::env::var(PERMIT_VAR) {
                Ok(permit) if !permit.is_empty() => format!("{name}#permit-{permit}"),
                _ => name,
            },
            _ => {
                return Err(CliError::new(
                    Exit::Usage,
                    format!(
                        "no resource to fence: give --resource RESOURCE (the data the fence \
                         guards: a table, a key, `orders/42`), or run this inside `lease run \
                         NAME -- …`, whose NAME ({NAME_VAR}) is the default"
                    ),
                ));
            }
        },
    };
    check_name(&resource, "resource", MAX_RESOURCE_BYTES)?;
    Ok(resource)
}

/// The checks lease-fence makes of a resource or file name, made here before any I/O.
fn check_name(name: &str, what: &str, max: usize) -> Result<(), CliError> {
    let why = if name.is_empty() {
        format!("the fence {what} name is empty; name the data the fence guards")
    } else if name.len() > max {
        format!(
            "the fence {what} name {:?}… is {} bytes long; a fence takes at most {max}",
            name.chars().take(32).collect::<String>(),
            name.len()
        )
    } else if name.chars().any(char::is_control) {
        format!(
            "the fence {what} name {name:?} holds a control character; use printable \
             characters only"
        )
    } else {
        return Ok(());
    };
    Err(CliError::new(Exit::BadName, why))
}

/// A fenced write's failure as `lease`'s error: a refusal is [`Exit::Stale`], one line that
/// says to stop; anything else exits as its kind calls for.
fn failed(e: FenceError, shown: &str) -> CliError {
    match e {
        FenceError::Stale(s) => refused(&s, shown),
        other => CliError::from_lease(&lease::Error::from(other)),
    }
}

/// The refusal's line: the resource (as `shown`), the fence's token and the offered one.
fn refused(s: &Stale, shown: &str) -> CliError {
    CliError::new(
        Exit::Stale,
        format!(
            "refused: resource '{shown}' has seen token {} > {}; stop: a newer term has \
             written there, and nothing was written",
            s.fence(),
            s.offered()
        ),
    )
}

/// The scheme of `url` (before `:`), lower-cased.
fn scheme(url: &str) -> String {
    url.split_once(':')
        .map(|(s, _)| s.to_ascii_lowercase())
        .unwrap_or_default()
}

/// Registers `url`'s password for redaction and answers the URL as it may be shown.
fn shown_url(url: &str) -> String {
    redact::add_secrets(lease::telemetry::redact::secrets(url));
    lease::telemetry::redact::redact_url(url)
}

/// The SQL databases `lease fence sql` takes.
#[derive(Debug, Clone, Copy)]
enum Database {
    Postgres,
    MySql,
    Sqlite,
}

/// `lease fence sql URL -- STATEMENT…`.
async fn sql(args: FenceSqlArgs) -> Result<u8, CliError> {
    let shown = shown_url(&args.url);
    let (dialect, url) = match scheme(&args.url).as_str() {
        "postgres" | "postgresql" => (Database::Postgres, args.url.clone()),
        "mysql" => (Database::MySql, args.url.clone()),
        "mariadb" => (
            Database::MySql,
            format!("mysql{}", &args.url["mariadb".len()..]),
        ),
        "sqlite" => (Database::Sqlite, args.url.clone()),
        "" => {
            return Err(CliError::new(
                Exit::BadUrl,
                format!(
                    "{shown:?} is not a database URL: give postgres://…, mysql://…, \
                     mariadb://… or sqlite://PATH"
                ),
            ));
        }
        other => {
            let hint = if other.starts_with("redis") {
                "; for Redis use `lease fence redis`"
            } else {
                ""
            };
            return Err(CliError::new(
                Exit::UnsupportedStore,
                format!(
                    "lease fence sql writes to PostgreSQL, MySQL/MariaDB or SQLite, not \
                     {other}:// ({shown}){hint}"
                ),
            ));
        }
    };
    let token = token(&args.of.token)?;
    let resource = resource(&args.of)?;
    let fence = SqlFence::new(&args.table).map_err(|e| CliError::from_lease(&e))?;
    #[cfg(feature = "break-fence-check-for-tests")]
    let fence = fence.break_check_for_tests();
    let timeout = parse_duration(&args.connect_timeout)?;
    let connect = Connect {
        url: &url,
        shown: &shown,
        timeout,
        sqlite: matches!(dialect, Database::Sqlite),
    };
    let run = Fenced {
        fence: &fence,
        resource: &resource,
        token,
        statements: &args.statements,
        shown: &shown,
    };
    match dialect {
        Database::Postgres => run.on(connect.pool::<sqlx::Postgres>().await?).await,
        Database::MySql => run.on(connect.pool::<sqlx::MySql>().await?).await,
        Database::Sqlite => run.on(connect.pool::<sqlx::Sqlite>().await?).await,
    }
}

/// How `lease fence sql` connects.
struct Connect<'a> {
    url: &'a str,
    shown: &'a str,
    /// How long to keep trying to connect.
    timeout: Duration,
    /// A SQLite file, which must exist.
    sqlite: bool,
}

impl Connect<'_> {
    /// A pool of one connection to the database: a malformed URL is [`Exit::BadUrl`], a
    /// database that cannot be reached within the timeout [`Exit::Unavailable`], with the
    /// cause of the last attempt.
    async fn pool<DB: sqlx::Database>(&self) -> Result<Pool<DB>, CliError> {
        let shown = self.shown;
        let doing = format!("connect to {shown} for a fenced write");
        let tried = sqlx::pool::PoolOptions::<DB>::new()
            .max_connections(1)
            .acquire_timeout(self.timeout)
            .connect(self.url)
            .await;
        let timed_out = matches!(tried, Err(sqlx::Error::PoolTimedOut));
        let e = match tried {
            Ok(pool) => return Ok(pool),
            Err(sqlx::Error::PoolTimedOut) => {
                // The pool kept trying and kept no cause: one attempt more, to name it.
                match <DB::Connection as sqlx::Connection>::connect(self.url).await {
                    Ok(conn) => {
                        let _ = sqlx::Connection::close(conn).await;
                        sqlx::Error::PoolTimedOut
                    }
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        Err(match e {
            sqlx::Error::Configuration(why) => {
                CliError::new(Exit::BadUrl, format!("bad database URL {shown}: {why}"))
            }
            e if self.sqlite => CliError::new(
                Exit::Unavailable,
                format!(
                    "cannot open the SQLite database {shown}: {e}. The file must exist and be \
                     writable (add ?mode=rwc to the URL to create it)"
                ),
            ),
            e if timed_out => {
                let e = lease::sql::classify(e, &doing);
                CliError::new(
                    Exit::Unavailable,
                    format!(
                        "{e} (tried for {}: --connect-timeout sets how long)",
                        human(self.timeout)
                    ),
                )
            }
            e => CliError::from_lease(&lease::sql::classify(e, &doing)),
        })
    }
}

/// The statements of `lease fence sql` and their fence.
struct Fenced<'a> {
    fence: &'a SqlFence,
    resource: &'a str,
    token: u64,
    statements: &'a [String],
    shown: &'a str,
}

impl Fenced<'_> {
    /// Ensures the fence table, then in one transaction: the check, the statements, the commit.
    async fn on<DB>(&self, pool: Pool<DB>) -> Result<u8, CliError>
    where
        DB: FenceDb,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    {
        let outcome = self.write(&pool).await;
        pool.close().await;
        outcome.map(|()| 0)
    }

    async fn write<DB>(&self, pool: &Pool<DB>) -> Result<(), CliError>
    where
        DB: FenceDb,
        for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    {
        self.fence
            .ensure(pool)
            .await
            .map_err(|e| CliError::from_lease(&e))?;
        let mut tx = self
            .fence
            .begin(pool, self.resource, self.token)
            .await
            .map_err(|e| failed(e, self.resource))?;
        let count = self.statements.len();
        for (i, statement) in self.statements.iter().enumerate() {
            if let Err(e) = sqlx::raw_sql(statement).execute(&mut *tx).await {
                let _ = tx.rollback().await;
                let e = lease::sql::classify(
                    e,
                    &format!(
                        "run statement {} of {count} on {} (rolled back with the fence's \
                         raise: nothing was written)",
                        i + 1,
                        self.shown
                    ),
                );
                return Err(CliError::new(Exit::StoreError, e.to_string()));
            }
        }
        tx.commit().await.map_err(|e| {
            CliError::from_lease(&lease::sql::classify(
                e,
                &format!(
                    "commit the fenced transaction on {} (its outcome is unknown: read the \
                     data back before writing again)",
                    self.shown
                ),
            ))
        })
    }
}

/// `lease fence redis URL set|hset|del …`.
async fn redis(args: FenceRedisArgs) -> Result<u8, CliError> {
    let shown = shown_url(&args.url);
    match scheme(&args.url).as_str() {
        "redis" | "rediss" | "redis+unix" | "unix" => {}
        "" => {
            return Err(CliError::new(
                Exit::BadUrl,
                format!("{shown:?} is not a Redis URL: give redis://HOST[:PORT][/DB]"),
            ));
        }
        other => {
            return Err(CliError::new(
                Exit::UnsupportedStore,
                format!(
                    "lease fence redis writes to Redis (redis://, rediss://), not {other}:// \
                     ({shown}); for a SQL database use `lease fence sql`"
                ),
            ));
        }
    }
    let token = token(&args.of.token)?;
    let resource = resource(&args.of)?;
    let fence = RedisFence::with_prefix(&args.prefix).map_err(|e| CliError::from_lease(&e))?;
    #[cfg(feature = "break-fence-check-for-tests")]
    let fence = fence.break_check_for_tests();
    let timeout = parse_duration(&args.connect_timeout)?;
    let client = redis::Client::open(args.url.as_str())
        .map_err(|e| CliError::new(Exit::BadUrl, format!("bad Redis URL {shown}: {e}")))?;
    let connected = tokio::time::timeout(timeout, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| {
            CliError::new(
                Exit::Unavailable,
                format!(
                    "connect to {shown} for a fenced write: no connection within {} \
                     (--connect-timeout sets how long)",
                    human(timeout)
                ),
            )
        })?;
    let mut conn = connected.map_err(|e| {
        CliError::from_lease(&lease::redis::classify(
            e,
            &format!("connect to {shown} for a fenced write"),
        ))
    })?;
    let written = match &args.write {
        RedisWrite::Set { key, value } => {
            fence
                .set(&mut conn, &resource, token, key, value.as_str())
                .await
        }
        RedisWrite::Hset { key, field, value } => fence
            .hset(
                &mut conn,
                &resource,
                token,
                key,
                field.as_str(),
                value.as_str(),
            )
            .await
            .map(|_| ()),
        RedisWrite::Del { keys } => {
            let mut cmd = redis::cmd("DEL");
            cmd.arg(keys);
            fence
                .write::<_, u64>(&mut conn, &resource, token, &cmd)
                .await
                .map(|_| ())
        }
    };
    written.map_err(|e| failed(e, &resource))?;
    Ok(0)
}

/// `lease fence file PATH`: stdin to PATH.
async fn file(args: FenceFileArgs) -> Result<u8, CliError> {
    let token = token(&args.token)?;
    let (dir, name) = split_path(&args.path)?;
    let fence = FileFence::new(dir);
    #[cfg(feature = "break-fence-check-for-tests")]
    let fence = fence.break_check_for_tests();
    let mut contents = Vec::new();
    tokio::io::stdin()
        .read_to_end(&mut contents)
        .await
        .map_err(|e| {
            CliError::new(
                Exit::StoreError,
                format!("cannot read stdin for {}: {e}", args.path.display()),
            )
        })?;
    fence
        .write(&name, token, contents)
        .await
        .map_err(|e| failed(e, &args.path.display().to_string()))?;
    Ok(0)
}

/// PATH as the fence's directory and file name, checked as lease-fence checks the name.
fn split_path(path: &Path) -> Result<(&Path, String), CliError> {
    let Some(name) = path.file_name() else {
        return Err(CliError::new(
            Exit::BadName,
            format!(
                "{} names no file: give the path of a file to replace, such as out/report.csv",
                path.display()
            ),
        ));
    };
    let Some(name) = name.to_str() else {
        return Err(CliError::new(
            Exit::BadName,
            format!(
                "the file name of {} is not UTF-8, which a fence cannot name; rename it",
                path.display()
            ),
        ));
    };
    check_name(name, "file", MAX_FILE_NAME_BYTES)?;
    if name == FENCE_DIR {
        return Err(CliError::new(
            Exit::BadName,
            format!(
                "{FENCE_DIR} is the fences' own folder, not a file to write; pick another name"
            ),
        ));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((dir, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_split_into_a_directory_and_a_plain_name() {
        let (dir, name) = split_path(Path::new("out/report.csv")).unwrap();
        assert_eq!((dir, name.as_str()), (Path::new("out"), "report.csv"));
        let (dir, _) = split_path(Path::new("report.csv")).unwrap();
        assert_eq!(dir, Path::new("."));
        for bad in ["/", "out/..", "out/.lease-fence", "a\u{7}b"] {
            let e = split_path(Path::new(bad)).unwrap_err();
            assert_eq!(e.exit(), Exit::BadName, "{bad}: {e}");
        }
    }

    #[test]
    fn a_refusal_is_one_line_with_both_tokens() {
        let e = failed(FenceError::Stale(stale("orders", 4, 9)), "orders");
        assert_eq!(e.exit(), Exit::Stale);
        assert!(
            e.to_string()
                .starts_with("lease: refused: resource 'orders' has seen token 9 > 4; stop"),
            "{e}"
        );
    }

    /// A refusal as lease-fence makes one (its constructor is the crate's own).
    fn stale(resource: &str, offered: u64, fence: u64) -> Stale {
        let dir = std::env::temp_dir().join(format!(
            "lease-cli-stale-{}-{offered}-{fence}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let f = FileFence::new(&dir);
        f.write_blocking(resource, fence, b"").unwrap();
        let e = f.write_blocking(resource, offered, b"").unwrap_err();
        let _ = std::fs::remove_dir_all(&dir);
        e.stale().cloned().unwrap()
    }
}
