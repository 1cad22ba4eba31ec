//! The store type shared by the three dialects and what every part of the store's code shares:
//! the fence and token of verified writes, the group tables checked on first use ([`Table`]),
//! the conversions of TTLs, the connection macros every operation runs through, and the
//! start-up checks all dialects share (each dialect's `available()` runs them, then its own
//! catalog checks). It imports none of the parts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::backend::HolderToken;
use lease_core::{Error, Result, Term};
use sqlx::{Database, Pool};

use crate::config::SqlConfig;
use crate::wire::Statements;
use crate::wire::conns::Conns;
use crate::wire::schema::Dialect;

/// A lease store on a SQL database: [`PostgresStore`](crate::PostgresStore),
/// [`MySqlStore`](crate::MySqlStore) or [`SqliteStore`](crate::SqliteStore).
///
/// Lease operations run on a few connections of the store's own (see
/// [`SqlConfig::lease_connections`]), opened with the application pool's connect options: a
/// saturated application pool never delays a renewal, and no pool pings them on checkout or
/// release, so every operation is one round trip on a warm connection. The
/// application's pool is used only for the transactions opened with `begin_verified`.
pub struct SqlStore<DB: Database> {
    pub(crate) inner: Arc<Inner<DB>>,
}

pub(crate) struct Inner<DB: Database> {
    pub(crate) leases: Conns<DB>,
    pub(crate) app: Pool<DB>,
    pub(crate) stmts: Statements,
    pub(crate) config: SqlConfig,
    pub(crate) server: String,
    pub(crate) dialect: Dialect,
    /// MySQL/MariaDB: the server takes `SET STATEMENT innodb_lock_wait_timeout = 0 FOR` (MariaDB
    /// 10.3 or later), so claims use [`Statements::claim_nowait`]; found at start-up.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) nowait_claims: std::sync::atomic::AtomicBool,
    /// MySQL/MariaDB: the server renews many leases in one request (`JSON_TABLE` and `SKIP
    /// LOCKED` in a derived table: MariaDB 10.6 or later), so `renew_many` sends
    /// [`Statements::renew_many`]; found at start-up.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) batch_renewals: std::sync::atomic::AtomicBool,
    /// The partition, member and permit tables (by
    /// [`Table::index`]), checked (and created when missing) on
    /// their first use, not at start-up.
    pub(crate) group_tables: [tokio::sync::OnceCell<()>; 3],
    /// The hints its writes, its listener or its poller notify (SQLite: shared by every store of
    /// this process on the same file and table).
    pub(crate) hints: Arc<crate::hints::Hints>,
    /// `capabilities().watch`: the hints cover the changes of other processes.
    pub(crate) watch: bool,
    /// PostgreSQL: the connect options of the hint listener when they are not the application
    /// pool's (see `PostgresStore::with_listener_options`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) listen_options: std::sync::Mutex<Option<crate::wire::conns::Options<DB>>>,
}

impl<DB: Database> Clone for SqlStore<DB> {
    fn clone(&self) -> Self {
        SqlStore {
            inner: self.inner.clone(),
        }
    }
}

impl<DB: Database> fmt::Debug for SqlStore<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("dialect", &self.inner.dialect)
            .field("server", &self.inner.server)
            .field("table", &self.inner.config.table)
            .finish_non_exhaustive()
    }
}

impl<DB: Database> SqlStore<DB>
where
    Self: lease_core::LeaseStore,
{
    /// The store, once its start-up checks ([`available`](lease_core::LeaseStore::available))
    /// passed: the end of every dialect's `with_client`.
    pub(crate) async fn started(self) -> Result<Self> {
        lease_core::LeaseStore::available(&self).await?;
        Ok(self)
    }
}

