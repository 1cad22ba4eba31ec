//! Fenced writes on Redis: the check, the write and the raise in one Lua script, one round trip.
//!
//! A resource's fence is a string key, `<prefix><resource>` (prefix [`DEFAULT_PREFIX`] unless
//! set), holding the highest token accepted, in decimal. A fenced write runs one script
//! (`EVALSHA`, and `EVAL` once per server when the script is not cached yet) that:
//!
//! 1. reads the fence; a token lower than it is refused with [`FenceError::Stale`] and nothing
//!    else runs;
//! 2. runs the write — any command ([`RedisFence::write`]) or one of the shorthands
//!    ([`set`](RedisFence::set), [`hset`](RedisFence::hset), [`del`](RedisFence::del),
//!    [`xadd`](RedisFence::xadd)); a write that fails (`WRONGTYPE`, …) returns its error and
//!    leaves the fence as it was;
//! 3. raises the fence to the token when it is higher.
//!
//! Redis runs a script alone, so no other command runs between the check and the write: a
//! write accepted under token *t* is never applied after one under a higher token, and once a
//! higher token has written, every write under *t* is refused. Tokens are compared as decimal
//! strings, so every `u64` orders exactly (a Lua number would not past 2^53).
//!
//! **What it cannot do.** The fence is only as durable as the Redis writes: a failover to an
//! asynchronous replica, or a restart without AOF, can lose a raised fence (and the write with
//! it), after which a lower token is accepted again — the same limit as a lease on Redis (the
//! README's "Guarantees per backend"). The command is one command: a write of several commands
//! under one fence needs a script of your own that reads the fence the same way. On Redis
//! Cluster every key the command touches must hash to the fence key's slot: put the same hash
//! tag in the resource name and the data keys (resource `{order:42}`, key `{order:42}:lines`).

use std::sync::LazyLock;

use ::redis::aio::ConnectionLike;
use ::redis::{Cmd, FromRedisValue, ToRedisArgs, Value};
use lease_core::{Error, ErrorKind, Result};

use crate::error::{FenceError, Stale};

/// The fence key's default prefix: the fence of resource `orders/7` is the key
/// `lease-fence:orders/7`.
pub const DEFAULT_PREFIX: &str = "lease-fence:";

/// The longest key prefix taken, in bytes.
pub const MAX_PREFIX_BYTES: usize = 256;

static SCRIPT: LazyLock<::redis::Script> =
    LazyLock::new(|| ::redis::Script::new(include_str!("fence.lua")));

/// Fenced writes on Redis, on the application's own connection (a `ConnectionManager`, a
/// `MultiplexedConnection`, a cluster connection: anything `::redis::aio::ConnectionLike`). See
/// the [module docs](self) for the script and what it guarantees.
///
/// ```no_run
/// # async fn f(mut conn: ::redis::aio::ConnectionManager, term: lease_core::Term)
/// # -> Result<(), lease_fence::FenceError> {
/// use lease_fence::redis::RedisFence;
///
/// let fence = RedisFence::new();
/// // Refused (FenceError::Stale) once a newer term has written to "report".
/// fence.set(&mut conn, "report", term.token(), "report:today", "42 rows").await?;
/// // Any one command: the check, the command and the raise run as one script.
/// let mut cmd = redis::cmd("INCRBY");
/// cmd.arg("report:count").arg(1);
/// let count: i64 = fence.write(&mut conn, "report", term.token(), &cmd).await?;
/// # let _ = count; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisFence {
    prefix: String,
    compare: bool,
}

impl Default for RedisFence {
    fn default() -> Self {
        RedisFence::new()
    }
}

impl RedisFence {
    /// Fences whose keys start with [`DEFAULT_PREFIX`].
    pub fn new() -> RedisFence {
        RedisFence {
            prefix: DEFAULT_PREFIX.to_owned(),
            compare: true,
        }
    }

