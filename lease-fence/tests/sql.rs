//! The SQL fence on each dialect's real server (SQLite: a file): a zombie whose successor has
//! written is refused and changes nothing; one term writes twice; a higher term raises the
//! fence; with the check broken the zombie's write gets through (so these tests can fail);
//! two writers racing never land a lower token after a higher one; bad input and a foreign
//! table are refused with typed errors.
//!
//! PostgreSQL and MySQL/MariaDB come from `LEASE_TEST_POSTGRES_URL` / `LEASE_TEST_MYSQL_URL`
//! (lease-conformance's policy: unset prints one `SKIPPED` line, a failure when
//! `LEASE_TEST_REQUIRE` names the backend).

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use common::{RACE_WRITES, assert_never_back, assert_refused, race, unique};
use lease_conformance::env;
use lease_core::ErrorKind;
use lease_fence::FenceError;
use lease_fence::sql::SqlFence;

/// The fence table every test of this file shares (several tests `ensure` it at once, which
/// must work); each test fences resources of its own.
const FENCE_TABLE: &str = "lease_fence_tests";

/// The business statements of one dialect; `{t}` is the test's data table.
struct Sql {
    data: &'static str,
    upsert: &'static str,
    log_table: &'static str,
    log: &'static str,
    val: &'static str,
    tokens: &'static str,
    foreign: &'static str,
}

const POSTGRES: Sql = Sql {
    data: "CREATE TABLE {t} (id INT PRIMARY KEY, val TEXT NOT NULL)",
    upsert: "INSERT INTO {t} (id, val) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET val = EXCLUDED.val",
    log_table: "CREATE TABLE {t} (seq BIGSERIAL PRIMARY KEY, token BIGINT NOT NULL)",
    log: "INSERT INTO {t} (token) VALUES ($1)",
    val: "SELECT val FROM {t} WHERE id = 1",
    tokens: "SELECT token FROM {t} ORDER BY seq",
    foreign: "CREATE TABLE {t} (a INT, b INT)",
};

const MYSQL: Sql = Sql {
    data: "CREATE TABLE {t} (id INT PRIMARY KEY, val VARCHAR(64) NOT NULL) ENGINE=InnoDB",
    upsert: "REPLACE INTO {t} (id, val) VALUES (1, ?)",
    log_table: "CREATE TABLE {t} (seq BIGINT AUTO_INCREMENT PRIMARY KEY, token BIGINT NOT NULL) ENGINE=InnoDB",
    log: "INSERT INTO {t} (token) VALUES (?)",
    val: "SELECT val FROM {t} WHERE id = 1",
    tokens: "SELECT token FROM {t} ORDER BY seq",
    foreign: "CREATE TABLE {t} (a INT, b INT)",
};

const SQLITE: Sql = Sql {
    data: "CREATE TABLE {t} (id INTEGER PRIMARY KEY, val TEXT NOT NULL)",
    upsert: "INSERT OR REPLACE INTO {t} (id, val) VALUES (1, ?1)",
    log_table: "CREATE TABLE {t} (seq INTEGER PRIMARY KEY AUTOINCREMENT, token INTEGER NOT NULL)",
    log: "INSERT INTO {t} (token) VALUES (?1)",
    val: "SELECT val FROM {t} WHERE id = 1",
    tokens: "SELECT token FROM {t} ORDER BY seq",
    foreign: "CREATE TABLE {t} (a INT, b INT)",
};

fn on(statement: &str, table: &str) -> String {
    statement.replace("{t}", table)
}

async fn postgres() -> Option<sqlx::PgPool> {
    let url = env::server_url("postgres")?;
    match sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect(&url)
        .await
    {
        Ok(pool) => Some(pool),
        Err(e) => {
            env::skip("postgres", &format!("cannot connect to {url}: {e}"));
            None
        }
    }
}

async fn mysql() -> Option<sqlx::MySqlPool> {
    let url = env::server_url("mysql")?;
    match sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(6)
        .connect(&url)
        .await
    {
        Ok(pool) => Some(pool),
        Err(e) => {
            env::skip("mysql", &format!("cannot connect to {url}: {e}"));
            None
        }
    }
}

/// A fresh SQLite file under the system temp dir.
async fn sqlite() -> Option<sqlx::SqlitePool> {
    let dir = std::env::temp_dir().join("lease-fence-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/{}.db?mode=rwc", dir.display(), unique("f"));
    Some(
        sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(4)
            .connect(&url)
            .await
            .unwrap(),
    )
}

