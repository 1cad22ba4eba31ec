//! MySQL's and MariaDB's statements (written out in the docs of
//! [`MySqlStore`](crate::MySqlStore)).

use crate::wire::schema::{Dialect, schema_sql};
use crate::wire::{
    BATCH_MARKER, COUNT_MARKER, GROUP_MARKER, GroupStatements, HOLDER_MARKER, INSTANCE_MARKER,
    NAME_MARKER, NAMES_MARKER, OWNER_MARKER, PARTITIONS_MARKER, PermitStatements, SlotStatements,
    Statements, TTL_MARKER, WIDTH_MARKER,
};

/// The statements of a MySQL/MariaDB store on the lease table `t`.
///
/// MySQL has no RETURNING on UPDATE: the term comes back through LAST_INSERT_ID(expr),
/// which the server reports in the OK packet of the same statement — 0 when the
/// expression was not evaluated (no row matched, or the lease was held). Affected-row
/// counts are not used: they depend on the client's found-rows flag.
///
/// ON DUPLICATE KEY UPDATE assigns left to right, each assignment seeing the columns
/// already assigned: expires_at_ms is assigned last, so every condition tests the
/// original expiry. LAST_INSERT_ID(1) in VALUES is evaluated before the duplicate is
/// found; the update then calls LAST_INSERT_ID again (term + 1 when claimed, 0 when
/// held), and the last call is what the OK packet reports.
pub(crate) fn statements(t: &str) -> Statements {
    let dialect = Dialect::MySql;
    let now = dialect.expiry_ms();
    let s = Statements {
        renew_many: renew_many(t, now),
        claim: format!(
            "INSERT INTO {t} (name, holder, instance, term, expires_at_ms) \
                     VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                     ON DUPLICATE KEY UPDATE \
                     holder = IF(expires_at_ms <= {now}, ?, holder), \
                     instance = IF(expires_at_ms <= {now}, ?, instance), \
                     term = IF(expires_at_ms <= {now}, LAST_INSERT_ID(term + 1), term + LAST_INSERT_ID(0)), \
                     expires_at_ms = IF(expires_at_ms <= {now}, {now} + ?, expires_at_ms)"
        ),
        claim_nowait: String::new(),
        renew: format!(
            "UPDATE {t} SET expires_at_ms = GREATEST(expires_at_ms, {now} + ?), \
                     term = LAST_INSERT_ID(term) \
                     WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
        ),
        release: format!(
            "UPDATE {t} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
                     WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
        ),
        force_release: format!(
            "UPDATE {t} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
                     WHERE name = ? AND expires_at_ms > {now}"
        ),
        verify: format!(
            "SELECT term, expires_at_ms - {now} FROM {t} \
                     WHERE name = ? AND holder = ? AND expires_at_ms > {now}"
        ),
        verify_locking: format!(
            "SELECT term FROM {t} \
                     WHERE name = ? AND holder = ? AND term = ? AND expires_at_ms > {now} \
                     LOCK IN SHARE MODE"
        ),
        // utf8mb4_bin columns come back flagged binary: ask for text.
        get: format!(
            "SELECT CAST(instance AS CHAR CHARACTER SET utf8mb4), term, \
                     expires_at_ms - {now} FROM {t} WHERE name = ?"
        ),
        names: crate::wire::names_statement(dialect, t),
        now: format!("SELECT {now}"),
        create: schema_sql(dialect, t),
        hint_channel: String::new(),
        slots: slots(t, now),
        groups: groups(t),
        permits: permits(t),
    };
    // MariaDB's claim: the same statement, under a lock wait timeout of 0.
    Statements {
        claim_nowait: format!("SET STATEMENT innodb_lock_wait_timeout = 0 FOR {}", s.claim),
        ..s
    }
}