impl<DB: Database> SqlStore<DB> {
    /// The store on the application's pool `app`, with lease connections of its own opened
    /// with the pool's connect options; `stmts` are the dialect's statements on the configured
    /// table; `hints` its hints and `watch` whether they cover other processes. No I/O: the
    /// dialect's `with_client` runs the start-up checks next.
    pub(crate) fn assemble(
        app: Pool<DB>,
        config: SqlConfig,
        server: String,
        dialect: Dialect,
        stmts: Statements,
        (hints, watch): (Arc<crate::hints::Hints>, bool),
    ) -> Self {
        let leases = Conns::new((*app.connect_options()).clone(), config.lease_connections);
        SqlStore {
            inner: Arc::new(Inner {
                leases,
                app,
                stmts,
                config,
                server,
                dialect,
                nowait_claims: std::sync::atomic::AtomicBool::new(false),
                batch_renewals: std::sync::atomic::AtomicBool::new(false),
                group_tables: Default::default(),
                hints,
                watch,
                listen_options: std::sync::Mutex::new(None),
            }),
        }
    }

    /// The options this store was built with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// The server this store talks to (host:port/database or file), for messages; never a
    /// password.
    pub fn server(&self) -> &str {
        &self.inner.server
    }

    /// The application's pool the store was built on.
    pub fn app_pool(&self) -> &Pool<DB> {
        &self.inner.app
    }

    /// Maps a sqlx error met while `doing` something, naming the table and its DDL when the
    /// table is missing.
    pub(crate) fn err<'a>(
        &self,
        e: sqlx::Error,
        doing: impl Into<crate::error::Doing<'a>>,
    ) -> Error {
        if crate::error::is_missing_table(&e) {
            return crate::error::missing_table(
                &self.inner.config.table,
                &self.inner.stmts.create,
                &self.inner.server,
            )
            .with_source(e);
        }
        crate::error::map(e, doing.into(), &self.inner.server)
    }

    /// The end of the replication check (see [`SqlConfig::allow_async_replication`]): `risk`,
    /// when there is one, refused with `Unsupported` naming what to change, or logged as a
    /// warning when the configuration accepts it.
    ///
    /// [`SqlConfig::allow_async_replication`]: crate::SqlConfig::allow_async_replication
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) fn replication_verdict(&self, risk: Option<String>) -> Result<()> {
        let Some(why) = risk else { return Ok(()) };
        if self.inner.config.allow_async_replication {
            tracing::warn!(
                server = %self.inner.server,
                %why,
                "a failover can lose acknowledged lease records; terms and partition epochs \
                 (fencing tokens) could then repeat and live leases vanish; accepted by \
                 allow_async_replication"
            );
            return Ok(());
        }
        Err(self.at_server(Error::unsupported(format!(
            "a failover can lose acknowledged lease records, and a lost claim hands its term \
             (fencing token) out again while its holder still counts on the lease: {why}; or \
             accept the risk with SqlConfig::allow_async_replication(true) \
             (URL: allow_async_replication=1)"
        ))))
    }

    /// `e` with this store's server attached, unless it has one (the start-up checks' messages
    /// leave it out).
    pub(crate) fn at_server(&self, e: Error) -> Error {
        e.at_server(self.inner.server.as_str())
    }

    pub(crate) fn term_from(&self, v: i64) -> Result<u64> {
        u64::try_from(v)
            .ok()
            .filter(|t| *t > 0)
            .ok_or_else(|| crate::error::corrupt(&format!("term {v}"), &self.inner.server))
    }
}

/// Which of the tables checked on first use an operation works on (the permit table of
/// counted leases, `permits.rs`, is checked the same way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    Partitions,
    Members,
    Permits,
}

impl Table {
    /// Its place in [`Inner::group_tables`](Inner).
    pub(crate) fn index(self) -> usize {
        match self {
            Table::Partitions => 0,
            Table::Members => 1,
            Table::Permits => 2,
        }
    }

    pub(crate) fn what(self) -> &'static str {
        match self {
            Table::Partitions => "partition table",
            Table::Members => "member table",
            Table::Permits => "permit table",
        }
    }
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(lease_core::backend::ceil_millis(ttl)).unwrap_or(i64::MAX)
}

pub(crate) fn remaining(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// What a verified transaction is told about the term it runs under.
#[derive(Debug, Clone, Copy)]
pub struct Fence<'a> {
    /// The lease's name.
    pub name: &'a str,
    /// The holder token the term was claimed under.
    pub holder: &'a HolderToken,
    /// The term (fencing token).
    pub term: u64,
    /// The permit, for a term of a counted name; `None` for a plain lease. A verified
    /// transaction under a permit is refused (`Unsupported`): the check inside the transaction
    /// reads the lease table, where a permit is not.
    pub permit: Option<u32>,
}

