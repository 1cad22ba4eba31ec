//! Listing the names a store keeps: [`LeaseStore::names`](crate::LeaseStore::names) answers
//! one page of the names under a prefix, in byte order.
//!
//! The rules, the same on every backend:
//!
//! - **Names with a record.** A name is listed when the store keeps a record of it: a plain
//!   lease (held, released or expired, as [`get`](crate::LeaseStore::get) would answer `Some`)
//!   or permits of a counted name (as [`permits`](crate::backend::permits::PermitStore::permits)
//!   would answer non-empty). A store whose server removes ended records
//!   ([`keeps_ended_records`](crate::backend::Capabilities::keeps_ended_records) `false`: etcd,
//!   NATS once the bucket's max age has passed) lists a name only while it still has one. Each
//!   [`ListedName`] says which kinds of record the name has; reading them is `get` and
//!   `permits`.
//! - **By prefix, literally.** `prefix` is compared byte for byte: no character is special, so
//!   `%`, `_`, `*`, `?`, `[`, `.` and `>` match only themselves on every backend. The empty
//!   prefix lists every name. A prefix is checked like a name (at most the store's
//!   [`max_name_bytes`](crate::backend::Capabilities::max_name_bytes), no control character) and
//!   refused with `InvalidName` before any I/O.
//! - **Byte order, in pages.** Names come in byte order of their UTF-8 (which is code-point
//!   order), at most `limit` per call, `limit` at most [`MAX_NAMES_PER_PAGE`]. `after`, when
//!   given, lists only names greater than it: pass the last name of one page to get the next.
//!   [`NamePage::more`] says whether names under the prefix are left past the page.
//! - **Read-only and not a snapshot.** A listing never writes. Paged over several calls, a name
//!   claimed or removed meanwhile may or may not show; each page on its own is as the store
//!   answered it.
//!
//! ```
//! use lease_core::LeaseStore;
//! use lease_core::backend::HolderToken;
//! use lease_local::MemoryStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lease_core::Result<()> {
//! let store = MemoryStore::new();
//! let ttl = std::time::Duration::from_secs(10);
//! for name in ["jobs/b", "jobs/a", "mail"] {
//!     store.claim(name, &HolderToken::mint(), "me", ttl).await?;
//! }
//! let page = store.names("jobs/", None, 10).await?;
//! let names: Vec<&str> = page.names.iter().map(|n| n.name.as_str()).collect();
//! assert_eq!(names, ["jobs/a", "jobs/b"]);
//! assert!(!page.more);
//! let first = store.names("", None, 1).await?;
//! assert!(first.more);
//! let next = store.names("", Some(&first.names[0].name), 10).await?;
//! assert_eq!(next.names.len(), 2);
//! # Ok(()) }
//! ```

use crate::store::error::{Error, Result};

/// The most names one call of [`LeaseStore::names`](crate::LeaseStore::names) answers: a page
/// is one bounded read on every backend (Redis and NATS, which cannot read names in order, keep
/// at most this many plus one while they walk the keys).
pub const MAX_NAMES_PER_PAGE: usize = 1000;

/// One name a store keeps a record of, and which kinds of record.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListedName {
    /// The name.
    pub name: String,
    /// It has a plain lease record ([`get`](crate::LeaseStore::get) answers `Some`).
    pub lease: bool,
    /// It has permit records of a counted name
    /// ([`permits`](crate::backend::permits::PermitStore::permits) answers some).
    pub counted: bool,
}

/// One page of [`LeaseStore::names`](crate::LeaseStore::names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamePage {
    /// The names, in byte order, each once.
    pub names: Vec<ListedName>,
    /// More names under the prefix follow the last of this page: ask again with it as `after`.
    pub more: bool,
}

impl NamePage {
    /// The page of at most `limit` names from `found`, the names a store read (kinds merged, in
    /// any order, repeats allowed, none outside the prefix or not after the cursor), when it read
    /// every name of the range or at least the first `limit + 1` of each kind it reads apart: the
    /// first `limit` distinct names in byte order, and `more` when there were others.
    pub fn from_found(found: impl IntoIterator<Item = ListedName>, limit: usize) -> NamePage {
        let mut merged: std::collections::BTreeMap<String, ListedName> = Default::default();
        for n in found {
            let entry = merged.entry(n.name.clone()).or_insert(ListedName {
                name: n.name,
                lease: false,
                counted: false,
            });
            entry.lease |= n.lease;
            entry.counted |= n.counted;
        }
        let more = merged.len() > limit;
        NamePage {
            names: merged.into_values().take(limit).collect(),
            more,
        }
    }
}

/// A name with a plain lease record.
pub fn lease_name(name: impl Into<String>) -> ListedName {
    ListedName {
        name: name.into(),
        lease: true,
        counted: false,
    }
}

