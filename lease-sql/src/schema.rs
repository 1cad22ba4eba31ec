//! The lease table and the statements run on it, per dialect.
//!
//! One row per name, updated in place. `:now` is always the database server's clock, in
//! milliseconds since the Unix epoch; every value is a bound parameter.

/// A SQL dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    /// The server's clock in milliseconds, as a SQL expression.
    ///
    /// - PostgreSQL: `clock_timestamp()`, which moves during a transaction (unlike `now()`), so a
    ///   verify late in a long transaction still sees the real time.
    /// - MySQL / MariaDB: `UNIX_TIMESTAMP()` plus the milliseconds of `NOW(3)`; both read the
    ///   statement's start instant, and neither goes through the session time zone (which is
    ///   ambiguous at daylight-saving changes).
    /// - SQLite: `unixepoch('subsec')` (SQLite 3.42+), the wall clock of the process running
    ///   the statement. The SQLite store does **not** judge expiries by it: it uses the host's
    ///   boot clock, which no SQL expression reads (the store hands it to each statement; see
    ///   [`SqliteStore`](crate::SqliteStore)). Here it serves the scheduler's instants.
    pub fn now_ms(self) -> &'static str {
        match self {
            Dialect::Postgres => "FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            Dialect::MySql => {
                "(CAST(UNIX_TIMESTAMP() AS SIGNED) * 1000 + MICROSECOND(NOW(3)) DIV 1000)"
            }
            Dialect::Sqlite => "CAST(unixepoch('subsec') * 1000 AS INTEGER)",
        }
    }

    /// The clock expiries are measured on, as a SQL expression: [`Dialect::now_ms`] on
    /// PostgreSQL and MySQL; on SQLite the host's boot clock in milliseconds since boot, which
    /// the store sets right before each operation in a one-row temporary table of its lease
    /// connection (see `boot_clock.rs` and `conns.rs`).
    pub(crate) fn expiry_ms(self) -> &'static str {
        match self {
            Dialect::Sqlite => "(SELECT boot_ms FROM temp.lease_sql_clock)",
            _ => self.now_ms(),
        }
    }

    /// A short name, for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }
}

/// The `CREATE TABLE IF NOT EXISTS` statement for the lease table `table` in `dialect`.
///
/// Columns: `name` (compared byte for byte, 255 bytes), `holder` (the holder token, 32 hex
/// digits), `instance`, `term` (the fencing token), `expires_at_ms` (the server's clock; 0 once
/// released), and the scheduler's slot columns `slot_ms`, `unfinished_slot_ms`,
/// `rerun_slot_ms` (NULL until used).
///
/// ```
/// use lease_sql::{Dialect, schema_sql};
/// let sql = schema_sql(Dialect::MySql, "leases");
/// assert!(sql.contains("VARBINARY(255)"));
/// ```
pub fn schema_sql(dialect: Dialect, table: &str) -> String {
    let (name, text, instance, big, tail) = match dialect {
        // COLLATE "C": byte order, and equality is byte equality.
        Dialect::Postgres => ("VARCHAR(255) COLLATE \"C\"", "TEXT", "TEXT", "BIGINT", ""),
        // VARBINARY: exact bytes, no case folding, no PAD SPACE ("job" ≠ "job ").
        Dialect::MySql => (
            "VARBINARY(255)",
            "CHAR(32) CHARACTER SET ascii COLLATE ascii_bin",
            "VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "BIGINT",
            " ENGINE=InnoDB",
        ),
        // TEXT with the default BINARY collation compares with memcmp.
        Dialect::Sqlite => ("TEXT", "TEXT", "TEXT", "INTEGER", ""),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         name               {name} NOT NULL PRIMARY KEY,\n    \
         holder             {text} NOT NULL,\n    \
         instance           {instance} NOT NULL,\n    \
         term               {big} NOT NULL,\n    \
         expires_at_ms      {big} NOT NULL,\n    \
         slot_ms            {big} NULL,\n    \
         unfinished_slot_ms {big} NULL,\n    \
         rerun_slot_ms      {big} NULL\n)\
         {tail}"
    )
}

