//! The binary's command line, without servers: help, and a schedule that the seed alone
//! decides. (Also makes `cargo test --workspace` build `target/debug/lease-soak`, which CI
//! then runs for the short soak without another build.)

use std::process::Command;

fn soak(args: &[&str]) -> (bool, String) {
    let out = match Command::new(env!("CARGO_BIN_EXE_lease-soak"))
        .args(args)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!("cannot run lease-soak: {e}"),
    };
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn help_works() {
    let (ok, out) = soak(&["--help"]);
    assert!(ok);
    for option in [
        "--seconds",
        "--backends",
        "--seed",
        "--contenders",
        "--lease-ms",
        "--phases",
        "--group-workers",
        "--group-partitions",
        "--break-group-renewals",
        "--no-real-fences",
        "--break-real-fence",
    ] {
        assert!(out.contains(option), "{option} missing from:\n{out}");
    }
}

#[test]
fn the_seed_decides_the_schedule() {
    let args = |seed: &'static str| {
        [
            "--show-schedule",
            "--seconds",
            "30",
            "--backends",
            "postgres,redis",
            "--seed",
            seed,
        ]
    };
    let (ok, first) = soak(&args("42"));
    assert!(ok);
    assert!(first.contains("stall") && first.contains("cut") && first.contains("restart"));
    assert!(first.contains("group schedule postgres"), "{first}");
    assert!(first.contains("leave  worker-") && first.contains("rejoin worker-"));
    assert!(first.contains("crash  worker-") && first.contains("(blip)"));
    assert!(first.contains("calm"));
    assert_eq!(soak(&args("42")).1, first);
    assert_ne!(soak(&args("43")).1, first);
}

#[test]
fn bad_options_are_refused() {
    assert!(!soak(&["--backends", "mongo"]).0);
    assert!(!soak(&["--seconds", "0"]).0);
    assert!(!soak(&["--phases", "slots"]).0);
}
