//! Redis errors as [`lease_core::Error`]s.
//!
//! Every mapping of the crate is here, nowhere else. Messages say only what went wrong; the
//! operation, the name and the server are attached as the core's structured context
//! ([`During::attach`]: `Error::during`, `Error::at_server`).
//!
//! - A request with no answer within the operation timeout ([`timed_out`], or the connection's
//!   own response timeout when you gave it one): `Timeout`, temporary; the operation may or may
//!   not have taken effect.
//! - The connection failed, was dropped, reset or refused, or a node of a cluster could not be
//!   found: `Unavailable`, temporary, naming the server (host and port, never credentials);
//!   also a server [`unreachable`] at connect.
//! - A malformed URL ([`bad_url`]): `Unavailable`, permanent, naming the host only.
//! - Authentication or the client's configuration failed: `Unavailable`, permanent.
//! - The server answered with an error: `Backend`, temporary when the server says so
//!   (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` after a failover, `MOVED` /
//!   `ASK` during resharding, `BUSY`, `OOM`), permanent otherwise (`NOPERM`, `WRONGTYPE`, a
//!   script error, an unexpected reply); a server that refuses to run scripts at all
//!   ([`scripting_refused`]): `Unsupported`; a script reply of the wrong shape
//!   ([`unexpected_reply`]): `Backend`, permanent.

use std::time::Duration;

use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind};
use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

