//! MySQL's slot writes and `unfinished`: the term (or the finish's outcome) comes back through
//! `LAST_INSERT_ID(expr)`; every write is retried at once after a deadlock, as the claim is.
//! The rest of [`SlotStore`](lease_core::SlotStore) is shared, see `slots.rs`.

use lease_core::Result;
use lease_core::backend::SlotFinish;
use sqlx::MySql;
use sqlx::mysql::{MySqlArguments, MySqlQueryResult};
use sqlx::query::Query;

use super::leases::inserted;
use lease_core::layer::Operation;

use crate::slots::{Claim, Finish, Previous};
use crate::store::{SqlStore, raw_conn, with_conn};
use crate::wire::NAMES_MARKER;

/// The most names one `unfinished` statement carries (MySQL allows 65,535 placeholders a
/// statement); more take one round trip per this many.
const NAMES_PER_STATEMENT: usize = 4096;

impl SqlStore<MySql> {
    /// Runs a write, retried at once (up to `DEADLOCK_RETRIES` times) when InnoDB picked it as
    /// a deadlock victim: the statement was rolled back whole.
    async fn write<'q>(
        &self,
        op: Operation,
        q: impl Fn() -> Query<'q, MySql, MySqlArguments>,
    ) -> Result<MySqlQueryResult> {
        let mut attempt = 0;
        loop {
            let r = raw_conn!(self, op, |c| q().execute(c));
            match r {
                Err(e)
                    if crate::error::is_deadlock(&e)
                        && attempt < crate::error::DEADLOCK_RETRIES =>
                {
                    attempt += 1;
                }
                r => return r.map_err(|e| self.err(e, op)),
            }
        }
    }

    /// The claim's write after its read. `LAST_INSERT_ID` is the new term, or 0 when the write
    /// did not match (a duplicate key, or a term that moved on since the read).
    pub(super) async fn claim_slot_row(
        &self,
        w: Claim<'_>,
        previous: Option<Previous>,
    ) -> Result<Option<u64>> {
        let s = &self.inner.stmts.slots;
        let done = match previous {
            None => {
                self.write(lease_core::layer::Operation::ClaimSlot, || {
                    sqlx::query(&s.insert)
                        .bind(w.name)
                        .bind(w.hex)
                        .bind(w.instance)
                        .bind(w.ttl_ms)
                        .bind(w.instant_ms)
                        .bind(w.instant_ms)
                })
                .await?
            }
            Some(p) => {
                self.write(lease_core::layer::Operation::ClaimSlot, || {
                    sqlx::query(&s.update)
                        .bind(w.hex)
                        .bind(w.instance)
                        .bind(w.ttl_ms)
                        .bind(w.instant_ms)
                        .bind(w.instant_ms)
                        .bind(w.name)
                        .bind(p.term)
                })
                .await?
            }
        };
        Ok(inserted(done.last_insert_id()))
    }

    /// The finish: one `UPDATE`, its outcome in the bits of `LAST_INSERT_ID`.
    pub(super) async fn finish_in(&self, f: Finish<'_>) -> Result<SlotFinish> {
        let (h, i, p) = (f.hex, f.instant_ms, f.passed_ms);
        // The placeholders in statement order (see `slots` in statements.rs):
        // LAST_INSERT_ID(rec, took, held), IF(rec AND fin), IF(took, passed), IF(held),
        // WHERE name AND (rec OR held).
        let done = self
            .write(lease_core::layer::Operation::FinishSlot, || {
                sqlx::query(&self.inner.stmts.slots.finish)
                    // 1 + 2 * rec + 4 * took + 8 * held
                    .bind(i)
                    .bind(h)
                    .bind(i)
                    .bind(p)
                    .bind(p)
                    .bind(i)
                    .bind(h)
                    // unfinished_slot_ms: rec AND fin
                    .bind(i)
                    .bind(i)
                    // slot_ms: took, passed
                    .bind(h)
                    .bind(i)
                    .bind(p)
                    .bind(p)
                    .bind(i)
                    .bind(p)
                    // expires_at_ms: held
                    .bind(h)
                    // WHERE
                    .bind(f.name)
                    .bind(i)
                    .bind(h)
            })
            .await?;
        let flags = done.last_insert_id();
        Ok(SlotFinish {
            recorded: flags & 2 != 0,
            passed_taken: flags & 4 != 0,
            released: flags & 8 != 0,
        })
    }

    /// One statement per [`NAMES_PER_STATEMENT`] names, one `?` each.
    pub(super) async fn unfinished_rows(&self, names: &[String]) -> Result<Vec<(Vec<u8>, i64)>> {
        let mut rows = Vec::new();
        for chunk in names.chunks(NAMES_PER_STATEMENT) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = self
                .inner
                .stmts
                .slots
                .unfinished
                .replace(NAMES_MARKER, &marks);
            let found: Vec<(Vec<u8>, i64)> =
                with_conn!(self, lease_core::layer::Operation::Unfinished, |c| {
                    chunk
                        .iter()
                        .fold(sqlx::query_as(&sql), |q, n| q.bind(n))
                        .fetch_all(c)
                })?;
            rows.extend(found);
        }
        Ok(rows)
    }

    /// `LAST_INSERT_ID()` is the new term, 0 when not eligible.
    pub(super) async fn rerun_row(&self, w: Claim<'_>) -> Result<Option<u64>> {
        let done = self
            .write(lease_core::layer::Operation::ClaimRerun, || {
                sqlx::query(&self.inner.stmts.slots.rerun)
                    .bind(w.hex)
                    .bind(w.instance)
                    .bind(w.ttl_ms)
                    .bind(w.instant_ms)
                    .bind(w.name)
                    .bind(w.instant_ms)
                    .bind(w.instant_ms)
                    .bind(w.instant_ms)
            })
            .await?;
        Ok(inserted(done.last_insert_id()))
    }
}
