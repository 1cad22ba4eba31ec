//! The store's own connections for lease operations.
//!
//! Not a sqlx `Pool`: a pool pings every connection when it is returned (and, by default, when
//! it is checked out), so every lease operation through it would cost two round trips or more.
//! These are plain connections: a warm operation is one statement, one round trip.
//!
//! An operation takes the first connection that is free: a fair semaphore with one permit per
//! connection hands permits out in the order operations asked for them, and a free connection
//! is taken from the idle list (or opened when there is none yet). An operation never queues
//! behind one particular connection, so one that waits long on the server (a lock, a slow
//! statement) delays no other while another connection is free.
//!
//! A connection whose operation did not finish (an error of the transport, or a future dropped
//! mid-flight by a timeout) may hold half a response; it is closed, never reused, and a later
//! operation opens a fresh one.
//!
//! A connection is opened on a task of its own, which outlives the operation that asked for it:
//! when the operation gives up first (its attempt timeout), the connection, once open, is kept
//! idle for the next one. Opening inside the operation would start every connect afresh and cut
//! it at each attempt timeout, so a server that takes longer to accept a connection than an
//! attempt may last (a loaded host: PostgreSQL took 3 s with both cores busy) would never be
//! reached again after its first timed-out statement closed a connection. A connect is bounded
//! by [`CONNECT_TIMEOUT`], so one that hangs does not hold its permit for ever.
//!
//! A *write* (every operation that changes a row: a claim, a renewal, a release, a heartbeat)
//! takes its connection with [`Conns::get_write`] and ends with [`Slot::end_write`]: the
//! dialect's [`LeaseDb::begin_write`] and [`LeaseDb::end_write`] run around it. On PostgreSQL
//! and MySQL they do nothing (the statement reads the server's clock itself); on SQLite the
//! write is a `BEGIN IMMEDIATE` transaction whose clock is read once the write lock is held (see
//! `sqlite/clock.rs`), the one place that rule is kept.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::{ConnectOptions, Connection, Database};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// The longest a connection may take to open (on its own task, see the module docs).
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// The connect options of `DB`'s connections.
pub(crate) type Options<DB> = <<DB as Database>::Connection as Connection>::Options;

/// What a dialect does on its lease connections besides the operation itself (each dialect's
/// `mod.rs` implements it; SQLite's sets its boot clock, see `sqlite/clock.rs`).
pub(crate) trait LeaseDb: Database {
    /// Once on each new connection.
    fn on_connect(
        _conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        std::future::ready(Ok(()))
    }

    /// Right before each operation that only reads (after [`LeaseDb::on_connect`] on a new
    /// connection).
    fn before_op(
        _conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        std::future::ready(Ok(()))
    }

    /// Right before each write, in place of [`LeaseDb::before_op`]: what must come between
    /// waiting for the right to write and the write itself. The default is `before_op`.
    fn begin_write(
        conn: &mut Self::Connection,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        Self::before_op(conn)
    }

    /// Right after each write's statements: `commit` when they all succeeded. Nothing by
    /// default. A failure here closes the connection (it may still be inside the write).
    fn end_write(
        _conn: &mut Self::Connection,
        _commit: bool,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        std::future::ready(Ok(()))
    }

    /// The clock a verify inside an application's transaction is told, bound after its other
    /// parameters: `None` where the statement reads the server's clock itself.
    fn verify_now() -> Option<i64> {
        None
    }
}

pub(crate) struct Conns<DB: Database> {
    options: Options<DB>,
    /// One permit per connection that may be open at once.
    permits: Arc<Semaphore>,
    /// Open connections no operation holds.
    idle: Arc<Idle<DB>>,
}

/// Open connections no operation holds. Locked only to push or pop, never across an await.
struct Idle<DB: Database>(Mutex<Vec<DB::Connection>>);

impl<DB: Database> Idle<DB> {
    fn pop(&self) -> Option<DB::Connection> {
        match self.0.lock() {
            Ok(mut idle) => idle.pop(),
            Err(poisoned) => poisoned.into_inner().pop(),
        }
    }

    fn push(&self, conn: DB::Connection) {
        match self.0.lock() {
            Ok(mut idle) => idle.push(conn),
            Err(poisoned) => poisoned.into_inner().push(conn),
        }
    }
}

impl<DB: Database> Conns<DB> {
    pub(crate) fn new(options: Options<DB>, n: u32) -> Self {
        let n = usize::try_from(n.max(1)).unwrap_or(1);
        Conns {
            options,
            permits: Arc::new(Semaphore::new(n)),
            idle: Arc::new(Idle(Mutex::new(Vec::with_capacity(n)))),
        }
    }
}

/// What an opening task hands the operation that asked for it.
type Opened<DB> = Result<(<DB as Database>::Connection, OwnedSemaphorePermit), sqlx::Error>;