/// What a request was for, to attach to its error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum During<'a> {
    /// A store operation on a name (a lease, group or service; `""` when it has none).
    Op(Operation, &'a str),
    /// Anything else (start-up commands, clean-up helpers): said at the head of the message.
    Task(&'a str),
    /// The application's own command ([`classify`]): said at the head of the message, with no
    /// hint about the lease scripts.
    App(&'a str),
}

impl During<'_> {
    /// The message head for a task, none for an operation (its context says it).
    fn task(self) -> Option<String> {
        match self {
            During::Op(..) => None,
            During::Task(what) | During::App(what) => Some(what.to_owned()),
        }
    }

    /// Attaches the operation and name, and the server when its label is known.
    pub(crate) fn attach(self, e: Error, server: Option<&str>) -> Error {
        let e = match self {
            During::Op(op, name) => e.during(op, name),
            During::Task(_) | During::App(_) => e,
        };
        match server {
            Some(server) => e.at_server(server),
            None => e,
        }
    }
}

/// `message`, headed by the task when there is one.
fn said(during: During<'_>, message: &str) -> String {
    match during.task() {
        Some(task) => format!("{task}: {message}"),
        None => message.to_owned(),
    }
}

/// The primary answered, but only `acked` of the `replicas` replicas asked for acknowledged
/// within `wait` ([`RedisConfig::replica_acks`](crate::RedisConfig::replica_acks)): the operation
/// took effect on the primary and may be lost in a failover, so the store does not answer with
/// it.
pub(crate) fn too_few_acks(
    during: During<'_>,
    server: Option<&str>,
    (replicas, acked): (u32, u64),
    wait: Duration,
) -> Error {
    let e = Error::unavailable(said(
        during,
        &format!(
            "only {acked} of {replicas} replicas acknowledged within {wait:?}; the primary \
             applied the operation but a failover could lose it, so it is not reported as done \
             — check the replicas (INFO replication), or lower replica_acks"
        ),
    ));
    during.attach(e, server)
}

/// No answer within the operation timeout `bound`.
pub(crate) fn timed_out(during: During<'_>, server: Option<&str>, bound: Duration) -> Error {
    let e = Error::new(
        ErrorKind::Timeout,
        said(
            during,
            &format!("no answer within {bound:?}; the outcome is unknown"),
        ),
    );
    during.attach(e, server)
}

/// The URL `url` does not parse; the message names its host, never its credentials.
pub(crate) fn bad_url(url: &str, e: RedisError) -> Error {
    Error::unavailable(format!(
        "the Redis URL {} is invalid; expected redis://[user:password@]host:port[/db]",
        lease_core::telemetry::redact::redact_url(url)
    ))
    .with_source(e)
    .with_temporary(false)
}

/// Opening the first connection to `addr` (host and port) failed.
pub(crate) fn unreachable(e: RedisError, addr: &str) -> Error {
    if e.is_io_error() {
        Error::unavailable("the Redis server is unreachable")
            .with_source(e)
            .at_server(addr)
    } else {
        from_redis(e, During::Task("connect"), Some(addr))
    }
}

/// `SCRIPT LOAD` failed at start-up: a permanent server error means scripting is off or
/// forbidden for this user, which no retry cures.
pub(crate) fn scripting_refused(e: Error) -> Error {
    if e.is(ErrorKind::Backend) && !e.is_temporary() {
        let server = e.server().map(str::to_owned);
        let refused = Error::unsupported(format!(
            "the server cannot run the lease scripts ({}); Lua scripting must be enabled and \
             allowed for this user",
            e.message()
        ))
        .with_source(e);
        match server {
            Some(server) => refused.at_server(server),
            None => refused,
        }
    } else {
        e
    }
}

/// A script answered with a reply of a shape it never sends.
pub(crate) fn unexpected_reply(
    during: During<'_>,
    server: Option<&str>,
    reply: impl std::fmt::Debug,
) -> Error {
    let e = Error::new(
        ErrorKind::Backend,
        said(
            during,
            &format!("unexpected reply {reply:?} from the script"),
        ),
    )
    .with_temporary(false);
    during.attach(e, server)
}

/// A task of a fanned-out read (one call per name on a cluster connection) failed to finish.
pub(crate) fn task_failed(during: During<'_>, e: tokio::task::JoinError) -> Error {
    during.attach(
        Error::new(ErrorKind::Backend, said(during, "a read task failed")).with_source(e),
        None,
    )
}

/// Maps `e`, raised during `during` on `server` (its label, when known).
pub(crate) fn from_redis(e: RedisError, during: During<'_>, server: Option<&str>) -> Error {
    let kind = e.kind();
    let mapped = match kind {
        RedisKind::Io if e.is_timeout() => Error::new(
            ErrorKind::Timeout,
            said(
                during,
                "no answer within the connection's response timeout; the outcome is unknown",
            ),
        )
        .with_source(e),
        RedisKind::Io | RedisKind::ClusterConnectionNotFound => {
            Error::unavailable(said(during, "the Redis server is unavailable")).with_source(e)
        }
        RedisKind::AuthenticationFailed => Error::unavailable(said(
            during,
            "the server refused the credentials; check the user name and password",
        ))
        .with_source(e)
        .with_temporary(false),
        RedisKind::InvalidClientConfig => {
            Error::unavailable(said(during, "the connection settings are invalid"))
                .with_source(e)
                .with_temporary(false)
        }
        RedisKind::Server(server_kind) => {
            let temporary = matches!(
                server_kind,
                ServerErrorKind::BusyLoading
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::ReadOnly
                    | ServerErrorKind::Moved
                    | ServerErrorKind::Ask
            );
            let hint = match server_kind {
                _ if matches!(during, During::App(_)) => "",
                ServerErrorKind::NoPerm => {
                    "; the Redis user needs EVAL, EVALSHA and the commands the scripts call \
                     (TIME, HMGET, HGET, HGETALL, HSET, HDEL, DEL, ZADD, ZRANGEBYSCORE, ZREM, \
                     ZSCORE) on the lease keys"
                }
                ServerErrorKind::CrossSlot => {
                    "; every lease script touches one key, or (membership) two keys under one \
                     hash tag"
                }
                _ => "",
            };
            Error::backend(
                said(during, &format!("the server answered with an error{hint}")),
                e,
                temporary,
            )
        }
        RedisKind::Extension => {
            let code = e.code().unwrap_or("").to_owned();
            let temporary = matches!(code.as_str(), "BUSY" | "OOM" | "LOADING");
            let hint = match code.as_str() {
                _ if matches!(during, During::App(_)) => "",
                "WRONGTYPE" => {
                    "; another application keeps a value of another type under the lease key \
                     prefix: give the store a prefix of its own"
                }
                "LEASECORRUPT" => "; the record was written by something else than this store",
                _ => "",
            };
            Error::backend(
                said(during, &format!("the server answered with an error{hint}")),
                e,
                temporary,
            )
        }
        _ => Error::backend(said(during, "unexpected reply or client error"), e, false),
    };
    during.attach(mapped, server)
}

/// A Redis error met by the application's own command as a lease error, for business code
/// that mixes redis calls with lease calls under one error type: `doing` heads the message, the
/// redis error is its source, and the verdict [`is_temporary`](Error::is_temporary) is the one
/// the store judges its own commands by (the list at the top of this module): a dropped or
/// refused connection is `Unavailable`, temporary; no answer within the connection's response
/// timeout is `Timeout`, temporary, the outcome unknown; `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`,
/// `MASTERDOWN`, `READONLY`, `MOVED`, `ASK`, `BUSY` and `OOM` are `Backend`, temporary; failed
/// authentication is `Unavailable`, permanent; any other server error (`WRONGTYPE`, `NOPERM`, a
/// script error) is `Backend`, permanent.
///
/// Why a function and not `impl From<redis::RedisError> for lease_core::Error`: Rust's orphan
/// rule allows that impl only in lease-core, which would then depend on redis (and on every
/// other backend's driver) and classify its errors a second time. [`RedisResultExt::lease_err`]
/// is the same as a method on a `Result`.
///
/// ```
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let e = lease_redis::classify(redis::RedisError::from(refused), "count the visit");
/// assert_eq!(e.kind(), lease_core::ErrorKind::Unavailable);
/// assert!(e.is_temporary());
/// assert!(e.to_string().starts_with("count the visit: "));
/// ```
pub fn classify(err: RedisError, doing: &str) -> Error {
    from_redis(err, During::App(doing), None)
}

/// Redis results as lease results: [`classify`] as a method.
///
/// ```no_run
/// use lease_redis::RedisResultExt;
///
/// # async fn visit(mut conn: redis::aio::ConnectionManager) -> lease_core::Result<()> {
/// let visits: i64 = redis::cmd("INCR")
///     .arg("visits")
///     .query_async(&mut conn)
///     .await
///     .lease_err("count the visit")?;
/// # let _ = visits; Ok(()) }
/// ```
pub trait RedisResultExt<T> {
    /// The error, if any, as [`classify`] maps it; `doing` heads its message.
    fn lease_err(self, doing: &str) -> lease_core::Result<T>;
}

impl<T> RedisResultExt<T> for Result<T, RedisError> {
    fn lease_err(self, doing: &str) -> lease_core::Result<T> {
        self.map_err(|e| classify(e, doing))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn urls_in_messages_never_show_credentials() {
        for (url, host, secret) in [
            ("redis://u:secret@h:1/0", "h:1", "secret"),
            ("redis://:p%40ss@h:1", "h:1", "p%40ss"),
            ("redis//u:secret@h", "@h", "secret"),
            ("redis://u:se/cret@h:1", "h:1", "se/cret"),
        ] {
            let shown = lease_core::telemetry::redact::redact_url(url);
            assert!(shown.contains(host), "{shown}");
            assert!(!shown.contains(secret), "{shown}");
        }
    }

    const CLAIM_A: During<'static> = During::Op(Operation::Claim, "a");

    #[test]
    fn the_applications_errors_get_the_verdict_and_no_lease_hint() {
        let e = classify(
            RedisError::from((RedisKind::Server(ServerErrorKind::ReadOnly), "replica")),
            "count",
        );
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.is_temporary());
        assert!(e.message().starts_with("count: "), "{e}");
        let e = classify(
            RedisError::from((RedisKind::Server(ServerErrorKind::NoPerm), "no")),
            "count",
        );
        assert!(!e.is_temporary());
        assert!(!e.message().contains("EVALSHA"), "{e}");
        assert_eq!(e.operation(), None);
    }

    #[test]
    fn reset_connections_are_unavailable_and_silence_is_a_timeout() {
        let e = RedisError::from(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
        let e = from_redis(e, CLAIM_A, Some("h:1"));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        let e = timed_out(CLAIM_A, Some("h:1"), Duration::from_secs(5));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());
        assert_eq!(e.operation(), Some(Operation::Claim));
        assert_eq!(e.name(), Some("a"));
        assert_eq!(e.server(), Some("h:1"));
    }

    #[test]
    fn io_errors_are_unavailable_and_name_the_server() {
        let e = RedisError::from(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        let e = from_redis(e, CLAIM_A, Some("10.0.0.1:6379"));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        assert_eq!(e.server(), Some("10.0.0.1:6379"));
        assert!(e.to_string().contains("10.0.0.1:6379"), "{e}");
        assert!(!e.message().contains("claim"), "{e}");

        let e = RedisError::from(io::Error::new(io::ErrorKind::TimedOut, "slow"));
        let e = from_redis(e, During::Op(Operation::Renew, "a"), Some("x:1"));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());
    }

    #[test]
    fn server_errors_keep_their_source_and_verdict() {
        let e = RedisError::from((RedisKind::Server(ServerErrorKind::ReadOnly), "replica"));
        let e = from_redis(e, CLAIM_A, None);
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.is_temporary());
        assert!(std::error::Error::source(&e).is_some());

        let e = RedisError::from((RedisKind::Server(ServerErrorKind::NoPerm), "no"));
        let e = from_redis(e, During::Task("SCRIPT LOAD (claim)"), None);
        assert!(!e.is_temporary());
        assert!(e.message().contains("EVALSHA"), "{e}");
        assert!(e.message().starts_with("SCRIPT LOAD (claim): "), "{e}");
    }
}
