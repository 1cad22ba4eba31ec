//! SQLite: the check-and-raise answers the fence's token with `RETURNING` (SQLite 3.35+).

use lease_sql::{Dialect, Token};
use sqlx::{Sqlite, SqliteConnection};

use super::BoxFuture;

impl super::sealed::Sealed for Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;

    fn raise<'c>(
        conn: &'c mut SqliteConnection,
        sql: &'c str,
        resource: &'c str,
        token: Token,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<Sqlite, i64>(sql)
                .bind(resource)
                .bind(token)
                .fetch_one(conn),
        )
    }

    fn read<'c>(
        conn: &'c mut SqliteConnection,
        sql: &'c str,
        resource: &'c str,
    ) -> BoxFuture<'c, Result<Option<i64>, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<Sqlite, i64>(sql)
                .bind(resource)
                .fetch_optional(conn),
        )
    }

    fn columns<'c>(
        conn: &'c mut SqliteConnection,
        table: &'c str,
        schema: Option<&'c str>,
    ) -> BoxFuture<'c, Result<Vec<String>, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<Sqlite, String>(Dialect::Sqlite.columns_sql())
                .bind(table)
                .bind(schema)
                .fetch_all(conn),
        )
    }

    fn execute<'c>(
        conn: &'c mut SqliteConnection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(async move { sqlx::query::<Sqlite>(sql).execute(conn).await.map(|_| ()) })
    }
}
