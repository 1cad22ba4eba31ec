//! The refusal ([`Stale`]) and the error of every fenced write ([`FenceError`]).

use std::fmt;

use lease_core::{Error, ErrorKind};

/// A fence refused a write: a term with a higher token has already written to the resource, so
/// the term that offered this token was superseded. Nothing was changed by the refused call.
///
/// Its holder must stop writing under that term: whatever it still holds locally, its lease
/// has passed to someone else (it was paused, cut off, or kept working past its deadline).
/// Trying again with the same token is refused again; only a new term (a new lease, with a
/// higher token) can write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    resource: String,
    offered: u64,
    fence: u64,
}

impl Stale {
    /// The refusal of `offered` by the fence of `resource`, which holds `fence`.
    pub(crate) fn new(resource: &str, offered: u64, fence: u64) -> Stale {
        Stale {
            resource: resource.to_owned(),
            offered,
            fence,
        }
    }

    /// The resource whose fence refused the write.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The token the write offered (the stale term's).
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// The fence's token when it refused: the highest token the resource has accepted, always
    /// greater than [`offered`](Stale::offered).
    pub fn fence(&self) -> u64 {
        self.fence
    }
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the fence of '{}' refused token {}: a newer term (token {}) has written there, so \
             the term holding token {} was superseded; nothing was written — stop working \
             under that term",
            self.resource, self.offered, self.fence, self.offered
        )
    }
}

impl std::error::Error for Stale {}

/// Why a fenced write did not happen.
///
/// [`FenceError::Stale`] is the fence doing its job: a newer term has written, and the caller
/// must stop. Everything else is [`FenceError::Other`], a [`lease_core::Error`] with its kind:
/// `InvalidArgument` for a token of 0 or one the resource cannot hold, `InvalidName` for a
/// resource name that is empty, too long or not storable, `Schema` for a fence table of
/// another shape, and `Backend`, `Unavailable` or `Timeout` for the resource's own failures
/// (temporary or not as the backend crate judges its own: see
/// [`is_temporary`](FenceError::is_temporary)).
///
/// Converted into a [`lease_core::Error`] (`?` in work that returns `lease_core::Result`), a
/// refusal becomes `ErrorKind::Lost` with the [`Stale`] as its source, so `Term::run` and
/// `run_elected` treat the work's failure as the loss it is and step down.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum FenceError {
    /// The fence refused the token: a newer term has written. Nothing was changed.
    Stale(Stale),
    /// Any other failure: bad input, a fence of another shape, the resource's own error.
    Other(Error),
}

impl FenceError {
    /// `true` when the fence refused the token ([`FenceError::Stale`]).
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale(_))
    }

    /// The refusal, when this is one.
    pub fn stale(&self) -> Option<&Stale> {
        match self {
            FenceError::Stale(s) => Some(s),
            FenceError::Other(_) => None,
        }
    }

    /// The kind a caller acts on: `Lost` for a refusal (the term was superseded), the error's
    /// own kind otherwise.
    pub fn kind(&self) -> ErrorKind {
        match self {
            FenceError::Stale(_) => ErrorKind::Lost,
            FenceError::Other(e) => e.kind(),
        }
    }

    /// `true` when trying again may succeed. Never for a refusal: the same token is refused
    /// again.
    pub fn is_temporary(&self) -> bool {
        match self {
            FenceError::Stale(_) => false,
            FenceError::Other(e) => e.is_temporary(),
        }
    }
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::Stale(s) => s.fmt(f),
            FenceError::Other(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FenceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FenceError::Stale(_) => None,
            FenceError::Other(e) => e.source(),
        }
    }
}

impl From<Error> for FenceError {
    fn from(e: Error) -> Self {
        FenceError::Other(e)
    }
}

impl From<Stale> for FenceError {
    fn from(s: Stale) -> Self {
        FenceError::Stale(s)
    }
}

/// A refusal becomes `Lost` (permanent) with the [`Stale`] as its source; any other error is
/// itself.
impl From<FenceError> for Error {
    fn from(e: FenceError) -> Self {
        match e {
            FenceError::Stale(s) => Error::new(ErrorKind::Lost, s.to_string())
                .with_temporary(false)
                .with_source(s),
            FenceError::Other(e) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_says_what_happened_and_converts_to_lost() {
        let e = FenceError::from(Stale::new("orders/7", 4, 9));
        assert!(e.is_stale() && !e.is_temporary());
        assert_eq!(e.kind(), ErrorKind::Lost);
        let s = e
            .stale()
            .map(|s| (s.resource().to_owned(), s.offered(), s.fence()));
        assert_eq!(s, Some(("orders/7".to_owned(), 4, 9)));
        let text = e.to_string();
        assert!(text.contains("'orders/7' refused token 4"), "{text}");
        assert!(text.contains("token 9") && text.contains("stop"), "{text}");

        let lease: Error = e.into();
        assert_eq!(lease.kind(), ErrorKind::Lost);
        assert!(!lease.is_temporary());
        let source = std::error::Error::source(&lease).and_then(|s| s.downcast_ref::<Stale>());
        assert_eq!(source.map(Stale::fence), Some(9));
    }
}
