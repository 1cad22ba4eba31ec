//! The argument checks every fence runs before any I/O, so every resource refuses the same
//! input with the same kind and message.

use lease_core::{Error, Result};

/// The longest resource name a fence takes, in bytes: what the SQL fence table's `resource`
/// column holds (`VARCHAR(255)` / `VARBINARY(255)`). A file fence takes shorter names (see
/// [`MAX_FILE_NAME_BYTES`](crate::file::MAX_FILE_NAME_BYTES)).
pub const MAX_RESOURCE_BYTES: usize = 255;

/// Checks a fencing token: `InvalidArgument` for 0, which no lease hands out (terms start at
/// 1), so a 0 is a token that was never set.
pub(crate) fn token(token: u64) -> Result<()> {
    if token == 0 {
        return Err(Error::invalid_argument(
            "fencing token 0 is not a token: every term's token is at least 1. Pass the token \
             of the term you write under (`term.token()`), not a default or unset value",
        ));
    }
    Ok(())
}

/// Checks a resource name: `InvalidName` when it is empty, longer than `max` bytes, or holds a
/// control character (no store keeps NUL in a text column, and a name with a newline or an
/// escape code cannot be shown in a message as it is).
#[cfg_attr(
    not(any(
        feature = "postgres",
        feature = "mysql",
        feature = "sqlite",
        feature = "redis",
        feature = "etcd",
        feature = "nats",
        feature = "file",
        feature = "http"
    )),
    allow(dead_code) // the MongoDB fence names documents by filter, not by name
)]
pub(crate) fn resource(resource: &str, max: usize) -> Result<()> {
    if resource.is_empty() {
        return Err(Error::invalid_name(
            "a fence's resource name is empty; name the data the fence guards (a table row, a \
             key, a file: `orders/42`)",
        ));
    }
    if resource.len() > max {
        return Err(Error::invalid_name(format!(
            "the resource name {:?}… is {} bytes long; this fence takes at most {max}: use a \
             shorter name, such as a hash of the long one",
            resource.chars().take(32).collect::<String>(),
            resource.len()
        )));
    }
    if resource.chars().any(char::is_control) {
        return Err(Error::invalid_name(format!(
            "the resource name {resource:?} holds a control character; use printable characters \
             only"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use lease_core::ErrorKind;

    #[test]
    fn bad_tokens_and_names_are_refused_with_what_to_change() {
        let e = super::token(0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.to_string().contains("term.token()"), "{e}");
        assert!(super::token(1).is_ok() && super::token(u64::MAX).is_ok());

        for (bad, says) in [
            ("", "empty"),
            ("a\nb", "control"),
            ("nul\0", "control"),
            (&"x".repeat(256)[..], "at most 255"),
        ] {
            let e = super::resource(bad, 255).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad:?}");
            assert!(e.to_string().contains(says), "{bad:?}: {e}");
        }
        assert!(super::resource(&"é".repeat(127), 255).is_ok());
        assert!(super::resource(&"é".repeat(128), 255).is_err());
        assert!(super::resource("orders/42", 255).is_ok());
    }
}