/// MariaDB's renewal of many leases (10.6 or later: `JSON_TABLE`, and `SKIP LOCKED` in a
/// derived table), one text-protocol request of four statements, each committed on its own:
///
/// - the batch, a JSON array of `[name, holder]` pairs sent as a hex literal (nothing else is
///   interpolated but integers), into a session variable;
/// - one expiry for the whole batch, the statement's now + TTL;
/// - the `UPDATE`: its derived table `s` reads the batch as a table (`JSON_TABLE`, one row per
///   pair, numbered) and looks up each name by the primary key, locking the rows live under
///   their holders and passing by (`SKIP LOCKED`) a row another transaction holds locked (a
///   verified transaction's share lock, a concurrent renewal); the rows of `s`, locked by this
///   statement, then get `GREATEST(expiry, the batch's expiry)` while still live by the
///   statement's now — never revived, never moved back (ARCHITECTURE.md "A write that waited
///   never moves an expiry back");
/// - the answer: each pair whose name is live under its holder, with its term and whether its
///   expiry now reaches the batch's (renewed by the `UPDATE`, or further by another renewal);
///   one that does not was passed by, and the store renews it alone.
///
/// `STRAIGHT_JOIN` fixes the plan: the batch first, then one primary-key lookup per pair, so the
/// work grows with the batch, never with its square, and the `UPDATE` touches no row outside
/// `s` (a scan of the table would lock rows it does not renew and wait for rows others hold).
/// The `UPDATE` never waits for a lock, so it is never part of a deadlock.
fn renew_many(t: &str, now: &str) -> String {
    let batch = format!(
        "JSON_TABLE(@lease_sql_batch, '$[*]' COLUMNS (item FOR ORDINALITY, \
         name VARBINARY({WIDTH_MARKER}) PATH '$[0]', holder VARBINARY(64) PATH '$[1]')) AS i"
    );
    format!(
        "SET @lease_sql_batch = CONVERT({BATCH_MARKER} USING utf8mb4); \
         SET @lease_sql_renewal_ms = {now} + {TTL_MARKER}; \
         UPDATE (SELECT k.name FROM {batch} STRAIGHT_JOIN {t} AS k \
         ON k.name = i.name AND k.holder = i.holder WHERE k.expires_at_ms > {now} \
         FOR UPDATE SKIP LOCKED) AS s STRAIGHT_JOIN {t} AS l ON l.name = s.name \
         SET l.expires_at_ms = GREATEST(l.expires_at_ms, @lease_sql_renewal_ms) \
         WHERE l.expires_at_ms > {now} AND @lease_sql_renewal_ms > {now}; \
         SELECT CAST(i.item AS SIGNED), l.term, \
         CAST(l.expires_at_ms >= @lease_sql_renewal_ms AS SIGNED) \
         FROM {batch} STRAIGHT_JOIN {t} AS l ON l.name = i.name AND l.holder = i.holder \
         WHERE l.expires_at_ms > {now}; \
         SET @lease_sql_batch = NULL"
    )
}

/// MySQL's slot statements. No RETURNING on UPDATE: the term (or the finish's outcome) comes
/// back through `LAST_INSERT_ID(expr)` in the OK packet, 0 when no row matched; affected-row
/// counts are never read. An UPDATE assigns left to right, each assignment seeing the columns
/// already assigned, so every assignment below reads only columns assigned after it.
fn slots(t: &str, now: &str) -> SlotStatements {
    // The finish's conditions, on the record as it was; each `?` is bound in this order.
    let held = format!("(holder = ? AND expires_at_ms > {now})"); // holder
    let rec = "(slot_ms <=> ?)"; // instant
    let due = format!("COALESCE(? <= {now} AND ? > ?, 0)"); // passed, passed, instant
    let took = format!("({held} AND {rec} AND {due})"); // holder, instant, passed, passed, instant
    SlotStatements {
        read: format!(
            "SELECT n.now, l.term, l.expires_at_ms - n.now, l.slot_ms, l.unfinished_slot_ms \
             FROM (SELECT {now} AS now) n LEFT JOIN {t} l ON l.name = ?"
        ),
        // Never INSERT IGNORE (it turns errors into warnings). A duplicate key (another replica
        // inserted first) leaves the row as it is and reports LAST_INSERT_ID 0: held.
        insert: format!(
            "INSERT INTO {t} \
             (name, holder, instance, term, expires_at_ms, slot_ms, unfinished_slot_ms) \
             VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?, ?, ?) \
             ON DUPLICATE KEY UPDATE term = term + LAST_INSERT_ID(0)"
        ),
        update: format!(
            "UPDATE {t} SET holder = ?, instance = ?, term = LAST_INSERT_ID(term + 1), \
             expires_at_ms = {now} + ?, slot_ms = ?, unfinished_slot_ms = ? \
             WHERE name = ? AND term = ? AND expires_at_ms <= {now}"
        ),
        // LAST_INSERT_ID = 1 + 2·recorded + 4·passed taken + 8·released (0: no row matched),
        // evaluated first, on the record as it was, whether or not the row then changes.
        finish: format!(
            "UPDATE {t} SET \
             term = term + 0 * LAST_INSERT_ID(1 + 2 * {rec} + 4 * {took} + 8 * {held}), \
             unfinished_slot_ms = IF({rec} AND unfinished_slot_ms <=> ?, NULL, unfinished_slot_ms), \
             slot_ms = IF({took}, ?, slot_ms), \
             expires_at_ms = IF({held}, 0, expires_at_ms) \
             WHERE name = ? AND ({rec} OR {held})"
        ),
        finish_write: String::new(),
        rerun: format!(
            "UPDATE {t} SET holder = ?, instance = ?, term = LAST_INSERT_ID(term + 1), \
             expires_at_ms = {now} + ?, rerun_slot_ms = ? \
             WHERE name = ? AND unfinished_slot_ms = ? AND slot_ms = ? \
             AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> ?) AND expires_at_ms <= {now}"
        ),
        unfinished: format!(
            "SELECT name, unfinished_slot_ms FROM {t} WHERE name IN ({NAMES_MARKER}) \
             AND slot_ms = unfinished_slot_ms \
             AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> unfinished_slot_ms) \
             AND expires_at_ms <= {now}"
        ),
        last: format!("SELECT slot_ms, unfinished_slot_ms, rerun_slot_ms FROM {t} WHERE name = ?"),
    }
}

