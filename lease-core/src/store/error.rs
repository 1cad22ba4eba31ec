//! The one error type of the workspace, with a kind and a temporary/permanent verdict.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::store::operation::Operation;

/// A boxed error from a backend driver or from user work.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// A `Result` whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in the terms a caller acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Someone else holds the name. Not a failure: try again later.
    Held,
    /// The lease was lost: a renewal found it gone, or no renewal succeeded within the local
    /// deadline. Work under it must stop.
    Lost,
    /// The coordinator was closed.
    Closed,
    /// The name is empty, too long for the store, or holds characters the store cannot keep.
    InvalidName,
    /// A duration or a set of timings is unsafe or out of range.
    InvalidTimings,
    /// Another argument is out of range: an oversized batch, too many groups, a bad address.
    InvalidArgument,
    /// The store could not be reached, or refused the connection.
    Unavailable,
    /// An operation did not finish within its bound; its outcome is unknown.
    Timeout,
    /// The store cannot do what was asked (see its capabilities).
    Unsupported,
    /// The store answered with an error of its own.
    Backend,
    /// The store's tables (or collections, buckets) do not fit it: a table of the configured
    /// name exists with other columns, a column is too narrow or compares loosely, or a table is
    /// missing while the store may not create it. Permanent: the message names the table, what
    /// is wrong with it, and what to change (another name, the DDL to run).
    Schema,
    /// The work run under a lease returned an error; the source is the work's error.
    Work,
    /// The work run under a lease panicked; the message carries the panic message.
    Panicked,
}

impl ErrorKind {
    /// A short lower-case label, used in metrics and log fields.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Held => "held",
            ErrorKind::Lost => "lost",
            ErrorKind::Closed => "closed",
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::InvalidTimings => "invalid_timings",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::Backend => "backend",
            ErrorKind::Schema => "schema",
            ErrorKind::Work => "work",
            ErrorKind::Panicked => "panicked",
        }
    }

    /// The default verdict for this kind: `true` when trying again later may succeed.
    fn default_temporary(self) -> bool {
        matches!(
            self,
            ErrorKind::Held | ErrorKind::Unavailable | ErrorKind::Timeout
        )
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every lease operation.
///
/// It carries a [`kind`](Error::kind), a message that says what to change, a verdict on whether
/// trying again may help ([`is_temporary`](Error::is_temporary)) and, for backend and work
/// errors, the original error as its [`source`](StdError::source).
///
/// `Error` is cheap to clone: a term that ends hands the same error to every observer.
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    temporary: bool,
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
    context: Option<Box<Context>>,
}

/// Where an error happened: the store operation, the name it was about, the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Context {
    operation: Option<Operation>,
    name: Option<String>,
    server: Option<String>,
}