    /// Fences whose keys start with `prefix` (at most [`MAX_PREFIX_BYTES`]; empty is allowed:
    /// the fence key is then the resource name itself). `InvalidName` when longer.
    pub fn with_prefix(prefix: &str) -> Result<RedisFence> {
        if prefix.len() > MAX_PREFIX_BYTES {
            return Err(Error::invalid_name(format!(
                "a fence key prefix of {} bytes is too long; use at most {MAX_PREFIX_BYTES}",
                prefix.len()
            )));
        }
        Ok(RedisFence {
            prefix: prefix.to_owned(),
            compare: true,
        })
    }

    /// Test support: the same fence with its check left out — the script writes and sets the
    /// offered token whatever the fence holds, as a resource that does not compare tokens
    /// would. Tests use it to show that their zombie's write gets through without the check.
    /// Never use it for data.
    #[doc(hidden)]
    pub fn break_check_for_tests(mut self) -> RedisFence {
        self.compare = false;
        self
    }

    /// The fence key of `resource`.
    pub fn key(&self, resource: &str) -> String {
        format!("{}{resource}", self.prefix)
    }

    /// Runs `cmd` only if `token` is at least the fence of `resource`, and raises the fence to
    /// `token`: one script, one round trip. Answers the command's reply as `T`.
    ///
    /// [`FenceError::Stale`] when a higher token has written (nothing ran); the command's own
    /// error when it fails (the fence unchanged); `InvalidArgument` for a token of 0 and
    /// `InvalidName` for an empty, oversized or control-character resource name, before any
    /// I/O. Redis errors are mapped as lease-redis maps its own (`lease_redis::classify`).
    pub async fn write<C, T>(
        &self,
        conn: &mut C,
        resource: &str,
        token: u64,
        cmd: &Cmd,
    ) -> Result<T, FenceError>
    where
        C: ConnectionLike + Send,
        T: FromRedisValue,
    {
        let reply = self.invoke(conn, resource, token, Some(cmd)).await?;
        T::from_redis_value(reply).map_err(|e| {
            Error::backend(
                format!(
                    "fenced write to '{resource}': the command's reply is not of the type asked \
                     for"
                ),
                e,
                false,
            )
            .into()
        })
    }

    /// Checks `token` against the fence of `resource` and raises the fence to it, with no
    /// write: the script's check and raise alone, one round trip. `Ok` when `token` is at least
    /// the fence's (the fence now holds `token`), [`FenceError::Stale`] when a higher token has
    /// been accepted (nothing changed). Errors as [`write`](RedisFence::write).
    ///
    /// It orders nothing by itself: a write made after it, outside the script, is not fenced
    /// (a successor may raise the fence in between). It is for a check in front of work that
    /// is ordered otherwise, such as the HTTP layer's
    /// [`RedisBook`](crate::http::RedisBook).
    pub async fn check<C>(&self, conn: &mut C, resource: &str, token: u64) -> Result<(), FenceError>
    where
        C: ConnectionLike + Send,
    {
        self.invoke(conn, resource, token, None).await.map(|_| ())
    }

