//! Redis errors as [`lease_core::Error`]s.
//!
//! Every mapping of the crate is here, nowhere else:
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

use lease_core::{Error, ErrorKind};
use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

/// `what` on `server` got no answer within the operation timeout `bound`.
pub(crate) fn timed_out(what: &str, server: &str, bound: Duration) -> Error {
    Error::timeout(format!("{what} on {server}"), bound)
}

/// The URL `url` does not parse; the message names its host, never its credentials.
pub(crate) fn bad_url(url: &str, e: RedisError) -> Error {
    Error::unavailable(format!(
        "the Redis URL for {} is invalid; expected redis://[user:password@]host:port[/db]",
        url_host(url)
    ))
    .with_source(e)
    .with_temporary(false)
}

/// Opening the first connection to `addr` (host and port) failed.
pub(crate) fn unreachable(e: RedisError, addr: &str) -> Error {
    if e.is_io_error() {
        Error::unavailable(format!("redis server {addr} is unreachable")).with_source(e)
    } else {
        from_redis(e, &format!("redis server {addr}"), "connect")
    }
}

/// `SCRIPT LOAD` failed at start-up: a permanent server error means scripting is off or
/// forbidden for this user, which no retry cures.
pub(crate) fn scripting_refused(e: Error, server: &str) -> Error {
    if e.is(ErrorKind::Backend) && !e.is_temporary() {
        Error::unsupported(format!(
            "{server} cannot run the lease scripts ({e}); Lua scripting must be enabled and \
             allowed for this user"
        ))
    } else {
        e
    }
}

/// A script answered `what` with a reply of a shape it never sends.
pub(crate) fn unexpected_reply(what: &str, reply: impl std::fmt::Debug) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("{what}: unexpected reply {reply:?} from the script"),
    )
    .with_temporary(false)
}

/// A task of a fanned-out read (one call per name on a cluster connection) failed to finish.
pub(crate) fn task_failed(what: &str, e: tokio::task::JoinError) -> Error {
    Error::new(ErrorKind::Backend, format!("{what} failed")).with_source(e)
}

/// The host part of a URL that may not parse, without credentials, for messages.
fn url_host(url: &str) -> String {
    let Some((_, rest)) = url.split_once("://") else {
        return "a URL without a scheme".to_owned();
    };
    // Everything up to the last '@' may be credentials, even a malformed password holding '/'.
    let after_credentials = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let host = after_credentials
        .split(['/', '?', '#'])
        .next()
        .unwrap_or("");
    if host.is_empty() {
        "a URL without a host".to_owned()
    } else {
        format!("'{host}'")
    }
}

/// Maps `e`, raised while doing `what` on `server`.
pub(crate) fn from_redis(e: RedisError, server: &str, what: &str) -> Error {
    let kind = e.kind();
    match kind {
        RedisKind::Io if e.is_timeout() => Error::new(
            ErrorKind::Timeout,
            format!(
                "{what} got no answer from {server} within the response timeout; its outcome is \
                 unknown"
            ),
        )
        .with_source(e),
        RedisKind::Io | RedisKind::ClusterConnectionNotFound => {
            Error::unavailable(format!("{server} is unavailable ({what})")).with_source(e)
        }
        RedisKind::AuthenticationFailed => Error::unavailable(format!(
            "{server} refused the credentials ({what}); check the user name and password"
        ))
        .with_source(e)
        .with_temporary(false),
        RedisKind::InvalidClientConfig => Error::unavailable(format!(
            "the connection settings for {server} are invalid ({what})"
        ))
        .with_source(e)
        .with_temporary(false),
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
                format!("{server} answered {what} with an error{hint}"),
                e,
                temporary,
            )
        }
        RedisKind::Extension => {
            let code = e.code().unwrap_or("").to_owned();
            let temporary = matches!(code.as_str(), "BUSY" | "OOM" | "LOADING");
            let hint = match code.as_str() {
                "WRONGTYPE" => {
                    "; another application keeps a value of another type under the lease key \
                     prefix: give the store a prefix of its own"
                }
                "LEASECORRUPT" => "; the record was written by something else than this store",
                _ => "",
            };
            Error::backend(
                format!("{server} answered {what} with an error{hint}"),
                e,
                temporary,
            )
        }
        _ => Error::backend(
            format!("{what} on {server} failed: unexpected reply or client error"),
            e,
            false,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[test]
    fn url_hosts_never_show_credentials() {
        assert_eq!(url_host("redis://u:secret@h:1/0"), "'h:1'");
        assert_eq!(url_host("redis://:p%40ss@h:1"), "'h:1'");
        assert_eq!(url_host("redis://h:99999"), "'h:99999'");
        assert!(!url_host("redis//u:secret@h").contains("secret"));
        assert_eq!(url_host("redis://u:se/cret@h:1"), "'h:1'");
        assert_eq!(url_host("redis:///0"), "a URL without a host");
    }

    #[test]
    fn reset_connections_are_unavailable_and_silence_is_a_timeout() {
        let e = RedisError::from(io::Error::new(io::ErrorKind::ConnectionReset, "reset"));
        let e = from_redis(e, "redis server h:1", "claim of 'a'");
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        let e = timed_out("claim of 'a'", "redis server h:1", Duration::from_secs(5));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());
    }

    #[test]
    fn io_errors_are_unavailable_and_name_the_server() {
        let e = RedisError::from(io::Error::new(io::ErrorKind::ConnectionRefused, "refused"));
        let e = from_redis(e, "redis server 10.0.0.1:6379", "claim of 'a'");
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        assert!(e.message().contains("10.0.0.1:6379"), "{e}");

        let e = RedisError::from(io::Error::new(io::ErrorKind::TimedOut, "slow"));
        let e = from_redis(e, "redis server x:1", "renew of 'a'");
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());
    }

    #[test]
    fn server_errors_keep_their_source_and_verdict() {
        let e = RedisError::from((RedisKind::Server(ServerErrorKind::ReadOnly), "replica"));
        let e = from_redis(e, "s", "claim");
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.is_temporary());
        assert!(std::error::Error::source(&e).is_some());

        let e = RedisError::from((RedisKind::Server(ServerErrorKind::NoPerm), "no"));
        let e = from_redis(e, "s", "claim");
        assert!(!e.is_temporary());
        assert!(e.message().contains("EVALSHA"), "{e}");
    }
}
