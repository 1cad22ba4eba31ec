//! The store's hint state, shared by its clones: the hub its waiters subscribe to, the watch
//! feeding it (its client and running listener), and when the last put of each lease key was
//! seen.

use std::collections::HashMap;
use std::sync::Arc;

use etcd_client::Client;
use lease_core::backend::listen::Listener;
use lease_core::backend::{clock::Stamp, notify::Hub};

/// When this store's watch saw the last put of each lease key, by key: the put's mod revision
/// and the moment. The put (a claim, or a renewal's move onto a longer session) was taken by
/// etcd before that moment, after the holder started counting its term's TTL, so the name's
/// own deadline as that put set it is before that moment plus the TTL (see
/// [`EtcdStore::time_left_of`](crate::EtcdStore::time_left_of)). A key's entry goes with its
/// deletion.
pub(crate) type PutsSeen = Arc<std::sync::Mutex<HashMap<Vec<u8>, (i64, Stamp)>>>;

/// The store's hints: the hub waiters subscribe to, and the watch feeding it.
pub(crate) struct Hints {
    pub(crate) hub: Hub,
    pub(crate) watch: std::sync::Mutex<Watch>,
    /// The last put of each lease key seen, by key.
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
