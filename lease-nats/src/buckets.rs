//! The store's two buckets as it opens them: looked up, created when missing (as KV buckets,
//! directly on the stream API), and checked for the shape that leases or slot records need.

use std::time::Duration;

use async_nats::jetstream::Context;
use async_nats::jetstream::ErrorCode;
use async_nats::jetstream::context::{
    CreateStreamErrorKind, GetStreamErrorKind, RequestError, RequestErrorKind,
};
use async_nats::jetstream::kv;
use async_nats::jetstream::stream::{self, DiscardPolicy, StorageType};
use lease_core::backend::validate_ttl;
use lease_core::{Error, ErrorKind, Result};
use tracing::info;

use crate::config::{NatsConfig, TtlMismatch};
use crate::error::Site;

/// Looks up the stream `name`: `None` when it does not exist.
pub(crate) async fn find_stream<'s>(
    js: &Context,
    name: &str,
    bound: Duration,
    site: &dyn Fn(bool) -> Site<'s>,
    connected: &dyn Fn() -> bool,
) -> Result<Option<stream::Stream>> {
    let found = tokio::time::timeout(bound, js.get_stream(name))
        .await
        .map_err(|_| site(connected()).timed_out(bound))?;
    let e = match found {
        Ok(stream) => return Ok(Some(stream)),
        Err(e) => e,
    };
    let at = site(connected());
    match e.kind() {
        GetStreamErrorKind::JetStream(j) if j.error_code() == ErrorCode::STREAM_NOT_FOUND => {
            Ok(None)
        }
        GetStreamErrorKind::Request => {
            let timed_out = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<RequestError>())
                .is_some_and(|r| r.kind() == RequestErrorKind::TimedOut);
            if timed_out && at.connected {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "opening the NATS bucket {}: JetStream did not answer within the \
                         client's request timeout (is JetStream enabled with -js, and the server \
                         not overloaded?)",
                        at.bucket
                    ),
                )
                .with_source(e)
                .at_server(at.server.to_owned()));
            }
            Err(Error::unavailable(format!(
                "opening the NATS bucket {}: JetStream did not answer (is the server up, and \
                 JetStream enabled with -js?)",
                at.bucket
            ))
            .with_source(e)
            .at_server(at.server.to_owned()))
        }
        _ => Err(at.backend(e, false)),
    }
}

/// Which of a store's two buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The leases, partitions and members: max age = the lease duration.
    Leases,
    /// The scheduler's slot records: no max age.
    Slots,
}

/// Creates `site.bucket`'s stream as a KV bucket: for leases of `config.ttl`, or for slot
/// records (no max age).
pub(crate) async fn create_bucket(
    js: &Context,
    config: &NatsConfig,
    kind: Kind,
    site: &Site<'_>,
) -> Result<stream::Stream> {
    let bucket = site.bucket;
    let (description, max_age) = match kind {
        Kind::Leases => (
            format!(
                "lease-nats: leases of {:?} (max age = lease duration)",
                config.ttl
            ),
            config.ttl,
        ),
        Kind::Slots => (
            format!(
                "lease-nats: scheduler slot records of the lease bucket {} (no max age)",
                config.bucket
            ),
            Duration::ZERO,
        ),
    };
    let stream_config = stream::Config {
        name: format!("KV_{bucket}"),
        description: Some(description),
        subjects: vec![format!("$KV.{bucket}.>")],
        max_messages_per_subject: 1,
        max_age,
        storage: StorageType::File,
        allow_direct: true,
        allow_rollup: true,
        deny_delete: true,
        deny_purge: false,
        discard: DiscardPolicy::New,
        num_replicas: config.replicas,
        ..Default::default()
    };
    let bound = config.op_timeout;
    let created = tokio::time::timeout(bound, js.create_stream(stream_config))
        .await
        .map_err(|_| site.timed_out(bound))?;
    match created {
        Ok(s) => {
            info!(bucket = %bucket, kind = ?kind, ttl = ?config.ttl, server = site.server, "created the bucket");
            Ok(s)
        }
        Err(e) => match e.kind() {
            // Another process created it first, with another configuration: look at it.
            CreateStreamErrorKind::JetStream(j)
                if j.error_code() == ErrorCode::STREAM_NAME_EXIST =>
            {
                tokio::time::timeout(bound, js.get_stream(format!("KV_{bucket}")))
                    .await
                    .map_err(|_| site.timed_out(bound))?
                    .map_err(|e| site.backend(e, true))
            }
            CreateStreamErrorKind::TimedOut | CreateStreamErrorKind::JetStreamUnavailable => {
                Err(site.unavailable(Some(Box::new(e))))
            }
            _ => Err(site.backend(e, false)),
        },
    }
}

