//! The file fence on the local filesystem (the system temp dir): a zombie whose successor has
//! written is refused and changes nothing; one term writes twice; a higher term raises the
//! fence; with the check broken the zombie's write gets through; two racing writers (threads
//! with fences of their own, as two processes would have) never land a lower token after a
//! higher one; bad names are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, unreachable_pub)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{RACE_WRITES, assert_refused, unique};
use lease_core::ErrorKind;
use lease_fence::file::{FENCE_DIR, FileFence};

fn dir() -> PathBuf {
    let dir = std::env::temp_dir()
        .join("lease-fence-tests")
        .join(unique("files-"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn read(dir: &std::path::Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_after_its_successor_is_refused_and_changes_nothing() {
    let dir = dir();
    let fence = FileFence::new(&dir);
    fence.write("out.csv", 5, "first").await.unwrap();
    fence.write("out.csv", 6, "successor").await.unwrap();
    let e = fence.write("out.csv", 5, "zombie").await.unwrap_err();
    assert_refused(&e, "out.csv", 5, 6);
    assert_eq!(read(&dir, "out.csv"), "successor");
    assert_eq!(fence.token("out.csv").unwrap(), Some(6));
    // No temporary file is left behind, refused or not.
    let left: Vec<_> = std::fs::read_dir(dir.join(FENCE_DIR))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_term_writes_twice_and_a_higher_one_raises_the_fence() {
    let dir = dir();
    let fence = FileFence::new(&dir);
    assert_eq!(fence.token("r.json").unwrap(), None);
    fence.write("r.json", 3, "a").await.unwrap();
    fence.write("r.json", 3, "b").await.unwrap();
    assert_eq!(read(&dir, "r.json"), "b");
    assert_eq!(fence.token("r.json").unwrap(), Some(3));
    fence.write_blocking("r.json", 9, b"c").unwrap();
    assert_eq!(read(&dir, "r.json"), "c");
    assert_eq!(fence.token("r.json").unwrap(), Some(9));
    assert!(fence.write("r.json", 3, "d").await.unwrap_err().is_stale());
    assert_eq!(read(&dir, "r.json"), "c");
    // Per file: another file of the directory still takes token 3.
    fence.write("other.json", 3, "e").await.unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_check_broken_the_zombie_gets_through() {
    let dir = dir();
    let fence = FileFence::new(&dir);
    fence.write("out.csv", 6, "successor").await.unwrap();
    let broken = fence.clone().break_check_for_tests();
    broken.write("out.csv", 5, "zombie").await.unwrap();
    assert_eq!(
        read(&dir, "out.csv"),
        "zombie",
        "the broken fence let the zombie write"
    );
    assert_eq!(fence.token("out.csv").unwrap(), Some(5));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn two_racing_writers_never_land_a_lower_token_after_a_higher_one() {
    let dir = dir();
    let (low, high) = (10_u64, 11_u64);
    let high_landed = Arc::new(AtomicBool::new(false));
    let low_accepted = Arc::new(AtomicUsize::new(0));
    // Each writer has a fence of its own (its own lock file handles), as two processes would.
    let zombie = std::thread::spawn({
        let fence = FileFence::new(&dir);
        let (high_landed, low_accepted) = (high_landed.clone(), low_accepted.clone());
        move || {
            let mut refused = 0;
            for i in 0..100_000 {
                let after_high = high_landed.load(Ordering::SeqCst);
                match fence.write_blocking("log", low, format!("{low} {i}").as_bytes()) {
                    Ok(()) => {
                        assert!(!after_high, "token {low} accepted after {high} had landed");
                        low_accepted.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => {
                        assert!(e.is_stale(), "{e}");
                        refused += 1;
                        if refused == RACE_WRITES {
                            return refused;
                        }
                    }
                }
            }
            refused
        }
    });
    let successor = std::thread::spawn({
        let fence = FileFence::new(&dir);
        let (high_landed, low_accepted) = (high_landed.clone(), low_accepted.clone());
        move || {
            while low_accepted.load(Ordering::SeqCst) < 5 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            for i in 0..RACE_WRITES {
                fence
                    .write_blocking("log", high, format!("{high} {i}").as_bytes())
                    .unwrap();
                high_landed.store(true, Ordering::SeqCst);
            }
        }
    });
    successor.join().unwrap();
    assert_eq!(zombie.join().unwrap(), RACE_WRITES);
    // The last write that landed is the successor's last.
    assert_eq!(read(&dir, "log"), format!("{high} {}", RACE_WRITES - 1));
    assert_eq!(FileFence::new(&dir).token("log").unwrap(), Some(high));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn bad_names_and_tokens_are_refused_before_any_io() {
    // A directory that does not exist: a refusal of another kind than an I/O error proves the
    // check came first.
    let fence = FileFence::new("/nonexistent/lease-fence");
    for (name, token, kind) in [
        ("a", 0, ErrorKind::InvalidArgument),
        ("", 1, ErrorKind::InvalidName),
        ("..", 1, ErrorKind::InvalidName),
        ("a/b", 1, ErrorKind::InvalidName),
        (FENCE_DIR, 1, ErrorKind::InvalidName),
    ] {
        let e = fence.write(name, token, "x").await.unwrap_err();
        assert_eq!(e.kind(), kind, "{name:?}: {e}");
    }
    let e = fence.write("a", 1, "x").await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(e.to_string().contains("/nonexistent/lease-fence"), "{e}");
}
