//! What the store writes to the bucket: the keys ([`keys`]: lease names, partitions and
//! members escaped into KV keys) and the values ([`codec`]: lease, partition and member
//! records). Pure functions, tested without a server.

pub(crate) mod codec;
pub(crate) mod keys;
