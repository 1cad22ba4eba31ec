//! PostgreSQL's counted claim: one statement (see `statements.rs` and the docs of
//! [`PostgresStore`](crate::PostgresStore)), sent again when its snapshot was stale. The rest
//! of the permit operations is shared, see `permits.rs`.

use lease_core::Result;

use super::PostgresStore;
use crate::partitions::group_conn;
use crate::store::Table;

/// How many times a claim is sent whose snapshot a concurrent claim of the same name made
/// stale. Each stale answer means another claim of the name was granted in between, so the
/// name moves on; a claim that loses this many races in a row answers full, and its caller
/// retries as after any full answer.
const STALE_ATTEMPTS: u32 = 16;

/// The permit and term granted, `None` when full.
pub(super) async fn claim_permit_row(
    store: &PostgresStore,
    name: &str,
    count: u32,
    hex: &str,
    instance: &str,
    ms: i64,
) -> Result<Option<(i64, i64)>> {
    let p = &store.inner.stmts.permits;
    for _ in 0..STALE_ATTEMPTS {
        let (permit, term, stale): (Option<i64>, Option<i64>, bool) = group_conn!(
            store,
            lease_core::layer::Operation::ClaimPermit,
            Table::Permits,
            |c| {
                sqlx::query_as(&p.claim)
                    .bind(name)
                    .bind(hex)
                    .bind(instance)
                    .bind(ms)
                    .bind(i64::from(count))
                    .fetch_one(c)
            }
        )?;
        match (permit, term) {
            (Some(permit), Some(term)) => return Ok(Some((permit, term))),
            _ if stale => continue,
            _ => return Ok(None),
        }
    }
    tracing::debug!(
        name,
        "lease-sql: a counted claim lost every race; answered full"
    );
    Ok(None)
}