impl Error {
    /// A new error of `kind` with `message`, temporary as the kind's default.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            temporary: kind.default_temporary(),
            source: None,
            context: None,
        }
    }

    /// Attaches the underlying error.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// Replaces the message, keeping the kind, the verdict, the source and the context: for a
    /// caller that says the same failure better (e.g. in its own terms, with the fix it offers)
    /// without repeating the original as a source.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = message.into();
        self
    }

    /// Overrides the temporary/permanent verdict.
    pub fn with_temporary(mut self, temporary: bool) -> Self {
        self.temporary = temporary;
        self
    }

    /// Someone else holds `name`.
    pub fn held(name: &str) -> Self {
        Error::new(
            ErrorKind::Held,
            format!("lease '{name}' is held by another holder"),
        )
    }

    /// The lease on `name` was lost, for `why`.
    pub fn lost(name: &str, why: impl fmt::Display) -> Self {
        Error::new(ErrorKind::Lost, format!("lease '{name}' lost: {why}"))
    }

    /// The coordinator was closed.
    pub fn closed() -> Self {
        Error::new(ErrorKind::Closed, "coordinator is closed")
    }

    /// A name the store cannot hold.
    pub fn invalid_name(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidName, message)
    }

    /// An unsafe or out-of-range duration.
    pub fn invalid_timings(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidTimings, message)
    }

    /// An argument out of range, other than a name or a duration.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    /// The store could not be reached.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    /// An operation did not finish within `bound`; its outcome is unknown.
    pub fn timeout(what: impl fmt::Display, bound: std::time::Duration) -> Self {
        Error::new(
            ErrorKind::Timeout,
            format!("{what} did not finish within {bound:?}; its outcome is unknown"),
        )
    }

    /// The store cannot do this.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unsupported, message)
    }

    /// The store's tables do not fit it (see [`ErrorKind::Schema`]); `message` says what to
    /// change.
    pub fn schema(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Schema, message)
    }

    /// An error the store answered with; `temporary` says whether a retry may help.
    pub fn backend(
        message: impl Into<String>,
        source: impl Into<BoxError>,
        temporary: bool,
    ) -> Self {
        Error::new(ErrorKind::Backend, message)
            .with_source(source)
            .with_temporary(temporary)
    }

    /// Attaches the store operation and the name it was about (a lease, job, group or service
    /// name), unless an earlier call attached them: the innermost context is kept. Shown before
    /// the message: `renew 'compactor' at postgres://db:5432/app: connection reset`.
    pub fn during(mut self, operation: Operation, name: &str) -> Self {
        let context = self.context.get_or_insert_with(Box::default);
        if context.operation.is_none() {
            context.operation = Some(operation);
            context.name = (!name.is_empty()).then(|| name.to_owned());
        }
        self
    }

    /// Attaches the server the store talks to, unless one was attached already. Pass it with
    /// its password redacted.
    pub fn at_server(mut self, server: impl Into<String>) -> Self {
        let context = self.context.get_or_insert_with(Box::default);
        if context.server.is_none() {
            context.server = Some(server.into());
        }
        self
    }

    /// The store operation that failed, when attached ([`during`](Error::during)).
    pub fn operation(&self) -> Option<Operation> {
        self.context.as_ref().and_then(|c| c.operation)
    }

    /// The name the failed operation was about, when attached ([`during`](Error::during)).
    pub fn name(&self) -> Option<&str> {
        self.context.as_ref().and_then(|c| c.name.as_deref())
    }

    /// The server the failed operation went to, when attached
    /// ([`at_server`](Error::at_server)).
    pub fn server(&self) -> Option<&str> {
        self.context.as_ref().and_then(|c| c.server.as_deref())
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// `true` when trying again later may succeed: a held name, an unreachable store, a
    /// timeout, or a backend error its driver calls transient.
    pub fn is_temporary(&self) -> bool {
        self.temporary
    }

    /// `true` when the error is of `kind`.
    pub fn is(&self, kind: ErrorKind) -> bool {
        self.kind == kind
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind)
            .field("message", &self.message)
            .field("temporary", &self.temporary);
        if let Some(context) = &self.context {
            d.field("operation", &context.operation)
                .field("name", &context.name)
                .field("server", &context.server);
        }
        if let Some(source) = &self.source {
            d.field("source", source);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(context) = &self.context {
            let mut any = false;
            if let Some(operation) = context.operation {
                write!(f, "{operation}")?;
                any = true;
            }
            if let Some(name) = &context.name {
                write!(f, "{}'{name}'", if any { " " } else { "" })?;
                any = true;
            }
            if let Some(server) = &context.server {
                write!(f, "{}at {server}", if any { " " } else { "" })?;
                any = true;
            }
            if any {
                f.write_str(": ")?;
            }
        }
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_structured_and_the_innermost_is_kept() {
        let e = Error::unavailable("connection reset")
            .during(Operation::Renew, "compactor")
            .at_server("postgres://db:5432/app")
            .during(Operation::Claim, "other")
            .at_server("elsewhere");
        assert_eq!(e.operation(), Some(Operation::Renew));
        assert_eq!(e.name(), Some("compactor"));
        assert_eq!(e.server(), Some("postgres://db:5432/app"));
        assert_eq!(
            e.to_string(),
            "renew 'compactor' at postgres://db:5432/app: connection reset"
        );
        assert_eq!(Error::closed().to_string(), "coordinator is closed");
        assert_eq!(
            Error::closed().at_server("redis://x").to_string(),
            "at redis://x: coordinator is closed"
        );
    }

    #[test]
    fn verdicts_follow_the_kind() {
        assert!(Error::held("a").is_temporary());
        assert!(!Error::lost("a", "gone").is_temporary());
        assert!(!Error::invalid_name("x").is_temporary());
        assert!(!Error::schema("x").is_temporary());
        assert!(Error::unavailable("down").is_temporary());
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let e = Error::backend("claim failed", io, true);
        assert!(e.is_temporary());
        assert_eq!(e.to_string(), "claim failed: reset");
        assert!(StdError::source(&e).is_some());
    }
}
