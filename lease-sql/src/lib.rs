//! Leases on PostgreSQL, MySQL/MariaDB and SQLite through sqlx, on the database's clock.
