//! What the store says to the database: the tables' DDL ([`schema`]), the statements of one
//! store ([`Statements`], built per dialect by `postgres/statements.rs`, `mysql/statements.rs`
//! and `sqlite/statements.rs`; PostgreSQL and SQLite share most of theirs, [`returning`]) and
//! the store's own connections they run on ([`conns`]).
//!
//! One row per name, updated in place. `:now` is always the database server's clock, in
//! milliseconds since the Unix epoch (SQLite: the host's boot clock); every value is a bound
//! parameter but in MySQL's text-protocol templates, which take hex literals and integers only.

pub(crate) mod conns;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) mod returning;
pub(crate) mod schema;

use crate::config::{MEMBERS_SUFFIX, PARTITIONS_SUFFIX};
use schema::{Dialect, members_schema_sql, partitions_schema_sql};

/// The statements of one store, with the table name and clock expression filled in.
#[derive(Debug, Clone, Default)]
pub(crate) struct Statements {
    pub(crate) claim: String,
    /// MariaDB's claim: the same under `SET STATEMENT innodb_lock_wait_timeout = 0 FOR`, so a
    /// row locked by a verified transaction fails it at once (1205) rather than after a wait.
    /// Empty elsewhere.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) claim_nowait: String,
    pub(crate) renew: String,
    /// The renewal of many leases in one statement (PostgreSQL's and SQLite's): `$1` the
    /// names and `$2` their holders, as the database binds a list of text (see
    /// `Returning::texts`), `$3` the TTL in milliseconds. Rows `(name, term, skipped)`: one
    /// with the term per lease renewed, and on PostgreSQL also one `(name, NULL, 1)` per lease
    /// found live under its holder (a name with only that row was passed by, its row locked by
    /// another transaction). A name without a row was not live under its holder.
    ///
    /// On MySQL/MariaDB a text-protocol template of one request (see [`BATCH_MARKER`],
    /// [`WIDTH_MARKER`] and [`TTL_MARKER`]) whose last statement answers `(item, term,
    /// renewed)` per lease found live under its holder: `item` its place in the batch from 1,
    /// `renewed` 1 when the request renewed it (or found it renewed further), 0 when it passed
    /// by its locked row.
    pub(crate) renew_many: String,
    pub(crate) release: String,
    pub(crate) force_release: String,
    pub(crate) verify: String,
    pub(crate) verify_locking: String,
    pub(crate) get: String,
    /// The listing of names: see [`names_statement`].
    pub(crate) names: String,
    pub(crate) now: String,
    pub(crate) create: String,
    /// PostgreSQL's `NOTIFY` channel, when its statements send hints (empty otherwise).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) hint_channel: String,
    pub(crate) slots: SlotStatements,
    pub(crate) groups: GroupStatements,
    pub(crate) permits: PermitStatements,
}

/// The counted-lease statements of one store (see `permits.rs`), on the permit table: one row
/// per `(name, permit_no)`, and the name's counter row at `permit_no = -1`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PermitStatements {
    pub(crate) table: String,
    pub(crate) create: String,
    /// PostgreSQL's claim, one statement: `(permit, term, stale)`. MySQL's, one text-protocol
    /// request (see [`NAME_MARKER`] and the others): `(permit, term)`, both NULL when full.
    /// Empty on SQLite.
    #[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub(crate) claim: String,
    /// The first statement of SQLite's claim transaction: the counter row created when
    /// missing. Empty elsewhere.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) lock: String,
    /// SQLite's claim transaction: its read of the name's rows, the counter's included,
    /// `(permit_no, held by the claimant, term, time left)`. Empty elsewhere.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) read: String,
    /// SQLite's claim transaction: its write of a permit never used, a new row.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) insert: String,
    /// SQLite's claim transaction: its write of a free permit that has a row.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) take: String,
    /// SQLite's claim transaction: the counter row moved to the term granted.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) count: String,
    pub(crate) renew: String,
    pub(crate) release: String,
    pub(crate) verify: String,
    pub(crate) list: String,
}

impl PermitStatements {
    /// The permit table of the lease table `table` (its name and DDL in `dialect`), with no
    /// statement yet: each dialect fills in its own.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
        allow(dead_code)
    )]
    pub(crate) fn table(dialect: Dialect, table: &str) -> PermitStatements {
        let t = permits_table(table);
        PermitStatements {
            create: schema::permits_schema_sql(dialect, &t),
            table: t,
            ..PermitStatements::default()
        }
    }
}

