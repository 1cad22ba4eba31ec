//! The records as etcd values. Each starts with a tag naming its kind and version, so a value
//! this store did not write is told apart (and reported) rather than misread.
//!
//! | record | value |
//! |---|---|
//! | lease | `lease1;<holder token, 32 hex digits>;<instance>` |
//! | partition | `part1;<owner>` |
//! | member | `member1`, the address and the groups, each on its own line |
//!
//! The term of a lease and the epoch of a partition are not in the value: they are the key's
//! create revision, which etcd keeps with every key.

use lease_core::backend::{HolderToken, decode_groups, encode_groups};

const LEASE_TAG: &str = "lease1;";
const PART_TAG: &str = "part1;";
const MEMBER_TAG: &str = "member1\n";

/// A lease value: who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LeaseValue {
    pub(crate) holder: HolderToken,
    pub(crate) instance: String,
}

impl LeaseValue {
    pub(crate) fn encode(holder: &HolderToken, instance: &str) -> Vec<u8> {
        format!("{LEASE_TAG}{};{instance}", holder.to_hex()).into_bytes()
    }

    pub(crate) fn decode(value: &[u8]) -> Option<LeaseValue> {
        let text = std::str::from_utf8(value).ok()?.strip_prefix(LEASE_TAG)?;
        let (hex, instance) = text.split_once(';')?;
        Some(LeaseValue {
            holder: HolderToken::from_hex(hex)?,
            instance: instance.to_owned(),
        })
    }
}

/// A partition value: the owner.
pub(crate) fn encode_part(owner: &str) -> Vec<u8> {
    format!("{PART_TAG}{owner}").into_bytes()
}

/// The owner in a partition value.
pub(crate) fn decode_part(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    text.strip_prefix(PART_TAG).map(str::to_owned)
}

/// A member value: the address and the groups (neither holds a line feed: both are checked
/// for control characters before any I/O).
pub(crate) fn encode_member(address: &str, groups: &[String]) -> Vec<u8> {
    format!("{MEMBER_TAG}{address}\n{}", encode_groups(groups)).into_bytes()
}

/// The address and groups in a member value.
pub(crate) fn decode_member(value: &[u8]) -> Option<(String, Vec<String>)> {
    let text = std::str::from_utf8(value).ok()?.strip_prefix(MEMBER_TAG)?;
    let (address, groups) = text.split_once('\n')?;
    Some((address.to_owned(), decode_groups(groups)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn records_round_trip_and_foreign_values_are_refused() {
        let h = HolderToken::mint();
        let v = LeaseValue::decode(&LeaseValue::encode(&h, "worker;7")).unwrap();
        assert_eq!((v.holder, v.instance.as_str()), (h, "worker;7"));
        assert_eq!(LeaseValue::decode(b"hello"), None);
        assert_eq!(decode_part(&encode_part("n@1")).as_deref(), Some("n@1"));
        assert_eq!(decode_part(b"x"), None);
        let groups = vec!["a".to_string(), "b".to_string()];
        assert_eq!(
            decode_member(&encode_member("h:1", &groups)),
            Some(("h:1".to_string(), groups))
        );
        assert_eq!(
            decode_member(&encode_member("", &[])),
            Some((String::new(), vec![]))
        );
    }
}
