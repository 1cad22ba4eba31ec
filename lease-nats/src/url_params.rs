//! The query parameters of a store URL that lease-nats reads itself.

use lease_core::backend::{ParamError, UrlParam};

use crate::{NatsConfig, TtlMismatch};

/// What a store URL's query sets for a NATS store: `bucket=NAME`, a bucket taken whatever its
/// max age ([`NatsConfig::bucket`] with [`TtlMismatch::Adopt`]). The NATS client reads no
/// query parameters, so a caller refuses every pair [`take`](Self::take) leaves.
///
/// ```
/// use std::time::Duration;
/// use lease_core::backend::UrlParam;
/// use lease_nats::{NatsConfig, NatsUrlParams};
///
/// let mut params = NatsUrlParams::default();
/// assert!(params.take(UrlParam::parse("bucket=jobs"))?);
/// assert!(!params.take(UrlParam::parse("colour=blue"))?);
/// let config = params.apply(NatsConfig::new(Duration::from_secs(15)));
/// assert_eq!(config.bucket_name(), "jobs");
/// # Ok::<(), lease_core::backend::ParamError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NatsUrlParams {
    /// `bucket=NAME`.
    pub bucket: Option<String>,
}

impl NatsUrlParams {
    /// The parameters read here, as messages list them.
    pub const NAMES: &'static str = "bucket=NAME";

    /// Reads `param` when it is one of lease-nats's: `Ok(true)` when taken (a later pair of the
    /// same name replaces it), `Ok(false)` when it is not, an error when its value is refused.
    pub fn take(&mut self, param: UrlParam<'_>) -> Result<bool, ParamError> {
        match param.name {
            "bucket" => self.bucket = Some(param.word()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `config` with what the URL set: a bucket named in the URL is taken whatever its max age
    /// (the store then reports that age as its `fixed_ttl`).
    pub fn apply(&self, mut config: NatsConfig) -> NatsConfig {
        if let Some(bucket) = &self.bucket {
            config = config
                .bucket(bucket.clone())
                .on_ttl_mismatch(TtlMismatch::Adopt);
        }
        config
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn takes_a_bucket_only() {
        let mut p = NatsUrlParams::default();
        assert!(p.take(UrlParam::parse("bucket=jobs")).unwrap());
        assert!(!p.take(UrlParam::parse("colour=blue")).unwrap());
        assert_eq!(p.bucket.as_deref(), Some("jobs"));
        let e = p.take(UrlParam::parse("bucket")).unwrap_err();
        assert_eq!(e.to_string(), "bucket takes a non-empty value, not ''");
    }
}
