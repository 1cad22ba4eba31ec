//! async-nats errors as lease errors.
//!
//! - A request sent with no answer within its bound (the operation timeout, or the driver's own
//!   request timeout) → `Timeout`, temporary: the outcome is unknown.
//! - No connection (a broken pipe, a client that is not connected and reconnecting, no
//!   JetStream answering the subject) → `Unavailable`, temporary. A write the client buffered
//!   while reconnecting may still land later, so its outcome is unknown too.
//! - Both name the server by host and port (never a password).
//! - An error the server answered with → `Backend`, keeping the driver's error as the source;
//!   temporary when trying again may help (a missing stream during a cluster election, a
//!   JetStream that is briefly unavailable), permanent for what needs a fix (a payload too large,
//!   a key the server refuses).

use std::error::Error as StdError;
use std::time::Duration;

use async_nats::jetstream::context::{
    PublishError, PublishErrorKind, RequestError, RequestErrorKind,
};
use async_nats::jetstream::kv::{
    EntryError, EntryErrorKind, PutError, PutErrorKind, UpdateError, UpdateErrorKind,
};
use async_nats::jetstream::stream::{
    DirectGetError, DirectGetErrorKind, LastRawMessageError, LastRawMessageErrorKind, PurgeError,
    PurgeErrorKind,
};
use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind};

/// Where an operation ran: attached to its errors as the core's structured context
/// ([`Error::during`], [`Error::at_server`]), so the messages say only what went wrong.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Site<'a> {
    /// What was attempted; `None` while the store is being opened (no store operation yet).
    pub(crate) op: Option<Operation>,
    /// The lease name (or group, or service), or empty for an operation on the bucket.
    pub(crate) name: &'a str,
    /// host:port of the server.
    pub(crate) server: &'a str,
    /// The bucket.
    pub(crate) bucket: &'a str,
    /// Whether the client was connected when the error came back.
    pub(crate) connected: bool,
}

