//! PostgreSQL's statements (written out in the docs of [`PostgresStore`](crate::PostgresStore)).

use crate::wire::returning;
use crate::wire::schema::Dialect;
use crate::wire::{GroupStatements, PermitStatements, SlotStatements, Statements};

/// Where PostgreSQL's statements send their hints: the channel (a plain identifier, see
/// `hints::channel`) and whether a name may be too long for a payload (then every hint is
/// `*`, which wakes every topic).
pub(crate) struct Notify<'a> {
    pub(crate) channel: &'a str,
    pub(crate) long_names: bool,
}

/// The longest name sent in a payload (PostgreSQL takes payloads below 8000 bytes).
pub(crate) const MAX_PAYLOAD_NAME_BYTES: usize = 7000;

impl Notify<'_> {
    /// `pg_notify` of the topic `prefix` (see `crate::hints`) named by the SQL `name`.
    fn call(&self, prefix: &str, name: &str) -> String {
        let payload = if self.long_names {
            "'*'".to_owned()
        } else {
            format!("'{prefix}' || {name}")
        };
        format!("pg_notify('{}', {payload})", self.channel)
    }
}

/// The statements of a PostgreSQL store on the lease table `t`, sending hints through `notify`
/// when it is given.
pub(crate) fn statements(t: &str, notify: Option<&Notify<'_>>) -> Statements {
    let s = plain(t);
    let Some(n) = notify else { return s };
    with_notify(s, t, n)
}

/// `s` with a `pg_notify` in each statement that changes hands, sent only when a row changed
/// (one per statement: PostgreSQL delivers identical notifications of a transaction once).
/// Every statement keeps its answer: the claim's and the acquire's rows, the releases' counts
/// (the rows of the final `SELECT`, one per row changed).
fn with_notify(s: Statements, t: &str, n: &Notify<'_>) -> Statements {
    use crate::hints::{GROUP_PREFIX, LEASE_PREFIX};
    let lease = n.call(LEASE_PREFIX, "$1");
    let claim = match s.claim.split_once(" INSERT INTO ") {
        Some((busy, insert)) => format!(
            "{busy}, c AS (INSERT INTO {insert}), n AS (SELECT {lease} FROM c)              SELECT c.term FROM c, n"
        ),
        None => s.claim.clone(),
    };
    let released = |update: &str| format!("WITH u AS ({update} RETURNING 1) SELECT {lease} FROM u");
    let (p, _) = crate::wire::group_tables(t);
    let group = n.call(GROUP_PREFIX, "$1");
    let g = &s.groups;
    // The acquire hints only when the epoch moved (a new owner, or one whose lease had
    // expired): the owner taking its own live lease again changes nothing. `old` reads the
    // row as the statement's snapshot has it, before the insert.
    let acquire = format!(
        "WITH old AS (SELECT epoch FROM {p} WHERE group_name = $1 AND partition_no = $2),          a AS ({}),          n AS (SELECT {group} FROM a LEFT JOIN old ON true          WHERE old.epoch IS DISTINCT FROM a.epoch)          SELECT a.epoch FROM a, (SELECT count(*) FROM n) AS k",
        g.acquire
    );
    let release_parts = match g.release.split_once(" UPDATE ") {
        Some((with_now, update)) => {
            format!("{with_now}, u AS (UPDATE {update} RETURNING 1) SELECT {group} FROM u")
        }
        None => g.release.clone(),
    };
    let permits = PermitStatements {
        claim: permit_claim(&s.permits.table, &lease),
        release: released(&s.permits.release),
        ..s.permits.clone()
    };
    Statements {
        claim,
        release: released(&s.release),
        force_release: released(&s.force_release),
        hint_channel: n.channel.to_owned(),
        permits,
        groups: GroupStatements {
            acquire,
            release: release_parts,
            ..s.groups.clone()
        },
        ..s
    }
}

