//! What talks Redis's language: the Lua scripts ([`scripts`]), the keys they run on ([`keys`]),
//! the decoding of their replies ([`codec`]), and the one request path every operation takes
//! (this module): `EVALSHA`, `EVAL` after a `NOSCRIPT`, the whole of it bounded by **one**
//! timer, the operation timeout; with [`RedisConfig::replica_acks`](crate::RedisConfig::replica_acks)
//! each script is followed in the same pipeline by `PUBLISH` and `WAIT`.

pub(crate) mod codec;
pub(crate) mod keys;
pub(crate) mod scripts;

use std::future::Future;

use lease_core::Result;
use redis::aio::ConnectionLike;
use redis::{Cmd, FromRedisValue, RedisResult, ServerErrorKind};

use crate::error::{self, During};
use crate::store::RedisStore;
use keys::replica_sync_channel;
use scripts::LuaScript;

impl<C> RedisStore<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Runs `script` on `key` with `args`; see [`eval_with`](Self::eval_with).
    pub(crate) async fn eval<T: FromRedisValue>(
        &self,
        during: During<'_>,
        script: &LuaScript,
        key: &[u8],
        args: &[&str],
    ) -> Result<T> {
        self.eval_keys(during, script, &[key], args).await
    }

    /// Runs `script` on `keys` (all under one hash tag) with `args`; see
    /// [`eval_with`](Self::eval_with).
    pub(crate) async fn eval_keys<T: FromRedisValue>(
        &self,
        during: During<'_>,
        script: &LuaScript,
        keys: &[&[u8]],
        args: &[&str],
    ) -> Result<T> {
        let bytes = args.iter().map(|a| a.len()).sum::<usize>();
        self.eval_with(during, script, keys, args.len(), bytes, |cmd| {
            for a in args {
                cmd.arg(*a);
            }
        })
        .await
    }

    /// Runs `script` on `keys` with the arguments `args` appends (about `arg_count` of them,
    /// `arg_bytes` long in all, to size the request once): `EVALSHA`, then `EVAL` after a
    /// `NOSCRIPT`, both within one operation timeout; errors mapped by [`error`], with `during`
    /// and the server attached.
    pub(crate) async fn eval_with<T: FromRedisValue>(
        &self,
        during: During<'_>,
        script: &LuaScript,
        keys: &[&[u8]],
        arg_count: usize,
        arg_bytes: usize,
        args: impl Fn(&mut Cmd),
    ) -> Result<T> {
        let request = |verb: &str, body: &str| {
            let key_bytes = keys.iter().map(|k| k.len()).sum::<usize>();
            // The command holds its arguments' bytes back to back (RESP framing comes later);
            // the verb and the key count take at most 16.
            let count = 3 + keys.len() + arg_count;
            let mut cmd = Cmd::with_capacity(count, 16 + body.len() + key_bytes + arg_bytes);
            cmd.arg(verb).arg(body).arg(keys.len());
            for key in keys {
                cmd.arg(*key);
            }
            args(&mut cmd);
            cmd
        };
        let acks = self.config().get_replica_acks();
        let send = |cmd: Cmd| {
            let mut conn = self.conn.clone();
            let prefix = self.config().get_key_prefix();
            async move {
                match acks {
                    None => cmd.query_async(&mut conn).await.map(|v| (v, None)),
                    Some((replicas, wait)) => {
                        // One pipeline on one connection: the script, a write every replica
                        // receives (so the client's replication offset covers every write the
                        // primary applied, whichever client made it), and the wait.
                        let mut pipe = redis::pipe();
                        pipe.add_command(cmd)
                            .cmd("PUBLISH")
                            .arg(replica_sync_channel(prefix))
                            .arg("")
                            .ignore()
                            .cmd("WAIT")
                            .arg(replicas)
                            .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                        let (value, acked): (T, u64) = pipe.query_async(&mut conn).await?;
                        Ok((value, Some((replicas, acked, wait))))
                    }
                }
            }
        };
        let call = async {
            let first = send(request("EVALSHA", &script.sha)).await;
            match first {
                Err(e) if e.kind() == redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
                    tracing::debug!(script = script.name, "script not cached; sending EVAL");
                    send(request("EVAL", script.source)).await
                }
                other => other,
            }
        };
        match self.bounded(during, call).await? {
            (value, None) => Ok(value),
            (value, Some((replicas, acked, _))) if acked >= u64::from(replicas) => Ok(value),
            (_, Some((replicas, acked, wait))) => Err(error::too_few_acks(
                during,
                self.label(),
                (replicas, acked),
                wait,
            )),
        }
    }

    /// Awaits `call` within the operation timeout (the one timer on the request path: the
    /// `ConnectionManager` of [`RedisStore::connect`] arms none of its own), mapping errors.
    pub(crate) async fn bounded<T>(
        &self,
        during: During<'_>,
        call: impl Future<Output = RedisResult<T>>,
    ) -> Result<T> {
        let result = match self.config().get_operation_timeout() {
            Some(bound) => match tokio::time::timeout(bound, call).await {
                Ok(r) => r,
                Err(_) => return Err(error::timed_out(during, self.label(), bound)),
            },
            None => call.await,
        };
        result.map_err(|e| error::from_redis(e, during, self.label()))
    }

    /// One command without a key, bounded and mapped.
    pub(crate) async fn command<T: FromRedisValue>(&self, what: &str, cmd: Cmd) -> Result<T> {
        self.bounded(During::Task(what), async {
            let mut conn = self.conn.clone();
            cmd.query_async(&mut conn).await
        })
        .await
    }
}

/// `EVALSHA <sha> 1 <key> <args…>` or `EVAL <source> 1 <key> <args…>`, for pipelines.
pub(crate) fn script_cmd(verb: &str, script: &str, key: &[u8], args: &[&str]) -> Cmd {
    let mut cmd = redis::cmd(verb);
    cmd.arg(script).arg(1).arg(key);
    for a in args {
        cmd.arg(*a);
    }
    cmd
}