impl Site<'_> {
    /// `e` with the operation, the name and the server attached; while the store is being
    /// opened, the message says so.
    fn attach(&self, e: Error) -> Error {
        let e = match self.op {
            Some(op) => e.during(op, self.name),
            None => e,
        };
        e.at_server(self.server.to_owned())
    }

    /// The message, led by what was opened when no store operation ran yet.
    fn say(&self, what: impl std::fmt::Display) -> String {
        match self.op {
            Some(_) => what.to_string(),
            None => format!("opening the NATS bucket {}: {what}", self.bucket),
        }
    }

    /// No connection to the server (or no JetStream answering): the request may not have left
    /// this process.
    pub(crate) fn unavailable(&self, source: Option<Box<dyn StdError + Send + Sync>>) -> Error {
        let e = Error::unavailable(self.say(if self.connected {
            "NATS did not take the request (the connection broke, or no JetStream answers)"
        } else {
            "the NATS client is not connected (it is reconnecting; a write it buffered may still \
             land)"
        }));
        self.attach(match source {
            Some(s) => e.with_source(s),
            None => e,
        })
    }

    /// A request that got no answer within the driver's own timeout: `Timeout` while the client
    /// is connected (the request was sent), `Unavailable` while it is not.
    fn no_answer(&self, source: Box<dyn StdError + Send + Sync>) -> Error {
        if !self.connected {
            return self.unavailable(Some(source));
        }
        self.attach(
            Error::new(
                ErrorKind::Timeout,
                self.say("no answer from NATS in time; the outcome is unknown"),
            )
            .with_source(source),
        )
    }

    /// The operation did not finish within `bound`: `Timeout` while the client is connected
    /// (the request was sent), `Unavailable` while it is not.
    pub(crate) fn timed_out(&self, bound: Duration) -> Error {
        if !self.connected {
            return self.unavailable(None);
        }
        self.attach(Error::new(
            ErrorKind::Timeout,
            self.say(format_args!(
                "no answer from NATS within {bound:?}; the outcome is unknown"
            )),
        ))
    }

    /// An error the server answered with.
    pub(crate) fn backend(
        &self,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
        temporary: bool,
    ) -> Error {
        self.attach(Error::backend(
            self.say(format_args!("NATS refused it (bucket {})", self.bucket)),
            source,
            temporary,
        ))
    }

    /// A value in the bucket this store did not write.
    pub(crate) fn foreign_value(&self, key: &str) -> Error {
        self.attach(Error::new(
            ErrorKind::Backend,
            self.say(format_args!(
                "the key {key:?} in bucket {} holds a value this store did not write; remove it \
                 (`nats kv del`) or use another bucket for leases",
                self.bucket
            )),
        ))
    }

    /// A publish (claim or renewal) that failed for another reason than a revision mismatch.
    pub(crate) fn update(&self, e: UpdateError) -> Error {
        match e.kind() {
            UpdateErrorKind::TimedOut => self.no_answer(Box::new(e)),
            UpdateErrorKind::InvalidKey => self.backend(e, false),
            UpdateErrorKind::WrongLastRevision | UpdateErrorKind::Other => {
                let publish = e.source().and_then(|s| s.downcast_ref::<PublishError>());
                match publish.map(PublishError::kind) {
                    Some(PublishErrorKind::TimedOut) => self.no_answer(Box::new(e)),
                    Some(PublishErrorKind::BrokenPipe) => self.unavailable(Some(Box::new(e))),
                    _ if !self.connected => self.unavailable(Some(Box::new(e))),
                    Some(PublishErrorKind::MaxPayloadExceeded) => self.backend(e, false),
                    // No stream answers the bucket's subjects: deleted, or a cluster electing
                    // a leader. Temporary: a re-created bucket makes the store work again.
                    Some(PublishErrorKind::StreamNotFound) => self.backend(e, true),
                    _ => self.backend(e, true),
                }
            }
        }
    }

    /// An unconditional publish (a heartbeat) that failed.
    pub(crate) fn put(&self, e: PutError) -> Error {
        match e.kind() {
            PutErrorKind::InvalidKey => self.backend(e, false),
            PutErrorKind::Publish | PutErrorKind::Ack => {
                let publish = e.source().and_then(|s| s.downcast_ref::<PublishError>());
                match publish.map(PublishError::kind) {
                    Some(PublishErrorKind::TimedOut) => self.no_answer(Box::new(e)),
                    Some(PublishErrorKind::BrokenPipe) => self.unavailable(Some(Box::new(e))),
                    _ if !self.connected => self.unavailable(Some(Box::new(e))),
                    Some(PublishErrorKind::MaxPayloadExceeded) => self.backend(e, false),
                    _ => self.backend(e, true),
                }
            }
        }
    }

    /// A JetStream API request (listing keys) that failed.
    pub(crate) fn request(&self, e: RequestError) -> Error {
        match e.kind() {
            RequestErrorKind::TimedOut => self.no_answer(Box::new(e)),
            RequestErrorKind::NoResponders => self.unavailable(Some(Box::new(e))),
            _ if !self.connected => self.unavailable(Some(Box::new(e))),
            _ => self.backend(e, true),
        }
    }

    /// A read of a key that failed.
    pub(crate) fn entry(&self, e: EntryError) -> Error {
        match e.kind() {
            EntryErrorKind::TimedOut => self.no_answer(Box::new(e)),
            EntryErrorKind::InvalidKey => self.backend(e, false),
            EntryErrorKind::Other => {
                let direct = e.source().and_then(|s| s.downcast_ref::<DirectGetError>());
                match direct.map(DirectGetError::kind) {
                    Some(DirectGetErrorKind::TimedOut) => self.no_answer(Box::new(e)),
                    Some(DirectGetErrorKind::Request) => self.unavailable(Some(Box::new(e))),
                    _ if !self.connected => self.unavailable(Some(Box::new(e))),
                    _ => self.backend(e, true),
                }
            }
        }
    }

    /// A read of a key's last message on the stream's leader (`STREAM.MSG.GET`) that failed.
    pub(crate) fn last_message(&self, e: LastRawMessageError) -> Error {
        match e.kind() {
            LastRawMessageErrorKind::NoMessageFound | LastRawMessageErrorKind::InvalidSubject => {
                self.backend(e, false)
            }
            LastRawMessageErrorKind::Other => {
                let request = e.source().and_then(|s| s.downcast_ref::<RequestError>());
                match request.map(RequestError::kind) {
                    Some(RequestErrorKind::TimedOut) => self.no_answer(Box::new(e)),
                    Some(RequestErrorKind::NoResponders) => self.unavailable(Some(Box::new(e))),
                    _ if !self.connected => self.unavailable(Some(Box::new(e))),
                    _ => self.backend(e, true),
                }
            }
            // E.g. no stream leader while the replicas elect one: temporary.
            LastRawMessageErrorKind::JetStream(_) if !self.connected => {
                self.unavailable(Some(Box::new(e)))
            }
            LastRawMessageErrorKind::JetStream(_) => self.backend(e, true),
        }
    }

    /// A purge (release) that failed.
    pub(crate) fn purge(&self, e: PurgeError) -> Error {
        match e.kind() {
            PurgeErrorKind::TimedOut => self.no_answer(Box::new(e)),
            PurgeErrorKind::Request => self.unavailable(Some(Box::new(e))),
            PurgeErrorKind::JetStream(_) if !self.connected => self.unavailable(Some(Box::new(e))),
            PurgeErrorKind::JetStream(_) => self.backend(e, true),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SITE: Site<'static> = Site {
        op: Some(Operation::Renew),
        name: "x",
        server: "10.0.0.1:4222",
        bucket: "leases_15000ms",
        connected: true,
    };

    #[test]
    fn no_answer_in_time_is_a_timeout_naming_the_server() {
        let site = SITE;
        let e = site.timed_out(Duration::from_secs(5));
        assert_eq!(e.kind(), ErrorKind::Timeout);
        assert!(e.is_temporary());
        assert!(e.to_string().contains("10.0.0.1:4222"), "{e}");
        assert!(e.to_string().contains("outcome is unknown"), "{e}");
        for e in [
            site.update(UpdateError::new(UpdateErrorKind::TimedOut)),
            site.entry(EntryError::new(EntryErrorKind::TimedOut)),
            site.purge(PurgeError::new(PurgeErrorKind::TimedOut)),
            site.request(RequestError::new(RequestErrorKind::TimedOut)),
            site.put(PutError::with_source(
                PutErrorKind::Publish,
                PublishError::new(PublishErrorKind::TimedOut),
            )),
        ] {
            assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
            assert!(e.is_temporary(), "{e}");
            assert!(e.to_string().contains("10.0.0.1:4222"), "{e}");
        }
    }

    #[test]
    fn no_connection_is_unavailable_and_answers_are_backend() {
        let site = SITE;
        let e = site.update(UpdateError::new(UpdateErrorKind::InvalidKey));
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(!e.is_temporary());
        let e = site.purge(PurgeError::new(PurgeErrorKind::Request));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        let e = site.request(RequestError::new(RequestErrorKind::NoResponders));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        let e = site.put(PutError::with_source(
            PutErrorKind::Publish,
            PublishError::new(PublishErrorKind::BrokenPipe),
        ));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        let offline = Site {
            connected: false,
            ..site
        };
        let e = offline.update(UpdateError::new(UpdateErrorKind::Other));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        // Not connected: nothing reached the server, whatever bound passed.
        let e = offline.timed_out(Duration::from_secs(5));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.is_temporary());
        let e = offline.update(UpdateError::new(UpdateErrorKind::TimedOut));
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(e.to_string().contains("10.0.0.1:4222"), "{e}");
    }
}
