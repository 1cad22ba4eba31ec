//! SQLite's statements: PostgreSQL's with `?N` parameters and `:now` the boot clock (see
//! [`SqliteStore`](crate::SqliteStore)).

use crate::wire::returning;
use crate::wire::schema::Dialect;
use crate::wire::{GroupStatements, PermitStatements, SlotStatements, Statements};

/// The statements of a SQLite store on the lease table `t`.
pub(crate) fn statements(t: &str) -> Statements {
    let dialect = Dialect::Sqlite;
    let now = dialect.expiry_ms();
    let wall = dialect.now_ms();
    let shared = returning::statements(dialect, t);
    let s = Statements {
        // No row lock first: SQLite has none (verified transactions hold the file's write
        // lock).
        claim: format!(
            "INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
             VALUES ($1, $2, $3, 1, {now} + $4) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             instance = excluded.instance, term = l.term + 1, \
             expires_at_ms = excluded.expires_at_ms \
             WHERE l.expires_at_ms <= {now} \
             RETURNING term"
        ),
        // It runs on the application's connection, where the temporary clock table does not
        // exist: there the boot clock is bound as $4.
        verify_locking: format!(
            "SELECT term FROM {t} \
             WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at_ms > $4"
        ),
        // One statement, in the write transaction (whose clock is read once): the names and
        // holders as two JSON arrays, paired by position. The holders are materialized first,
        // so SQLite pairs them through an automatic index on their position: joined directly,
        // `json_each($2)` was scanned (and $2 parsed) once per name, 21 s for 10,000 names.
        renew_many: format!(
            "WITH h AS MATERIALIZED (SELECT key, value FROM json_each($2)) \
             UPDATE {t} AS l SET expires_at_ms = {now} + $3 \
             FROM (SELECT n.value AS name, h.value AS holder \
             FROM json_each($1) AS n JOIN h ON h.key = n.key) AS i \
             WHERE l.name = i.name AND l.holder = i.holder AND l.expires_at_ms > {now} \
             RETURNING name, term, 0"
        ),
        groups: groups(t),
        permits: permits(t),
        slots: SlotStatements {
            // The instants are wall-clock times: SQLite reads its wall clock for them and its
            // boot clock for the expiry.
            read: format!(
                "SELECT n.wall, l.term, l.expires_at_ms - n.now, l.slot_ms, \
                 l.unfinished_slot_ms \
                 FROM (SELECT {now} AS now, {wall} AS wall) n \
                 LEFT JOIN {t} l ON l.name = $1"
            ),
            // The finish's read; its write is `finish_write`, in one transaction.
            finish: format!(
                "SELECT holder = $2 AND expires_at_ms > {now}, \
                 COALESCE(slot_ms = $3, 0), \
                 COALESCE(unfinished_slot_ms = $3, 0), \
                 COALESCE($4 <= {wall} AND $4 > $3, 0) \
                 FROM {t} WHERE name = $1"
            ),
            finish_write: format!(
                "UPDATE {t} SET \
                 slot_ms = CASE WHEN $2 THEN $3 ELSE slot_ms END, \
                 unfinished_slot_ms = CASE WHEN $4 THEN NULL \
                 ELSE unfinished_slot_ms END, \
                 expires_at_ms = CASE WHEN $5 THEN 0 ELSE expires_at_ms END \
                 WHERE name = $1"
            ),
            unfinished: returning::unfinished(t, now, "name IN (SELECT value FROM json_each($1))"),
            ..shared.slots
        },
        ..shared
    };
    // SQLite numbers its parameters ?1, ?2…
    renumber(s, |q| q.replace('$', "?"))
}

/// `s` with `f` applied to the statements written with PostgreSQL's `$N` (the group statements
/// are written with `?N` already).
fn renumber(s: Statements, f: impl Fn(String) -> String) -> Statements {
    Statements {
        claim: f(s.claim),
        claim_nowait: s.claim_nowait,
        renew: f(s.renew),
        renew_many: f(s.renew_many),
        release: f(s.release),
        force_release: f(s.force_release),
        verify: f(s.verify),
        verify_locking: f(s.verify_locking),
        get: f(s.get),
        names: s.names,
        now: s.now,
        create: s.create,
        hint_channel: s.hint_channel,
        groups: s.groups,
        permits: PermitStatements {
            table: s.permits.table,
            create: s.permits.create,
            claim: f(s.permits.claim),
            lock: f(s.permits.lock),
            read: f(s.permits.read),
            insert: f(s.permits.insert),
            take: f(s.permits.take),
            count: f(s.permits.count),
            renew: f(s.permits.renew),
            release: f(s.permits.release),
            verify: f(s.permits.verify),
            list: f(s.permits.list),
        },
        slots: SlotStatements {
            read: f(s.slots.read),
            insert: f(s.slots.insert),
            update: f(s.slots.update),
            finish: f(s.slots.finish),
            finish_write: f(s.slots.finish_write),
            rerun: f(s.slots.rerun),
            unfinished: f(s.slots.unfinished),
            last: f(s.slots.last),
        },
    }
}