impl<'a> From<&'a Term> for Fence<'a> {
    fn from(term: &'a Term) -> Self {
        Fence {
            name: term.name(),
            holder: term.holder(),
            term: term.token(),
            permit: term.permit(),
        }
    }
}

/// The refusal of a verified transaction under a counted lease's permit.
pub(crate) fn permit_not_verifiable(fence: &Fence<'_>, permit: u32) -> Error {
    Error::unsupported(format!(
        "a verified transaction under permit {permit} of the counted name '{}' (term {}) is not \
         supported: the check inside the transaction reads plain leases only. Check the term \
         with `Term::verify` before the transaction and write its token with your rows",
        fence.name, fence.term
    ))
}

pub(crate) fn lost_in_transaction(fence: &Fence<'_>) -> Error {
    Error::lost(
        fence.name,
        format_args!(
            "verify at the start of the transaction found term {} no longer held; no statement \
             ran under it",
            fence.term
        ),
    )
}

/// A fencing token — a term's [`token`](Term::token), a partition lease's epoch — as SQL binds
/// it: a signed 64-bit integer, which is PostgreSQL's `BIGINT`, MySQL's and MariaDB's `BIGINT`
/// (signed, or `UNSIGNED`: the server converts a non-negative value), SQLite's `INTEGER`. Bind
/// it as it is, no cast in the SQL and none in Rust:
///
/// ```
/// # use lease_sql::Token;
/// # fn fenced(term: &lease_core::Term) -> lease_core::Result<()> {
/// let query = sqlx::query::<sqlx::Postgres>(
///     "UPDATE accounts SET fence = $1 WHERE id = $2 AND fence <= $1",
/// )
///     .bind(Token::of(term)?)
///     .bind(7_i64);
/// # drop(query);
/// # Ok(()) }
/// ```
///
/// A token is a `u64`; every one a SQL store hands out fits in an `i64` (it is read from a
/// `BIGINT` column). A token above `i64::MAX` — possible only from another backend, such as a
/// NATS stream sequence — is refused by [`Token::new`] with `InvalidArgument`: it is never
/// wrapped to a negative number nor clamped, either of which would let a stale holder's write
/// pass a fence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(i64);

impl Token {
    /// The token `token`; `InvalidArgument` above `i64::MAX`, which no SQL integer column holds.
    pub fn new(token: u64) -> Result<Token> {
        i64::try_from(token).map(Token).map_err(|_| {
            Error::invalid_argument(format!(
                "fencing token {token} is above {}, the largest a SQL BIGINT holds; fence with \
                 a NUMERIC(20) column bound as text, or a store whose tokens fit",
                i64::MAX
            ))
        })
    }

    /// The token of `term` (see [`Token::new`]).
    pub fn of(term: &Term) -> Result<Token> {
        Token::new(term.token())
    }

    /// The token as the `i64` SQL stores.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl TryFrom<u64> for Token {
    type Error = Error;
    fn try_from(token: u64) -> Result<Token> {
        Token::new(token)
    }
}

impl TryFrom<&Term> for Token {
    type Error = Error;
    fn try_from(term: &Term) -> Result<Token> {
        Token::of(term)
    }
}

impl From<Token> for i64 {
    fn from(token: Token) -> i64 {
        token.0
    }
}

impl From<Token> for u64 {
    fn from(token: Token) -> u64 {
        // Never negative: built from a u64 that fits.
        u64::try_from(token.0).unwrap_or(0)
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A token is bound as the database's `i64`.
impl<DB: Database> sqlx::Type<DB> for Token
where
    i64: sqlx::Type<DB>,
{
    fn type_info() -> DB::TypeInfo {
        <i64 as sqlx::Type<DB>>::type_info()
    }

    fn compatible(ty: &DB::TypeInfo) -> bool {
        <i64 as sqlx::Type<DB>>::compatible(ty)
    }
}

/// A token is encoded as the database's `i64`.
impl<'q, DB: Database> sqlx::Encode<'q, DB> for Token
where
    i64: sqlx::Encode<'q, DB>,
{
    fn encode(
        self,
        buf: &mut <DB as Database>::ArgumentBuffer<'q>,
    ) -> std::result::Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <i64 as sqlx::Encode<'q, DB>>::encode(self.0, buf)
    }

    fn encode_by_ref(
        &self,
        buf: &mut <DB as Database>::ArgumentBuffer<'q>,
    ) -> std::result::Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <i64 as sqlx::Encode<'q, DB>>::encode_by_ref(&self.0, buf)
    }

