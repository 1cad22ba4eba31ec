//! The book of fences a [`FenceLayer`](super::FenceLayer) consults before its own: a fence
//! shared by several server replicas ([`FenceBook`]), and its adapters over this crate's Redis
//! and SQL fences ([`RedisBook`], [`SqlBook`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use crate::error::FenceError;

/// The future of a [`FenceBook`]'s check.
pub type BookFuture<'a> = Pin<Box<dyn Future<Output = Result<(), FenceError>> + Send + 'a>>;

/// A book of fences shared by several server replicas: per resource name, the highest token
/// any replica has admitted, kept in a store they all reach. A [`FenceLayer`](super::FenceLayer)
/// given one ([`FenceLayer::book`](super::FenceLayer::book)) checks every fenced request in it
/// before taking its own per-process lock (see the [module docs](super) for what that
/// guarantees).
///
/// This crate has [`RedisBook`] (one script per request) and [`SqlBook`] (one upsert in a
/// short transaction, on PostgreSQL, MySQL/MariaDB or SQLite). For another store, implement
/// [`check`](FenceBook::check) with the same contract:
///
/// - compare and raise **atomically in the store**: when `token` is at least the resource's
///   fence, raise the fence to `token` and answer `Ok`; when it is lower, change nothing and
///   answer [`FenceError::Stale`] with the fence's token. No two checks of one resource may
///   both read the same old fence and both raise it (a read, then a write, is not enough: use
///   the store's compare-and-set, a transaction or a script);
/// - answer `Ok` only once the raise is durable as far as the store makes it so; when the
///   answer is unknown (the store is unreachable, timed out, answered something unexpected),
///   answer [`FenceError::Other`] — the layer then answers 503 and does not call the service.
///   Never answer `Ok` when the fence could not be read.
pub trait FenceBook: fmt::Debug + Send + Sync + 'static {
    /// Checks `token` against the fence of `resource` and raises the fence to it, in the
    /// shared store (see the trait's contract). `resource` and `token` were checked by the
    /// layer: a resource name of 1 to [`MAX_RESOURCE_BYTES`](crate::MAX_RESOURCE_BYTES) bytes
    /// without control characters, a token of at least 1.
    fn check<'a>(&'a self, resource: &'a str, token: u64) -> BookFuture<'a>;
}

/// A book of fences on Redis: [`RedisFence::check`](crate::redis::RedisFence::check) on the
/// application's connection, one script per request (one round trip: the script reads the
/// fence, refuses a lower token, raises it). The fence keys are the `RedisFence`'s (its
/// prefix, then the resource name), so a resource's fence is the same one a `RedisFence`
/// write of that resource checks.
///
/// The connection is cloned per request: give it one whose clones share a connection and that
/// reconnects after a failure, such as a `redis::aio::ConnectionManager` (while the book cannot
/// reach Redis, every fenced request is answered 503).
///
/// It is as durable as the Redis writes (see the [Redis fence's
/// limits](crate::redis)): a failover to a replica that had not received a raise lets a lower
/// token in again.
#[cfg(feature = "redis")]
#[derive(Clone)]
pub struct RedisBook<C> {
    fence: crate::redis::RedisFence,
    conn: C,
}

#[cfg(feature = "redis")]
impl<C> fmt::Debug for RedisBook<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBook")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "redis")]
impl<C> RedisBook<C>
where
    C: ::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A book whose fences are `fence`'s keys, reached through `conn`.
    pub fn new(fence: crate::redis::RedisFence, conn: C) -> RedisBook<C> {
        RedisBook { fence, conn }
    }

    /// Test support: the same book with its check left out — every request sets the fence
    /// to its token, as a store that does not compare would. Tests use it to show that their
    /// zombie gets through without the check. Never use it in a service.
    #[doc(hidden)]
    pub fn break_check_for_tests(self) -> RedisBook<C> {
        RedisBook {
            fence: self.fence.break_check_for_tests(),
            ..self
        }
    }
}

#[cfg(feature = "redis")]
impl<C> FenceBook for RedisBook<C>
where
    C: ::redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn check<'a>(&'a self, resource: &'a str, token: u64) -> BookFuture<'a> {
        Box::pin(async move {
            let mut conn = self.conn.clone();
            self.fence.check(&mut conn, resource, token).await
        })
    }
}

/// A book of fences in a SQL fence table (PostgreSQL, MySQL/MariaDB, SQLite): per request a
/// short transaction on the pool whose one statement is [`SqlFence::check`]'s upsert, then
/// its commit (three round trips: begin, the upsert, commit). The table is the `SqlFence`'s,
/// so a resource's fence is the same one a `SqlFence` write of that resource checks.
///
/// The upsert locks the resource's row until the commit, so two replicas checking one
/// resource at once are ordered by the database. The fence table must exist: call
/// [`SqlFence::ensure`] once at start-up (a missing table is answered 503, saying so). Tokens
/// above `i64::MAX` do not fit the table's column: such a request is answered 400.
///
/// [`SqlFence::check`]: crate::sql::SqlFence::check
/// [`SqlFence::ensure`]: crate::sql::SqlFence::ensure
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub struct SqlBook<DB: crate::sql::FenceDb> {
    fence: crate::sql::SqlFence,
    pool: sqlx::Pool<DB>,
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
impl<DB: crate::sql::FenceDb> Clone for SqlBook<DB> {
    fn clone(&self) -> Self {
        SqlBook {
            fence: self.fence.clone(),
            pool: self.pool.clone(),
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
impl<DB: crate::sql::FenceDb> fmt::Debug for SqlBook<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlBook")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
impl<DB: crate::sql::FenceDb> SqlBook<DB> {
    /// A book whose fences are the rows of `fence`'s table, reached through `pool`.
    pub fn new(fence: crate::sql::SqlFence, pool: sqlx::Pool<DB>) -> SqlBook<DB> {
        SqlBook { fence, pool }
    }

    /// Test support: the same book with its check left out — every request sets the fence
    /// to its token, as a store that does not compare would. Tests use it to show that their
    /// zombie gets through without the check. Never use it in a service.
    #[doc(hidden)]
    pub fn break_check_for_tests(self) -> SqlBook<DB> {
        SqlBook {
            fence: self.fence.break_check_for_tests(),
            ..self
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
impl<DB: crate::sql::FenceDb> FenceBook for SqlBook<DB> {
    fn check<'a>(&'a self, resource: &'a str, token: u64) -> BookFuture<'a> {
        Box::pin(async move {
            let tx = self.fence.begin(&self.pool, resource, token).await?;
            tx.commit().await.map_err(|e| {
                lease_sql::classify(e, &format!("commit the fence of '{resource}'")).into()
            })
        })
    }
}
