//! PostgreSQL's slot finish and `unfinished` (the rest of
//! [`SlotStore`](lease_core::backend::slots::SlotStore) is shared, see `slots.rs`).

use lease_core::Result;
use lease_core::backend::slots::SlotFinish;

use super::PostgresStore;
use crate::slots::Finish;
use crate::store::with_conn;

/// The finish: one statement that locks the row, computes the outcome from it and applies
/// it (a data-modifying CTE).
pub(super) async fn finish_in(store: &PostgresStore, f: Finish<'_>) -> Result<SlotFinish> {
    let row: Option<(bool, bool, bool)> =
        with_conn!(store, lease_core::layer::Operation::FinishSlot, |c| {
            sqlx::query_as(&store.inner.stmts.slots.finish)
                .bind(f.name)
                .bind(f.hex)
                .bind(f.instant_ms)
                .bind(f.passed_ms)
                .fetch_optional(c)
        })?;
    Ok(row
        .map(|(recorded, passed_taken, released)| SlotFinish {
            recorded,
            passed_taken,
            released,
        })
        .unwrap_or_default())
}

/// The unfinished instants of `names` (one `text[]` parameter).
pub(super) async fn unfinished_rows(
    store: &PostgresStore,
    names: &[String],
) -> Result<Vec<(Vec<u8>, i64)>> {
    let rows: Vec<(String, i64)> =
        with_conn!(store, lease_core::layer::Operation::Unfinished, |c| {
            sqlx::query_as(&store.inner.stmts.slots.unfinished)
                .bind(names)
                .fetch_all(c)
        })?;
    Ok(rows
        .into_iter()
        .map(|(n, at)| (n.into_bytes(), at))
        .collect())
}
