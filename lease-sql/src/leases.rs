//! The lease table's part of a database's code, [`LeaseDriver`]: the statements of the lease
//! operations, the start-up checks, the hints and the verified transactions. The parts of the
//! partition, member, permit and slot tables extend it, and the
//! [`LeaseStore`](lease_core::LeaseStore) impl that calls it is in `driver.rs`, with the
//! `Driver` that sums the parts.

use std::future::Future;

use lease_core::Result;
use lease_core::backend::notify::{Topic, Wakeups};

use crate::store::{SqlStore, Table, Token};

/// The bounds of one listing of names, as the statement binds them (see
/// `wire::names_statement`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NameBounds<'a> {
    /// The prefix: the least name listed.
    pub(crate) lower: &'a str,
    /// Names are greater than this (`""` for no cursor).
    pub(crate) after: &'a str,
    /// Names are less than this.
    pub(crate) end: &'a str,
    /// At most this many of each kind.
    pub(crate) limit: i64,
}
use crate::wire::conns::LeaseDb;

/// The lease table's part of the `Driver` (`driver.rs`): what a database runs for the lease
/// operations, its start-up checks, its hints and its verified transactions. The row operations
/// return their rows as read (the callers check and convert them) and their errors as lease errors,
/// without the operation's context (the callers add it).
pub(crate) trait LeaseDriver: LeaseDb {
    /// The statement that opens a verified transaction, when not sqlx's `BEGIN`.
    const BEGIN: Option<&'static str> = None;

    /// The start-up checks of [`available`](lease_core::LeaseStore::available).
    fn check_available(store: &SqlStore<Self>) -> impl Future<Output = Result<()>> + Send;

    /// The check of the partition, member or permit table `table` on its first use (see
    /// [`SqlStore::group_table_ready`]).
    fn check_group_table(
        store: &SqlStore<Self>,
        table: Table,
    ) -> impl Future<Output = Result<()>> + Send;

    /// The hints of `topic` (see each database's store docs).
    fn watch(store: &SqlStore<Self>, topic: &Topic) -> Wakeups;

    /// The claim: the new term, `None` when held.
    fn claim_row(
        store: &SqlStore<Self>,
        name: &str,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// The renewal: the term, `None` when the lease is not the holder's live.
    fn renew_row(
        store: &SqlStore<Self>,
        name: &str,
        hex: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<u64>>> + Send;

    /// Whether [`renew_many_rows`](LeaseDriver::renew_many_rows) renews many leases in one statement
    /// on every server of the database; `false`: see
    /// [`renews_many`](LeaseDriver::renews_many).
    const RENEW_MANY: bool = false;

    /// Whether this store's server renews many leases in one request
    /// ([`renew_many_rows`](LeaseDriver::renew_many_rows)); otherwise the store renews them one
    /// by one. [`RENEW_MANY`](LeaseDriver::RENEW_MANY) unless the database decides by its
    /// server's version at start-up (MySQL/MariaDB: MariaDB 10.6 or later).
    fn renews_many(_store: &SqlStore<Self>) -> bool {
        Self::RENEW_MANY
    }

    /// The renewal of many leases in one statement or one request (see
    /// `Statements::renew_many`): `(name, term, skipped)` rows; a name with a row carrying a
    /// term was renewed, one whose rows carry none but `skipped` non-zero was found live and
    /// passed by (its row locked by another transaction), one without a row was not live under
    /// its holder. A name may come twice. Called only when
    /// [`renews_many`](LeaseDriver::renews_many).
    fn renew_many_rows(
        store: &SqlStore<Self>,
        names: &[&str],
        hexes: &[&str],
        ms: i64,
    ) -> impl Future<Output = Result<Vec<(String, Option<i64>, i64)>>> + Send;

    /// The release: whether the holder's live lease ended.
    fn release_row(
        store: &SqlStore<Self>,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The forced release: whether a live lease ended.
    fn force_release_row(
        store: &SqlStore<Self>,
        name: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The verify: the term and the time left, when the lease is the holder's live.
    fn verify_row(
        store: &SqlStore<Self>,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send;

    /// The record of `name`: its instance, term and time left.
    fn get_row(
        store: &SqlStore<Self>,
        name: &str,
    ) -> impl Future<Output = Result<Option<(String, i64, i64)>>> + Send;

    /// The listing of names (see `wire::names_statement`): `(name, 0)` per lease row and
    /// `(name, 1)` per counted name, at most `limit` of each, in the range the bounds give.
    fn name_rows(
        store: &SqlStore<Self>,
        bounds: NameBounds<'_>,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;

    /// The verify inside the caller's transaction on `conn`: whether the lease is still held
    /// under `token`.
    fn verify_locked(
        store: &SqlStore<Self>,
        conn: &mut Self::Connection,
        name: &str,
        hex: &str,
        token: Token,
    ) -> impl Future<Output = std::result::Result<bool, sqlx::Error>> + Send;
}
