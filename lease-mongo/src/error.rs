//! Driver errors → [`lease_core::Error`].
//!
//! - The duplicate key error (E11000) on the lease collection's `_id` index is how a claim of
//!   a live lease fails: [`is_duplicate_id`] recognises exactly that, and the claim reports the
//!   name held. Any other error, including E11000 on some other unique index, is an error.
//! - Server selection failures (no server to send to within `serverSelectionTimeoutMS`), I/O
//!   errors such as a refused, reset or closed connection, a cleared pool and DNS failures are
//!   `Unavailable` (temporary) and name the server (host:port, never a password).
//! - Failed authentication and a bad TLS set-up are `Unavailable`, permanent.
//! - No answer within a bound once the command could be sent: the server's `MaxTimeMSExpired`
//!   (the command's own `maxTimeMS`) and the driver's socket timeout (an I/O error of kind
//!   `TimedOut`) are `Timeout`, temporary, outcome unknown — as is the store's own bound on
//!   each call. (The driver does not tell whether a socket timeout came before or after the
//!   command was written, so it is taken as the unknown outcome.)
//! - Other server errors are `Backend` with the driver's error as source; temporary when the
//!   server calls them retryable (a step-down, a shutdown, a write concern timeout — after a
//!   write concern error the write's outcome is unknown).

use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind};
use mongodb::error::{Error as MongoError, ErrorKind as MongoKind, WriteFailure};

/// MongoDB's `DuplicateKey` error code.
pub const DUPLICATE_KEY: i32 = 11000;

/// `MaxTimeMSExpired`: the server gave up on the command after its `maxTimeMS`.
const MAX_TIME_MS_EXPIRED: i32 = 50;

/// Codes the server uses for transient conditions: a primary stepping down or shutting down, a
/// node not yet primary, network trouble between nodes, a write concern not met in time, a
/// write conflict.
const TRANSIENT_CODES: &[i32] = &[
    6,     // HostUnreachable
    7,     // HostNotFound
    64,    // WriteConcernFailed (wtimeout)
    89,    // NetworkTimeout
    91,    // ShutdownInProgress
    112,   // WriteConflict
    189,   // PrimarySteppedDown
    262,   // ExceededTimeLimit
    9001,  // SocketException
    10107, // NotWritablePrimary
    11600, // InterruptedAtShutdown
    11602, // InterruptedDueToReplStateChange
    13435, // NotPrimaryNoSecondaryOk
    13436, // NotPrimaryOrSecondary
];

/// The server's error code and message, when the error carries them.
fn code_and_message(err: &MongoError) -> Option<(i32, &str)> {
    match err.kind.as_ref() {
        MongoKind::Command(c) => Some((c.code, c.message.as_str())),
        MongoKind::Write(WriteFailure::WriteError(w)) => Some((w.code, w.message.as_str())),
        MongoKind::Write(WriteFailure::WriteConcernError(w)) => Some((w.code, w.message.as_str())),
        _ => None,
    }
}

/// `true` when `err` is the duplicate key error on the `_id` index, which is how the upsert of
/// a claim answers a live lease (held).
///
/// `findAndModify` reports it as a command error, `update` as a write error; both carry code
/// 11000. The server's message names the index (`index: _id_`); when a message names another
/// index, the error is not a held lease but a unique index someone added to the collection, and
/// is reported as an error.
pub fn is_duplicate_id(err: &MongoError) -> bool {
    // A write concern error reports on replication, never on the write itself.
    let (code, message) = match err.kind.as_ref() {
        MongoKind::Command(c) => (c.code, c.message.as_str()),
        MongoKind::Write(WriteFailure::WriteError(w)) => (w.code, w.message.as_str()),
        _ => return false,
    };
    if code != DUPLICATE_KEY {
        return false;
    }
    match message.split_once("index: ") {
        Some((_, rest)) => rest.split_whitespace().next() == Some("_id_"),
        None => true,
    }
}

