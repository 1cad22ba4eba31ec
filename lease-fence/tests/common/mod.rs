//! Helpers shared by the test files: the servers (through lease-conformance's policy: a
//! `LEASE_TEST_<BACKEND>_URL`, else one loud `SKIPPED` line, a failure when
//! `LEASE_TEST_REQUIRE` names the backend), unique names, the race tests' order check.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

/// A string unique to this call, starting with `tag`: table names, resource names, keys.
pub fn unique(tag: &str) -> String {
    let hex = lease_core::backend::HolderToken::mint().to_hex();
    format!("{tag}{}", &hex[..10])
}

/// How many writes each writer of a race test makes.
pub const RACE_WRITES: usize = 60;

/// Asserts the order in which the fence let writes through: `tokens`, in the order the writes
/// landed, never go down.
pub fn assert_never_back(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] <= pair[1],
            "a write under token {} landed after one under {}: {tokens:?}",
            pair[1],
            pair[0]
        );
    }
}