/// The test cases, once per dialect: `$db` the sqlx database, `$pool` the async fn giving its
/// pool (`None`: skipped), `$sql` its business statements.
macro_rules! dialect {
    ($name:ident, $db:ty, $pool:ident, $sql:ident) => {
        mod $name {
            use super::*;

            type Db = $db;

            /// The pool, the fence (its table ensured) and a data table of the test's own.
            async fn setup() -> Option<(sqlx::Pool<Db>, SqlFence, String)> {
                let pool = $pool().await?;
                let fence = SqlFence::new(FENCE_TABLE).unwrap();
                fence.ensure(&pool).await.unwrap();
                let table = unique("fdata_");
                sqlx::query::<Db>(&on($sql.data, &table))
                    .execute(&pool)
                    .await
                    .unwrap();
                Some((pool, fence, table))
            }

            async fn drop_table(pool: &sqlx::Pool<Db>, table: &str) {
                let _ = sqlx::query::<Db>(&format!("DROP TABLE {table}"))
                    .execute(pool)
                    .await;
            }

            /// One fenced write of `val` under `token`, the fence checked after the business
            /// statement (so a refusal must roll the write back): the verdict.
            async fn write(
                pool: &sqlx::Pool<Db>,
                fence: &SqlFence,
                table: &str,
                resource: &str,
                token: u64,
                val: &str,
            ) -> Result<(), FenceError> {
                let mut tx = pool.begin().await.unwrap();
                sqlx::query::<Db>(&on($sql.upsert, table))
                    .bind(val)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                fence.check(&mut tx, resource, token).await?;
                tx.commit().await.unwrap();
                Ok(())
            }

            async fn val(pool: &sqlx::Pool<Db>, table: &str) -> String {
                sqlx::query_scalar::<Db, String>(&on($sql.val, table))
                    .fetch_one(pool)
                    .await
                    .unwrap()
            }

            async fn fence_token(pool: &sqlx::Pool<Db>, fence: &SqlFence, r: &str) -> Option<u64> {
                let mut conn = pool.acquire().await.unwrap();
                fence.token::<Db>(&mut conn, r).await.unwrap()
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_zombie_after_its_successor_is_refused_and_changes_nothing() {
                let Some((pool, fence, table)) = setup().await else {
                    return;
                };
                let resource = unique("orders/");
                write(&pool, &fence, &table, &resource, 5, "first")
                    .await
                    .unwrap();
                write(&pool, &fence, &table, &resource, 6, "successor")
                    .await
                    .unwrap();

                // The zombie's business statement ran before the check; the refusal and the
                // dropped transaction leave nothing of it.
                let e = write(&pool, &fence, &table, &resource, 5, "zombie")
                    .await
                    .unwrap_err();
                assert_refused(&e, &resource, 5, 6);
                assert!(e.to_string().contains("stop"), "{e}");
                assert_eq!(val(&pool, &table).await, "successor");
                assert_eq!(fence_token(&pool, &fence, &resource).await, Some(6));

                // Through `begin`: refused before any business statement, rolled back.
                let e = fence.begin(&pool, &resource, 4).await.unwrap_err();
                assert_eq!(e.stale().map(|s| (s.offered(), s.fence())), Some((4, 6)));
                let lease: lease_core::Error = e.into();
                assert_eq!(lease.kind(), ErrorKind::Lost);
                assert_eq!(fence_token(&pool, &fence, &resource).await, Some(6));
                drop_table(&pool, &table).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn one_term_writes_twice_and_a_higher_one_raises_the_fence() {
                let Some((pool, fence, table)) = setup().await else {
                    return;
                };
                let resource = unique("report/");
                assert_eq!(fence_token(&pool, &fence, &resource).await, None);
                write(&pool, &fence, &table, &resource, 3, "a")
                    .await
                    .unwrap();
                write(&pool, &fence, &table, &resource, 3, "b")
                    .await
                    .unwrap();
                assert_eq!(val(&pool, &table).await, "b");
                assert_eq!(fence_token(&pool, &fence, &resource).await, Some(3));

                let mut tx = fence.begin(&pool, &resource, 9).await.unwrap();
                sqlx::query::<Db>(&on($sql.upsert, &table))
                    .bind("c")
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                assert_eq!(val(&pool, &table).await, "c");
                assert_eq!(fence_token(&pool, &fence, &resource).await, Some(9));
                assert!(
                    write(&pool, &fence, &table, &resource, 3, "d")
                        .await
                        .unwrap_err()
                        .is_stale()
                );
                assert_eq!(val(&pool, &table).await, "c");

                // Fences are per resource: another resource still takes token 3.
                write(&pool, &fence, &table, &unique("other/"), 3, "e")
                    .await
                    .unwrap();
                drop_table(&pool, &table).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn with_the_check_broken_the_zombie_gets_through() {
                let Some((pool, fence, table)) = setup().await else {
                    return;
                };
                let resource = unique("orders/");
                write(&pool, &fence, &table, &resource, 6, "successor")
                    .await
                    .unwrap();
                let broken = fence.clone().break_check_for_tests();
                write(&pool, &broken, &table, &resource, 5, "zombie")
                    .await
                    .unwrap();
                assert_eq!(
                    val(&pool, &table).await,
                    "zombie",
                    "the broken fence let the zombie write"
                );
                assert_eq!(fence_token(&pool, &fence, &resource).await, Some(5));
                drop_table(&pool, &table).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
                let Some((pool, fence, table)) = setup().await else {
                    return;
                };
                sqlx::query::<Db>(&format!("DROP TABLE {table}"))
                    .execute(&pool)
                    .await
                    .unwrap();
                sqlx::query::<Db>(&on($sql.log_table, &table))
                    .execute(&pool)
                    .await
                    .unwrap();
                let resource = unique("log/");
                let (low, high) = (10_u64, 11_u64);

                // One fenced append: the verdict, retrying what the database says may be
                // retried (a deadlock between two first inserts, a busy SQLite file).
                async fn append(
                    pool: &sqlx::Pool<Db>,
                    fence: &SqlFence,
                    table: &str,
                    resource: &str,
                    token: u64,
                ) -> Result<(), FenceError> {
                    loop {
                        let mut tx = match fence.begin(pool, resource, token).await {
                            Ok(tx) => tx,
                            Err(e) if e.is_temporary() => continue,
                            Err(e) => return Err(e),
                        };
                        let logged = sqlx::query::<Db>(&on($sql.log, table))
                            .bind(i64::try_from(token).unwrap())
                            .execute(&mut *tx)
                            .await;
                        if let Err(e) = logged {
                            let e = lease_sql::classify(e, "log");
                            assert!(e.is_temporary(), "{e}");
                            continue;
                        }
                        match tx.commit().await {
                            Ok(()) => return Ok(()),
                            Err(e) => {
                                let e = lease_sql::classify(e, "commit");
                                assert!(e.is_temporary(), "{e}");
                            }
                        }
                    }
                }

                let race = race(low, high, {
                    let (pool, fence, table, resource) =
                        (pool.clone(), fence.clone(), table.clone(), resource.clone());
                    move |token: u64, _| {
                        let (pool, fence, table, resource) =
                            (pool.clone(), fence.clone(), table.clone(), resource.clone());
                        async move { append(&pool, &fence, &table, &resource, token).await }
                    }
                })
                .await;

                let tokens: Vec<u64> = sqlx::query_scalar::<Db, i64>(&on($sql.tokens, &table))
                    .fetch_all(&pool)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|t| u64::try_from(t).unwrap())
                    .collect();
                assert_never_back(&tokens);
                assert_eq!(tokens.iter().filter(|t| **t == high).count(), RACE_WRITES);
                assert_eq!(
                    tokens.iter().filter(|t| **t == low).count(),
                    race.low_accepted
                );
                assert_eq!(fence_token(&pool, &fence, &resource).await, Some(high));
                drop_table(&pool, &table).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_input_and_foreign_tables_are_refused_with_what_to_change() {
                let Some((pool, fence, table)) = setup().await else {
                    return;
                };
                let mut tx = pool.begin().await.unwrap();
                let e = fence.check(&mut tx, "r", 0).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                let e = fence.check(&mut tx, "r", u64::MAX).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                assert!(e.to_string().contains("BIGINT"), "{e}");
                let e = fence.check(&mut tx, "", 1).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidName);
                let e = fence.check(&mut tx, &"r".repeat(256), 1).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidName);
                drop(tx);

                // A table of that name with other columns.
                let foreign = unique("foreign_");
                sqlx::query::<Db>(&on($sql.foreign, &foreign))
                    .execute(&pool)
                    .await
                    .unwrap();
                let e = SqlFence::new(&foreign)
                    .unwrap()
                    .ensure(&pool)
                    .await
                    .unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Schema);
                let text = e.to_string();
                assert!(text.contains("lacks `resource`, `token`"), "{text}");
                assert!(
                    text.contains("SqlFence::new") && text.contains("CREATE TABLE"),
                    "{text}"
                );

                // A missing table: Schema, with the DDL.
                let missing = SqlFence::new(&unique("missing_")).unwrap();
                let mut tx = pool.begin().await.unwrap();
                let e = missing.check(&mut tx, "r", 1).await.unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Schema, "{e}");
                assert!(e.to_string().contains("does not exist"), "{e}");
                drop(tx);

                // Ensuring twice, and on a fresh table, is fine; the fresh table works.
                let fresh = SqlFence::new(&unique("fresh_")).unwrap();
                fresh.ensure(&pool).await.unwrap();
                fresh.ensure(&pool).await.unwrap();
                let tx = fresh.begin(&pool, "r", 1).await.unwrap();
                tx.commit().await.unwrap();
                drop_table(&pool, fresh.table()).await;
                drop_table(&pool, &foreign).await;
                drop_table(&pool, &table).await;
            }
        }
    };
}

dialect!(on_postgres, sqlx::Postgres, postgres, POSTGRES);
dialect!(on_mysql, sqlx::MySql, mysql, MYSQL);
dialect!(on_sqlite, sqlx::Sqlite, sqlite, SQLITE);
