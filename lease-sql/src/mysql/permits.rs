//! MySQL's counted claim (one transaction in two text-protocol requests), and its permit
//! renewal and release: no `RETURNING` on `UPDATE`, so the term comes back through
//! `LAST_INSERT_ID(term)`, 0 when no row matched (see `statements.rs`). The rest of the permit
//! operations is shared, see `permits.rs`.

use lease_core::Result;
use sqlx::{MySql, Row};

use super::leases::inserted;
use super::partitions::{hex_literal, raw_execute, raw_rows};
use crate::partitions::{Table, group_conn};
use crate::permits::{Decision, Seen, decide};
use crate::store::SqlStore;
use crate::wire::{
    HOLDER_MARKER, INSTANCE_MARKER, NAME_MARKER, PERMIT_MARKER, TERM_MARKER, TTL_MARKER,
};

/// What the claim's templates are filled with: the strings as hex literals, the numbers as
/// decimal integers. No value is interpolated any other way.
struct Claim<'a> {
    name: &'a str,
    hex: &'a str,
    instance: &'a str,
    ms: i64,
}

impl Claim<'_> {
    fn fill(&self, template: &str, permit: i64, term: i64) -> String {
        template
            .replace(PERMIT_MARKER, &permit.to_string())
            .replace(TERM_MARKER, &term.to_string())
            .replace(TTL_MARKER, &self.ms.to_string())
            .replace(NAME_MARKER, &hex_literal(self.name))
            .replace(HOLDER_MARKER, &hex_literal(self.hex))
            .replace(INSTANCE_MARKER, &hex_literal(self.instance))
    }
}

/// Ends the claim's transaction after `e` (or, with no error, when the name is full): `e` when
/// the rollback went through or the connection is being closed for `e` anyway, else an error
/// that is not the server's, so the connection is closed rather than reused with a
/// transaction open (the next `START TRANSACTION` would commit it).
async fn rolled_back(
    c: &mut sqlx::mysql::MySqlConnection,
    e: Option<sqlx::Error>,
) -> std::result::Result<(), sqlx::Error> {
    match (raw_execute(c, "ROLLBACK").await, e) {
        (Ok(_), None) => Ok(()),
        (Ok(_), Some(e)) => Err(e),
        (Err(_), Some(e)) if !matches!(e, sqlx::Error::Database(_)) => Err(e),
        (Err(r), e) => Err(sqlx::Error::Protocol(match e {
            Some(e) => format!("{e}; and the rollback after it failed: {r}"),
            None => format!("the rollback of a full claim failed: {r}"),
        })),
    }
}

impl SqlStore<MySql> {
    /// The permit and term granted, `None` when full: one transaction, two round trips. The
    /// first request opens it, locks the name's counter row (creating it when missing) and
    /// reads the name's rows with a locking read; [`decide`] picks; the second request writes
    /// the permit, moves the counter and commits (or rolls back: a third, when full). Claims of
    /// a name queue on the counter row's lock, so each decides on the latest rows. A deadlock
    /// (InnoDB rolled the transaction back) is retried at once.
    pub(super) async fn claim_permit_row(
        &self,
        name: &str,
        count: u32,
        hex: &str,
        instance: &str,
        ms: i64,
    ) -> Result<Option<(i64, i64)>> {
        let p = &self.inner.stmts.permits;
        let claim = Claim {
            name,
            hex,
            instance,
            ms,
        };
        let read = claim.fill(&p.read, 0, 0);
        let claim = &claim;
        let read = &read;
        group_conn!(
            self,
            lease_core::layer::Operation::ClaimPermit,
            Table::Permits,
            |c| async move {
                let rows = match raw_rows(&mut *c, read).await {
                    Ok(rows) => rows,
                    Err(e) => return rolled_back(c, Some(e)).await.map(|()| None),
                };
                let seen = rows
                    .iter()
                    .map(|r| {
                        Ok(Seen {
                            permit: r.try_get(0)?,
                            held: r.try_get::<i64, _>(1)? != 0,
                            term: r.try_get(2)?,
                            left: r.try_get(3)?,
                        })
                    })
                    .collect::<std::result::Result<Vec<Seen>, sqlx::Error>>();
                let seen = match seen {
                    Ok(seen) => seen,
                    Err(e) => return rolled_back(c, Some(e)).await.map(|()| None),
                };
                let Decision::Take {
                    permit,
                    existing,
                    term,
                } = decide(&seen, count)
                else {
                    return rolled_back(c, None).await.map(|()| None);
                };
                let permit = i64::from(permit);
                let write = claim.fill(if existing { &p.take } else { &p.insert }, permit, term);
                match raw_execute(&mut *c, &write).await {
                    Ok(_) => Ok(Some((permit, term))),
                    Err(e) => rolled_back(c, Some(e)).await.map(|()| None),
                }
            }
        )
    }

    /// The term, `None` when the permit is not the holder's live.
    pub(super) async fn renew_permit_row(
        &self,
        name: &str,
        permit: u32,
        hex: &str,
        ms: i64,
    ) -> Result<Option<i64>> {
        let p = &self.inner.stmts.permits;
        let done = group_conn!(
            self,
            lease_core::layer::Operation::RenewPermit,
            Table::Permits,
            |c| {
                sqlx::query(&p.renew)
                    .bind(ms)
                    .bind(name)
                    .bind(i64::from(permit))
                    .bind(hex)
                    .execute(c)
            }
        )?;
        Ok(inserted(done.last_insert_id()).map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
    }

    /// Whether the holder's live permit ended.
    pub(super) async fn release_permit_row(
        &self,
        name: &str,
        permit: u32,
        hex: &str,
    ) -> Result<bool> {
        let p = &self.inner.stmts.permits;
        let done = group_conn!(
            self,
            lease_core::layer::Operation::ReleasePermit,
            Table::Permits,
            |c| {
                sqlx::query(&p.release)
                    .bind(name)
                    .bind(i64::from(permit))
                    .bind(hex)
                    .execute(c)
            }
        )?;
        Ok(inserted(done.last_insert_id()).is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_templates_take_only_hex_and_integers() {
        let claim = Claim {
            name: "x'; DROP TABLE t; --",
            hex: "/*name*/",
            instance: "é",
            ms: 1500,
        };
        let sql = claim.fill(
            "n=/*name*/ h=/*holder*/ i=/*instance*/ p=/*permit*/ t=/*term*/ ttl=/*ttl*/",
            3,
            42,
        );
        assert_eq!(
            sql,
            "n=X'78273b2044524f50205441424c4520743b202d2d' h=X'2f2a6e616d652a2f' i=X'c3a9' \
             p=3 t=42 ttl=1500"
        );
    }
}
