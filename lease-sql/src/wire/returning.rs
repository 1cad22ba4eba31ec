//! The statements PostgreSQL and SQLite share: both have `RETURNING` and `ON CONFLICT`, so the
//! term comes back as a row. Written with PostgreSQL's `$N` parameters; the SQLite store
//! renumbers them `?N` (see `sqlite/statements.rs`).
//!
//! Each dialect fills in its own: the claim (PostgreSQL takes the row's lock first), the verify
//! inside a transaction (PostgreSQL's `FOR SHARE`; SQLite binds its boot clock), the slot
//! claim's read, the finish, `unfinished`'s list of names, and the partition and member
//! statements.

use super::schema::{Dialect, schema_sql};
use super::{PermitStatements, SlotStatements, Statements};

/// The statements of `dialect` (PostgreSQL or SQLite) on the lease table `t` that both share,
/// the others left empty.
pub(crate) fn statements(dialect: Dialect, t: &str) -> Statements {
    let now = dialect.expiry_ms();
    let wall = dialect.now_ms();
    Statements {
        renew: format!(
            "UPDATE {t} SET expires_at_ms = {now} + $3 \
             WHERE name = $1 AND holder = $2 AND expires_at_ms > {now} RETURNING term"
        ),
        // Each dialect writes its own.
        renew_many: String::new(),
        release: format!(
            "UPDATE {t} SET expires_at_ms = 0 \
             WHERE name = $1 AND holder = $2 AND expires_at_ms > {now}"
        ),
        force_release: format!(
            "UPDATE {t} SET expires_at_ms = 0 WHERE name = $1 AND expires_at_ms > {now}"
        ),
        verify: format!(
            "SELECT term, expires_at_ms - {now} FROM {t} \
             WHERE name = $1 AND holder = $2 AND expires_at_ms > {now}"
        ),
        get: format!("SELECT instance, term, expires_at_ms - {now} FROM {t} WHERE name = $1"),
        names: super::names_statement(dialect, t),
        // SQLite's start-up check of its clock function (the boot clock is the store's own).
        now: format!("SELECT {wall}"),
        create: schema_sql(dialect, t),
        slots: SlotStatements {
            insert: format!(
                "INSERT INTO {t} \
                 (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms) \
                 VALUES ($1, $2, $3, 1, {now} + $4, $5, $5) \
                 ON CONFLICT (name) DO NOTHING RETURNING term"
            ),
            update: format!(
                "UPDATE {t} SET holder = $2, instance = $3, term = term + 1, \
                 expires_at_ms = {now} + $4, slot_ms = $5, unfinished_slot_ms = $5 \
                 WHERE name = $1 AND term = $6 AND expires_at_ms <= {now} RETURNING term"
            ),
            rerun: format!(
                "UPDATE {t} SET holder = $2, instance = $3, term = term + 1, \
                 expires_at_ms = {now} + $4, rerun_slot_ms = $5 \
                 WHERE name = $1 AND unfinished_slot_ms = $5 AND slot_ms = $5 \
                 AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> $5) \
                 AND expires_at_ms <= {now} RETURNING term"
            ),
            last: format!(
                "SELECT slot_ms, unfinished_slot_ms, rerun_slot_ms FROM {t} WHERE name = $1"
            ),
            ..SlotStatements::default()
        },
        ..Statements::default()
    }
}

/// `unfinished`'s statement, `names` the condition on the names (one bound parameter).
pub(crate) fn unfinished(t: &str, now: &str, names: &str) -> String {
    format!(
        "SELECT name, unfinished_slot_ms FROM {t} WHERE {names} \
         AND slot_ms = unfinished_slot_ms \
         AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> unfinished_slot_ms) \
         AND expires_at_ms <= {now}"
    )
}

/// The counted-lease statements of `dialect` (PostgreSQL or SQLite) on the lease table `t`
/// that both share: renew, release, verify and list; the claim is each dialect's own.
pub(crate) fn permits(dialect: Dialect, t: &str) -> PermitStatements {
    let now = dialect.expiry_ms();
    let base = PermitStatements::table(dialect, t);
    let p = &base.table;
    PermitStatements {
        renew: format!(
            "UPDATE {p} SET expires_at_ms = {now} + $4 \
             WHERE name = $1 AND permit_no = $2 AND holder = $3 AND expires_at_ms > {now} \
             RETURNING term"
        ),
        release: format!(
            "UPDATE {p} SET expires_at_ms = 0 \
             WHERE name = $1 AND permit_no = $2 AND holder = $3 AND expires_at_ms > {now}"
        ),
        verify: format!(
            "SELECT permit_no, term, expires_at_ms - {now} FROM {p} \
             WHERE name = $1 AND holder = $2 AND permit_no >= 0 AND expires_at_ms > {now} \
             ORDER BY permit_no LIMIT 1"
        ),
        list: format!(
            "SELECT permit_no, instance, term, expires_at_ms - {now} FROM {p} \
             WHERE name = $1 AND permit_no >= 0 ORDER BY permit_no"
        ),
        ..base
    }
}
