//! Names as etcd keys.
//!
//! etcd keys are bytes, so a name is kept as it is, byte for byte, after the store's prefix
//! and a namespace: `l/` for leases, `c/` for the permits of counted names, `p/` for
//! partitions, `m/` for members. A group or service
//! (or counted name) is closed by a NUL byte, which no name holds (names hold no control characters), so the
//! keys of group `a` never share a prefix with those of group `a/b`.
//!
//! | record | key |
//! |---|---|
//! | lease `name` | `<prefix>l/<name>` |
//! | permit `i` of counted `name` | `<prefix>c/<name>\0<i as 10 decimal digits>` |
//! | partition `p` of `group` | `<prefix>p/<group>\0<p as 10 decimal digits>` |
//! | member `node` of `service` | `<prefix>m/<service>\0<node>` |

/// The key of lease `name`.
pub(crate) fn lease(prefix: &str, name: &str) -> Vec<u8> {
    join(prefix, "l/", name, None)
}

/// The prefix of every permit key of the counted name `name`.
pub(crate) fn permits(prefix: &str, name: &str) -> Vec<u8> {
    join(prefix, "c/", name, Some(""))
}

/// The key of permit `i` of the counted name `name`.
pub(crate) fn permit(prefix: &str, name: &str, i: u32) -> Vec<u8> {
    join(prefix, "c/", name, Some(&format!("{i:010}")))
}

/// The prefix of every partition key of `group`.
pub(crate) fn partitions(prefix: &str, group: &str) -> Vec<u8> {
    join(prefix, "p/", group, Some(""))
}

/// The key of partition `p` of `group`.
pub(crate) fn partition(prefix: &str, group: &str, p: u32) -> Vec<u8> {
    join(prefix, "p/", group, Some(&format!("{p:010}")))
}

/// The partition number of a key under [`partitions`]`(prefix, group)` (or the permit index
/// of a key under [`permits`]`(prefix, name)`), or `None` for a key that is not one.
pub(crate) fn partition_of(group_prefix: &[u8], key: &[u8]) -> Option<u32> {
    let digits = key.strip_prefix(group_prefix)?;
    if digits.len() != 10 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The prefix of every member key of `service`.
pub(crate) fn members(prefix: &str, service: &str) -> Vec<u8> {
    join(prefix, "m/", service, Some(""))
}

/// The key of member `node` of `service`.
pub(crate) fn member(prefix: &str, service: &str, node: &str) -> Vec<u8> {
    join(prefix, "m/", service, Some(node))
}

/// The node id of a key under [`members`]`(prefix, service)`.
pub(crate) fn member_of(service_prefix: &[u8], key: &[u8]) -> Option<String> {
    let node = key.strip_prefix(service_prefix)?;
    String::from_utf8(node.to_vec()).ok()
}

/// The start of every lease key: `<prefix>l/`.
pub(crate) fn lease_space(prefix: &str) -> Vec<u8> {
    join(prefix, "l/", "", None)
}

/// The start of every permit key: `<prefix>c/`.
pub(crate) fn permit_space(prefix: &str) -> Vec<u8> {
    join(prefix, "c/", "", None)
}

/// The counted name a permit key (after [`permit_space`]) belongs to.
pub(crate) fn counted_of(tail: &[u8]) -> Option<String> {
    let end = tail.iter().position(|&b| b == 0)?;
    String::from_utf8(tail.get(..end)?.to_vec()).ok()
}

/// The least key greater than every key that starts with `key` (etcd's prefix range end):
/// `key` with its last byte below `0xFF` raised by one and what follows dropped; `[0]` (to the
/// end of the keyspace) when there is none.
pub(crate) fn range_end(key: &[u8]) -> Vec<u8> {
    let mut end = key.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn join(prefix: &str, space: &str, name: &str, tail: Option<&str>) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + space.len() + name.len() + 12);
    key.extend_from_slice(prefix.as_bytes());
    key.extend_from_slice(space.as_bytes());
    key.extend_from_slice(name.as_bytes());
    if let Some(tail) = tail {
        key.push(0);
        key.extend_from_slice(tail.as_bytes());
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_names_apart() {
        assert_eq!(lease("lease/", "a.b"), b"lease/l/a.b".to_vec());
        let g = partitions("x/", "a");
        assert_eq!(partition("x/", "a", 7), b"x/p/a\x000000000007".to_vec());
        assert_eq!(partition_of(&g, &partition("x/", "a", 7)), Some(7));
        assert_eq!(
            partition_of(&g, &partition("x/", "a", u32::MAX)),
            Some(u32::MAX)
        );
        // Group `a/b` shares no prefix with group `a`.
        assert!(!partition("x/", "a/b", 7).starts_with(&g));
        let s = members("x/", "svc");
        assert_eq!(
            member_of(&s, &member("x/", "svc", "n1")).as_deref(),
            Some("n1")
        );
        assert!(!member("x/", "svc2", "n1").starts_with(&s));
        let c = permits("x/", "a");
        assert_eq!(permit("x/", "a", 3), b"x/c/a\x000000000003".to_vec());
        assert_eq!(partition_of(&c, &permit("x/", "a", 3)), Some(3));
        assert!(!permit("x/", "a/b", 3).starts_with(&c));
        assert!(!permit("x/", "a", 3).starts_with(&lease("x/", "a")));
    }
}
