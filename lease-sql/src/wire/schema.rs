//! The tables' DDL, per dialect: the lease table, the partition and member tables, and SQLite's
//! boot-clock table and triggers (the same SQL ships as migrations under `migrations/`).

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

    /// The catalog query for the column names of a table, in order: bind the table's bare name,
    /// then its schema (`None`: the connection's current schema). No row: there is no such
    /// table. The name is matched as the database folds an unquoted identifier (PostgreSQL:
    /// lower case). The store checks its tables with it; lease-fence checks its fence table.
    pub fn columns_sql(self) -> &'static str {
        match self {
            // Unquoted identifiers are folded to lower case, as the store's statements send them.
            Dialect::Postgres => {
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_name = lower($1) AND table_schema = COALESCE(lower($2), current_schema()) \
                 ORDER BY ordinal_position"
            }
            Dialect::MySql => {
                "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
                 WHERE TABLE_NAME = ? AND TABLE_SCHEMA = COALESCE(?, DATABASE()) \
                 ORDER BY ORDINAL_POSITION"
            }
            Dialect::Sqlite => {
                "SELECT name FROM pragma_table_info(?1, COALESCE(?2, 'main')) ORDER BY cid"
            }
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

/// The `CREATE TABLE IF NOT EXISTS` statement for the permit table `table` of counted leases
/// (by default the lease table's name then `_permits`, see
/// [`SqlConfig::permits_table_name`](crate::SqlConfig::permits_table_name)) in `dialect`.
///
/// One row per `(name, permit_no)`: `holder` (the holder token), `instance`, `term` (the
/// permit's last fencing token) and `expires_at_ms` (the server's clock; 0 once released). Each
/// name also has one counter row, `permit_no = -1`, whose `term` is the greatest term ever
/// issued for the name across its permits: every claim locks it and moves it on, so tokens
/// strictly increase per name. `name` compares byte for byte.
///
/// ```
/// use lease_sql::{Dialect, permits_schema_sql};
/// let sql = permits_schema_sql(Dialect::Postgres, "leases_permits");
/// assert!(sql.contains("PRIMARY KEY (name, permit_no)"));
/// ```
pub fn permits_schema_sql(dialect: Dialect, table: &str) -> String {
    let (name, holder, instance, big, tail) = match dialect {
        Dialect::Postgres => ("VARCHAR(255) COLLATE \"C\"", "TEXT", "TEXT", "BIGINT", ""),
        Dialect::MySql => (
            "VARBINARY(255)",
            "CHAR(32) CHARACTER SET ascii COLLATE ascii_bin",
            "VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "BIGINT",
            " ENGINE=InnoDB",
        ),
        Dialect::Sqlite => ("TEXT", "TEXT", "TEXT", "INTEGER", ""),
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {table} (\n    \
         name          {name} NOT NULL,\n    \
         permit_no     {big} NOT NULL,\n    \
         holder        {holder} NOT NULL,\n    \
         instance      {instance} NOT NULL,\n    \
         term          {big} NOT NULL,\n    \
         expires_at_ms {big} NOT NULL,\n    \
         PRIMARY KEY (name, permit_no)\n)\
         {tail}"
    )
}

/// SQLite's boot-clock DDL for the lease table `table` (by default `leases`): its statements,
/// in order (see [`sqlite_boot_clock_sql`]): the clock table, then the triggers of the lease,
/// partition and member tables.
pub(crate) fn sqlite_boot_clock_statements(table: &str) -> Vec<String> {
    let mut out = vec![sqlite_clock_table(table)];
    for suffix in [
        "",
        crate::config::PARTITIONS_SUFFIX,
        crate::config::MEMBERS_SUFFIX,
    ] {
        out.extend(sqlite_boot_clock_triggers(table, suffix));
    }
    out
}

/// SQLite: the table `<table>_clock`, which records the boot the expiries were measured in.
pub(crate) fn sqlite_clock_table(table: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {table}{CLOCK_SUFFIX} (\n    \
         id      INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),\n    \
         boot_id TEXT NOT NULL\n)"
    )
}

/// SQLite: the two triggers that refuse wall-clock expiries in the table `<table><suffix>` (the
/// lease table, or with a suffix the partition or member table), which must exist.
pub(crate) fn sqlite_boot_clock_triggers(table: &str, suffix: &str) -> [String; 2] {
    let (schema, bare) = match table.split_once('.') {
        Some((s, n)) => (format!("{s}."), n),
        None => (String::new(), table),
    };
    let floor = crate::config::WALL_CLOCK_FLOOR_MS;
    let t = format!("{bare}{suffix}");
    [("INSERT", "insert"), ("UPDATE OF expires_at_ms", "update")].map(|(event, what)| {
        format!(
            "CREATE TRIGGER IF NOT EXISTS {schema}{t}_boot_clock_{what}\n\
             BEFORE {event} ON {t} WHEN NEW.expires_at_ms >= {floor}\n\
             BEGIN SELECT RAISE(ABORT, 'lease-sql: {t} keeps its expiries on the boot \
             clock; a process of an older lease-sql (wall-clock expiries) still writes it: \
             stop or upgrade it'); END"
        )
    })
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
