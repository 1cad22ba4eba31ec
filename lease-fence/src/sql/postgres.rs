//! PostgreSQL: the check-and-raise answers the fence's token with `RETURNING`.

use lease_sql::{Dialect, Token};
use sqlx::{PgConnection, Postgres};

use super::BoxFuture;

impl super::sealed::Sealed for Postgres {
    const DIALECT: Dialect = Dialect::Postgres;

    fn raise<'c>(
        conn: &'c mut PgConnection,
        sql: &'c str,
        resource: &'c str,
        token: Token,
    ) -> BoxFuture<'c, Result<i64, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<Postgres, i64>(sql)
                .bind(resource)
                .bind(token)
                .fetch_one(conn),
        )
    }

    fn read<'c>(
        conn: &'c mut PgConnection,
        sql: &'c str,
        resource: &'c str,
    ) -> BoxFuture<'c, Result<Option<i64>, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<Postgres, i64>(sql)
                .bind(resource)
                .fetch_optional(conn),
        )
    }

    fn columns<'c>(
        conn: &'c mut PgConnection,
        table: &'c str,
        schema: Option<&'c str>,
    ) -> BoxFuture<'c, Result<Vec<String>, sqlx::Error>> {
        Box::pin(
            sqlx::query_scalar::<Postgres, String>(Dialect::Postgres.columns_sql())
                .bind(table)
                .bind(schema)
                .fetch_all(conn),
        )
    }

    fn execute<'c>(
        conn: &'c mut PgConnection,
        sql: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(async move { sqlx::query::<Postgres>(sql).execute(conn).await.map(|_| ()) })
    }
}
