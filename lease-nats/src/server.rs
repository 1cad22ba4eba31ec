//! The server a store connects to: how errors name it (host and port, never credentials), how
//! long the client pauses between reconnect attempts, and whether its version keeps a
//! replicated bucket's replicas in step.

use std::time::Duration;

use lease_core::{Error, Result};

/// The oldest nats-server on which a replicated bucket's replicas stay in step across an
/// expiry. Before 2.12.0 a follower checks `Nats-Expected-Last-Subject-Sequence` again when it
/// applies a message, against its own store; max age is enforced by each node's own timer, so a
/// follower that still holds a key's expired message (one replaying what it missed while down
/// always does) refuses a claim the leader accepted. Its stream is one message short from then
/// on, and once it leads it hands out stream sequences (this store's terms) that were already
/// handed out. nats-server 2.12.0 has followers apply what the leader accepted
/// (nats-io/nats-server#7119).
pub(crate) const REPLICAS_FIXED_IN: (u64, u64, u64) = (2, 12, 0);

/// `major.minor.patch` of a server version string (`2.10.27`, `v2.9.10`, `2.11.0-beta.1`);
/// `None` when it does not start with three numbers.
pub(crate) fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let mut parts = version.trim().trim_start_matches('v').splitn(3, '.');
    let mut number = |last: bool| -> Option<u64> {
        let part = parts.next()?;
        let digits = if last {
            part.split(|c: char| !c.is_ascii_digit()).next()?
        } else {
            part
        };
        digits.parse().ok()
    };
    Some((number(false)?, number(false)?, number(true)?))
}

/// Whether a server of `version` may let a replicated bucket's replicas diverge (see
/// [`REPLICAS_FIXED_IN`]): older than it. A version that cannot be parsed is not flagged.
pub(crate) fn replicas_may_diverge(version: &str) -> bool {
    parse_version(version).is_some_and(|v| v < REPLICAS_FIXED_IN)
}

/// Refuses a bucket of `replicas` replicas on a server of `version` older than
/// [`REPLICAS_FIXED_IN`] (`Unsupported`, not temporary), unless `allowed`
/// ([`NatsConfig::allow_diverging_replicas`](crate::NatsConfig::allow_diverging_replicas)): then it warns, once per process.
pub(crate) fn check_replicas(
    bucket: &str,
    replicas: usize,
    version: &str,
    server: &str,
    allowed: bool,
) -> Result<()> {
    static WARNED: std::sync::Once = std::sync::Once::new();
    if replicas <= 1 || !replicas_may_diverge(version) {
        return Ok(());
    }
    let (a, b, c) = REPLICAS_FIXED_IN;
    if !allowed {
        return Err(Error::unsupported(format!(
            "the NATS bucket {bucket} has {replicas} replicas on nats-server {version}: before \
             {a}.{b}.{c} a follower can refuse a claim its leader accepted \
             (nats-io/nats-server#7119), and fencing terms go back once it leads; upgrade the \
             servers to {a}.{b}.{c} or newer, use one replica, or accept the risk with \
             NatsConfig::allow_diverging_replicas(true)"
        ))
        .at_server(server.to_owned())
        .with_temporary(false));
    }
    WARNED.call_once(|| {
        tracing::warn!(
            bucket,
            replicas,
            version,
            server,
            "the NATS bucket is replicated on nats-server {version}: before {a}.{b}.{c} \
             a follower can refuse a claim its leader accepted (nats-io/nats-server#7119), \
             and fencing terms go back once it leads; accepted by allow_diverging_replicas"
        );
    });
    Ok(())
}

/// host:port of the server a client is connected to.
pub(crate) fn server_of(client: &async_nats::Client) -> String {
    let info = client.server_info();
    if info.host.is_empty() {
        "(unknown NATS server)".to_owned()
    } else {
        format!("{}:{}", info.host, info.port)
    }
}