/// The `CREATE TABLE IF NOT EXISTS` statement for the partition table `table` (by default the
/// lease table's name then `_partitions`, see
/// [`SqlConfig::partitions_table_name`](crate::SqlConfig::partitions_table_name)) in `dialect`.
///
/// One row per `(group_name, partition_no)`: `owner` (one process incarnation, at most 128
/// bytes), `epoch` (the fencing token: 1 first, kept while the owner holds the lease live, +1
/// otherwise) and `expires_at_ms` (the server's clock; the release instant once released).
/// `group_name` and `owner` compare byte for byte.
///
/// ```
/// use lease_sql::{Dialect, partitions_schema_sql};
/// let sql = partitions_schema_sql(Dialect::MySql, "leases_partitions");
/// assert!(sql.contains("PRIMARY KEY (group_name, partition_no)"));
/// ```
pub fn partitions_schema_sql(dialect: Dialect, table: &str) -> String {
    let (group, partition, owner, big, tail) = match dialect {
        Dialect::Postgres => (
            "VARCHAR(255) COLLATE \"C\"",
            "BIGINT",
            "TEXT COLLATE \"C\"",
            "BIGINT",
            "",
        ),
        Dialect::MySql => (
            "VARBINARY(255)",
            "INT UNSIGNED",
            "VARBINARY(128)",
            "BIGINT",
            " ENGINE=InnoDB",
        ),
        Dialect::Sqlite => ("TEXT", "INTEGER", "TEXT", "INTEGER", ""),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         group_name    {group} NOT NULL,\n    \
         partition_no  {partition} NOT NULL,\n    \
         owner         {owner} NOT NULL,\n    \
         epoch         {big} NOT NULL,\n    \
         expires_at_ms {big} NOT NULL,\n    \
         PRIMARY KEY (group_name, partition_no)\n)\
         {tail}"
    )
}

/// The `CREATE TABLE IF NOT EXISTS` statement for the member table `table` (by default the
/// lease table's name then `_members`, see
/// [`SqlConfig::members_table_name`](crate::SqlConfig::members_table_name)) in `dialect`.
///
/// One row per `(service, node)`: `address` (free-form, at most 255 bytes), `group_list` (the
/// groups the node serves, one per line, see [`lease_core::backend::encode_groups`]) and
/// `expires_at_ms` (the server's clock; the leaving instant once left). `service` and `node`
/// compare and sort byte for byte.
///
/// ```
/// use lease_sql::{Dialect, members_schema_sql};
/// let sql = members_schema_sql(Dialect::Postgres, "leases_members");
/// assert!(sql.contains("PRIMARY KEY (service, node)"));
/// ```
pub fn members_schema_sql(dialect: Dialect, table: &str) -> String {
    let (service, node, address, groups, big, tail) = match dialect {
        Dialect::Postgres => (
            "VARCHAR(255) COLLATE \"C\"",
            "TEXT COLLATE \"C\"",
            "TEXT",
            "TEXT",
            "BIGINT",
            "",
        ),
        Dialect::MySql => (
            "VARBINARY(255)",
            "VARBINARY(128)",
            "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "BIGINT",
            " ENGINE=InnoDB",
        ),
        Dialect::Sqlite => ("TEXT", "TEXT", "TEXT", "TEXT", "INTEGER", ""),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         service       {service} NOT NULL,\n    \
         node          {node} NOT NULL,\n    \
         address       {address} NOT NULL,\n    \
         group_list    {groups} NOT NULL,\n    \
         expires_at_ms {big} NOT NULL,\n    \
         PRIMARY KEY (service, node)\n)\
         {tail}"
    )
}

/// SQLite's boot-clock DDL for the lease table `table` (by default `leases`): its statements,
/// in order (see [`sqlite_boot_clock_sql`]).
pub(crate) fn sqlite_boot_clock_statements(table: &str) -> Vec<String> {
    let (schema, bare) = match table.split_once('.') {
        Some((s, n)) => (format!("{s}."), n),
        None => (String::new(), table),
    };
    let floor = crate::config::WALL_CLOCK_FLOOR_MS;
    let mut out = vec![format!(
        "CREATE TABLE IF NOT EXISTS {table}{CLOCK_SUFFIX} (\n    \
         id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),\n    \
         boot_id TEXT NOT NULL\n)"
    )];
    for suffix in [
        "",
        crate::config::PARTITIONS_SUFFIX,
        crate::config::MEMBERS_SUFFIX,
    ] {
        let t = format!("{bare}{suffix}");
        for (event, what) in [("INSERT", "insert"), ("UPDATE OF expires_at_ms", "update")] {
            out.push(format!(
                "CREATE TRIGGER IF NOT EXISTS {schema}{t}_boot_clock_{what}\n\
                 BEFORE {event} ON {t} WHEN NEW.expires_at_ms >= {floor}\n\
                 BEGIN SELECT RAISE(ABORT, 'lease-sql: {t} keeps its expiries on the boot \
                 clock; a process of an older lease-sql (wall-clock expiries) still writes it: \
                 stop or upgrade it'); END"
            ));
        }
    }
    out
}

