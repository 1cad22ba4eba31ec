//! The migrations shipped under `migrations/` are the DDL the store runs itself.
//! (`LEASE_BLESS=1 cargo test -p lease-sql --test migrations` rewrites them.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use lease_sql::{
    DEFAULT_TABLE, Dialect, SqlConfig, members_schema_sql, partitions_schema_sql,
    permits_schema_sql, schema_sql, sqlite_boot_clock_sql,
};

fn check(path: &std::path::Path, want: &str) {
    if std::env::var_os("LEASE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, want).unwrap();
    }
    let have = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        have,
        want,
        "{} is stale; rerun with LEASE_BLESS=1",
        path.display()
    );
}

#[test]
fn migrations_match_the_ddl_the_store_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
        let path = dir.join(dialect.as_str()).join("0001_create_leases.sql");
        let want = format!(
            "-- The lease table of lease-sql ({}). Slot columns serve the scheduler.\n{};\n",
            dialect.as_str(),
            schema_sql(dialect, DEFAULT_TABLE)
        );
        check(&path, &want);

        let config = SqlConfig::default();
        let path = dir
            .join(dialect.as_str())
            .join("0002_create_partitions_and_members.sql");
        let want = format!(
            "-- The partition and member tables of lease-sql ({}): partitioned leases and \
             membership.\n{};\n\n{};\n",
            dialect.as_str(),
            partitions_schema_sql(dialect, &config.partitions_table_name()),
            members_schema_sql(dialect, &config.members_table_name())
        );
        check(&path, &want);

        let path = dir.join(dialect.as_str()).join("0004_create_permits.sql");
        let want = format!(
            "-- The permit table of lease-sql ({}): counted leases. The row with permit_no = -1 \
             is each name's counter.\n{};\n",
            dialect.as_str(),
            permits_schema_sql(dialect, &config.permits_table_name())
        );
        check(&path, &want);
    }
    let path = dir.join("sqlite").join("0003_boot_clock.sql");
    let want = format!(
        "-- SQLite only: expiries on the host's boot clock, recorded with the boot they were \
         measured in.\n-- The store converts a file's wall-clock expiries on its first start \
         after this migration.\n{};\n",
        sqlite_boot_clock_sql(DEFAULT_TABLE)
    );
    check(&path, &want);
}
