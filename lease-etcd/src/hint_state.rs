//! The store's hint state, shared by its clones: the hub its waiters subscribe to, the watch
//! feeding it (its client and running listener), and the first put of a lease key seen on each
//! etcd lease.

use std::collections::HashMap;
use std::sync::Arc;

use etcd_client::Client;
use lease_core::backend::listen::Listener;
use lease_core::backend::{clock::Stamp, notify::Hub};

/// When this store's watch first saw a lease key put on each etcd lease: by etcd's order, after
/// the lease was granted, so the lease's TTL as granted runs out before that moment plus the
/// TTL, unless a keep-alive moved it later (see
/// [`EtcdStore::time_left_of`](crate::EtcdStore::time_left_of)).
pub(crate) type PutsSeen = Arc<std::sync::Mutex<HashMap<i64, Stamp>>>;

/// The store's hints: the hub waiters subscribe to, and the watch feeding it.
pub(crate) struct Hints {
    pub(crate) hub: Hub,
    pub(crate) watch: std::sync::Mutex<Watch>,
    /// The first put of a lease key seen on each etcd lease.
    pub(crate) puts_seen: PutsSeen,
}

pub(crate) struct Watch {
    /// The client the watch runs on.
    pub(crate) client: Client,
    /// The running listener; `None` until the first wait.
    pub(crate) listener: Option<Listener>,
}

impl Hints {
    /// Hints watched through `client`, disconnected until the watch is in place.
    pub(crate) fn new(client: Client) -> Hints {
        let hub = Hub::new();
        hub.set_connected(false);
        Hints {
            hub,
            watch: std::sync::Mutex::new(Watch {
                client,
                listener: None,
            }),
            puts_seen: PutsSeen::default(),
        }
    }
}