/// The statements of a PostgreSQL store on the lease table `t`, without hints.
fn plain(t: &str) -> Statements {
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
        // `s`: the leases live under their holders, as the statement's snapshot reads them;
        // `k`: the same rows locked, passing by a row another transaction has locked (a
        // verified transaction's FOR SHARE, a concurrent renewal) rather than waiting for it;
        // `u`: the locked rows renewed, live checked again on their latest version. The answer
        // is `u`'s rows (renewed, with their terms) followed by `s`'s (live, no term): a name
        // of `s` without a row of `u` was passed by, and the store renews it alone. No two
        // CTEs are joined to each other: the planner estimates a CTE at a handful of rows and
        // joins two of them in a nested loop, which made a batch of 10,000 names compare 10^8
        // pairs (78 s on PostgreSQL 15; see lease-sql/tests/renew_many.rs). `n.now` is read
        // once, when the statement starts: GREATEST keeps a batch that lands after a later
        // renewal of the same lease from moving its expiry back (tests/late_write.rs).
        renew_many: format!(
            "WITH n AS (SELECT {now} AS now), \
             i AS (SELECT a.name, a.holder FROM unnest($1::text[], $2::text[]) AS a(name, holder)), \
             s AS (SELECT l.name FROM n, {t} AS l JOIN i ON l.name = i.name AND l.holder = i.holder \
             WHERE l.expires_at_ms > n.now), \
             k AS (SELECT l.name FROM n, {t} AS l JOIN i ON l.name = i.name AND l.holder = i.holder \
             WHERE l.expires_at_ms > n.now FOR UPDATE OF l SKIP LOCKED), \
             u AS (UPDATE {t} AS l SET expires_at_ms = GREATEST(l.expires_at_ms, n.now + $3) FROM n, k \
             WHERE l.name = k.name AND l.expires_at_ms > n.now RETURNING l.name, l.term) \
             SELECT u.name::text, u.term, 0::int8 FROM u \
             UNION ALL SELECT s.name::text, NULL::int8, 1::int8 FROM s"
        ),
        groups: groups(t),
        permits: PermitStatements {
            claim: permit_claim(&crate::wire::permits_table(t), "1"),
            ..returning::permits(dialect, t)
        },
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
    //
    // That "now" is read when the statement starts, before it waits for the row's lock (a
    // concurrent write of the row, or one whose commit waits for a synchronous standby), so
    // it can be seconds old when the row is written. An owner's acquire or renewal that waited
    // that long may land after a later one of the same owner: its expiry is never moved
    // back (`GREATEST`), else the stale write would end the lease before the deadline the
    // later answer gave its holder, and another owner could take it meanwhile (seen in
    // `lease-soak --cluster postgres`: statements queued behind a synchronous commit during a
    // failover, applied once the standby came back).
    GroupStatements {
        acquire: format!(
            "INSERT INTO {p} AS p (group_name, partition_no, owner, epoch, expires_at_ms) \
                 VALUES ($1, $2, $3, 1, {now} + $4) \
                 ON CONFLICT (group_name, partition_no) DO UPDATE SET \
                 owner = excluded.owner, \
                 epoch = CASE WHEN p.owner = excluded.owner \
                 AND p.expires_at_ms > excluded.expires_at_ms - $4 \
                 THEN p.epoch ELSE p.epoch + 1 END, \
                 expires_at_ms = GREATEST(p.expires_at_ms, excluded.expires_at_ms) \
                 WHERE p.owner = excluded.owner OR p.expires_at_ms <= excluded.expires_at_ms - $4 \
                 RETURNING p.epoch"
        ),
        renew: format!(
            "WITH n AS (SELECT {now} AS now) \
                 UPDATE {p} AS p SET expires_at_ms = GREATEST(p.expires_at_ms, n.now + $4) FROM n \
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

/// The counted claim on the permit table `p`, one statement: `$1` name, `$2` holder, `$3`
/// instance, `$4` TTL in milliseconds, `$5` the permit count; `hint` an expression evaluated
/// once when a permit is granted (its `pg_notify`, or `1`). One row: the permit and term
/// granted (NULL, NULL when none) and whether the statement's snapshot was stale, in which
/// case nothing was written and the claim is sent again (see `PostgresStore`'s docs).
///
/// `s` reads the counter row as the statement's snapshot has it; `k` locks every row of the
/// name (`FOR UPDATE` waits for a concurrent claim, renewal or release of the name and then
/// reads the row's latest version) and `f` compares the two counters: equal, no claim
/// committed since the snapshot, so no permit row is missing from it and the count is exact.
/// The counter is then moved to the new term (its upsert also creates it, and a concurrent
/// first claim loses on its conflict), and the permit row written, only if still free.
fn permit_claim(p: &str, hint: &str) -> String {
    let now = Dialect::Postgres.expiry_ms();
    format!(
        "WITH n AS (SELECT {now} AS now), \
         s AS (SELECT term FROM {p} WHERE name = $1 AND permit_no = -1), \
         k AS (SELECT permit_no, holder, term, expires_at_ms FROM {p} \
         WHERE name = $1 ORDER BY permit_no FOR UPDATE), \
         live AS (SELECT k.permit_no, k.holder FROM k, n \
         WHERE k.permit_no >= 0 AND k.expires_at_ms > n.now), \
         f AS (SELECT (SELECT term FROM k WHERE permit_no = -1) \
         IS NOT DISTINCT FROM (SELECT term FROM s) AS fresh, \
         COALESCE((SELECT max(term) FROM k), 0) + 1 AS term), \
         ok AS (SELECT g.i, f.term FROM f, generate_series(0, $5 - 1) AS g(i) \
         WHERE f.fresh AND (SELECT count(*) FROM live) < $5 \
         AND NOT EXISTS (SELECT 1 FROM live WHERE live.holder = $2) \
         AND g.i NOT IN (SELECT permit_no FROM live) ORDER BY g.i LIMIT 1), \
         c AS (INSERT INTO {p} AS c (name, permit_no, holder, instance, term, expires_at_ms) \
         SELECT $1, -1, '', '', ok.term, 0 FROM ok \
         ON CONFLICT (name, permit_no) DO UPDATE SET term = excluded.term \
         WHERE c.term < excluded.term RETURNING term), \
         w AS (INSERT INTO {p} AS p (name, permit_no, holder, instance, term, expires_at_ms) \
         SELECT $1, ok.i, $2, $3, c.term, n.now + $4 FROM ok, c, n \
         ON CONFLICT (name, permit_no) DO UPDATE SET holder = excluded.holder, \
         instance = excluded.instance, term = excluded.term, \
         expires_at_ms = excluded.expires_at_ms \
         WHERE p.expires_at_ms <= excluded.expires_at_ms - $4 \
         RETURNING permit_no, term), \
         h AS (SELECT {hint} FROM w) \
         SELECT w.permit_no, w.term, \
         NOT f.fresh OR (EXISTS (SELECT 1 FROM ok) AND w.term IS NULL) \
         FROM f LEFT JOIN w ON true, (SELECT count(*) FROM h) AS hk"
    )
}
