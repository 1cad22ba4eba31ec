//! PostgreSQL's statements (written out in the docs of [`PostgresStore`](crate::PostgresStore)).

use crate::wire::returning;
use crate::wire::schema::Dialect;
use crate::wire::{GroupStatements, SlotStatements, Statements};

/// The statements of a PostgreSQL store on the lease table `t`.
pub(crate) fn statements(t: &str) -> Statements {
    let dialect = Dialect::Postgres;
    let now = dialect.expiry_ms();
    let shared = returning::statements(dialect, t);
    Statements {
        // The CTE takes the row's lock first, without waiting: a row locked by a verified
        // transaction (FOR SHARE) fails the claim at once with 55P03, which the store answers
        // as held. The count forces the CTE to run before the insert (a SELECT in WITH runs
        // only as far as it is read).
        claim: format!(
            "WITH busy AS (SELECT 1 FROM {t} WHERE name = $1 FOR UPDATE NOWAIT) \
             INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
             SELECT $1, $2, $3, 1, {now} + $4 FROM (SELECT count(*) FROM busy) AS b \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             instance = excluded.instance, term = l.term + 1, \
             expires_at_ms = excluded.expires_at_ms \
             WHERE l.expires_at_ms <= {now} \
             RETURNING term"
        ),
        verify_locking: format!(
            "SELECT term FROM {t} \
             WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at_ms > {now} FOR SHARE"
        ),
        groups: groups(t),
        slots: SlotStatements {
            read: format!(
                "SELECT n.now, l.term, l.expires_at_ms - n.now, l.slot_ms, \
                 l.unfinished_slot_ms \
                 FROM (SELECT {now} AS now) n LEFT JOIN {t} l ON l.name = $1"
            ),
            // The row is locked and read (its latest version), the flags computed from it,
            // and the update applies them: all one statement.
            finish: format!(
                "WITH o AS (\
                 SELECT name, \
                 holder = $2 AND expires_at_ms > {now} AS held, \
                 COALESCE(slot_ms = $3, false) AS rec, \
                 COALESCE(unfinished_slot_ms = $3, false) AS fin, \
                 COALESCE($4 <= {now} AND $4 > $3, false) AS due \
                 FROM {t} WHERE name = $1 FOR UPDATE), \
                 f AS (SELECT name, held, rec, fin, held AND rec AND due AS took \
                 FROM o), \
                 u AS (UPDATE {t} l SET \
                 slot_ms = CASE WHEN f.took THEN $4 ELSE l.slot_ms END, \
                 unfinished_slot_ms = CASE WHEN f.rec AND f.fin THEN NULL \
                 ELSE l.unfinished_slot_ms END, \
                 expires_at_ms = CASE WHEN f.held THEN 0 ELSE l.expires_at_ms END \
                 FROM f WHERE l.name = f.name AND (f.held OR (f.rec AND f.fin))) \
                 SELECT rec, took, held FROM f"
            ),
            unfinished: returning::unfinished(t, now, "name = ANY($1)"),
            ..shared.slots
        },
        ..shared
    }
}

/// The partition and member statements.
fn groups(table: &str) -> GroupStatements {
    let now = Dialect::Postgres.expiry_ms();
    let (p, m) = crate::wire::group_tables(table);
    // PostgreSQL reads clock_timestamp() anew at every call, so every statement that needs
    // "now" twice (or once per row) reads it once, in a CTE (never inlined: volatile) — or,
    // in the acquire, back from the expiry it just computed.
    GroupStatements {
        acquire: format!(
            "INSERT INTO {p} AS p (group_name, partition_no, owner, epoch, expires_at_ms) \
                 VALUES ($1, $2, $3, 1, {now} + $4) \
                 ON CONFLICT (group_name, partition_no) DO UPDATE SET \
                 owner = excluded.owner, \
                 epoch = CASE WHEN p.owner = excluded.owner \
                 AND p.expires_at_ms > excluded.expires_at_ms - $4 \
                 THEN p.epoch ELSE p.epoch + 1 END, \
                 expires_at_ms = excluded.expires_at_ms \
                 WHERE p.owner = excluded.owner OR p.expires_at_ms <= excluded.expires_at_ms - $4 \
                 RETURNING p.epoch"
        ),
        renew: format!(
            "WITH n AS (SELECT {now} AS now) \
                 UPDATE {p} AS p SET expires_at_ms = n.now + $4 FROM n \
                 WHERE p.group_name = $1 AND p.partition_no = ANY($2) AND p.owner = $3 \
                 AND p.expires_at_ms > n.now \
                 RETURNING p.partition_no, p.epoch"
        ),
        release: format!(
            "WITH n AS (SELECT {now} AS now) \
                 UPDATE {p} AS p SET expires_at_ms = n.now FROM n \
                 WHERE p.group_name = $1 AND p.partition_no = ANY($2) AND p.owner = $3 \
                 AND p.expires_at_ms > n.now"
        ),
        owners: format!(
            "WITH n AS (SELECT {now} AS now) \
                 SELECT p.partition_no, p.owner, p.epoch, p.expires_at_ms - n.now \
                 FROM {p} AS p, n WHERE p.group_name = $1 AND p.expires_at_ms > n.now \
                 ORDER BY p.partition_no"
        ),
        heartbeat: format!(
            "INSERT INTO {m} (service, node, address, group_list, expires_at_ms) \
                 VALUES ($1, $2, $3, $4, {now} + $5) \
                 ON CONFLICT (service, node) DO UPDATE SET address = excluded.address, \
                 group_list = excluded.group_list, expires_at_ms = excluded.expires_at_ms"
        ),
        members: format!(
            "WITH n AS (SELECT {now} AS now) \
                 SELECT m.node, m.address, m.group_list, m.expires_at_ms - n.now \
                 FROM {m} AS m, n WHERE m.service = $1 AND m.expires_at_ms > n.now \
                 ORDER BY m.node COLLATE \"C\""
        ),
        leave: format!(
            "WITH n AS (SELECT {now} AS now) \
                 UPDATE {m} AS m SET expires_at_ms = n.now FROM n \
                 WHERE m.service = $1 AND m.node = $2 AND m.expires_at_ms > n.now"
        ),
        ..GroupStatements::tables(Dialect::Postgres, table)
    }
}