    /// Runs the script: the check, `cmd` when there is one, the raise. Answers the command's
    /// reply (`OK` without a command).
    async fn invoke<C>(
        &self,
        conn: &mut C,
        resource: &str,
        token: u64,
        cmd: Option<&Cmd>,
    ) -> Result<Value, FenceError>
    where
        C: ConnectionLike + Send,
    {
        crate::check::token(token)?;
        crate::check::resource(resource, crate::MAX_RESOURCE_BYTES)?;
        let mut invocation = SCRIPT.key(self.key(resource));
        invocation
            .arg(token.to_string())
            .arg(if self.compare { "1" } else { "0" });
        if let Some(cmd) = cmd {
            let mut args = 0;
            for arg in cmd.args_iter() {
                if let ::redis::Arg::Simple(bytes) = arg {
                    invocation.arg(bytes);
                    args += 1;
                }
            }
            if args == 0 {
                return Err(Error::invalid_argument(
                    "a fenced write needs a command; pass one such as `redis::cmd(\"SET\")` with \
                     its arguments",
                )
                .into());
            }
        }
        let doing = match cmd {
            Some(_) => format!("fenced write to '{resource}'"),
            None => format!("check the fence of '{resource}'"),
        };
        let reply: Value = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| lease_redis::classify(e, &doing))?;
        let Value::Array(mut parts) = reply else {
            return Err(unexpected(resource, &reply).into());
        };
        let (Some(answer), Some(verdict), true) = (parts.pop(), parts.pop(), parts.is_empty())
        else {
            return Err(unexpected(resource, &Value::Array(parts)).into());
        };
        match verdict {
            Value::Int(1) => Ok(answer),
            Value::Int(0) => {
                let fence = parse_token(&answer).ok_or_else(|| unexpected(resource, &answer))?;
                Err(FenceError::Stale(Stale::new(resource, token, fence)))
            }
            other => Err(unexpected(resource, &other).into()),
        }
    }

    /// `SET key value` under the fence of `resource` (see [`write`](RedisFence::write)).
    pub async fn set<C, V>(
        &self,
        conn: &mut C,
        resource: &str,
        token: u64,
        key: &str,
        value: V,
    ) -> Result<(), FenceError>
    where
        C: ConnectionLike + Send,
        V: ToRedisArgs,
    {
        let mut cmd = ::redis::cmd("SET");
        cmd.arg(key).arg(value);
        self.write::<C, ()>(conn, resource, token, &cmd).await
    }

    /// `HSET key field value` under the fence of `resource`: answers how many fields were
    /// added (0 when `field` was there and is now overwritten).
    pub async fn hset<C, F, V>(
        &self,
        conn: &mut C,
        resource: &str,
        token: u64,
        key: &str,
        field: F,
        value: V,
    ) -> Result<u64, FenceError>
    where
        C: ConnectionLike + Send,
        F: ToRedisArgs,
        V: ToRedisArgs,
    {
        let mut cmd = ::redis::cmd("HSET");
        cmd.arg(key).arg(field).arg(value);
        self.write(conn, resource, token, &cmd).await
    }

    /// `DEL key` under the fence of `resource`: answers how many keys were removed (0 or 1).
    pub async fn del<C>(
        &self,
        conn: &mut C,
        resource: &str,
        token: u64,
        key: &str,
    ) -> Result<u64, FenceError>
    where
        C: ConnectionLike + Send,
    {
        let mut cmd = ::redis::cmd("DEL");
        cmd.arg(key);
        self.write(conn, resource, token, &cmd).await
    }

    /// `XADD key * field value …` under the fence of `resource`: answers the entry's id.
    /// `InvalidArgument` without a field.
    pub async fn xadd<C, F, V>(
        &self,
        conn: &mut C,
        resource: &str,
        token: u64,
        key: &str,
        items: &[(F, V)],
    ) -> Result<String, FenceError>
    where
        C: ConnectionLike + Send,
        F: ToRedisArgs,
        V: ToRedisArgs,
    {
        if items.is_empty() {
            return Err(Error::invalid_argument(
                "XADD needs at least one field and value; pass the entry's fields",
            )
            .into());
        }
        let mut cmd = ::redis::cmd("XADD");
        cmd.arg(key).arg("*");
        for (field, value) in items {
            cmd.arg(field).arg(value);
        }
        self.write(conn, resource, token, &cmd).await
    }

    /// The fence's token for `resource`: the highest token it has accepted, `None` before the
    /// first fenced write. For monitoring and tests: a write never needs it.
    pub async fn token<C>(&self, conn: &mut C, resource: &str) -> Result<Option<u64>>
    where
        C: ConnectionLike + Send,
    {
        crate::check::resource(resource, crate::MAX_RESOURCE_BYTES)?;
        let doing = format!("read the fence of '{resource}'");
        let value: Value = ::redis::cmd("GET")
            .arg(self.key(resource))
            .query_async(conn)
            .await
            .map_err(|e| lease_redis::classify(e, &doing))?;
        match value {
            Value::Nil => Ok(None),
            v => parse_token(&v)
                .map(Some)
                .ok_or_else(|| unexpected(resource, &v)),
        }
    }
}

/// A token as the script answers it: a decimal string.
fn parse_token(v: &Value) -> Option<u64> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Int(i) => u64::try_from(*i).ok(),
        _ => None,
    }
    .filter(|t| *t > 0)
}

fn unexpected(resource: &str, v: &Value) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!("the fence of '{resource}' answered {v:?}, which no fence script does"),
    )
}
