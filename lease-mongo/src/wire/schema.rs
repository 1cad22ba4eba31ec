//! What the start-up check sends and how it judges the answers (the server's version, the
//! collections' type and collation), and the indexes the store creates under `Ddl::Auto`.

use lease_core::{Error, Result};
use mongodb::bson::{Document, doc};

use super::*;

/// The oldest server the store works with: pipeline updates and `$$NOW` came in 4.2.
pub(crate) const MIN_SERVER_VERSION: (i32, i32) = (4, 2);

/// The index on the partition collection that [`owners_pipeline`] uses:
/// `{"_id.g": 1, "_id.p": 1}`.
pub(crate) const PARTITION_INDEX: &str = "group_partition";
/// The index on the membership collection that [`members_pipeline`] uses:
/// `{"_id.s": 1, "_id.n": 1}`.
pub(crate) const MEMBER_INDEX: &str = "service_node";

/// The keys of [`PARTITION_INDEX`].
pub(crate) fn partition_index_keys() -> Document {
    doc! { "_id.g": 1_i32, "_id.p": 1_i32 }
}

/// The keys of [`MEMBER_INDEX`].
pub(crate) fn member_index_keys() -> Document {
    doc! { "_id.s": 1_i32, "_id.n": 1_i32 }
}

/// `buildInfo`, which tells the server's version.
pub(crate) fn build_info_command() -> Document {
    doc! { "buildInfo": 1 }
}

/// Refuses a server older than [`MIN_SERVER_VERSION`], from a `buildInfo` reply.
pub(crate) fn check_build_info(reply: &Document, server: &str) -> Result<()> {
    let parts = match reply.get_array("versionArray") {
        Ok(a) => a.iter().filter_map(number).collect::<Vec<i64>>(),
        Err(_) => Vec::new(),
    };
    let version = reply.get_str("version").unwrap_or("unknown");
    let (Some(&major), Some(&minor)) = (parts.first(), parts.get(1)) else {
        return Err(Error::unsupported(format!(
            "{server} did not tell its version (buildInfo gave {version}); lease-mongo needs \
             MongoDB {}.{} or newer",
            MIN_SERVER_VERSION.0, MIN_SERVER_VERSION.1
        )));
    };
    let (min_major, min_minor) = MIN_SERVER_VERSION;
    if (major, minor) < (i64::from(min_major), i64::from(min_minor)) {
        return Err(Error::unsupported(format!(
            "{server} runs MongoDB {version}; lease-mongo needs {min_major}.{min_minor} or newer \
             (pipeline updates and $$NOW)"
        )));
    }
    Ok(())
}

/// Refuses a collection of the store (lease, partition or membership) that is a view, or
/// whose default collation is not the simple (binary) one: names must compare byte for byte
/// (`"Job"` and `"job"` are two leases, two groups, two nodes), and a query with another
/// collation than the `_id` index's cannot use the index.
pub(crate) fn check_collection(
    collection: &str,
    is_view: bool,
    collation_locale: Option<&str>,
    server: &str,
) -> Result<()> {
    if is_view {
        return Err(Error::unsupported(format!(
            "the lease store's collection {collection:?} on {server} is a view; give a \
             collection name that is free or holds a plain collection"
        )));
    }
    match collation_locale {
        None | Some("simple") => Ok(()),
        Some(locale) => Err(Error::unsupported(format!(
            "the lease store's collection {collection:?} on {server} has the default collation \
             {locale:?}; lease, group and node names must compare byte for byte: use a \
             collection with the simple collation"
        ))),
    }
}
