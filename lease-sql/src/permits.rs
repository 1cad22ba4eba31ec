//! Counted leases
//! ([`PermitStore::claim_permit`](lease_core::backend::permits::PermitStore::claim_permit) and the
//! other permit operations; the rules are in [`lease_core::backend::permits`]) on a table of their
//! own, named after the lease table: `<table>_permits`, one row per `(name, permit_no)`, and per
//! name one counter row (`permit_no = -1`) whose term is the greatest ever issued for the name
//! across its permits. Its DDL is [`permits_schema_sql`](crate::permits_schema_sql); it is checked,
//! and created when missing, on its first use, as the partition and member tables are.
//!
//! One impl for every database: argument checks before any I/O (lease-core's `backend::check`),
//! the grants, the hints; each database's [`PermitDriver`] runs the statements:
//! `claim_permit_row` (PostgreSQL: one statement, `postgres/permits.rs`; MySQL: one transaction
//! sent as one request, `mysql/permits.rs`; SQLite: one transaction that decides with
//! [`decide`], `sqlite/permits.rs`), `renew_permit_row` and `release_permit_row` (PostgreSQL's
//! and SQLite's in `shared.rs`, MySQL's in `mysql/permits.rs`), and the reads (`verify`,
//! `list`, the same shape on every database, in `shared.rs`).
//!
//! Every claim of a name is serialized on the name's rows: the count of its live permits, the
//! choice of the lowest free permit and the term one more than the counter are taken from the
//! latest committed rows, and the counter moves with the grant, in one atomic step. Renew,
//! verify, list and release are one statement each, one round trip; release sends the same hint
//! a lease's release sends (`Topic::lease(name)`).

use std::future::Future;

use lease_core::backend::async_trait;
use lease_core::{Result, backend::permits::PermitStore};

use crate::leases::LeaseDriver;
use crate::store::{SqlStore, Table};

impl<DB: sqlx::Database> SqlStore<DB> {
    /// A permit index read from the permit table.
    pub(crate) fn permit_from(&self, v: i64) -> lease_core::Result<u32> {
        u32::try_from(v).map_err(|_| self.corrupt_row(Table::Permits, &format!("permit {v}")))
    }
}

/// One row of a name as SQLite's claim transaction reads it: the permit (−1: the counter row),
/// whether the claimant holds it, its term and its time left by the store's clock.
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) permit: i64,
    pub(crate) held: bool,
    pub(crate) term: i64,
    pub(crate) left: i64,
}

/// What a claim does, decided from every row of the name (read under the claim's lock).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// The name is full, or the claimant holds a live permit of it already.
    Full,
    /// Take `permit` (its row exists when `existing`) with `term`.
    Take {
        permit: u32,
        existing: bool,
        term: i64,
    },
}

/// The rules of [`lease_core::backend::permits`] over the rows of one name (PostgreSQL's and
/// MySQL's claims say the same in SQL, see their statements): fewer than `count` live and none the
/// claimant's, then the lowest free permit below `count`, with a term one more than the greatest
/// the name ever issued (the counter's, or a permit's should it be greater).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn decide(rows: &[Seen], count: u32) -> Decision {
    let live = |s: &&Seen| s.permit >= 0 && s.left > 0;
    if rows.iter().filter(live).any(|s| s.held) {
        return Decision::Full;
    }
    let n_live = rows.iter().filter(live).count();
    if n_live >= usize::try_from(count).unwrap_or(usize::MAX) {
        return Decision::Full;
    }
    let taken = |i: u32| rows.iter().filter(live).any(|s| s.permit == i64::from(i));
    let Some(permit) = (0..count).find(|i| !taken(*i)) else {
        return Decision::Full;
    };
    let greatest = rows.iter().map(|s| s.term).max().unwrap_or(0).max(0);
    Decision::Take {
        permit,
        existing: rows.iter().any(|s| s.permit == i64::from(permit)),
        term: greatest.saturating_add(1),
    }
}

