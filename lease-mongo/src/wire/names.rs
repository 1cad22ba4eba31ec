//! The listing of names: two `aggregate`s on the lease collection, each a range of strings (the
//! lease documents' `_id`, which is the name; the counted names' `_id.c`, their `_id` being
//! `{ c: <name> }`), never a regular expression, so no character of the prefix is special; the
//! `_id` index reads the leases' range in order. Strings compare byte for byte (the simple collation), which is the names'
//! byte order, and a string bound matches strings only, so each range finds one kind.

use mongodb::bson::{Bson, Document, doc};

/// The range `prefix <= name < end` (no upper bound when `end` is `None`), past `after` when
/// given, as the conditions of a `$match` field.
fn range(prefix: &str, end: Option<&str>, after: Option<&str>, wrap: fn(&str) -> Bson) -> Document {
    let mut cond = doc! { "$gte": wrap(prefix) };
    if let Some(end) = end {
        cond.insert("$lt", wrap(end));
    }
    if let Some(after) = after {
        cond.insert("$gt", wrap(after));
    }
    cond
}

fn string(s: &str) -> Bson {
    Bson::String(s.to_owned())
}

/// The lease documents in the range, by name, at most `limit` (an int32, as every server and
/// the emulator take it): `{ _id: <name> }` each.
pub(crate) fn lease_names_pipeline(
    prefix: &str,
    end: Option<&str>,
    after: Option<&str>,
    limit: i32,
) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id": range(prefix, end, after, string) } },
        doc! { "$sort": { "_id": 1 } },
        doc! { "$limit": limit },
        doc! { "$project": { "_id": 1 } },
    ]
}

/// The counted names' documents in the range, by name, at most `limit`: `{ _id: { c: <name> }
/// }` each. The range is on `_id.c`, a string: a range of whole `_id` documents (`{ c: P }` to
/// `{ c: E }`), which MongoDB orders by that one field, would read the `_id` index, but the
/// wire emulator CI runs on matches no document with it; on `_id.c` the server scans the lease
/// collection for the counted names (one document per name).
pub(crate) fn counted_names_pipeline(
    prefix: &str,
    end: Option<&str>,
    after: Option<&str>,
    limit: i32,
) -> Vec<Document> {
    vec![
        doc! { "$match": { "_id.c": range(prefix, end, after, string) } },
        doc! { "$sort": { "_id.c": 1 } },
        doc! { "$limit": limit },
        doc! { "$project": { "_id": 1 } },
    ]
}

/// The name a listed document holds: a lease's `_id`, or a counted name's `_id.c`.
pub(crate) fn listed_name(doc: &Document) -> Option<String> {
    match doc.get("_id")? {
        Bson::String(name) => Some(name.clone()),
        Bson::Document(id) => id.get_str("c").ok().map(str::to_owned),
        _ => None,
    }
}