/// Maps a driver error met during `op` on `name` (empty for none) to the workspace's error,
/// with the operation, the name and `server` (host:port, never a password) attached as the
/// core's structured context ([`Error::during`], [`Error::at_server`]).
pub fn map_error(err: MongoError, op: Operation, name: &str, server: &str) -> Error {
    classified(err, Said::Plain)
        .during(op, name)
        .at_server(server)
}

/// A driver error met by the application's own command as a lease error, for business code
/// that mixes mongodb calls with lease calls under one error type: `doing` heads the message,
/// the driver's error is its source, and the verdict [`is_temporary`](Error::is_temporary) is
/// the one the store judges its own commands by (the list at the top of this module): no
/// server, a refused or reset connection: `Unavailable`, temporary; a socket timeout or
/// `MaxTimeMSExpired`: `Timeout`, temporary, the outcome unknown; a server error the server
/// calls retryable or transient (a step-down, a write conflict, a write concern not met):
/// `Backend`, temporary; failed authentication: `Unavailable`, permanent; any other server
/// error (a duplicate key, a validation failure): `Backend`, permanent.
///
/// Why a function and not `impl From<mongodb::error::Error> for lease_core::Error`: Rust's
/// orphan rule allows that impl only in lease-core, which would then depend on mongodb (and on
/// every other backend's driver) and classify its errors a second time.
/// [`MongoResultExt::lease_err`] is the same as a method on a `Result`.
///
/// ```
/// let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
/// let e = lease_mongo::classify(mongodb::error::Error::from(io), "store the order");
/// assert_eq!(e.kind(), lease_core::ErrorKind::Unavailable);
/// assert!(e.is_temporary());
/// assert!(e.to_string().starts_with("store the order: "));
/// ```
pub fn classify(err: MongoError, doing: &str) -> Error {
    classified(err, Said::Doing(doing))
}

/// MongoDB results as lease results: [`classify`] as a method.
pub trait MongoResultExt<T> {
    /// The error, if any, as [`classify`] maps it; `doing` heads its message.
    fn lease_err(self, doing: &str) -> lease_core::Result<T>;
}

impl<T> MongoResultExt<T> for Result<T, MongoError> {
    fn lease_err(self, doing: &str) -> lease_core::Result<T> {
        self.map_err(|e| classify(e, doing))
    }
}

/// A statement's error from an `update` command's reply (`writeErrors[i]`: `{index, code,
/// errmsg}`), met during `op` on `name`: the verdict of any write error ([`map_error`]).
pub(crate) fn statement_error(
    reply: &mongodb::bson::Document,
    op: Operation,
    name: &str,
    server: &str,
) -> Error {
    match mongodb::bson::from_document::<mongodb::error::WriteError>(reply.clone()) {
        Ok(w) => map_error(
            MongoError::from(MongoKind::Write(WriteFailure::WriteError(w))),
            op,
            name,
            server,
        ),
        Err(e) => unreadable("write error", reply, e, op, name, server),
    }
}

/// The write concern error of an `update` command's reply (`writeConcernError`: `{code,
/// errmsg}`), met during `op` on `name`: temporary, the outcome of the writes unknown.
pub(crate) fn write_concern_error(
    reply: &mongodb::bson::Document,
    op: Operation,
    name: &str,
    server: &str,
) -> Error {
    match mongodb::bson::from_document::<mongodb::error::WriteConcernError>(reply.clone()) {
        Ok(w) => map_error(
            MongoError::from(MongoKind::Write(WriteFailure::WriteConcernError(w))),
            op,
            name,
            server,
        ),
        Err(e) => unreadable("write concern error", reply, e, op, name, server),
    }
}

/// A failure the server reported in a form the driver cannot read: temporary (the outcome of
/// the write is unknown), the server's document in the message.
fn unreadable(
    what: &str,
    reply: &mongodb::bson::Document,
    e: impl std::fmt::Display,
    op: Operation,
    name: &str,
    server: &str,
) -> Error {
    Error::new(
        ErrorKind::Backend,
        format!(
            "MongoDB reported a {what} that cannot be read ({e}): {reply}; the outcome is unknown"
        ),
    )
    .with_temporary(true)
    .during(op, name)
    .at_server(server)
}