impl<DB: LeaseDb> Conns<DB> {
    /// A connection for one operation that only reads: the first one free, opened when none is
    /// open yet.
    pub(crate) async fn get(&self) -> Result<Slot<'_, DB>, sqlx::Error> {
        self.take(false).await
    }

    /// A connection for one write, [`LeaseDb::begin_write`] done on it: end the write with
    /// [`Slot::end_write`].
    pub(crate) async fn get_write(&self) -> Result<Slot<'_, DB>, sqlx::Error> {
        self.take(true).await
    }

    async fn take(&self, write: bool) -> Result<Slot<'_, DB>, sqlx::Error> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let (mut conn, permit) = match self.idle.pop() {
            Some(c) => (c, permit),
            None => self.open(permit).await?,
        };
        // A failure here drops the connection: it is not known to be clean.
        if write {
            DB::begin_write(&mut conn).await?;
        } else {
            DB::before_op(&mut conn).await?;
        }
        Ok(Slot {
            conns: self,
            conn: Some(conn),
            clean: false,
            broken: false,
            _permit: permit,
        })
    }

    /// Opens a connection on a task of its own, holding `permit` while it connects. Should the
    /// caller stop waiting, the task keeps the connection idle for the next operation and
    /// frees the permit.
    async fn open(&self, permit: OwnedSemaphorePermit) -> Opened<DB> {
        let (tx, rx) = oneshot::channel::<Opened<DB>>();
        let options = self.options.clone();
        let idle = Arc::clone(&self.idle);
        tokio::spawn(async move {
            let connect = async {
                let mut c = options.connect().await?;
                DB::on_connect(&mut c).await?;
                Ok::<_, sqlx::Error>(c)
            };
            let opened = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
                Ok(r) => r,
                Err(_) => Err(sqlx::Error::PoolTimedOut),
            };
            match opened {
                Ok(conn) => {
                    if let Err(Ok((conn, _permit))) = tx.send(Ok((conn, permit))) {
                        idle.push(conn);
                    }
                }
                Err(e) => {
                    drop(permit);
                    let _ = tx.send(Err(e));
                }
            }
        });
        match rx.await {
            Ok(opened) => opened,
            // The task ended without an answer: its runtime is shutting down.
            Err(_) => Err(sqlx::Error::PoolClosed),
        }
    }
}

impl<DB: LeaseDb> Slot<'_, DB> {
    /// Ends the write begun by [`Conns::get_write`] whose statements gave `result`:
    /// [`LeaseDb::end_write`], committing when `result` is `Ok`. A failed end makes the
    /// write's result that failure (a write not committed did not happen) and closes the
    /// connection.
    pub(crate) async fn end_write<T>(
        &mut self,
        result: Result<T, sqlx::Error>,
    ) -> Result<T, sqlx::Error> {
        let ended = DB::end_write(&mut **self, result.is_ok()).await;
        match ended {
            Ok(()) => result,
            Err(e) => {
                self.broken = true;
                // The statements' own error first: it says why the write was rolled back.
                result.and(Err(e))
            }
        }
    }
}

/// One connection, held for one operation. Dropped without [`Slot::done`], it closes the
/// connection; either way its permit goes to the next operation waiting.
pub(crate) struct Slot<'a, DB: Database> {
    conns: &'a Conns<DB>,
    conn: Option<DB::Connection>,
    clean: bool,
    /// Its write could not be ended: never reused, whatever the operation's result.
    broken: bool,
    // Dropped after `Drop::drop` has put the connection back: the next operation finds it idle.
    _permit: OwnedSemaphorePermit,
}

impl<DB: Database> Slot<'_, DB> {
    /// Marks the operation finished with `result`: the connection is kept unless the error says
    /// the transport failed.
    pub(crate) fn done<T>(mut self, result: &Result<T, sqlx::Error>) {
        self.clean = !self.broken
            && match result {
                Ok(_) => true,
                Err(sqlx::Error::Database(_)) | Err(sqlx::Error::RowNotFound) => true,
                Err(sqlx::Error::ColumnDecode { .. }) | Err(sqlx::Error::ColumnNotFound(_)) => true,
                Err(_) => false,
            };
    }
}

impl<DB: Database> Deref for Slot<'_, DB> {
    type Target = DB::Connection;
    fn deref(&self) -> &DB::Connection {
        match self.conn.as_ref() {
            Some(c) => c,
            None => unreachable!("a slot holds its connection until dropped"),
        }
    }
}

impl<DB: Database> DerefMut for Slot<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self.conn.as_mut() {
            Some(c) => c,
            None => unreachable!("a slot holds its connection until dropped"),
        }
    }
}

impl<DB: Database> Drop for Slot<'_, DB> {
    fn drop(&mut self) {
        // Unclean, the connection is dropped: that closes its socket without a goodbye, as it
        // may be mid-reply.
        if let Some(conn) = self.conn.take()
            && self.clean
        {
            self.conns.idle.push(conn);
        }
    }
}
