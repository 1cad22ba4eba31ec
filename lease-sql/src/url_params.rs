//! The query parameters of a store URL that lease-sql reads itself.

use lease_core::Result;
use lease_core::backend::{ParamError, UrlParam};

use crate::SqlConfig;

/// What a store URL's query sets for a SQL store: `table=NAME` ([`SqlConfig::table`]),
/// `hints=on|off` ([`SqlConfig::hints`]) and `allow_async_replication=1`
/// ([`SqlConfig::allow_async_replication`]). Every other pair is the driver's (e.g. SQLite's
/// `mode=rwc`) and is left alone.
///
/// [`take`](Self::take) reads one pair; [`apply`](Self::apply) sets what was read on a config.
///
/// ```
/// use lease_core::backend::UrlParam;
/// use lease_sql::{SqlConfig, SqlUrlParams};
///
/// let mut params = SqlUrlParams::default();
/// let mut driver = Vec::new();
/// for pair in UrlParam::pairs("table=jobs&mode=rwc&hints=off") {
///     if !params.take(pair)? {
///         driver.push(pair.name);
///     }
/// }
/// assert_eq!(driver, ["mode"]);
/// let config = params.apply(SqlConfig::default()).unwrap();
/// assert_eq!(config.table_name(), "jobs");
/// assert!(!config.hints_enabled());
/// # Ok::<(), lease_core::backend::ParamError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqlUrlParams {
    /// `table=NAME`: the lease table (checked by [`SqlConfig::table`] when applied).
    pub table: Option<String>,
    /// `hints=on|off` (also `1|0`, `true|false`).
    pub hints: Option<bool>,
    /// `allow_async_replication=1|0`.
    pub allow_async_replication: Option<bool>,
}

impl SqlUrlParams {
    /// The parameters read here, as messages list them.
    pub const NAMES: &'static str = "table=NAME, hints=on|off, allow_async_replication=1";

    /// Reads `param` when it is one of lease-sql's: `Ok(true)` when taken (a later pair of the
    /// same name replaces it), `Ok(false)` when it is not lease-sql's, an error when its value
    /// is refused.
    pub fn take(&mut self, param: UrlParam<'_>) -> std::result::Result<bool, ParamError> {
        match param.name {
            "table" => self.table = Some(param.word()?),
            "hints" => {
                self.hints = Some(param.one_of(
                    &[
                        ("on", true),
                        ("1", true),
                        ("true", true),
                        ("off", false),
                        ("0", false),
                        ("false", false),
                    ],
                    "on or off",
                )?);
            }
            "allow_async_replication" => self.allow_async_replication = Some(param.flag()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `config` with what the URL set; an invalid table name is refused as
    /// [`SqlConfig::table`] refuses it.
    pub fn apply(&self, mut config: SqlConfig) -> Result<SqlConfig> {
        if let Some(on) = self.hints {
            config = config.hints(on);
        }
        if let Some(allow) = self.allow_async_replication {
            config = config.allow_async_replication(allow);
        }
        match &self.table {
            Some(table) => config.table(table),
            None => Ok(config),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn takes_table_and_hints_only() {
        let mut p = SqlUrlParams::default();
        assert!(p.take(UrlParam::parse("table=jobs")).unwrap());
        assert!(p.take(UrlParam::parse("hints=0")).unwrap());
        assert!(!p.take(UrlParam::parse("mode=rwc")).unwrap());
        assert_eq!(p.table.as_deref(), Some("jobs"));
        assert_eq!(p.hints, Some(false));
        assert!(p.take(UrlParam::parse("allow_async_replication")).unwrap());
        assert_eq!(p.allow_async_replication, Some(true));
        assert!(
            p.apply(SqlConfig::default())
                .unwrap()
                .async_replication_allowed()
        );
        let e = p.take(UrlParam::parse("hints=maybe")).unwrap_err();
        assert_eq!(e.to_string(), "hints takes on or off, not 'maybe'");
        let e = p.take(UrlParam::parse("table=")).unwrap_err();
        assert_eq!(e.expected, "a non-empty value");
        let config = SqlUrlParams::default().apply(SqlConfig::default()).unwrap();
        assert!(config.hints_enabled());
        p.table = Some("no good".to_owned());
        assert!(p.apply(SqlConfig::default()).is_err());
    }
}