/// host:port of every server in a URL list, without credentials.
pub(crate) fn url_label(url: &str) -> Result<String> {
    let mut labels = Vec::new();
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<async_nats::ServerAddr>() {
            Ok(addr) => labels.push(format!("{}:{}", addr.host(), addr.port())),
            Err(e) => {
                let shown = lease_core::telemetry::redact::redact_url(part);
                return Err(Error::unavailable(format!(
                    "cannot connect to NATS: {shown:?} is not a NATS server URL"
                ))
                .with_source(e)
                .with_temporary(false));
            }
        }
    }
    if labels.is_empty() {
        return Err(
            Error::unavailable("cannot connect to NATS: the URL is empty").with_temporary(false),
        );
    }
    Ok(labels.join(","))
}

#[cfg(test)]
mod tests {
    use lease_core::ErrorKind;

    use super::*;

    #[test]
    fn servers_before_the_replica_fix_are_flagged() {
        assert_eq!(parse_version("2.10.27"), Some((2, 10, 27)));
        assert_eq!(parse_version("v2.9.10"), Some((2, 9, 10)));
        assert_eq!(parse_version("2.11.0-beta.1"), Some((2, 11, 0)));
        assert_eq!(parse_version("2.10"), None);
        assert_eq!(parse_version(""), None);
        for old in ["2.9.10", "2.10.27", "2.11.9", "1.4.1", "2.2.0"] {
            assert!(replicas_may_diverge(old), "{old}");
        }
        for new in ["2.12.0", "2.15.1", "3.0.0", "not a version"] {
            assert!(!replicas_may_diverge(new), "{new}");
        }
    }

    #[test]
    fn replicated_buckets_on_old_servers_are_refused_unless_allowed() {
        let refused = check_replicas("b", 3, "2.10.27", "n1:4222", false).unwrap_err();
        assert_eq!(refused.kind(), lease_core::ErrorKind::Unsupported);
        assert!(!refused.is_temporary());
        assert!(
            refused
                .to_string()
                .contains("allow_diverging_replicas(true)"),
            "{refused}"
        );
        assert!(check_replicas("b", 3, "2.10.27", "n1:4222", true).is_ok());
        assert!(check_replicas("b", 1, "2.9.10", "n1:4222", false).is_ok());
        assert!(check_replicas("b", 3, "2.12.0", "n1:4222", false).is_ok());
    }

    #[test]
    fn url_labels_hide_credentials() {
        assert_eq!(
            url_label("nats://user:secret@10.1.2.3:4333").unwrap(),
            "10.1.2.3:4333"
        );
        assert_eq!(url_label("localhost").unwrap(), "localhost:4222");
        assert_eq!(url_label("nats://a:1, nats://b:2").unwrap(), "a:1,b:2");
        let e = url_label("nats://u:secret@[bad").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert!(!e.is_temporary());
        assert!(!e.to_string().contains("secret"), "{e}");
        assert!(url_label("").is_err());
    }
}

/// The pause before reconnect attempt `attempts` (counted from 1): none for the first, then
/// 50 ms doubling up to 500 ms.
pub(crate) fn reconnect_delay(attempts: usize) -> Duration {
    if attempts <= 1 {
        return Duration::ZERO;
    }
    let exp = u32::try_from(attempts.saturating_sub(2).min(4)).unwrap_or(4);
    Duration::from_millis(50 * 2u64.pow(exp)).min(Duration::from_millis(500))
}

#[cfg(test)]
mod reconnect_tests {
    use super::*;

    #[test]
    fn reconnect_pauses_stay_short() {
        assert_eq!(reconnect_delay(1), Duration::ZERO);
        assert_eq!(reconnect_delay(2), Duration::from_millis(50));
        assert_eq!(reconnect_delay(3), Duration::from_millis(100));
        assert_eq!(reconnect_delay(100), Duration::from_millis(500));
    }
}