/// How a message names what the failed command was for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Said<'a> {
    /// Not at all: the error's context (operation, name) says it.
    Plain,
    /// After the message: the command of a multi-step operation (the start-up check).
    Step(&'a str),
    /// Before the message: the application's own command ([`classify`]).
    Doing(&'a str),
}

/// The kind, verdict and message of a driver error, the message said as `said` says. No
/// context attached.
pub(crate) fn classified(err: MongoError, said: Said<'_>) -> Error {
    let said = |what: &str| match said {
        Said::Step(step) => format!("{what} ({step})"),
        Said::Doing(doing) => format!("{doing}: {what}"),
        Said::Plain => what.to_owned(),
    };
    match err.kind.as_ref() {
        MongoKind::Io(io) if io.kind() == std::io::ErrorKind::TimedOut => Error::new(
            ErrorKind::Timeout,
            said("MongoDB did not answer within the socket timeout; the outcome is unknown"),
        )
        .with_source(err),
        MongoKind::ServerSelection { .. }
        | MongoKind::Io(_)
        | MongoKind::ConnectionPoolCleared { .. }
        | MongoKind::DnsResolve { .. } => {
            Error::unavailable(said("MongoDB is unreachable")).with_source(err)
        }
        MongoKind::Authentication { .. } => Error::unavailable(said(
            "MongoDB refused the credentials; check the user and password",
        ))
        .with_source(err)
        .with_temporary(false),
        MongoKind::InvalidTlsConfig { .. } => {
            Error::unavailable(said("the TLS set-up for MongoDB is invalid"))
                .with_source(err)
                .with_temporary(false)
        }
        MongoKind::Shutdown => Error::unavailable(said("the MongoDB client was shut down"))
            .with_source(err)
            .with_temporary(false),
        _ => match code_and_message(&err) {
            Some((MAX_TIME_MS_EXPIRED, _)) => Error::new(
                ErrorKind::Timeout,
                said("MongoDB gave up on the command at its time limit; the outcome is unknown"),
            )
            .with_source(err),
            Some((code, _)) => {
                let concern = matches!(
                    err.kind.as_ref(),
                    MongoKind::Write(WriteFailure::WriteConcernError(_))
                );
                let temporary = concern
                    || TRANSIENT_CODES.contains(&code)
                    || err.contains_label(mongodb::error::RETRYABLE_WRITE_ERROR)
                    || err.contains_label(mongodb::error::TRANSIENT_TRANSACTION_ERROR);
                let message = if concern {
                    said(&format!(
                        "MongoDB did not confirm the write on a majority (code {code}); the \
                         outcome is unknown"
                    ))
                } else {
                    said(&format!("MongoDB refused the command (code {code})"))
                };
                Error::backend(message, err, temporary)
            }
            None => Error::backend(said("the MongoDB driver failed the command"), err, false),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::bson::{doc, from_document};
    use mongodb::error::{CommandError, WriteConcernError, WriteError};

    fn command_error(code: i32, msg: &str) -> MongoError {
        let c: CommandError =
            from_document(doc! { "code": code, "codeName": "X", "errmsg": msg }).unwrap();
        MongoError::from(MongoKind::Command(c))
    }

    fn write_error(code: i32, msg: &str) -> MongoError {
        let w: WriteError = from_document(doc! { "code": code, "errmsg": msg }).unwrap();
        MongoError::from(MongoKind::Write(WriteFailure::WriteError(w)))
    }

    const DUP_ID: &str = "E11000 duplicate key error collection: app.leases index: _id_ dup key: \
                          { _id: \"orders\" }";

    #[test]
    fn the_duplicate_id_error_is_recognised_exactly() {
        assert!(is_duplicate_id(&command_error(11000, DUP_ID)));
        assert!(is_duplicate_id(&write_error(11000, DUP_ID)));
        assert!(is_duplicate_id(&command_error(11000, "")));
        // Another unique index, other codes, other kinds: not a held lease.
        let other = "E11000 duplicate key error collection: app.leases index: holder_1 dup key";
        assert!(!is_duplicate_id(&command_error(11000, other)));
        assert!(!is_duplicate_id(&write_error(11000, other)));
        assert!(!is_duplicate_id(&command_error(11001, DUP_ID)));
        assert!(!is_duplicate_id(&write_error(
            121,
            "Document failed validation"
        )));
        let wc: WriteConcernError =
            from_document(doc! { "code": 11000, "codeName": "DuplicateKey", "errmsg": DUP_ID })
                .unwrap();
        let wc = MongoError::from(MongoKind::Write(WriteFailure::WriteConcernError(wc)));
        assert!(!is_duplicate_id(&wc));
        let io = MongoError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(!is_duplicate_id(&io));
    }

    #[test]
    fn the_applications_errors_get_the_stores_verdict() {
        let e = classify(command_error(112, "write conflict"), "store the order");
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.is_temporary());
        assert!(e.message().starts_with("store the order: "), "{e}");
        let e = Err::<(), _>(write_error(11000, DUP_ID))
            .lease_err("store the order")
            .unwrap_err();
        assert!(!e.is_temporary(), "a duplicate key: {e}");
        assert_eq!(e.operation(), None);
    }

    #[test]
    fn io_is_unavailable_and_names_the_server() {
        let io = MongoError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let e = map_error(io, Operation::Claim, "orders", "db1:27017");
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        assert_eq!(e.server(), Some("db1:27017"), "{e}");
        assert_eq!(
            (e.operation(), e.name()),
            (Some(Operation::Claim), Some("orders")),
            "{e}"
        );
        assert!(e.to_string().contains("db1:27017"), "{e}");
        assert!(e.to_string().contains("claim 'orders'"), "{e}");
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn no_answer_after_sending_is_a_timeout_and_no_server_is_unavailable() {
        let io = MongoError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let e = map_error(io, Operation::Renew, "orders", "db1:27017");
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());
        assert_eq!(e.server(), Some("db1:27017"), "{e}");
        assert!(e.message().contains("outcome is unknown"), "{e}");
        for refused in [
            std::io::ErrorKind::ConnectionRefused,
            std::io::ErrorKind::ConnectionReset,
            std::io::ErrorKind::UnexpectedEof,
        ] {
            let io = MongoError::from(std::io::Error::from(refused));
            let e = map_error(io, Operation::Renew, "orders", "db1:27017");
            assert_eq!(e.kind(), ErrorKind::Unavailable, "{refused:?}");
            assert!(e.is_temporary());
        }
    }

    #[test]
    fn server_errors_are_backend_with_a_verdict() {
        let e = map_error(
            command_error(13, "not authorized"),
            Operation::Renew,
            "n",
            "db:1",
        );
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(!e.is_temporary());
        assert!(e.message().contains("code 13"), "{e}");

        let e = map_error(
            command_error(10107, "not primary"),
            Operation::Renew,
            "n",
            "db:1",
        );
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.is_temporary());

        // A duplicate key outside a claim (or on another index) is an error, not "held".
        let other = "E11000 duplicate key error collection: app.leases index: holder_1 dup key";
        let e = map_error(command_error(11000, other), Operation::Claim, "n", "db:1");
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(!e.is_temporary());

        let e = map_error(
            command_error(50, "operation exceeded time limit"),
            Operation::Get,
            "n",
            "db:1",
        );
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());

        let wc: WriteConcernError = from_document(
            doc! { "code": 64, "codeName": "WriteConcernFailed", "errmsg": "wtimeout" },
        )
        .unwrap();
        let wc = MongoError::from(MongoKind::Write(WriteFailure::WriteConcernError(wc)));
        let e = map_error(wc, Operation::Claim, "n", "db:1");
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.is_temporary());
        assert!(e.message().contains("outcome is unknown"), "{e}");
    }
}