/// The counted-lease statements: PostgreSQL's renew, release, verify and list, and the claim as
/// one `BEGIN IMMEDIATE` transaction (see `permits.rs`) of these statements, written with `$N`
/// (renumbered with the others).
fn permits(t: &str) -> PermitStatements {
    let now = Dialect::Sqlite.expiry_ms();
    let shared = returning::permits(Dialect::Sqlite, t);
    let p = &shared.table;
    PermitStatements {
        lock: format!(
            "INSERT INTO {p} (name, permit_no, holder, instance, term, expires_at_ms) \
             VALUES ($1, -1, '', '', 0, 0) ON CONFLICT (name, permit_no) DO NOTHING"
        ),
        read: format!(
            "SELECT permit_no, holder = $1, term, expires_at_ms - {now} FROM {p} \
             WHERE name = $2 ORDER BY permit_no"
        ),
        insert: format!(
            "INSERT INTO {p} (name, permit_no, holder, instance, term, expires_at_ms) \
             VALUES ($1, $2, $3, $4, $5, {now} + $6)"
        ),
        take: format!(
            "UPDATE {p} SET holder = $1, instance = $2, term = $3, expires_at_ms = {now} + $4 \
             WHERE name = $5 AND permit_no = $6"
        ),
        count: format!("UPDATE {p} SET term = $1 WHERE name = $2 AND permit_no = -1"),
        ..shared
    }
}

/// The partition and member statements.
fn groups(table: &str) -> GroupStatements {
    let now = Dialect::Sqlite.expiry_ms();
    let (p, m) = crate::wire::group_tables(table);
    // SQLite reads the clock once per step of a statement, and a write (RETURNING
    // included) makes all its changes in its first step: every `:now` of a write is the
    // same instant. The partition numbers come as one JSON array of integers.
    GroupStatements {
        acquire: format!(
            "INSERT INTO {p} AS p (group_name, partition_no, owner, epoch, expires_at_ms) \
                 VALUES (?1, ?2, ?3, 1, {now} + ?4) \
                 ON CONFLICT (group_name, partition_no) DO UPDATE SET \
                 owner = excluded.owner, \
                 epoch = CASE WHEN p.owner = excluded.owner AND p.expires_at_ms > {now} \
                 THEN p.epoch ELSE p.epoch + 1 END, \
                 expires_at_ms = excluded.expires_at_ms \
                 WHERE p.owner = excluded.owner OR p.expires_at_ms <= {now} \
                 RETURNING epoch"
        ),
        renew: format!(
            "UPDATE {p} SET expires_at_ms = {now} + ?4 \
                 WHERE group_name = ?1 AND partition_no IN (SELECT value FROM json_each(?2)) \
                 AND owner = ?3 AND expires_at_ms > {now} \
                 RETURNING partition_no, epoch"
        ),
        release: format!(
            "UPDATE {p} SET expires_at_ms = {now} \
                 WHERE group_name = ?1 AND partition_no IN (SELECT value FROM json_each(?2)) \
                 AND owner = ?3 AND expires_at_ms > {now}"
        ),
        owners: format!(
            "SELECT partition_no, owner, epoch, expires_at_ms - {now} FROM {p} \
                 WHERE group_name = ?1 AND expires_at_ms > {now} ORDER BY partition_no"
        ),
        heartbeat: format!(
            "INSERT INTO {m} (service, node, address, group_list, expires_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, {now} + ?5) \
                 ON CONFLICT (service, node) DO UPDATE SET address = excluded.address, \
                 group_list = excluded.group_list, expires_at_ms = excluded.expires_at_ms"
        ),
        members: format!(
            "SELECT node, address, group_list, expires_at_ms - {now} FROM {m} \
                 WHERE service = ?1 AND expires_at_ms > {now} ORDER BY node COLLATE BINARY"
        ),
        leave: format!(
            "UPDATE {m} SET expires_at_ms = {now} \
                 WHERE service = ?1 AND node = ?2 AND expires_at_ms > {now}"
        ),
        ..GroupStatements::tables(Dialect::Sqlite, table)
    }
}
