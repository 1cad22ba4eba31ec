//! Start-up checks and bad input: a database that cannot carry leases is refused at once, with
//! a message that says what to change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::str::FromStr;

use lease_core::{ErrorKind, HolderToken, LeaseStore};
use lease_sql::{Ddl, MySqlStore, PostgresStore, SqlConfig, SqliteStore};

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
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{msg}");
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
    let e = SqliteStore::new(ro).await.unwrap_err();
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
        let e = PostgresStore::with_config(pool, config).await.unwrap_err();
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
        let e = MySqlStore::with_config(pool.clone(), config)
            .await
            .unwrap_err();
        sqlx::query(&format!("DROP TABLE {table}"))
            .execute(&pool)
            .await
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{column}: {e}");
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
    let narrow = MySqlStore::with_config(pool.clone(), config).await.unwrap();
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
    sqlx::query(&format!("DROP TABLE {table}"))
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
        let e = PostgresStore::with_config(pg.app_pool().clone(), config)
            .await
            .unwrap_err();
        sqlx::query(&format!("DROP TABLE {table}"))
            .execute(pg.app_pool())
            .await
            .unwrap();
        assert!(e.to_string().contains("widen the column"), "{e}");
    }
}
