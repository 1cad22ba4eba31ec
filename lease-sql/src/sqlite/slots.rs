//! SQLite's slot finish and `unfinished` (the rest of
//! [`SlotStore`](lease_core::backend::slots::SlotStore) is shared, see `slots.rs`).

use lease_core::Result;
use lease_core::backend::slots::SlotFinish;

use super::SqliteStore;
use crate::slots::Finish;
use crate::store::with_conn;

/// The finish: SQLite's `RETURNING` sees only the new row, so the outcome is read and
/// applied in one write (`with_conn!(write …)`: a `BEGIN IMMEDIATE` transaction, the write
/// lock from its first statement and the clock read after it), on the embedded database. A
/// future dropped mid-way closes the connection, which rolls the transaction back.
pub(super) async fn finish_in(store: &SqliteStore, f: Finish<'_>) -> Result<SlotFinish> {
    let s = &store.inner.stmts.slots;
    with_conn!(
        write store,
        lease_core::layer::Operation::FinishSlot,
        |c| async move {
            let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(&s.finish)
                .bind(f.name)
                .bind(f.hex)
                .bind(f.instant_ms)
                .bind(f.passed_ms)
                .fetch_optional(&mut *c)
                .await?;
            let Some((held, rec, fin, due)) = row else {
                return Ok(SlotFinish::default());
            };
            let (released, recorded) = (held != 0, rec != 0);
            let clear = recorded && fin != 0;
            let passed_taken = released && recorded && due != 0;
            if released || clear {
                sqlx::query(&s.finish_write)
                    .bind(f.name)
                    .bind(passed_taken)
                    .bind(f.passed_ms)
                    .bind(clear)
                    .bind(released)
                    .execute(&mut *c)
                    .await?;
            }
            Ok::<_, sqlx::Error>(SlotFinish {
                recorded,
                passed_taken,
                released,
            })
        }
    )
}

/// The unfinished instants of `names` (one JSON array parameter).
pub(super) async fn unfinished_rows(
    store: &SqliteStore,
    names: &[String],
) -> Result<Vec<(Vec<u8>, i64)>> {
    let rows: Vec<(String, i64)> =
        with_conn!(store, lease_core::layer::Operation::Unfinished, |c| {
            sqlx::query_as(&store.inner.stmts.slots.unfinished)
                .bind(json_array(names))
                .fetch_all(c)
        })?;
    Ok(rows
        .into_iter()
        .map(|(n, at)| (n.into_bytes(), at))
        .collect())
}

/// The names as one JSON array of strings, for SQLite's `json_each`.
fn json_array(names: &[String]) -> String {
    use std::fmt::Write;
    let mut out = String::from("[");
    for (i, name) in names.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for ch in name.chars() {
            match ch {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", u32::from(c));
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}