/// A name with permit records.
pub fn counted_name(name: impl Into<String>) -> ListedName {
    ListedName {
        name: name.into(),
        lease: false,
        counted: true,
    }
}

/// Whether `name` belongs on a page of `prefix` after `after`: it starts with `prefix` and is
/// greater than `after`, byte for byte. For a backend that filters what it read.
pub fn in_range(name: &str, prefix: &str, after: Option<&str>) -> bool {
    name.starts_with(prefix) && after.is_none_or(|a| name > a)
}

/// The least string greater than every string that starts with `prefix`, in byte order (code
/// points): `prefix` with its last character that is not U+10FFFF moved to the next one and
/// what follows it dropped. `None` when there is none (the empty prefix, or one of U+10FFFF
/// only): every string from `prefix` on then starts with it. With it, "starts with `prefix`" is
/// the range `prefix <= name < end`, which an ordered index reads without any pattern (and so
/// without any character to escape).
///
/// ```
/// use lease_core::backend::names::prefix_end;
/// assert_eq!(prefix_end("jobs/").as_deref(), Some("jobs0"));
/// assert_eq!(prefix_end("a%").as_deref(), Some("a&"));
/// assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
/// assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"));
/// assert_eq!(prefix_end(""), None);
/// ```
pub fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = match u32::from(last) {
            0xD7FF => Some('\u{E000}'),
            n => char::from_u32(n + 1),
        };
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Checks the arguments of a listing: the prefix like a name (but it may be empty), `after` a
/// name when given, and `limit` from 1 to [`MAX_NAMES_PER_PAGE`].
pub(crate) fn check(
    prefix: &str,
    after: Option<&str>,
    limit: usize,
    max_bytes: usize,
) -> Result<()> {
    if prefix.len() > max_bytes {
        return Err(Error::invalid_name(format!(
            "name prefix is {} bytes long; this store holds names of at most {max_bytes} bytes, \
             so none starts with it: give a shorter prefix",
            prefix.len()
        )));
    }
    if let Some((at, c)) = prefix.char_indices().find(|(_, c)| c.is_control()) {
        return Err(Error::invalid_name(format!(
            "name prefix holds the control character {c:?} at byte {at}, which no name holds; \
             use printable characters"
        )));
    }
    if let Some(after) = after {
        crate::store::validate::validate_name(after, max_bytes).map_err(|e| {
            Error::invalid_name(format!(
                "the name to list after: {}",
                e.message().replace("lease name", "name")
            ))
        })?;
    }
    if limit == 0 || limit > MAX_NAMES_PER_PAGE {
        return Err(Error::invalid_argument(format!(
            "a listing answers from 1 to {MAX_NAMES_PER_PAGE} names per call; asked for {limit} \
             (page through more with `after`)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn prefix_end_bounds_exactly_the_names_under_the_prefix() {
        let names = [
            "a",
            "a%",
            "a%b",
            "a&",
            "a\u{10FFFF}",
            "a\u{10FFFF}x",
            "b",
            "a_",
            "`",
        ];
        for prefix in ["a", "a%", "a\u{10FFFF}", "`", "a_"] {
            let end = prefix_end(prefix);
            for name in names {
                let in_range = name >= prefix && end.as_deref().is_none_or(|e| name < e);
                assert_eq!(in_range, name.starts_with(prefix), "{prefix:?} {name:?}");
            }
        }
        assert_eq!(prefix_end("\u{10FFFF}\u{10FFFF}"), None);
    }

    #[test]
    fn pages_merge_kinds_and_cut_at_the_limit() {
        let page = NamePage::from_found(
            [
                lease_name("b"),
                counted_name("a"),
                lease_name("a"),
                lease_name("c"),
            ],
            2,
        );
        assert_eq!(
            page.names,
            [
                ListedName {
                    name: "a".into(),
                    lease: true,
                    counted: true
                },
                lease_name("b")
            ]
        );
        assert!(page.more);
        assert!(!NamePage::from_found([lease_name("a")], 1).more);
    }

    #[test]
    fn arguments_are_checked() {
        assert!(check("", None, 1, 255).is_ok());
        let e = check("a\nb", None, 10, 255).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName);
        assert!(
            e.message()
                .starts_with("name prefix holds the control character '\\n' at byte 1"),
            "{e}"
        );
        let e = check(&"x".repeat(256), None, 10, 255).unwrap_err();
        assert!(e.message().contains("256 bytes"), "{e}");
        assert!(check("a", Some(""), 10, 255).is_err());
        let e = check("a", None, 0, 255).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(check("a", None, MAX_NAMES_PER_PAGE + 1, 255).is_err());
        assert!(check("a", Some("a"), MAX_NAMES_PER_PAGE, 255).is_ok());
        assert!(in_range("ab", "a", Some("aa")) && !in_range("aa", "a", Some("aa")));
    }
}
