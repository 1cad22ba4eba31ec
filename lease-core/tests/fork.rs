//! Holder tokens stay unique across `fork()`: a forked child never mints a token its parent
//! minted or will mint. A real fork (the `fork` crate's safe wrapper of fork(2)); the child
//! writes its tokens to a pipe and exits.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};

use fork::Fork;
use lease_core::backend::HolderToken;

/// Forks; the child mints `n` tokens and writes their bytes to a pipe, then exits; the parent
/// mints `n` of its own after the fork. Returns (parent's, child's).
fn mint_on_both_sides_of_a_fork(n: usize) -> (Vec<HolderToken>, Vec<HolderToken>) {
    let (mut reader, mut writer) = std::io::pipe().expect("pipe");
    match fork::fork().expect("fork") {
        Fork::Child => {
            drop(reader);
            let mut ok = true;
            for _ in 0..n {
                ok &= writer.write_all(HolderToken::mint().as_bytes()).is_ok();
            }
            // Never return into the test harness from the child.
            std::process::exit(if ok { 0 } else { 1 });
        }
        Fork::Parent(pid) => {
            drop(writer);
            let parent: Vec<HolderToken> = (0..n).map(|_| HolderToken::mint()).collect();
            let mut child = Vec::new();
            for _ in 0..n {
                let mut buf = [0u8; 16];
                reader.read_exact(&mut buf).expect("the child's tokens");
                child.push(HolderToken::from_bytes(buf));
            }
            let status = fork::waitpid(pid).expect("waitpid");
            assert_eq!(status, 0, "the child failed");
            (parent, child)
        }
    }
}

#[test]
fn a_forked_child_never_mints_its_parents_tokens() {
    // Mint first, so that any per-process or per-thread generator state exists before the fork
    // and is copied into the child.
    let before: Vec<HolderToken> = (0..4).map(|_| HolderToken::mint()).collect();
    let (parent, child) = mint_on_both_sides_of_a_fork(8);
    for (i, c) in child.iter().enumerate() {
        assert!(
            !parent.contains(c) && !before.contains(c),
            "the child's token {i} ({c:?}) was also minted by its parent; parent {parent:?}, \
             child {child:?}"
        );
    }
    // And the child's own tokens differ from one another.
    for (i, c) in child.iter().enumerate() {
        assert!(!child[..i].contains(c), "the child minted {c:?} twice");
    }
}
