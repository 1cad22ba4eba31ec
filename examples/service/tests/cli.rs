//! The service's command line refuses what it cannot run, with a message that says what to
//! change, before it serves anything. (Its serving is checked by `ci/service-smoke.sh`, which
//! runs the binary this test makes cargo build.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn run(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lease-example-service"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_negative_lease_is_refused_with_what_to_give() {
    let (code, stderr) = run(&["--lease=-1", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("--lease -1"), "{stderr}");
    assert!(stderr.contains("give seconds"), "{stderr}");
}

#[test]
fn a_store_without_its_backend_names_the_feature() {
    let (code, stderr) = run(&[
        "--store",
        "postgres://nobody@127.0.0.1:1/none",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("opening the store"), "{stderr}");
    assert!(stderr.contains("postgres"), "{stderr}");
}
