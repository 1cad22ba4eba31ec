//! The query parameters of a store URL that lease-etcd reads itself.

use lease_core::backend::{ParamError, UrlParam};

use crate::EtcdConfig;

/// What a store URL's query sets for an etcd store: `prefix=PREFIX` ([`EtcdConfig::prefix`]).
/// The etcd client reads no query parameters, so a caller refuses every pair
/// [`take`](Self::take) leaves.
///
/// ```
/// use lease_core::backend::UrlParam;
/// use lease_etcd::{EtcdConfig, EtcdUrlParams};
///
/// let mut params = EtcdUrlParams::default();
/// assert!(params.take(UrlParam::parse("prefix=jobs/"))?);
/// assert_eq!(params.apply(EtcdConfig::new()).key_prefix(), "jobs/");
/// # Ok::<(), lease_core::backend::ParamError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct EtcdUrlParams {
    /// `prefix=PREFIX`.
    pub prefix: Option<String>,
}

impl EtcdUrlParams {
    /// The parameters read here, as messages list them.
    pub const NAMES: &'static str = "prefix=PREFIX";

    /// Reads `param` when it is one of lease-etcd's: `Ok(true)` when taken (a later pair of the
    /// same name replaces it), `Ok(false)` when it is not, an error when its value is refused.
    pub fn take(&mut self, param: UrlParam<'_>) -> Result<bool, ParamError> {
        match param.name {
            "prefix" => self.prefix = Some(param.word()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `config` with what the URL set.
    pub fn apply(&self, mut config: EtcdConfig) -> EtcdConfig {
        if let Some(prefix) = &self.prefix {
            config = config.prefix(prefix.clone());
        }
        config
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn takes_a_prefix_only() {
        let mut p = EtcdUrlParams::default();
        assert!(p.take(UrlParam::parse("prefix=a/")).unwrap());
        assert!(!p.take(UrlParam::parse("x=1")).unwrap());
        assert_eq!(p.prefix.as_deref(), Some("a/"));
        assert!(p.take(UrlParam::parse("prefix=")).is_err());
    }
}