    fn produces(&self) -> Option<DB::TypeInfo> {
        <i64 as sqlx::Encode<'q, DB>>::produces(&self.0)
    }

    fn size_hint(&self) -> usize {
        <i64 as sqlx::Encode<'q, DB>>::size_hint(&self.0)
    }
}

/// Runs `$body` (a sqlx future using the connection `$c`) on one of the store's own
/// connections and returns sqlx's result; a failed transport closes the connection.
///
/// `raw_conn!(write self, …)` for an operation that changes rows: the body runs between the
/// dialect's [`begin_write`](crate::wire::conns::LeaseDb::begin_write) and
/// [`end_write`](crate::wire::conns::LeaseDb::end_write) (on SQLite, inside a `BEGIN
/// IMMEDIATE` transaction whose clock is read once it holds the write lock), committed when
/// it succeeds.
///
/// A macro rather than a method taking an async closure: rustc cannot prove `Send` the future
/// of such a method, whose closure borrows the connection for any lifetime ("implementation of
/// `Send` is not general enough"), and every store operation's future must be `Send`.
macro_rules! raw_conn {
    (write $self:expr, $op:expr, |$c:ident| $body:expr) => {{
        match $self.inner.leases.get_write().await {
            Ok(mut slot) => {
                let r = {
                    let $c = &mut *slot;
                    $body.await
                };
                let r = slot.end_write(r).await;
                slot.done(&r);
                r
            }
            Err(e) => Err(e),
        }
    }};
    ($self:expr, $op:expr, |$c:ident| $body:expr) => {{
        match $self.inner.leases.get().await {
            Ok(mut slot) => {
                let $c = &mut *slot;
                let r = $body.await;
                slot.done(&r);
                r
            }
            Err(e) => Err(e),
        }
    }};
}

/// As [`raw_conn`], with the error mapped to a lease error of operation `$op`; `with_conn!(write
/// self, …)` for a write.
macro_rules! with_conn {
    (write $self:expr, $op:expr, |$c:ident| $body:expr) => {{ $crate::store::raw_conn!(write $self, $op, |$c| $body).map_err(|e| $self.err(e, $op)) }};
    ($self:expr, $op:expr, |$c:ident| $body:expr) => {{ $crate::store::raw_conn!($self, $op, |$c| $body).map_err(|e| $self.err(e, $op)) }};
}

pub(crate) use raw_conn;
pub(crate) use with_conn;

/// A possibly schema-qualified table name, split: `(Some(schema), table)` or `(None, table)`.
pub(crate) fn split_table(table: &str) -> (Option<&str>, &str) {
    match table.split_once('.') {
        Some((schema, name)) => (Some(schema), name),
        None => (None, table),
    }
}

/// Checks the `name` column: it must exist and hold `max_name_bytes`. `column` is its type and
/// width in characters or bytes (whichever the type limits; `None` = unlimited).
pub(crate) fn name_width<DB: Database>(
    store: &SqlStore<DB>,
    column: Option<(String, Option<i64>)>,
) -> Result<()> {
    let inner = &store.inner;
    let Some((data_type, width)) = column else {
        return Err(Error::schema(format!(
            "the lease table `{}` has no `name` column; create it with:\n{}",
            inner.config.table, inner.stmts.create
        )));
    };
    let wanted = i64::try_from(inner.config.max_name_bytes).unwrap_or(i64::MAX);
    match width {
        Some(w) if w < wanted => Err(Error::schema(format!(
            "the `name` column of `{}` is {data_type}({w}), narrower than the {wanted} bytes \
             this store accepts; widen the column or lower max_name_bytes to {w}",
            inner.config.table
        ))),
        _ => Ok(()),
    }
}

