//! MySQL and MariaDB: no `RETURNING` on an upsert, so the check-and-raise hands the fence's
//! token back through `LAST_INSERT_ID(expr)`, which the server puts in the statement's OK
//! packet: still one statement, one round trip.

use lease_sql::{Dialect, Token};
use sqlx::{MySql, MySqlConnection};

use super::BoxFuture;

impl super::sealed::Sealed for MySql {
    const DIALECT: Dialect = Dialect::MySql;

    fn raise<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c str,
        resource: &'c str,
        token: Token,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>> {
        Box::pin(async move {
            let done = sqlx::query::<MySql>(sql)
                .bind(resource)
                .bind(token)
                .execute(conn)
                .await?;
            // A fence's token is at most i64::MAX (a BIGINT); anything else is reported as the
            // impossible token it is.
            Ok(i64::try_from(done.last_insert_id()).unwrap_or(-1))
        })
    }

    fn read<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c str,
        resource: &'c str,
    ) -> BoxFuture<'c, Result<Option<i64>, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<MySql, i64>(sql)
                .bind(resource)
                .fetch_optional(conn),
        )
    }

    fn columns<'c>(
        conn: &'c mut MySqlConnection,
        table: &'c str,
        schema: Option<&'c str>,
    ) -> BoxFuture<'c, Result<Vec<String>, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<MySql, String>(Dialect::MySql.columns_sql())
                .bind(table)
                .bind(schema)
                .fetch_all(conn),
        )
    }

    fn execute<'c>(
        conn: &'c mut MySqlConnection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(async move { sqlx::query::<MySql>(sql).execute(conn).await.map(|_| ()) })
    }
}
