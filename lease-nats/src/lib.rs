//! Leases on NATS JetStream KV: server-side expiry, the stream sequence as the fencing token.
