//! Redis by hand on one multiplexed connection: lease-redis's own claim and release scripts (the
//! raw Lua lease, with the same two keys), and `SET NX PX` + `DEL` (the floor).

use anyhow::{Context, Result, ensure};
use futures::future::BoxFuture;
use lease::backend::HolderToken;
use lease::redis::RedisConfig;
use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};

use super::{INSTANCE, Subject};
use crate::backends::{REDIS_PREFIX, TTL};

/// lease-redis's claim script, the very source the library embeds: its prelude (the term rule),
/// its hint (`notify.lua`) and the waiters' check (`waited.lua`) joined to `claim.lua`.
const CLAIM_LUA: &str = concat!(
    include_str!("../../../lease-redis/src/wire/scripts/prelude.lua"),
    include_str!("../../../lease-redis/src/wire/scripts/notify.lua"),
    include_str!("../../../lease-redis/src/wire/scripts/waited.lua"),
    include_str!("../../../lease-redis/src/wire/scripts/claim.lua")
);
/// lease-redis's release script, its hint and the waiters' check joined in front as the
/// library does.
const RELEASE_LUA: &str = concat!(
    include_str!("../../../lease-redis/src/wire/scripts/notify.lua"),
    include_str!("../../../lease-redis/src/wire/scripts/waited.lua"),
    include_str!("../../../lease-redis/src/wire/scripts/release.lua")
);

async fn connect(url: &str) -> Result<MultiplexedConnection> {
    redis::Client::open(url)
        .context("parsing the Redis URL")?
        .get_multiplexed_async_connection()
        .await
        .context("connecting to Redis")
}

/// The key lease-redis uses for `name` (the benchmark's names hold no `%`, `{` or `}`).
fn record_key(name: &str) -> String {
    format!("{REDIS_PREFIX}{{{name}}}")
}

/// The key of `name`'s waiters' mark, which lease-redis passes to its lease scripts beside the
/// record (nobody waits in this benchmark, so it is never set and nothing is published).
fn waiting_key(name: &str) -> String {
    format!("{REDIS_PREFIX}{{{name}}}:waiting")
}

/// lease-redis's claim and release scripts by `EVALSHA`, with the arguments the library sends,
/// on connection `C`.
pub(crate) struct RawLua<C> {
    conn: C,
    key: String,
    mark: String,
    claim_sha: String,
    release_sha: String,
    ttl_ms: String,
}

impl RawLua<MultiplexedConnection> {
    /// Connects with a plain multiplexed connection and loads the scripts.
    pub(crate) async fn open(url: &str, name: &str) -> Result<Self> {
        RawLua::on(connect(url).await?, name).await
    }
}

impl RawLua<ConnectionManager> {
    /// Connects through a `ConnectionManager` set up as lease-redis sets up its own
    /// ([`RedisConfig::manager_config`]: response timeout, reconnection), and loads the scripts.
    pub(crate) async fn open_managed(url: &str, name: &str) -> Result<Self> {
        let client = redis::Client::open(url).context("parsing the Redis URL")?;
        let conn = ConnectionManager::new_with_config(client, RedisConfig::new().manager_config())
            .await
            .context("connecting to Redis")?;
        RawLua::on(conn, name).await
    }
}

impl<C: ConnectionLike + Send> RawLua<C> {
    async fn on(mut conn: C, name: &str) -> Result<Self> {
        let claim_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(CLAIM_LUA)
            .query_async(&mut conn)
            .await
            .context("loading the claim script")?;
        let release_sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(RELEASE_LUA)
            .query_async(&mut conn)
            .await
            .context("loading the release script")?;
        Ok(RawLua {
            conn,
            key: record_key(name),
            mark: waiting_key(name),
            claim_sha,
            release_sha,
            ttl_ms: TTL.as_millis().to_string(),
        })
    }
}

impl<C: ConnectionLike + Send> Subject for RawLua<C> {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let holder = HolderToken::mint().to_hex();
            let grant: Option<(u64, u64)> = redis::cmd("EVALSHA")
                .arg(&self.claim_sha)
                .arg(2)
                .arg(&self.key)
                .arg(&self.mark)
                .arg(&holder)
                .arg(INSTANCE)
                .arg(&self.ttl_ms)
                .arg("0")
                .query_async(&mut self.conn)
                .await?;
            ensure!(grant.is_some(), "the claim of a free name was refused");
            let released: i64 = redis::cmd("EVALSHA")
                .arg(&self.release_sha)
                .arg(2)
                .arg(&self.key)
                .arg(&self.mark)
                .arg(&holder)
                .query_async(&mut self.conn)
                .await?;
            ensure!(released == 1, "the release did not end the lease");
            Ok(())
        })
    }
}

/// `SET key token NX PX ttl` + `DEL key`: a lock with no owner check on release and no term.
pub(crate) struct SetNx {
    conn: MultiplexedConnection,
    key: String,
    ttl_ms: u64,
}

impl SetNx {
    /// Connects.
    pub(crate) async fn open(url: &str, name: &str) -> Result<SetNx> {
        Ok(SetNx {
            conn: connect(url).await?,
            key: format!("{REDIS_PREFIX}setnx:{name}"),
            ttl_ms: u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX),
        })
    }
}

impl Subject for SetNx {
    fn cycle(&mut self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let token = HolderToken::mint().to_hex();
            let set: Option<String> = redis::cmd("SET")
                .arg(&self.key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms)
                .query_async(&mut self.conn)
                .await?;
            ensure!(set.is_some(), "SET NX refused a free key");
            let deleted: i64 = redis::cmd("DEL")
                .arg(&self.key)
                .query_async(&mut self.conn)
                .await?;
            ensure!(deleted == 1, "DEL found no key");
            Ok(())
        })
    }
}
