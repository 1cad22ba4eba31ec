//! The query parameters of a store URL that lease-redis reads itself.

use lease_core::backend::{ParamError, UrlParam};

use crate::{RedisConfig, TermScheme};

/// What a store URL's query sets for a Redis store: `allow_volatile=1`
/// ([`RedisConfig::allow_volatile`]), `allow_fsync_everysec=1`
/// ([`RedisConfig::allow_fsync_everysec`]), `terms=counter|clock_floor`
/// ([`RedisConfig::term_scheme`]) and `key_prefix=PREFIX` ([`RedisConfig::key_prefix`]). Every
/// other pair is the driver's (e.g. `protocol=resp3`) and is left alone.
///
/// [`take`](Self::take) reads one pair; [`apply`](Self::apply) sets what was read on a config.
///
/// ```
/// use lease_core::backend::UrlParam;
/// use lease_redis::{RedisConfig, RedisUrlParams, TermScheme};
///
/// let mut params = RedisUrlParams::default();
/// for pair in UrlParam::pairs("terms=clock_floor&key_prefix=app:&protocol=resp3") {
///     let _ours = params.take(pair)?;
/// }
/// assert_eq!(params.terms, Some(TermScheme::ClockFloor));
/// assert_eq!(params.key_prefix.as_deref(), Some("app:"));
/// let _config: RedisConfig = params.apply(RedisConfig::new());
/// # Ok::<(), lease_core::backend::ParamError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisUrlParams {
    /// `allow_volatile=1|0`.
    pub allow_volatile: Option<bool>,
    /// `allow_fsync_everysec=1|0`.
    pub allow_fsync_everysec: Option<bool>,
    /// `terms=counter|clock_floor`.
    pub terms: Option<TermScheme>,
    /// `key_prefix=PREFIX` (checked when the store is built, as [`RedisConfig::validate`]
    /// does).
    pub key_prefix: Option<String>,
}

impl RedisUrlParams {
    /// The parameters read here, as messages list them.
    pub const NAMES: &'static str =
        "allow_volatile=1, allow_fsync_everysec=1, terms=counter|clock_floor, key_prefix=PREFIX";

    /// Reads `param` when it is one of lease-redis's: `Ok(true)` when taken (a later pair of
    /// the same name replaces it), `Ok(false)` when it is not lease-redis's, an error when its
    /// value is refused.
    pub fn take(&mut self, param: UrlParam<'_>) -> Result<bool, ParamError> {
        match param.name {
            "allow_volatile" => self.allow_volatile = Some(param.flag()?),
            "allow_fsync_everysec" => self.allow_fsync_everysec = Some(param.flag()?),
            "terms" => {
                self.terms = Some(param.one_of(
                    &[
                        ("clock_floor", TermScheme::ClockFloor),
                        ("counter", TermScheme::Counter),
                    ],
                    "counter or clock_floor",
                )?);
            }
            "key_prefix" => self.key_prefix = Some(param.word()?),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `config` with what the URL set.
    pub fn apply(&self, mut config: RedisConfig) -> RedisConfig {
        if let Some(allow) = self.allow_volatile {
            config = config.allow_volatile(allow);
        }
        if let Some(allow) = self.allow_fsync_everysec {
            config = config.allow_fsync_everysec(allow);
        }
        if let Some(scheme) = self.terms {
            config = config.term_scheme(scheme);
        }
        if let Some(prefix) = &self.key_prefix {
            config = config.key_prefix(prefix.clone());
        }
        config
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn takes_its_four_and_leaves_the_rest() {
        let mut p = RedisUrlParams::default();
        for pair in UrlParam::pairs("allow_volatile&allow_fsync_everysec=0&terms=counter") {
            assert!(p.take(pair).unwrap());
        }
        assert!(!p.take(UrlParam::parse("protocol=resp3")).unwrap());
        assert_eq!(p.allow_volatile, Some(true));
        assert_eq!(p.allow_fsync_everysec, Some(false));
        assert_eq!(p.terms, Some(TermScheme::Counter));
        let e = p
            .take(UrlParam::parse("allow_fsync_everysec=2"))
            .unwrap_err();
        assert_eq!(e.to_string(), "allow_fsync_everysec takes 1 or 0, not '2'");
        let e = p.take(UrlParam::parse("terms=random")).unwrap_err();
        assert_eq!(e.expected, "counter or clock_floor");
        assert!(p.take(UrlParam::parse("key_prefix=")).is_err());
    }
}
