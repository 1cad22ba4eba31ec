//! Start-up checks and bad input: a database that cannot carry leases is refused at once, with
//! a message that says what to change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use lease_conformance::GroupStore;
use lease_core::{
    ErrorKind, LeaseStore,
    backend::{HolderToken, membership::MembershipStore, partitions::PartitionStore},
};
use lease_sql::{
    Ddl, Dialect, MySqlStore, PostgresStore, SqlConfig, SqliteStore, members_schema_sql,
    partitions_schema_sql, schema_sql,
};

const TTL: Duration = Duration::from_secs(30);

/// The partition and member tables' DDL for `config`.
fn group_tables(dialect: Dialect, config: &SqlConfig) -> [String; 2] {
    [
        partitions_schema_sql(dialect, &config.partitions_table_name()),
        members_schema_sql(dialect, &config.members_table_name()),
    ]
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_named_without_its_password() {
    let (pg, my) = tokio::join!(
        PostgresStore::connect(
            "postgres://app:s3cret@127.0.0.1:1/test",
            SqlConfig::default()
        ),
        MySqlStore::connect("mysql://app:s3cret@127.0.0.1:1/test", SqlConfig::default()),
    );
    for e in [pg.unwrap_err(), my.unwrap_err()] {
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
        assert!(e.is_temporary());
        let shown = format!("{e} {e:?}");
        assert!(shown.contains("127.0.0.1:1"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

#[tokio::test]
async fn a_bad_url_is_refused_as_permanent() {
    let e = PostgresStore::connect("postgres://[::1", SqlConfig::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable);
    assert!(!e.is_temporary());
    assert!(
        e.to_string().contains("postgres://user:password@host"),
        "{e}"
    );
    let e = SqliteStore::connect("sqlite:///nonexistent-dir-lease/x.db", SqlConfig::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("nonexistent-dir-lease"), "{e}");
}

#[tokio::test]
async fn a_table_name_that_is_not_an_identifier_is_refused() {
    let e = SqlConfig::default()
        .table("leases; DROP TABLE x")
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName);
}

#[tokio::test]
async fn a_missing_table_with_ddl_off_names_the_table_and_its_statement() {
    let config = SqlConfig::default()
        .table("lease_missing_table")
        .unwrap()
        .ddl(Ddl::None);
    let e = SqliteStore::connect(&support::sqlite_url(), config.clone())
        .await
        .unwrap_err();
    check_missing(&e);
    if let Some(url) = lease_conformance::env::server_url("postgres") {
        check_missing(
            &PostgresStore::connect(&url, config.clone())
                .await
                .unwrap_err(),
        );
    }
    if let Some(url) = lease_conformance::env::server_url("mysql") {
        check_missing(&MySqlStore::connect(&url, config).await.unwrap_err());
    }
}

fn check_missing(e: &lease_core::Error) {
    let msg = e.to_string();
    assert_eq!(e.kind(), ErrorKind::Schema, "{msg}");
    assert!(!e.is_temporary());
    assert!(msg.contains("`lease_missing_table`"), "{msg}");
    assert!(
        msg.contains("CREATE TABLE IF NOT EXISTS lease_missing_table"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_read_only_connection_is_refused() {
    // SQLite: a file opened read-only.
    let url = support::sqlite_url();
    drop(
        SqliteStore::connect(&url, SqlConfig::default())
            .await
            .unwrap(),
    );
    let ro = sqlx::sqlite::SqlitePoolOptions::new()
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::from_str(&url)
                .unwrap()
                .read_only(true),
        )
        .await
        .unwrap();
    let e = SqliteStore::with_client(ro, SqlConfig::default())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("read-only"), "{e}");

    // PostgreSQL: every transaction read-only.
    if let Some(url) = lease_conformance::env::server_url("postgres") {
        let opts = sqlx::postgres::PgConnectOptions::from_str(&url)
            .unwrap()
            .options([("default_transaction_read_only", "on")]);
        let pool = sqlx::postgres::PgPoolOptions::new().connect_lazy_with(opts);
        let config = SqlConfig::default().ddl(Ddl::None);
        // The table exists (other tests create it), so only the write probe can fail.
        PostgresStore::connect(&url, SqlConfig::default())
            .await
            .unwrap();
        let e = PostgresStore::with_client(pool, config).await.unwrap_err();
        assert!(e.to_string().contains("read-only"), "{e}");
    }
}

#[tokio::test]
async fn a_name_column_that_would_merge_or_truncate_names_is_refused() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    let store = MySqlStore::connect(&url, SqlConfig::default())
        .await
        .unwrap();
    let pool = store.app_pool().clone();
    let suffix = support::rand_u64() >> 16;
    let cases = [
        (
            format!("lease_ci_{suffix}"),
            "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
            "\"job \"",
        ),
        (
            format!("lease_padbin_{suffix}"),
            "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin",
            "\"job \"",
        ),
        (
            format!("lease_narrow_{suffix}"),
            "VARBINARY(10)",
            "widen the column",
        ),
    ];
    for (table, column, needle) in &cases {
        sqlx::query(&format!(
            "CREATE TABLE {table} (name {column} NOT NULL PRIMARY KEY, holder CHAR(32) NOT NULL, \
             instance VARCHAR(128) NOT NULL, term BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL)"
        ))
        .execute(&pool)
        .await
        .unwrap();
        let config = SqlConfig::default().table(table).unwrap().ddl(Ddl::None);
        let e = MySqlStore::with_client(pool.clone(), config)
            .await
            .unwrap_err();
        sqlx::query(&format!("DROP TABLE {table}"))
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Schema, "{column}: {e}");
        assert!(e.to_string().contains(needle), "{column}: {e}");
    }
    // The narrow table is fine for names that fit, when the store is told so.
    let table = format!("lease_fits_{suffix}");
    sqlx::query(&format!(
        "CREATE TABLE {table} (name VARBINARY(10) NOT NULL PRIMARY KEY, holder CHAR(32) NOT NULL, \
         instance VARCHAR(128) NOT NULL, term BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL)"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let config = SqlConfig::default()
        .table(&table)
        .unwrap()
        .ddl(Ddl::None)
        .max_name_bytes(10);
    for create in group_tables(Dialect::MySql, &config) {
        sqlx::query(&create).execute(&pool).await.unwrap();
    }
    let narrow = MySqlStore::with_client(pool.clone(), config).await.unwrap();
    let h = HolderToken::mint();
    assert!(
        narrow
            .claim("0123456789", &h, "a", std::time::Duration::from_secs(1))
            .await
            .unwrap()
            .is_some()
    );
    let e = narrow
        .claim("0123456789x", &h, "a", std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidName, "never truncated: {e}");
    sqlx::query(&format!(
        "DROP TABLE {table}, {table}_partitions, {table}_members"
    ))
    .execute(&pool)
    .await
    .unwrap();

    // PostgreSQL too refuses a column narrower than the names it is told to accept.
    if let Some(url) = lease_conformance::env::server_url("postgres") {
        let pg = PostgresStore::connect(&url, SqlConfig::default())
            .await
            .unwrap();
        let table = format!("lease_narrow_{suffix}");
        sqlx::query(&format!(
            "CREATE TABLE {table} (name VARCHAR(10) COLLATE \"C\" NOT NULL PRIMARY KEY, holder TEXT NOT NULL, \
             instance TEXT NOT NULL, term BIGINT NOT NULL, expires_at_ms BIGINT NOT NULL)"
        ))
        .execute(pg.app_pool())
        .await
        .unwrap();
        let config = SqlConfig::default().table(&table).unwrap().ddl(Ddl::None);
        let e = PostgresStore::with_client(pg.app_pool().clone(), config)
            .await
            .unwrap_err();
        sqlx::query(&format!("DROP TABLE {table}"))
            .execute(pg.app_pool())
            .await
            .unwrap();
        assert!(e.to_string().contains("widen the column"), "{e}");
    }
}

/// With DDL off, a lease table alone serves leases; the first partition (membership)
/// operation names the missing partition (member) table and the statement that creates it, and
/// works once it exists.
#[tokio::test]
async fn a_missing_group_table_with_ddl_off_names_it_and_its_statement() {
    type Build<DB> = fn(
        sqlx::Pool<DB>,
        SqlConfig,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = lease_core::Result<Arc<dyn GroupStore>>>>,
    >;

    async fn check<DB: sqlx::Database>(dialect: Dialect, pool: sqlx::Pool<DB>, build: Build<DB>)
    where
        for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
        for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
    {
        let table = format!("lease_groupless_{}", support::rand_u64() >> 20);
        let config = SqlConfig::default().table(&table).unwrap().ddl(Ddl::None);
        let run = |sql: String| {
            let pool = pool.clone();
            async move { sqlx::query(&sql).execute(&pool).await.unwrap() }
        };
        run(schema_sql(dialect, &table)).await;
        // SQLite's boot-clock triggers (migration 0003) need the partition and member tables:
        // those of the lease table come first, the others once their tables exist.
        let mut deferred = Vec::new();
        if dialect == Dialect::Sqlite {
            // SQLite's boot-clock table (migration 0003) is named the same way.
            let clock = format!("{table}_clock");
            let e = build(pool.clone(), config.clone()).await.unwrap_err();
            let msg = e.to_string();
            assert_eq!(e.kind(), ErrorKind::Schema, "{msg}");
            assert!(msg.contains(&format!("`{clock}` does not exist")), "{msg}");
            assert!(msg.contains("DDL is off"), "{msg}");
            let stmts: Vec<String> = lease_sql::sqlite_boot_clock_sql(&table)
                .split(";\n\n")
                .map(str::to_owned)
                .collect();
            for stmt in &stmts {
                assert!(msg.contains(stmt.as_str()), "{msg}");
            }
            for stmt in &stmts[..3] {
                run(stmt.clone()).await;
            }
            deferred = stmts[3..].to_vec();
        }
        let store = build(pool.clone(), config.clone()).await.unwrap();
        let h = lease_core::backend::HolderToken::mint();
        assert!(store.claim("job", &h, "w", TTL).await.unwrap().is_some());
        let [partitions, members] = group_tables(dialect, &config);
        for (missing, create) in [
            (config.partitions_table_name(), partitions),
            (config.members_table_name(), members),
        ] {
            let e = if missing.ends_with("_partitions") {
                store.acquire_partition("g", 0, "o@1", TTL).await.map(drop)
            } else {
                store.heartbeat("svc", "n@1", "a", TTL, &[]).await.map(drop)
            }
            .unwrap_err();
            let msg = e.to_string();
            assert_eq!(e.kind(), ErrorKind::Schema, "{msg}");
            assert!(!e.is_temporary(), "{msg}");
            assert!(
                msg.contains(&format!("`{missing}` does not exist")),
                "{msg}"
            );
            assert!(msg.contains("DDL is off"), "{msg}");
            assert!(msg.contains(&create), "{msg}");
            run(create).await;
        }
        for stmt in deferred {
            run(stmt).await;
        }
        assert!(
            store
                .acquire_partition("g", 0, "o@1", TTL)
                .await
                .unwrap()
                .is_some()
        );
        store.heartbeat("svc", "n@1", "a", TTL, &[]).await.unwrap();
        drop(store);
        if dialect == Dialect::Sqlite {
            run(format!("DROP TABLE {table}_clock")).await;
        }
        for t in [
            config.members_table_name(),
            config.partitions_table_name(),
            table,
        ] {
            run(format!("DROP TABLE {t}")).await;
        }
    }

    let url = support::sqlite_url();
    let opts = sqlx::sqlite::SqliteConnectOptions::from_str(&url)
        .unwrap()
        .create_if_missing(true);
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .connect_with(opts)
        .await
        .unwrap();
    check(Dialect::Sqlite, pool, |p, c| {
        Box::pin(async move {
            let s: Arc<dyn GroupStore> = Arc::new(SqliteStore::with_client(p, c).await?);
            Ok(s)
        })
    })
    .await;
    // The servers', on a pool of the test's own.
    macro_rules! on_server {
        ($backend:literal, $dialect:expr, $pool:ty, $store:ty) => {
            if let Some(url) = lease_conformance::env::server_url($backend) {
                let pool = <$pool>::new().connect(&url).await.unwrap();
                check($dialect, pool, |p, c| {
                    Box::pin(async move {
                        let s: Arc<dyn GroupStore> = Arc::new(<$store>::with_client(p, c).await?);
                        Ok(s)
                    })
                })
                .await;
            }
        };
    }
    on_server!(
        "postgres",
        Dialect::Postgres,
        sqlx::postgres::PgPoolOptions,
        PostgresStore
    );
    on_server!(
        "mysql",
        Dialect::MySql,
        sqlx::mysql::MySqlPoolOptions,
        MySqlStore
    );
}

/// Partition and member tables whose columns would merge, truncate or clamp what the store
/// writes are refused at start-up, each with what to change.
#[tokio::test]
async fn group_columns_that_would_merge_truncate_or_clamp_are_refused() {
    if let Some(url) = lease_conformance::env::server_url("mysql") {
        let store = MySqlStore::connect(&url, SqlConfig::default())
            .await
            .unwrap();
        let pool = store.app_pool().clone();
        let cases = [
            (
                "group_name VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
                "\"job \"",
            ),
            ("group_name VARBINARY(255)", "widen the column"), // owner below is too narrow
            ("group_name VARBINARY(100)", "or lower max_name_bytes"),
            ("group_name VARBINARY(255)", "INT UNSIGNED"), // partition_no below is signed
        ];
        for (i, (group_column, needle)) in cases.iter().enumerate() {
            let table = format!("lease_badgroups_{}", support::rand_u64() >> 20);
            let config = SqlConfig::default().table(&table).unwrap().ddl(Ddl::None);
            let owner = if i == 1 {
                "VARBINARY(64)"
            } else {
                "VARBINARY(128)"
            };
            let partition = if i == 3 { "INT" } else { "INT UNSIGNED" };
            let [_, members] = group_tables(Dialect::MySql, &config);
            for sql in [
                schema_sql(Dialect::MySql, &table),
                format!(
                    "CREATE TABLE {} ({group_column} NOT NULL, partition_no {partition} NOT NULL, \
                     owner {owner} NOT NULL, epoch BIGINT NOT NULL, \
                     expires_at_ms BIGINT NOT NULL, PRIMARY KEY (group_name, partition_no))",
                    config.partitions_table_name()
                ),
                members,
            ] {
                sqlx::query(&sql).execute(&pool).await.unwrap();
            }
            // The lease table is fine: the store starts, and the partition table is refused on
            // its first use.
            let store = MySqlStore::with_client(pool.clone(), config.clone())
                .await
                .unwrap();
            let e = store
                .acquire_partition("g", 0, "o@1", TTL)
                .await
                .unwrap_err();
            drop(store);
            drop_tables(&pool, &config).await;
            assert_eq!(e.kind(), ErrorKind::Schema, "{group_column}: {e}");
            assert!(e.to_string().contains(needle), "case {i}: {e}");
        }
    }

    if let Some(url) = lease_conformance::env::server_url("postgres") {
        let store = PostgresStore::connect(&url, SqlConfig::default())
            .await
            .unwrap();
        let pool = store.app_pool().clone();
        let table = format!("lease_narrowgroups_{}", support::rand_u64() >> 20);
        let config = SqlConfig::default().table(&table).unwrap().ddl(Ddl::None);
        let [partitions, _] = group_tables(Dialect::Postgres, &config);
        for sql in [
            schema_sql(Dialect::Postgres, &table),
            partitions,
            format!(
                "CREATE TABLE {} (service VARCHAR(255) NOT NULL, node VARCHAR(128) NOT NULL, \
                 address VARCHAR(100) NOT NULL, group_list TEXT NOT NULL, \
                 expires_at_ms BIGINT NOT NULL, PRIMARY KEY (service, node))",
                config.members_table_name()
            ),
        ] {
            sqlx::query(&sql).execute(&pool).await.unwrap();
        }
        let store = PostgresStore::with_client(pool.clone(), config.clone())
            .await
            .unwrap();
        let e = store
            .heartbeat("svc", "n@1", "a", TTL, &[])
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Schema, "{e}");
        drop(store);
        drop_tables(&pool, &config).await;
        let msg = e.to_string();
        assert!(
            msg.contains("`address`") && msg.contains("widen the column"),
            "{msg}"
        );
    }
}

/// Drops the lease table of `config` and its partition and member tables.
async fn drop_tables<DB: sqlx::Database>(pool: &sqlx::Pool<DB>, config: &SqlConfig)
where
    for<'c> &'c sqlx::Pool<DB>: sqlx::Executor<'c, Database = DB>,
    for<'q> <DB as sqlx::Database>::Arguments<'q>: sqlx::IntoArguments<'q, DB>,
{
    let sql = format!(
        "DROP TABLE {}, {}, {}",
        config.table_name(),
        config.partitions_table_name(),
        config.members_table_name()
    );
    sqlx::query(&sql).execute(pool).await.unwrap();
}
