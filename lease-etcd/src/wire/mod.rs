//! What goes over the wire: how names become etcd keys ([`keys`]) and how records become
//! values ([`codec`]).

pub(crate) mod codec;
pub(crate) mod keys;