/// The listing of names ([`LeaseStore::names`](lease_core::LeaseStore::names)) on the lease
/// table `t` and its permit table, in `dialect`: `(name, 0)` for each lease row and `(name, 1)`
/// for each counted name (a name with permit rows; its counter row alone does not count), in
/// the range `lower <= name`, `after < name`, `name < end`, at most `limit` of each kind (the
/// store merges them and keeps the first `limit`). The parameters: `lower` (the prefix), `after`
/// (`''` for none: no name is empty), `end` (the prefix's end, see
/// [`prefix_end`](lease_core::backend::names::prefix_end), or a bound above every name), `limit`;
/// MySQL takes the four twice, in that order, as positional `?`.
///
/// A range, not `LIKE`: `name` compares byte for byte on every dialect (PostgreSQL `COLLATE
/// "C"`, MySQL `VARBINARY`, SQLite's `BINARY`), so "starts with the prefix" is exactly that range,
/// which the primary key reads in order, and no character of the prefix is special (`LIKE`
/// would make `%` and `_` wildcards, and SQLite's `LIKE` ignores ASCII case).
pub(crate) fn names_statement(dialect: Dialect, t: &str) -> String {
    let p = permits_table(t);
    let (name, zero, one, [lower, after, end, limit]) = match dialect {
        Dialect::Postgres => (
            "name",
            "CAST(0 AS BIGINT)",
            "CAST(1 AS BIGINT)",
            ["$1", "$2", "$3", "$4"],
        ),
        Dialect::Sqlite => ("name", "0", "1", ["?1", "?2", "?3", "?4"]),
        // VARBINARY comes back as bytes: ask for text (names are UTF-8).
        Dialect::MySql => (
            "CAST(name AS CHAR CHARACTER SET utf8mb4)",
            "0",
            "1",
            ["?"; 4],
        ),
    };
    let range = format!("name >= {lower} AND name > {after} AND name < {end}");
    format!(
        "SELECT {name}, {zero} FROM \
         (SELECT name FROM {t} WHERE {range} ORDER BY name LIMIT {limit}) l \
         UNION ALL \
         SELECT {name}, {one} FROM \
         (SELECT DISTINCT name FROM {p} WHERE {range} AND permit_no >= 0 \
         ORDER BY name LIMIT {limit}) c"
    )
}

/// The permit table's name for the lease table `table`.
pub(crate) fn permits_table(table: &str) -> String {
    format!("{table}{}", crate::config::PERMITS_SUFFIX)
}

/// The scheduler slot statements of one store (see `slots.rs`). PostgreSQL and SQLite share
/// every statement but `finish` (and SQLite binds the names of `unfinished` as one JSON array).
#[derive(Debug, Clone, Default)]
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

/// The partition and membership statements of one store (see `partitions.rs` and `membership.rs`), on the partition
/// and member tables.
#[derive(Debug, Clone, Default)]
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
/// In MySQL's partition renew and lease `renew_many` templates: the TTL in milliseconds, as a
/// decimal integer.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const TTL_MARKER: &str = "/*ttl*/";

/// In MySQL's permit claim templates: the name, as a hex literal.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const NAME_MARKER: &str = "/*name*/";
/// In MySQL's permit claim templates: the holder token, as a hex literal.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const HOLDER_MARKER: &str = "/*holder*/";
/// In MySQL's permit claim templates: the instance label, as a hex literal.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const INSTANCE_MARKER: &str = "/*instance*/";
/// In MySQL's permit claim template: the permit count, as a decimal integer.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const COUNT_MARKER: &str = "/*count*/";

/// In MySQL's `renew_many` template: the batch, a JSON array of `[name, holder]` pairs, as a
/// hex literal.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const BATCH_MARKER: &str = "/*batch*/";
/// In MySQL's `renew_many` template: the longest name in bytes (the width of the batch's name
/// column), as a decimal integer.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const WIDTH_MARKER: &str = "/*width*/";

/// The marker in MySQL's `unfinished` statement replaced with one `?` per name.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) const NAMES_MARKER: &str = "/*names*/";

impl GroupStatements {
    /// The partition and member tables of the lease table `table` (their names and DDL in
    /// `dialect`), with no statement yet: each dialect fills in its own.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
        allow(dead_code)
    )]
    pub(crate) fn tables(dialect: Dialect, table: &str) -> GroupStatements {
        let (p, m) = group_tables(table);
        GroupStatements {
            create_partitions: partitions_schema_sql(dialect, &p),
            create_members: members_schema_sql(dialect, &m),
            partitions_table: p,
            members_table: m,
            ..GroupStatements::default()
        }
    }
}

/// The partition and member tables' names for the lease table `table`.
pub(crate) fn group_tables(table: &str) -> (String, String) {
    (
        format!("{table}{PARTITIONS_SUFFIX}"),
        format!("{table}{MEMBERS_SUFFIX}"),
    )
}