/// The permit table's part of the `Driver` (`driver.rs`): what a database runs for the permit
/// operations (see [`LeaseDriver`] for what each returns).
pub(crate) trait PermitDriver: LeaseDriver {
    /// The claim: the permit and term granted, `None` when the name is full (or the claimant
    /// holds a live permit of it already).
    fn claim_permit_row(
        store: &SqlStore<Self>,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<(i64, i64)>>> + Send;

    /// The renewal: the term, `None` when the permit is not the holder's live.
    fn renew_permit_row(
        store: &SqlStore<Self>,
        name: &str,
        permit: u32,
        hex: &str,
        ms: i64,
    ) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// The release: whether the holder's live permit ended.
    fn release_permit_row(
        store: &SqlStore<Self>,
        name: &str,
        permit: u32,
        hex: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// The holder's live permit of `name`: permit, term and time left.
    fn verify_permit_row(
        store: &SqlStore<Self>,
        name: &str,
        hex: &str,
    ) -> impl Future<Output = Result<Option<(i64, i64, i64)>>> + Send;

    /// Every permit of `name`: permit, instance, term and time left, by permit.
    fn permit_rows(
        store: &SqlStore<Self>,
        name: &str,
    ) -> impl Future<Output = Result<Vec<(i64, String, i64, i64)>>> + Send;
}

/// The permit operations, called by the [`LeaseStore`](lease_core::LeaseStore) impl
/// (`driver.rs`): argument checks, the permit table ready, the database's statement, the hint,
/// the answer.
// `PermitDriver` is crate-private; these methods are too (the lint looks at the impl's type).
#[allow(private_bounds)]
#[async_trait]
impl<DB: PermitDriver> PermitStore for SqlStore<DB>
where
    Self: lease_core::LeaseStore,
{
    async fn claim_permit(
        &self,
        name: &str,
        count: u32,
        holder: &lease_core::backend::HolderToken,
        instance: &str,
        ttl: std::time::Duration,
    ) -> lease_core::Result<Option<lease_core::backend::permits::PermitGrant>> {
        lease_core::backend::check::claim_permit(self, name, count, instance, ttl)?;
        let ms = crate::store::ttl_ms(ttl);
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::ClaimPermit, name);
        self.group_table_ready(Table::Permits)
            .await
            .map_err(during)?;
        let granted = DB::claim_permit_row(self, name, count, &holder.to_hex(), instance, ms)
            .await
            .map_err(during)?;
        let Some((permit, term)) = granted else {
            return Ok(None);
        };
        self.inner
            .hints
            .wrote(&lease_core::backend::notify::Topic::lease(name));
        Ok(Some(lease_core::backend::permits::PermitGrant {
            permit: self.permit_from(permit).map_err(during)?,
            grant: lease_core::backend::Grant {
                term: self.term_from(term).map_err(during)?,
                expires_in: crate::store::remaining(ms),
            },
        }))
    }

    async fn renew_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &lease_core::backend::HolderToken,
        ttl: std::time::Duration,
    ) -> lease_core::Result<Option<lease_core::backend::Grant>> {
        lease_core::backend::check::renew_permit(self, name, permit, ttl)?;
        let ms = crate::store::ttl_ms(ttl);
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::RenewPermit, name);
        self.group_table_ready(Table::Permits)
            .await
            .map_err(during)?;
        let term = DB::renew_permit_row(self, name, permit, &holder.to_hex(), ms)
            .await
            .map_err(during)?;
        term.map(|t| {
            Ok(lease_core::backend::Grant {
                term: self.term_from(t).map_err(during)?,
                expires_in: crate::store::remaining(ms),
            })
        })
        .transpose()
    }

    async fn release_permit(
        &self,
        name: &str,
        permit: u32,
        holder: &lease_core::backend::HolderToken,
    ) -> lease_core::Result<bool> {
        lease_core::backend::check::permit(self, name, permit)?;
        let during =
            |e: lease_core::Error| e.during(lease_core::layer::Operation::ReleasePermit, name);
        self.group_table_ready(Table::Permits)
            .await
            .map_err(during)?;
        let ended = DB::release_permit_row(self, name, permit, &holder.to_hex())
            .await
            .map_err(during)?;
        if ended {
            self.inner
                .hints
                .wrote(&lease_core::backend::notify::Topic::lease(name));
        }
        Ok(ended)
    }

    async fn verify_permit(
        &self,
        name: &str,
        holder: &lease_core::backend::HolderToken,
    ) -> lease_core::Result<Option<lease_core::backend::permits::PermitGrant>> {
        lease_core::backend::check::name(self, name)?;
        let op = lease_core::layer::Operation::VerifyPermit;
        let during = |e: lease_core::Error| e.during(op, name);
        self.group_table_ready(Table::Permits)
            .await
            .map_err(during)?;
        let row = DB::verify_permit_row(self, name, &holder.to_hex())
            .await
            .map_err(during)?;
        row.map(|(permit, term, left)| {
            Ok(lease_core::backend::permits::PermitGrant {
                permit: self.permit_from(permit).map_err(during)?,
                grant: lease_core::backend::Grant {
                    term: self.term_from(term).map_err(during)?,
                    expires_in: crate::store::remaining(left),
                },
            })
        })
        .transpose()
    }

    async fn permits(
        &self,
        name: &str,
    ) -> lease_core::Result<Vec<lease_core::backend::permits::PermitInfo>> {
        lease_core::backend::check::name(self, name)?;
        let op = lease_core::layer::Operation::Permits;
        let during = |e: lease_core::Error| e.during(op, name);
        self.group_table_ready(Table::Permits)
            .await
            .map_err(during)?;
        let rows = DB::permit_rows(self, name).await.map_err(during)?;
        rows.into_iter()
            .map(|(permit, instance, term, left)| {
                Ok(lease_core::backend::permits::PermitInfo {
                    permit: self.permit_from(permit)?,
                    instance,
                    term: self.term_from(term)?,
                    live: left > 0,
                    expires_in: crate::store::remaining(left),
                })
            })
            .collect::<lease_core::Result<_>>()
            .map_err(during)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(permit: i64, held: bool, term: i64, left: i64) -> Seen {
        Seen {
            permit,
            held,
            term,
            left,
        }
    }

    #[test]
    fn the_lowest_free_permit_with_the_next_term() {
        assert_eq!(
            decide(&[], 3),
            Decision::Take {
                permit: 0,
                existing: false,
                term: 1
            }
        );
        let rows = [
            row(-1, false, 7, 0),
            row(0, false, 7, 500),
            row(1, false, 5, 0),
        ];
        assert_eq!(
            decide(&rows, 3),
            Decision::Take {
                permit: 1,
                existing: true,
                term: 8
            }
        );
        // A permit's term above the counter's (a hand-edited table) still never repeats.
        let rows = [row(-1, false, 2, 0), row(0, false, 9, 0)];
        assert_eq!(
            decide(&rows, 1),
            Decision::Take {
                permit: 0,
                existing: true,
                term: 10
            }
        );
    }

    #[test]
    fn full_held_twice_and_a_lowered_count() {
        let rows = [
            row(-1, false, 2, 0),
            row(0, false, 1, 10),
            row(1, false, 2, 10),
        ];
        assert_eq!(decide(&rows, 2), Decision::Full);
        assert!(matches!(decide(&rows, 3), Decision::Take { permit: 2, .. }));
        let mine = [row(-1, false, 1, 0), row(0, true, 1, 10)];
        assert_eq!(decide(&mine, 5), Decision::Full);
        // Lowered from 5 to 2 with permits 3 and 4 live: full, though 0 and 1 are free.
        let high = [
            row(-1, false, 9, 0),
            row(3, false, 8, 10),
            row(4, false, 9, 10),
        ];
        assert_eq!(decide(&high, 2), Decision::Full);
        assert!(matches!(decide(&high, 3), Decision::Take { permit: 0, .. }));
    }
}