/// In SQLite, the suffix of the table that records which boot the expiries were measured in.
pub(crate) const CLOCK_SUFFIX: &str = "_clock";

/// SQLite only: the DDL that puts the lease, partition and member tables of `table` on the
/// host's boot clock (migration `0003`).
///
/// The table `<table>_clock` holds one row, the kernel's boot id under which the expiries were
/// measured; no row means a file of a lease-sql from before, whose expiries are wall-clock
/// milliseconds (the store converts them at start-up). The triggers refuse a wall-clock expiry
/// (milliseconds since the Unix epoch, from September 2001 on), so a process of an older
/// lease-sql still running on the file fails its writes rather than take a live lease.
///
/// ```
/// let sql = lease_sql::sqlite_boot_clock_sql("leases");
/// assert!(sql.contains("CREATE TABLE IF NOT EXISTS leases_clock"));
/// ```
pub fn sqlite_boot_clock_sql(table: &str) -> String {
    sqlite_boot_clock_statements(table).join(";\n\n")
}

/// The statements of one store, with the table name and clock expression filled in.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) claim: String,
    /// MariaDB's claim: the same under `SET STATEMENT innodb_lock_wait_timeout = 0 FOR`, so a
    /// row locked by a verified transaction fails it at once (1205) rather than after a wait.
    /// Empty elsewhere.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) claim_nowait: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) force_release: String,
    pub(crate) verify: String,
    pub(crate) verify_locking: String,
    pub(crate) get: String,
    pub(crate) now: String,
    pub(crate) create: String,
    pub(crate) slots: SlotStatements,
    pub(crate) groups: GroupStatements,
}

/// The scheduler slot statements of one store (see `slots.rs`). PostgreSQL and SQLite share
/// every statement but `finish` (and SQLite binds the names of `unfinished` as one JSON array).
#[derive(Debug, Clone)]
pub(crate) struct SlotStatements {
    /// The claim's read: the server's clock, then the record (all NULL when there is none).
    pub(crate) read: String,
    /// The claim's write for a new record: nothing (held) when another replica inserted first.
    pub(crate) insert: String,
    /// The claim's write for an existing record, with the term read compared.
    pub(crate) update: String,
    /// The finish: one statement on PostgreSQL and MySQL; SQLite's read inside its transaction.
    pub(crate) finish: String,
    /// SQLite's write inside the finish's transaction (empty elsewhere).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) finish_write: String,
    pub(crate) rerun: String,
    /// On MySQL, `name IN (/*names*/)`: one `?` per name is filled in per call.
    pub(crate) unfinished: String,
    pub(crate) last: String,
}

/// The partition and membership statements of one store (see `groups.rs`), on the partition
/// and member tables.
#[derive(Debug, Clone)]
pub(crate) struct GroupStatements {
    pub(crate) partitions_table: String,
    pub(crate) members_table: String,
    pub(crate) create_partitions: String,
    pub(crate) create_members: String,
    pub(crate) acquire: String,
    /// On MySQL a text-protocol template: see [`GROUP_MARKER`] and the others.
    pub(crate) renew: String,
    /// On MySQL a text-protocol template, as `renew`.
    pub(crate) release: String,
    pub(crate) owners: String,
    pub(crate) heartbeat: String,
    pub(crate) members: String,
    pub(crate) leave: String,
}

/// In MySQL's renew and release templates: the group, as a hex literal.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const GROUP_MARKER: &str = "/*group*/";
/// In MySQL's renew and release templates: the owner, as a hex literal.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const OWNER_MARKER: &str = "/*owner*/";
/// In MySQL's renew and release templates: the partition numbers, as decimal integers.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const PARTITIONS_MARKER: &str = "/*partitions*/";
/// In MySQL's renew template: the TTL in milliseconds, as a decimal integer.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const TTL_MARKER: &str = "/*ttl*/";

