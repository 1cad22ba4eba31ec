//! SQLite's counted claim: one `BEGIN IMMEDIATE` transaction (calls into the embedded
//! database, not round trips to a server). The rest of the permit operations is shared, see
//! `permits.rs`.

use lease_core::Result;

use super::SqliteStore;
use crate::partitions::group_conn;
use crate::permits::{Decision, Seen, decide};
use crate::store::Table;

/// The permit and term granted, `None` when full. A write (`group_conn!(write …)`): `BEGIN
/// IMMEDIATE` takes the file's write lock first and the clock is read after it, so the
/// claim reads the latest rows, no other write comes between its read and its writes, and
/// the permit gets its whole TTL however long the lock was waited for: `lock` (the counter
/// row created when missing), `read` (every row of the name), [`decide`], the permit's
/// write (`insert` or `take`) and the counter's (`count`), commit.
/// A future dropped mid-way closes the connection, which rolls the transaction back.
pub(super) async fn claim_permit_row(
    store: &SqliteStore,
    name: &str,
    count: u32,
    hex: &str,
    instance: &str,
    ms: i64,
) -> Result<Option<(i64, i64)>> {
    let p = &store.inner.stmts.permits;
    group_conn!(
        write store,
        lease_core::layer::Operation::ClaimPermit,
        Table::Permits,
        |c| async move {
            sqlx::query(&p.lock).bind(name).execute(&mut *c).await?;
            let rows: Vec<(i64, bool, i64, i64)> = sqlx::query_as(&p.read)
                .bind(hex)
                .bind(name)
                .fetch_all(&mut *c)
                .await?;
            let seen: Vec<Seen> = rows
                .into_iter()
                .map(|(permit, held, term, left)| Seen {
                    permit,
                    held,
                    term,
                    left,
                })
                .collect();
            let Decision::Take {
                permit,
                existing,
                term,
            } = decide(&seen, count)
            else {
                // Committed all the same: at most the counter row was created, as the
                // next claim would.
                return Ok(None);
            };
            let permit = i64::from(permit);
            if existing {
                sqlx::query(&p.take)
                    .bind(hex)
                    .bind(instance)
                    .bind(term)
                    .bind(ms)
                    .bind(name)
                    .bind(permit)
                    .execute(&mut *c)
                    .await?;
            } else {
                sqlx::query(&p.insert)
                    .bind(name)
                    .bind(permit)
                    .bind(hex)
                    .bind(instance)
                    .bind(term)
                    .bind(ms)
                    .execute(&mut *c)
                    .await?;
            }
            sqlx::query(&p.count)
                .bind(term)
                .bind(name)
                .execute(&mut *c)
                .await?;
            Ok::<_, sqlx::Error>(Some((permit, term)))
        }
    )
}
