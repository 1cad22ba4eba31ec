//! Options of a SQL lease store.

use lease_core::{Error, Result};

/// Whether the store creates its table when it is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ddl {
    /// Create the table (`CREATE TABLE IF NOT EXISTS`) when the store is built.
    #[default]
    Auto,
    /// Never run DDL: the table must exist (see [`schema_sql`](crate::schema_sql) and the
    /// migrations shipped with the crate); a missing table is reported with the statement that
    /// creates it.
    None,
}

/// Options of a SQL lease store.
///
/// ```
/// use lease_sql::{Ddl, SqlConfig};
/// let config = SqlConfig::default().table("app.leases").unwrap().ddl(Ddl::None);
/// assert_eq!(config.table_name(), "app.leases");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlConfig {
    pub(crate) table: String,
    pub(crate) ddl: Ddl,
    pub(crate) max_name_bytes: usize,
    pub(crate) lease_connections: u32,
}

/// The default table name.
pub const DEFAULT_TABLE: &str = "leases";

/// The width of the `name` column the crate creates, in bytes.
pub const NAME_COLUMN_BYTES: usize = 255;

impl Default for SqlConfig {
    fn default() -> Self {
        SqlConfig {
            table: DEFAULT_TABLE.to_owned(),
            ddl: Ddl::Auto,
            max_name_bytes: NAME_COLUMN_BYTES,
            lease_connections: 2,
        }
    }
}

impl SqlConfig {
    /// Sets the table name: an identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes),
    /// optionally qualified by a schema (`schema.table`). It is interpolated into the SQL, so
    /// nothing else is accepted.
    pub fn table(mut self, table: &str) -> Result<Self> {
        let parts: Vec<&str> = table.split('.').collect();
        let ident_ok = |p: &str| {
            !p.is_empty()
                && p.len() <= 63
                && p.chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if parts.len() > 2 || !parts.iter().all(|p| ident_ok(p)) {
            return Err(Error::invalid_name(format!(
                "table name {table:?} is not a plain SQL identifier; use letters, digits and \
                 underscores (optionally schema.table)"
            )));
        }
        self.table = table.to_owned();
        Ok(self)
    }

    /// Sets the DDL switch.
    pub fn ddl(mut self, ddl: Ddl) -> Self {
        self.ddl = ddl;
        self
    }

    /// Sets the longest name accepted, in bytes (default 255, the width of the column this crate
    /// creates). The store checks at start-up that the table's `name` column is at least this
    /// wide, so no name is ever truncated.
    pub fn max_name_bytes(mut self, bytes: usize) -> Self {
        self.max_name_bytes = bytes;
        self
    }

    /// Sets how many connections the store's own lease pool may open (default 2). Lease
    /// operations never wait behind the application's pool.
    pub fn lease_connections(mut self, n: u32) -> Self {
        self.lease_connections = n.max(1);
        self
    }

    /// The table name.
    pub fn table_name(&self) -> &str {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names_are_identifiers() {
        assert!(SqlConfig::default().table("leases_2").is_ok());
        assert!(SqlConfig::default().table("app.leases").is_ok());
        for bad in ["", "1x", "a;drop table x", "a.b.c", "a-b", "\"x\"", "a b"] {
            assert!(SqlConfig::default().table(bad).is_err(), "{bad}");
        }
    }
}
