//! The schemes [`open`](crate::open) knows besides the built-in ones: each one's opener,
//! registered at run time.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};

use lease_core::{LeaseStore, Result};

use crate::{Backend, Store, UrlError};

/// A registered opener: the URL in, the store out.
type Opener =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<Store>> + Send>> + Send + Sync>;

/// Every registered scheme and its opener, in the order of registration.
static REGISTERED: RwLock<Vec<(&'static str, Opener)>> = RwLock::new(Vec::new());

/// Makes [`open`](crate::open) (and so the `lease` command line, and every program that opens
/// its store by URL) reach a store of your own: a URL whose scheme is `scheme` (in any case)
/// is handed whole, as written, to `opener`, and the store it makes is checked with
/// [`available`](LeaseStore::available) and returned as a [`Store`] whose
/// [`url_backend`](Store::url_backend) is [`Backend::Registered`] and whose
/// [`downcast_ref`](Store::downcast_ref) reaches `S`.
///
/// Register once, at start-up, before any URL with the scheme is opened. `scheme` must be a URL
/// scheme (a letter, then letters, digits, `+`, `-` or `.`) that no built-in backend takes,
/// compiled in or not, and that is not registered already: else [`RegisterError`] says which.
/// [`check_url`](crate::check_url) checks only the scheme of such a URL; the rest (host, query,
/// [`OpenOptions`](crate::OpenOptions), which configure the built-in backends) is for the
/// opener to judge, and its errors are returned as they are. Keep passwords out of its
/// messages, as the built-in backends do (see [`redact`](crate::telemetry::redact)).
///
/// ```
/// use lease::sql::{SqlConfig, SqliteStore};
/// use lease::registry::RegisterError;
/// use lease::{Backend, OpenOptions};
///
/// /// Opens a `scratch://` URL. A store of your own would connect to the URL's host here.
/// async fn scratch(_url: String) -> lease::Result<SqliteStore> {
///     SqliteStore::connect("sqlite::memory:", SqlConfig::default()).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> lease::Result<()> {
/// lease::registry::register_scheme("scratch", scratch)?;
///
/// let store = lease::open("scratch://", &OpenOptions::new()).await?;
/// assert_eq!(store.url_backend(), Backend::Registered("scratch"));
/// assert!(store.downcast_ref::<SqliteStore>().is_some());
///
/// let e = lease::registry::register_scheme("postgres", scratch).unwrap_err();
/// assert!(matches!(e, RegisterError::BuiltIn { backend: Backend::Postgres, .. }));
/// # Ok(())
/// # }
/// ```
pub fn register_scheme<S, F, Fut>(scheme: &'static str, opener: F) -> Result<(), RegisterError>
where
    S: LeaseStore,
    F: Fn(String) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<S>> + Send + 'static,
{
    let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !valid {
        return Err(RegisterError::NotAScheme {
            scheme: scheme.to_owned(),
        });
    }
    if let Some(backend) = Backend::built_in(scheme) {
        return Err(RegisterError::BuiltIn {
            scheme: scheme.to_owned(),
            backend,
        });
    }
    let opener: Opener = Arc::new(move |url: String| {
        let store = opener(url);
        Box::pin(async move {
            let store = store.await?;
            store.available().await?;
            Ok(Store::new(Backend::Registered(scheme), store))
        })
    });
    let mut registered = REGISTERED.write().unwrap_or_else(PoisonError::into_inner);
    if registered
        .iter()
        .any(|(s, _)| s.eq_ignore_ascii_case(scheme))
    {
        return Err(RegisterError::Registered {
            scheme: scheme.to_owned(),
        });
    }
    registered.push((scheme, opener));
    Ok(())
}

/// The registered scheme `scheme` is, in any case, as it was registered.
pub(crate) fn find(scheme: &str) -> Option<&'static str> {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    registered
        .iter()
        .find(|(s, _)| s.eq_ignore_ascii_case(scheme))
        .map(|&(s, _)| s)
}

/// Every registered scheme, in the order of registration.
pub(crate) fn schemes() -> Vec<&'static str> {
    let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
    registered.iter().map(|&(s, _)| s).collect()
}

/// Opens `url` with the opener registered for `scheme`.
pub(crate) async fn open(scheme: &str, url: String) -> Result<Store> {
    let opener = {
        let registered = REGISTERED.read().unwrap_or_else(PoisonError::into_inner);
        registered
            .iter()
            .find(|(s, _)| s.eq_ignore_ascii_case(scheme))
            .map(|(_, o)| o.clone())
    };
    match opener {
        Some(opener) => opener(url).await,
        // A scheme is never unregistered, and only a registered one gets here.
        None => Err(UrlError::UnknownScheme {
            scheme: scheme.to_owned(),
        }
        .into()),
    }
}

/// Why [`register_scheme`] refused a scheme.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// The name is not a URL scheme.
    NotAScheme {
        /// The name given.
        scheme: String,
    },
    /// A built-in backend takes the scheme (whether or not this build compiled it in).
    BuiltIn {
        /// The scheme given.
        scheme: String,
        /// The backend that takes it.
        backend: Backend,
    },
    /// The scheme is registered already.
    Registered {
        /// The scheme given.
        scheme: String,
    },
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::NotAScheme { scheme } => write!(
                f,
                "cannot register store scheme '{scheme}': a URL scheme is a letter, then \
                 letters, digits, '+', '-' or '.'"
            ),
            RegisterError::BuiltIn { scheme, backend } => write!(
                f,
                "cannot register store scheme '{scheme}': the built-in {backend} backend takes \
                 it; register another name"
            ),
            RegisterError::Registered { scheme } => write!(
                f,
                "cannot register store scheme '{scheme}': it is registered already; register \
                 each scheme once, at start-up"
            ),
        }
    }
}

impl std::error::Error for RegisterError {}

/// An [`ErrorKind::InvalidArgument`](lease_core::ErrorKind::InvalidArgument) error whose
/// source is the `RegisterError`.
impl From<RegisterError> for lease_core::Error {
    fn from(e: RegisterError) -> lease_core::Error {
        lease_core::Error::new(lease_core::ErrorKind::InvalidArgument, e.to_string()).with_source(e)
    }
}
