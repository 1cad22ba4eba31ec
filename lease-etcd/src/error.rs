//! etcd-client errors as lease errors.
//!
//! - A request with no answer within [`EtcdConfig::op_timeout`](crate::EtcdConfig::op_timeout)
//!   (or the server's own deadline) → `Timeout`, temporary: the outcome is unknown.
//! - No connection (refused, reset, a stream that broke, a server that says it is unavailable:
//!   no leader, shutting down) → `Unavailable`, temporary. A write that fails so may still have
//!   landed: its outcome is unknown too.
//! - Both name the server by host and port (never a password).
//! - Any other error the server answered with → `Backend`, keeping the driver's error as the
//!   source; temporary when trying again may help (too many requests, an aborted request),
//!   permanent for what needs a fix (a request too large, a permission refused). etcd's
//!   "requested lease not found" (the etcd lease a request used ended before it landed: the
//!   request was refused whole) is temporary.

use std::time::Duration;

use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind};
use tonic::Code;

/// Where an operation ran: attached to its errors as the core's structured context
/// ([`Error::during`], [`Error::at_server`]), so the messages say only what went wrong.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site<'a> {
    /// What was attempted; `None` while the store is being opened.
    pub(crate) op: Option<Operation>,
    /// The lease name (or group, or service), or empty.
    pub(crate) name: &'a str,
    /// The endpoints, by host and port; empty for an application's own request
    /// ([`classify`]), whose error names no server.
    pub(crate) server: &'a str,
    /// What the application's own request was for ([`classify`]): heads the message.
    pub(crate) doing: Option<&'a str>,
}

impl Site<'_> {
    fn attach(&self, e: Error) -> Error {
        let e = match self.op {
            Some(op) => e.during(op, self.name),
            None => e,
        };
        if self.server.is_empty() {
            return e;
        }
        e.at_server(self.server.to_owned())
    }

    fn say(&self, what: impl std::fmt::Display) -> String {
        match (self.doing, self.op) {
            (Some(doing), _) => format!("{doing}: {what}"),
            (None, Some(_)) => what.to_string(),
            (None, None) => format!("opening the etcd lease store: {what}"),
        }
    }

    /// An error of the etcd client.
    pub(crate) fn etcd(&self, e: etcd_client::Error) -> Error {
        use etcd_client::Error as E;
        if lease_not_found(&e) {
            // An etcd lease this request hangs a key on, or renews, ended (ran out or was
            // revoked) before the request landed: etcd refused the whole request, nothing was
            // written, and a new request on a new etcd lease may succeed.
            return self.attach(Error::backend(
                self.say(
                    "the etcd lease this request used had ended (expired or revoked) before it \
                     landed; nothing was written, try again",
                ),
                e,
                true,
            ));
        }
        let unavailable = |e: E| {
            self.attach(
                Error::unavailable(self.say(
                    "etcd cannot be reached (no connection, or the member has no leader); a \
                     write may still have landed",
                ))
                .with_source(e),
            )
        };
        let status = match &e {
            E::GRpcStatus(status) => Some((status.code(), status.message().contains("transport"))),
            _ => None,
        };
        match status {
            Some((Code::Unavailable | Code::Cancelled, _) | (Code::Unknown, true)) => {
                unavailable(e)
            }
            Some((Code::DeadlineExceeded, _)) => self.attach(
                Error::new(
                    ErrorKind::Timeout,
                    self.say("etcd did not answer in time; the outcome is unknown"),
                )
                .with_source(e),
            ),
            Some((Code::ResourceExhausted | Code::Aborted, _)) => {
                self.attach(Error::backend(self.say("etcd refused it for now"), e, true))
            }
            Some(_) => self.attach(Error::backend(self.say("etcd refused it"), e, false)),
            None => match e {
                E::TransportError(_) | E::IoError(_) | E::LeaseKeepAliveError(_) => unavailable(e),
                other => self.attach(Error::backend(
                    self.say("the etcd client failed"),
                    other,
                    false,
                )),
            },
        }
    }

    /// The operation did not finish within `bound`.
    pub(crate) fn timed_out(&self, bound: Duration) -> Error {
        self.attach(Error::new(
            ErrorKind::Timeout,
            self.say(format_args!(
                "no answer from etcd within {bound:?}; the outcome is unknown"
            )),
        ))
    }

    /// A value under the store's prefix that this store did not write.
    pub(crate) fn foreign_value(&self, key: &[u8]) -> Error {
        self.attach(Error::new(
            ErrorKind::Backend,
            self.say(format_args!(
                "the key {:?} holds a value this store did not write; remove it (`etcdctl del`) \
                 or give the store another key prefix",
                String::from_utf8_lossy(key)
            )),
        ))
    }

    /// A claim whose transaction found the keys it compares changed `tries` times in a row
    /// (racing claims and releases of one counted name): temporary, nothing was written.
    pub(crate) fn racing(&self, tries: usize) -> Error {
        self.attach(
            Error::new(
                ErrorKind::Backend,
                self.say(format_args!(
                    "the name's permits changed under this claim {tries} times in a row \
                     (racing claims); nothing was claimed, try again"
                )),
            )
            .with_temporary(true),
        )
    }

    /// A key that moved onto another etcd lease `tries` times in a row while a listing asked
    /// about its lease (a holder renewing faster than the listing reads): temporary, nothing
    /// was written.
    pub(crate) fn moving(&self, key: &[u8], tries: usize) -> Error {
        self.attach(
            Error::new(
                ErrorKind::Backend,
                self.say(format_args!(
                    "the key {:?} moved onto another etcd lease {tries} times while it was read; \
                     try again",
                    String::from_utf8_lossy(key)
                )),
            )
            .with_temporary(true),
        )
    }

    /// An answer that lacks what every etcd answer carries.
    pub(crate) fn malformed(&self, what: &str) -> Error {
        self.attach(Error::new(
            ErrorKind::Backend,
            self.say(format_args!("etcd answered without {what}")),
        ))
    }
}

/// An etcd-client error met by the application's own request as a lease error, for code that
/// mixes etcd calls with lease calls under one error type (lease-fence's etcd fence maps its
/// transactions' errors with it): `doing` heads the message, the etcd error is its source, and
/// the verdict [`is_temporary`](Error::is_temporary) is the one the store judges its own
/// requests by (the list at the top of this module): no connection or no leader is
/// `Unavailable`, temporary (a write may still have landed); no answer in time is `Timeout`,
/// temporary, the outcome unknown; too many requests or an aborted request is `Backend`,
/// temporary; any other refusal is `Backend`, permanent. The counterpart of
/// `lease_sql::classify` and `lease_redis::classify`.
///
/// ```
/// let e = lease_etcd::classify(etcd_client::Error::InvalidArgs("no key".into()), "put the report");
/// assert_eq!(e.kind(), lease_core::ErrorKind::Backend);
/// assert!(!e.is_temporary());
/// assert!(e.to_string().starts_with("put the report: "));
/// ```
pub fn classify(err: etcd_client::Error, doing: &str) -> Error {
    Site {
        op: None,
        name: "",
        server: "",
        doing: Some(doing),
    }
    .etcd(err)
}

/// `true` when etcd said that a lease id is not (or no longer) granted: the lease expired or
/// was revoked.
pub(crate) fn lease_not_found(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            s.code() == Code::NotFound && s.message().contains("lease not found")
        }
        etcd_client::Error::LeaseKeepAliveError(m) => m.contains("not found"),
        _ => false,
    }
}