fn group_statements(dialect: Dialect, table: &str) -> GroupStatements {
    let now = dialect.expiry_ms();
    let p = format!("{table}{}", crate::config::PARTITIONS_SUFFIX);
    let m = format!("{table}{}", crate::config::MEMBERS_SUFFIX);
    let (create_partitions, create_members) = (
        partitions_schema_sql(dialect, &p),
        members_schema_sql(dialect, &m),
    );
    let s = match dialect {
        // PostgreSQL reads clock_timestamp() anew at every call, so every statement that needs
        // "now" twice (or once per row) reads it once, in a CTE (never inlined: volatile) — or,
        // in the acquire, back from the expiry it just computed.
        Dialect::Postgres => GroupStatements {
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
            partitions_table: String::new(),
            members_table: String::new(),
            create_partitions: String::new(),
            create_members: String::new(),
        },
        // SQLite reads the clock once per step of a statement, and a write (RETURNING
        // included) makes all its changes in its first step: every `:now` of a write is the
        // same instant. The partition numbers come as one JSON array of integers.
        Dialect::Sqlite => GroupStatements {
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
            partitions_table: String::new(),
            members_table: String::new(),
            create_partitions: String::new(),
            create_members: String::new(),
        },
        // MySQL: `:now` is fixed at the statement's start. ON DUPLICATE KEY UPDATE assigns left
        // to right, each assignment seeing the columns already assigned: the epoch is computed
        // first (from the old owner and expiry), expires_at_ms assigned last, and its condition
        // holds whether it reads the old owner or the new one. LAST_INSERT_ID is the epoch when
        // the lease is acquired or kept, 0 when another owner holds it.
        Dialect::MySql => GroupStatements {
            acquire: format!(
                "INSERT INTO {p} (group_name, partition_no, owner, epoch, expires_at_ms) \
                 VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                 ON DUPLICATE KEY UPDATE \
                 epoch = IF(expires_at_ms <= {now}, LAST_INSERT_ID(epoch + 1), \
                 IF(owner = ?, LAST_INSERT_ID(epoch), epoch + LAST_INSERT_ID(0))), \
                 owner = IF(expires_at_ms <= {now}, ?, owner), \
                 expires_at_ms = IF(expires_at_ms <= {now} OR owner = ?, {now} + ?, expires_at_ms)"
            ),
            // Text protocol, one round trip for all three statements: the SET fixes one expiry
            // for the batch, the UPDATE extends the live leases of the owner (never to an
            // expiry already past), the SELECT reads back exactly those it extended.
            renew: format!(
                "SET @lease_sql_renewal_ms = {now} + {TTL_MARKER}; \
                 UPDATE {p} SET expires_at_ms = @lease_sql_renewal_ms \
                 WHERE group_name = {GROUP_MARKER} AND partition_no IN ({PARTITIONS_MARKER}) \
                 AND owner = {OWNER_MARKER} AND expires_at_ms > {now} \
                 AND @lease_sql_renewal_ms > {now}; \
                 SELECT partition_no, epoch, expires_at_ms - {now} FROM {p} \
                 WHERE group_name = {GROUP_MARKER} AND partition_no IN ({PARTITIONS_MARKER}) \
                 AND owner = {OWNER_MARKER} AND expires_at_ms = @lease_sql_renewal_ms \
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
            partitions_table: String::new(),
            members_table: String::new(),
            create_partitions: String::new(),
            create_members: String::new(),
        },
    };
    GroupStatements {
        partitions_table: p,
        members_table: m,
        create_partitions,
        create_members,
        ..s
    }
}

/// The marker in MySQL's `unfinished` statement replaced with one `?` per name.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const NAMES_MARKER: &str = "/*names*/";

impl Statements {
    pub(crate) fn new(dialect: Dialect, table: &str) -> Statements {
        let now = dialect.expiry_ms();
        let wall = dialect.now_ms();
        let t = table;
        let s = match dialect {
            Dialect::Postgres | Dialect::Sqlite => Statements {
                claim: if dialect == Dialect::Postgres {
                    // The CTE takes the row's lock first, without waiting: a row locked by a
                    // verified transaction (FOR SHARE) fails the claim at once with 55P03,
                    // which the store answers as held. The count forces the CTE to run before
                    // the insert (a SELECT in WITH runs only as far as it is read).
                    format!(
                        "WITH busy AS (SELECT 1 FROM {t} WHERE name = $1 FOR UPDATE NOWAIT) \
                         INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
                         SELECT $1, $2, $3, 1, {now} + $4 FROM (SELECT count(*) FROM busy) AS b \
                         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                         instance = excluded.instance, term = l.term + 1, \
                         expires_at_ms = excluded.expires_at_ms \
                         WHERE l.expires_at_ms <= {now} \
                         RETURNING term"
                    )
                } else {
                    format!(
                        "INSERT INTO {t} AS l (name, holder, instance, term, expires_at_ms) \
                         VALUES ($1, $2, $3, 1, {now} + $4) \
                         ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                         instance = excluded.instance, term = l.term + 1, \
                         expires_at_ms = excluded.expires_at_ms \
                         WHERE l.expires_at_ms <= {now} \
                         RETURNING term"
                    )
                },
                claim_nowait: String::new(),
                renew: format!(
                    "UPDATE {t} SET expires_at_ms = {now} + $3 \
                     WHERE name = $1 AND holder = $2 AND expires_at_ms > {now} RETURNING term"
                ),
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
                // It runs on the application's connection, where SQLite's temporary clock
                // table does not exist: there the boot clock is bound as $4.
                verify_locking: format!(
                    "SELECT term FROM {t} \
                     WHERE name = $1 AND holder = $2 AND term = $3 AND expires_at_ms > {}",
                    if dialect == Dialect::Postgres {
                        format!("{now} FOR SHARE")
                    } else {
                        "$4".to_owned()
                    }
                ),
                get: format!(
                    "SELECT instance, term, expires_at_ms - {now} FROM {t} WHERE name = $1"
                ),
                // SQLite's start-up check of its clock function (the boot clock is the
                // store's own).
                now: format!("SELECT {wall}"),
                create: schema_sql(dialect, t),
                groups: group_statements(dialect, t),
                slots: SlotStatements {
                    // The instants are wall-clock times: SQLite reads its wall clock for them
                    // and its boot clock for the expiry.
                    read: if dialect == Dialect::Postgres {
                        format!(
                            "SELECT n.now, l.term, l.expires_at_ms - n.now, l.slot_ms, \
                             l.unfinished_slot_ms \
                             FROM (SELECT {now} AS now) n LEFT JOIN {t} l ON l.name = $1"
                        )
                    } else {
                        format!(
                            "SELECT n.wall, l.term, l.expires_at_ms - n.now, l.slot_ms, \
                             l.unfinished_slot_ms \
                             FROM (SELECT {now} AS now, {wall} AS wall) n \
                             LEFT JOIN {t} l ON l.name = $1"
                        )
                    },
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
                    finish: if dialect == Dialect::Postgres {
                        // The row is locked and read (its latest version), the flags computed
                        // from it, and the update applies them: all one statement.
                        format!(
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
                        )
                    } else {
                        format!(
                            "SELECT holder = $2 AND expires_at_ms > {now}, \
                             COALESCE(slot_ms = $3, 0), \
                             COALESCE(unfinished_slot_ms = $3, 0), \
                             COALESCE($4 <= {wall} AND $4 > $3, 0) \
                             FROM {t} WHERE name = $1"
                        )
                    },
                    finish_write: if dialect == Dialect::Sqlite {
                        format!(
                            "UPDATE {t} SET \
                             slot_ms = CASE WHEN $2 THEN $3 ELSE slot_ms END, \
                             unfinished_slot_ms = CASE WHEN $4 THEN NULL \
                             ELSE unfinished_slot_ms END, \
                             expires_at_ms = CASE WHEN $5 THEN 0 ELSE expires_at_ms END \
                             WHERE name = $1"
                        )
                    } else {
                        String::new()
                    },
                    rerun: format!(
                        "UPDATE {t} SET holder = $2, instance = $3, term = term + 1, \
                         expires_at_ms = {now} + $4, rerun_slot_ms = $5 \
                         WHERE name = $1 AND unfinished_slot_ms = $5 AND slot_ms = $5 \
                         AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> $5) \
                         AND expires_at_ms <= {now} RETURNING term"
                    ),
                    unfinished: format!(
                        "SELECT name, unfinished_slot_ms FROM {t} WHERE {} \
                         AND slot_ms = unfinished_slot_ms \
                         AND (rerun_slot_ms IS NULL OR rerun_slot_ms <> unfinished_slot_ms) \
                         AND expires_at_ms <= {now}",
                        if dialect == Dialect::Postgres {
                            "name = ANY($1)"
                        } else {
                            "name IN (SELECT value FROM json_each($1))"
                        }
                    ),
                    last: format!(
                        "SELECT slot_ms, unfinished_slot_ms, rerun_slot_ms FROM {t} WHERE name = $1"
                    ),
                },
            },
            // MySQL has no RETURNING on UPDATE: the term comes back through LAST_INSERT_ID(expr),
            // which the server reports in the OK packet of the same statement — 0 when the
            // expression was not evaluated (no row matched, or the lease was held). Affected-row
            // counts are not used: they depend on the client's found-rows flag.
            //
            // ON DUPLICATE KEY UPDATE assigns left to right, each assignment seeing the columns
            // already assigned: expires_at_ms is assigned last, so every condition tests the
            // original expiry. LAST_INSERT_ID(1) in VALUES is evaluated before the duplicate is
            // found; the update then calls LAST_INSERT_ID again (term + 1 when claimed, 0 when
            // held), and the last call is what the OK packet reports.
            Dialect::MySql => Statements {
                claim: format!(
                    "INSERT INTO {t} (name, holder, instance, term, expires_at_ms) \
                     VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                     ON DUPLICATE KEY UPDATE \
                     holder = IF(expires_at_ms <= {now}, ?, holder), \
                     instance = IF(expires_at_ms <= {now}, ?, instance), \
                     term = IF(expires_at_ms <= {now}, LAST_INSERT_ID(term + 1), term + LAST_INSERT_ID(0)), \
                     expires_at_ms = IF(expires_at_ms <= {now}, {now} + ?, expires_at_ms)"
                ),
                claim_nowait: format!(
                    "SET STATEMENT innodb_lock_wait_timeout = 0 FOR \
                     INSERT INTO {t} (name, holder, instance, term, expires_at_ms) \
                     VALUES (?, ?, ?, LAST_INSERT_ID(1), {now} + ?) \
                     ON DUPLICATE KEY UPDATE \
                     holder = IF(expires_at_ms <= {now}, ?, holder), \
                     instance = IF(expires_at_ms <= {now}, ?, instance), \
                     term = IF(expires_at_ms <= {now}, LAST_INSERT_ID(term + 1), term + LAST_INSERT_ID(0)), \
                     expires_at_ms = IF(expires_at_ms <= {now}, {now} + ?, expires_at_ms)"
                ),
                renew: format!(
                    "UPDATE {t} SET expires_at_ms = {now} + ?, term = LAST_INSERT_ID(term) \
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
                now: format!("SELECT {now}"),
                create: schema_sql(dialect, t),
                slots: mysql_slots(t, now),
                groups: group_statements(dialect, t),
            },
        };
        if dialect == Dialect::Sqlite {
            // SQLite numbers its parameters ?1, ?2…
            return s.map(|q| q.replace('$', "?"));
        }
        s
    }

    fn map(self, f: impl Fn(String) -> String) -> Statements {
        Statements {
            claim: f(self.claim),
            claim_nowait: self.claim_nowait,
            renew: f(self.renew),
            release: f(self.release),
            force_release: f(self.force_release),
            verify: f(self.verify),
            verify_locking: f(self.verify_locking),
            get: f(self.get),
            now: self.now,
            create: self.create,
            // Written with SQLite's ?N already.
            groups: self.groups,
            slots: SlotStatements {
                read: f(self.slots.read),
                insert: f(self.slots.insert),
                update: f(self.slots.update),
                finish: f(self.slots.finish),
                finish_write: f(self.slots.finish_write),
                rerun: f(self.slots.rerun),
                unfinished: f(self.slots.unfinished),
                last: f(self.slots.last),
            },
        }
    }
}

/// MySQL's slot statements. No RETURNING on UPDATE: the term (or the finish's outcome) comes
/// back through `LAST_INSERT_ID(expr)` in the OK packet, 0 when no row matched; affected-row
/// counts are never read. An UPDATE assigns left to right, each assignment seeing the columns
/// already assigned, so every assignment below reads only columns assigned after it.
fn mysql_slots(t: &str, now: &str) -> SlotStatements {
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
