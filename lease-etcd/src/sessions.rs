//! The owners' partition sessions a store keeps: one etcd lease per owner and TTL, which all the
//! owner's partition keys hang on.

use std::collections::HashMap;

/// The owners' sessions: one etcd lease per (owner, TTL in whole seconds).
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    pub(crate) map: tokio::sync::Mutex<HashMap<(String, i64), i64>>,
}