/// Why an existing bucket cannot keep `records`, by the checks both buckets pass: not a mirror,
/// the KV subjects, one message per key.
fn kv_shape(cfg: &stream::Config, bucket: &str, records: &str) -> Option<String> {
    if cfg.mirror.is_some() {
        return Some("it is a mirror; use the origin bucket".into());
    }
    let subject = format!("$KV.{bucket}.>");
    if !cfg.subjects.contains(&subject) {
        return Some(format!("its stream does not take the subjects {subject}"));
    }
    if cfg.max_messages_per_subject != 1 {
        return Some(format!(
            "it keeps {} messages per key; {records} need a history of 1",
            cfg.max_messages_per_subject
        ));
    }
    None
}

/// Checks that an existing bucket can keep slot records: no max age, one message per key.
pub(crate) fn check_slot_bucket(cfg: &stream::Config, bucket: &str, server: &str) -> Result<()> {
    let why = kv_shape(cfg, bucket, "slot records").or_else(|| {
        (!cfg.max_age.is_zero()).then(|| {
            format!(
                "it expires keys after {:?} (its max age), which would drop a job's last instant \
                 and let it run again; use a bucket with no max age (NatsConfig::slot_bucket)",
                cfg.max_age
            )
        })
    });
    match why {
        None => Ok(()),
        Some(why) => Err(Error::new(
            ErrorKind::Backend,
            format!("the NATS bucket {bucket} cannot keep scheduler slot records: {why}"),
        )
        .at_server(server.to_owned())),
    }
}

/// Checks that an existing bucket can carry leases of `config.ttl`; returns the lease duration.
pub(crate) fn check_bucket(
    cfg: &stream::Config,
    config: &NatsConfig,
    server: &str,
) -> Result<Duration> {
    let bucket = &config.bucket;
    let refuse = |why: String| {
        Err(Error::new(
            ErrorKind::Backend,
            format!("the NATS bucket {bucket} cannot carry leases: {why}"),
        )
        .at_server(server.to_owned()))
    };
    if let Some(why) = kv_shape(cfg, bucket, "leases") {
        return refuse(why);
    }
    if cfg.deny_purge {
        return refuse("it denies purge, which release needs".into());
    }
    if cfg.max_age.is_zero() {
        return refuse("it has no max age, so leases in it would never expire".into());
    }
    if cfg.max_age == config.ttl {
        return Ok(config.ttl);
    }
    match config.on_mismatch {
        TtlMismatch::Refuse => Err(Error::invalid_timings(format!(
            "the NATS bucket {bucket} expires keys after {:?} (its max age), but the lease \
             duration is {:?}; the server decides expiry by the bucket's max age, so they must \
             be equal: use a bucket per lease duration (see bucket_for_ttl), or adopt the \
             bucket's max age (TtlMismatch::Adopt)",
            cfg.max_age, config.ttl
        ))
        .at_server(server.to_owned())),
        TtlMismatch::Adopt => {
            validate_ttl(cfg.max_age)?;
            info!(bucket = %bucket, max_age = ?cfg.max_age, asked = ?config.ttl,
                "adopting the bucket's max age as the lease duration");
            Ok(cfg.max_age)
        }
    }
}

/// Whether `kv`'s stream keeps more than one replica (by the stream info read when the store
/// was opened): its reads then go to the stream's leader (see `NatsStore::read_in`).
pub(crate) fn replicated(kv: &kv::Store) -> bool {
    kv.stream.cached_info().config.num_replicas > 1
}