/// The counted-lease statements. The claim is one transaction in one text-protocol request
/// (one round trip; values are hex literals and integers only): it creates the counter row when
/// missing and locks it either way (`ON DUPLICATE KEY UPDATE` takes the row's exclusive lock, so
/// the claims of a name queue there), reads every row of the name with a locking read (the
/// latest committed versions) into user variables — the next term, the live count, whether the
/// claimant holds one, the lowest free permit — and writes the permit and the counter only when
/// the claim is granted, then commits and reads the variables back. No client round trip falls
/// inside the transaction, so a claimant that stalls or loses its network holds no lock. Renew
/// and release report the term through `LAST_INSERT_ID`, as the lease statements do.
fn permits(t: &str) -> PermitStatements {
    let now = Dialect::MySql.expiry_ms();
    let base = PermitStatements::table(Dialect::MySql, t);
    let p = &base.table;
    let (name, holder, n) = (NAME_MARKER, HOLDER_MARKER, COUNT_MARKER);
    let instance = format!("CONVERT({INSTANCE_MARKER} USING utf8mb4)");
    let live = format!("permit_no >= 0 AND expires_at_ms > {now}");
    PermitStatements {
        claim: format!(
            "START TRANSACTION; \
             INSERT INTO {p} (name, permit_no, holder, instance, term, expires_at_ms) \
             VALUES ({name}, -1, '', '', 0, 0) ON DUPLICATE KEY UPDATE term = term; \
             SELECT MAX(term) + 1, SUM({live}), SUM({live} AND holder = {holder}), \
             MAX(permit_no), \
             MIN(IF(permit_no >= 0 AND permit_no < {n} AND expires_at_ms <= {now}, \
             permit_no, NULL)) \
             INTO @lease_sql_term, @lease_sql_live, @lease_sql_mine, @lease_sql_max, \
             @lease_sql_free \
             FROM {p} WHERE name = {name} FOR UPDATE; \
             SET @lease_sql_pick = LEAST(COALESCE(@lease_sql_free, @lease_sql_max + 1), \
             @lease_sql_max + 1); \
             SET @lease_sql_ok = @lease_sql_live < {n} AND @lease_sql_mine = 0 \
             AND @lease_sql_pick < {n}; \
             UPDATE {p} SET holder = {holder}, instance = {instance}, term = @lease_sql_term, \
             expires_at_ms = {now} + {TTL_MARKER} \
             WHERE @lease_sql_ok AND name = {name} AND permit_no = @lease_sql_pick \
             AND expires_at_ms <= {now}; \
             INSERT INTO {p} (name, permit_no, holder, instance, term, expires_at_ms) \
             SELECT {name}, @lease_sql_pick, {holder}, {instance}, @lease_sql_term, \
             {now} + {TTL_MARKER} FROM DUAL \
             WHERE @lease_sql_ok AND @lease_sql_pick > @lease_sql_max; \
             UPDATE {p} SET term = @lease_sql_term \
             WHERE @lease_sql_ok AND name = {name} AND permit_no = -1; \
             COMMIT; \
             SELECT IF(@lease_sql_ok, @lease_sql_pick, NULL), \
             IF(@lease_sql_ok, @lease_sql_term, NULL)"
        ),
        renew: format!(
            "UPDATE {p} SET expires_at_ms = GREATEST(expires_at_ms, {now} + ?), \
             term = LAST_INSERT_ID(term) \
             WHERE name = ? AND permit_no = ? AND holder = ? AND expires_at_ms > {now}"
        ),
        release: format!(
            "UPDATE {p} SET expires_at_ms = 0, term = LAST_INSERT_ID(term) \
             WHERE name = ? AND permit_no = ? AND holder = ? AND expires_at_ms > {now}"
        ),
        verify: format!(
            "SELECT permit_no, term, expires_at_ms - {now} FROM {p} \
             WHERE name = ? AND holder = ? AND permit_no >= 0 AND expires_at_ms > {now} \
             ORDER BY permit_no LIMIT 1"
        ),
        // utf8mb4_bin columns come back flagged binary: ask for text.
        list: format!(
            "SELECT permit_no, CAST(instance AS CHAR CHARACTER SET utf8mb4), term, \
             expires_at_ms - {now} FROM {p} WHERE name = ? AND permit_no >= 0 \
             ORDER BY permit_no"
        ),
        ..base
    }
}