/// A column of the partition or member table, as the catalog describes it.
#[derive(Debug, Clone)]
pub(crate) struct ColumnInfo {
    pub(crate) name: String,
    /// Its type, for messages.
    pub(crate) data_type: String,
    /// How many bytes it surely holds (`None`: unlimited, or a type without a width).
    pub(crate) width: Option<i64>,
    /// `None` when it compares byte for byte; otherwise its collation, for the message.
    pub(crate) inexact: Option<String>,
}

/// What the store needs of one column.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted {
    pub(crate) column: &'static str,
    /// The longest value the store writes, in bytes (0: not a string).
    pub(crate) bytes: usize,
    /// The store compares (or sorts) it: it must compare byte for byte.
    pub(crate) exact: bool,
    /// Appended to the "too narrow" message, after "widen the column".
    pub(crate) hint: &'static str,
}

/// The columns every lease operation reads or writes (the scheduler's slot columns are used by
/// the slot operations only, and not required at start-up).
pub(crate) const LEASE_COLUMNS: [&str; 5] = ["name", "holder", "instance", "term", "expires_at_ms"];

/// Checks that the existing lease table, with the columns `have`, has every column of a lease
/// table (see [`missing_columns`]).
pub(crate) fn lease_table_columns<DB: Database>(
    store: &SqlStore<DB>,
    have: &[String],
) -> Result<()> {
    let inner = &store.inner;
    missing_columns(
        "lease table",
        &inner.config.table,
        &inner.stmts.create,
        have,
        &LEASE_COLUMNS,
    )
}

/// A table named `table` (the `what`: lease, partition or member table) exists with the columns
/// `have`: refused with [`ErrorKind::Schema`](lease_core::ErrorKind::Schema) when it lacks any
/// of `wanted`, in a message that names both lists and says how to give the store another
/// table — most likely the table is another application's, which happens to have the store's
/// (default) name.
pub(crate) fn missing_columns(
    what: &str,
    table: &str,
    create: &str,
    have: &[String],
    wanted: &[&str],
) -> Result<()> {
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| !have.iter().any(|h| h.eq_ignore_ascii_case(w)))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let list = |names: &mut dyn Iterator<Item = &str>| {
        names
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let named_after = if what == "lease table" {
        String::new()
    } else {
        " (it is named after the lease table)".to_owned()
    };
    Err(Error::schema(format!(
        "a table `{table}` exists but is not a {what} of lease-sql: it has the columns {}, and \
         lacks {}. If it belongs to something else, give the store a lease table of its own \
         name{named_after}: `SqlConfig::table`, the `LEASE_SQL_TABLE` variable, or \
         `?table=NAME` in a `lease::open` URL. If it is an older lease table, make it as in:\n\
         {create}",
        list(&mut have.iter().map(String::as_str)),
        list(&mut missing.iter().copied()),
    )))
}

/// Checks the columns of the partition or member table (`what` names it in messages): every
/// wanted column exists (else the table is refused as [`missing_columns`] says), holds the
/// longest value the store writes, and, where the store compares it, compares byte for byte.
pub(crate) fn table_columns(
    what: &str,
    table: &str,
    create: &str,
    have: &[ColumnInfo],
    wanted: &[Wanted],
) -> Result<()> {
    let names: Vec<String> = have.iter().map(|c| c.name.clone()).collect();
    let columns: Vec<&str> = wanted.iter().map(|w| w.column).collect();
    missing_columns(what, table, create, &names, &columns)?;
    for w in wanted {
        let Some(c) = have.iter().find(|c| c.name.eq_ignore_ascii_case(w.column)) else {
            continue;
        };
        let bytes = i64::try_from(w.bytes).unwrap_or(i64::MAX);
        if let Some(width) = c.width.filter(|width| *width < bytes) {
            return Err(Error::schema(format!(
                "the `{}` column of `{table}` is {}({width}), narrower than the \
                 {bytes} bytes this store writes; widen the column{}",
                w.column, c.data_type, w.hint
            )));
        }
        if let (true, Some(collation)) = (w.exact, &c.inexact) {
            return Err(Error::schema(format!(
                "the `{}` column of `{table}` is {} with collation {collation}, \
                 under which \"Job\", \"job\" and \"job \" could compare equal; make it as in:\n\
                 {create}",
                w.column, c.data_type
            )));
        }
    }
    Ok(())
}
