//! Redis errors as [`lease_core::Error`]s.
//!
//! - The connection failed, was dropped or refused, or a node of a cluster could not be found:
//!   `Unavailable`, temporary, naming the server (host and port, never credentials).
//! - The server took longer than the response timeout: `Timeout`, temporary; the operation may
//!   or may not have taken effect.
//! - Authentication or the client's configuration failed: `Unavailable`, permanent.
//! - The server answered with an error: `Backend`, temporary when the server says so
//!   (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` after a failover, `MOVED` /
//!   `ASK` during resharding, `BUSY`, `OOM`), permanent otherwise (`NOPERM`, `WRONGTYPE`, a
//!   script error, an unexpected reply).

use lease_core::{Error, ErrorKind};
use redis::{ErrorKind as RedisKind, RedisError, ServerErrorKind};

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
