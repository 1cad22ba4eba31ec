//! Removes what this run left on the servers: lease and partition records keep their row (or
//! hash) after release by design, so the run's rows and keys are deleted by name (or group)
//! prefix at the end.
//! NATS removes released and expired keys itself; the SQLite file lives in a temporary folder.

use anyhow::{Context, Result};
use sqlx::Connection;
use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;

use crate::backends::{Env, REDIS_PREFIX, SQL_TABLE, sql_config};
use crate::cli::Backend;

/// Deletes the run's records on `backend`; returns how many.
pub(crate) async fn run(env: &Env, backend: Backend) -> Result<u64> {
    let like = format!("{}-%", env.prefix);
    match backend {
        Backend::Postgres => {
            let mut c = PgConnection::connect(&env.postgres)
                .await
                .context("connecting to PostgreSQL")?;
            let done = sqlx::query(&format!("DELETE FROM {SQL_TABLE} WHERE name LIKE $1"))
                .bind(&like)
                .execute(&mut c)
                .await
                .context("deleting the run's rows")?;
            let parts = sql_config()?.partitions_table_name();
            let done_parts = sqlx::query(&format!("DELETE FROM {parts} WHERE group_name LIKE $1"))
                .bind(&like)
                .execute(&mut c)
                .await
                .context("deleting the run's partition rows")?;
            Ok(done.rows_affected() + done_parts.rows_affected())
        }
        Backend::Mysql => {
            let mut c = MySqlConnection::connect(&env.mysql)
                .await
                .context("connecting to MariaDB")?;
            let done = sqlx::query(&format!("DELETE FROM {SQL_TABLE} WHERE name LIKE ?"))
                .bind(&like)
                .execute(&mut c)
                .await
                .context("deleting the run's rows")?;
            let parts = sql_config()?.partitions_table_name();
            let done_parts = sqlx::query(&format!("DELETE FROM {parts} WHERE group_name LIKE ?"))
                .bind(&like)
                .execute(&mut c)
                .await
                .context("deleting the run's partition rows")?;
            Ok(done.rows_affected() + done_parts.rows_affected())
        }
        Backend::Redis => {
            let mut c = redis::Client::open(env.redis.as_str())
                .context("parsing the Redis URL")?
                .get_multiplexed_async_connection()
                .await
                .context("connecting to Redis")?;
            let pattern = format!("{REDIS_PREFIX}*{}-*", env.prefix);
            let mut cursor: u64 = 0;
            let mut deleted = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut c)
                    .await
                    .context("scanning the run's keys")?;
                if !keys.is_empty() {
                    let n: u64 = redis::cmd("UNLINK")
                        .arg(&keys)
                        .query_async(&mut c)
                        .await
                        .context("deleting the run's keys")?;
                    deleted += n;
                }
                if next == 0 {
                    return Ok(deleted);
                }
                cursor = next;
            }
        }
        Backend::Local | Backend::Sqlite | Backend::Nats | Backend::Mongodb | Backend::Etcd => {
            Ok(0)
        }
    }
}
