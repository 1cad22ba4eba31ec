//! The store's own connections for lease operations.
//!
//! Not a sqlx `Pool`: a pool pings every connection when it is returned (and, by default, when
//! it is checked out), so every lease operation through it would cost two round trips or more.
//! These slots hold plain connections: a warm operation is one statement, one round trip.
//!
//! A connection whose operation did not finish (an error of the transport, or a future dropped
//! mid-flight by a timeout) may hold half a response; it is closed, never reused, and the next
//! operation opens a fresh one.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::{ConnectOptions, Connection, Database};
use tokio::sync::{Mutex, MutexGuard};

type Options<DB> = <<DB as Database>::Connection as Connection>::Options;

pub(crate) struct Conns<DB: Database> {
    options: Options<DB>,
    slots: Vec<Mutex<Option<DB::Connection>>>,
    next: AtomicUsize,
}

impl<DB: Database> Conns<DB> {
    pub(crate) fn new(options: Options<DB>, n: u32) -> Self {
        Conns {
            options,
            slots: (0..n.max(1)).map(|_| Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
        }
    }

    /// A connection for one operation: a free one if any, otherwise the next in turn.
    pub(crate) async fn get(&self) -> Result<Slot<'_, DB>, sqlx::Error> {
        let guard = match self.slots.iter().find_map(|s| s.try_lock().ok()) {
            Some(g) => g,
            None => {
                let i = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
                self.slots[i].lock().await
            }
        };
        let mut slot = Slot {
            guard,
            clean: false,
        };
        if slot.guard.is_none() {
            *slot.guard = Some(self.options.connect().await?);
        }
        Ok(slot)
    }
}

/// One connection, held for one operation. Dropped without [`Slot::done`], it closes the
/// connection.
pub(crate) struct Slot<'a, DB: Database> {
    guard: MutexGuard<'a, Option<DB::Connection>>,
    clean: bool,
}

impl<DB: Database> Slot<'_, DB> {
    /// Marks the operation finished with `result`: the connection is kept unless the error says
    /// the transport failed.
    pub(crate) fn done<T>(mut self, result: &Result<T, sqlx::Error>) {
        self.clean = match result {
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
        match self.guard.as_ref() {
            Some(c) => c,
            None => unreachable!("a slot always holds a connection"),
        }
    }
}

impl<DB: Database> DerefMut for Slot<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        match self.guard.as_mut() {
            Some(c) => c,
            None => unreachable!("a slot always holds a connection"),
        }
    }
}

impl<DB: Database> Drop for Slot<'_, DB> {
    fn drop(&mut self) {
        if !self.clean {
            // Dropping the connection closes its socket without a goodbye: it may be mid-reply.
            self.guard.take();
        }
    }
}