/// The partition and member statements.
fn groups(table: &str) -> GroupStatements {
    let now = Dialect::MySql.expiry_ms();
    let (p, m) = crate::wire::group_tables(table);
    // MySQL: `:now` is fixed at the statement's start, before any wait for the row's lock
    // (or for a semi-synchronous acknowledgement of a write ahead of it): an acquire or
    // renewal of an owner that waited may land after a later one of the same owner, so
    // neither moves an expiry back (`GREATEST`; see the PostgreSQL statements). ON DUPLICATE KEY UPDATE assigns left
    // to right, each assignment seeing the columns already assigned: the epoch is computed
    // first (from the old owner and expiry), expires_at_ms assigned last, and its condition
    // holds whether it reads the old owner or the new one. LAST_INSERT_ID is the epoch when
    // the lease is acquired or kept, 0 when another owner holds it.
    GroupStatements {
        acquire: format!(
            "INSERT INTO {p} (group_name, partition_no, owner, epoch, expires_at_ms) \
                 VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                 ON DUPLICATE KEY UPDATE \
                 epoch = IF(expires_at_ms <= {now}, LAST_INSERT_ID(epoch + 1), \
                 IF(owner = ?, LAST_INSERT_ID(epoch), epoch + LAST_INSERT_ID(0))), \
                 owner = IF(expires_at_ms <= {now}, ?, owner), \
                 expires_at_ms = IF(expires_at_ms <= {now} OR owner = ?, \
                 GREATEST(expires_at_ms, {now} + ?), expires_at_ms)"
        ),
        // Text protocol, one round trip for all three statements: the SET fixes one expiry
        // for the batch, the UPDATE extends the live leases of the owner (never to an
        // expiry already past, never below the expiry a later renewal gave it), the SELECT
        // reads back exactly those it extended (or found extended further).
        renew: format!(
            "SET @lease_sql_renewal_ms = {now} + {TTL_MARKER}; \
                 UPDATE {p} SET expires_at_ms = GREATEST(expires_at_ms, @lease_sql_renewal_ms) \
                 WHERE group_name = {GROUP_MARKER} AND partition_no IN ({PARTITIONS_MARKER}) \
                 AND owner = {OWNER_MARKER} AND expires_at_ms > {now} \
                 AND @lease_sql_renewal_ms > {now}; \
                 SELECT partition_no, epoch, expires_at_ms - {now} FROM {p} \
                 WHERE group_name = {GROUP_MARKER} AND partition_no IN ({PARTITIONS_MARKER}) \
                 AND owner = {OWNER_MARKER} AND expires_at_ms >= @lease_sql_renewal_ms \
                 AND expires_at_ms > {now}"
        ),
        release: format!(
            "UPDATE {p} SET expires_at_ms = {now} \
                 WHERE group_name = {GROUP_MARKER} AND partition_no IN ({PARTITIONS_MARKER}) \
                 AND owner = {OWNER_MARKER} AND expires_at_ms > {now}"
        ),
        owners: format!(
            "SELECT partition_no, owner, epoch, expires_at_ms - {now} FROM {p} \
                 WHERE group_name = ? AND expires_at_ms > {now} ORDER BY partition_no"
        ),
        heartbeat: format!(
            "INSERT INTO {m} (service, node, address, group_list, expires_at_ms) \
                 VALUES (?, ?, ?, ?, {now} + ?) \
                 ON DUPLICATE KEY UPDATE address = ?, group_list = ?, expires_at_ms = {now} + ?"
        ),
        members: format!(
            "SELECT node, address, group_list, expires_at_ms - {now} FROM {m} \
                 WHERE service = ? AND expires_at_ms > {now} ORDER BY node"
        ),
        leave: format!(
            "UPDATE {m} SET expires_at_ms = {now} \
                 WHERE service = ? AND node = ? AND expires_at_ms > {now}"
        ),
        ..GroupStatements::tables(Dialect::MySql, table)
    }
}
