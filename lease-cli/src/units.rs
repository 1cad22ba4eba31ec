//! Checks of the example systemd units for `lease run` and `lease elect`
//! (examples/systemd/lease-run@.service, lease-elect@.service) by their parsed fields: ExecStart
//! runs `lease` with arguments lease's own parser and checks accept, `SuccessExitStatus=` is the
//! documented line, `KillMode=mixed`; and the README shows each unit as it is.

use clap::FromArgMatches;

use crate::cli::{Cli, Command};
use crate::commands::run::Conflict;
use crate::commands::timings;
use crate::exit::success_exit_status;

/// The units, by file name, with their text.
const UNITS: [(&str, &str); 2] = [
    (
        "lease-run@.service",
        include_str!("../examples/systemd/lease-run@.service"),
    ),
    (
        "lease-elect@.service",
        include_str!("../examples/systemd/lease-elect@.service"),
    ),
];

/// `section`'s `key=` values in `text` (comments and other sections left out).
fn values(text: &str, section: &str, key: &str) -> Vec<String> {
    let mut current = String::new();
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_owned();
            continue;
        }
        assert!(!line.ends_with('\\'), "keep each line whole: {line}");
        if current == section
            && let Some((k, v)) = line.split_once('=')
            && k.trim() == key
        {
            out.push(v.trim().to_owned());
        }
    }
    out
}

fn one(text: &str, section: &str, key: &str) -> String {
    let mut all = values(text, section, key);
    assert_eq!(all.len(), 1, "one [{section}] {key}= line: {all:?}");
    all.remove(0)
}

#[test]
fn exec_start_runs_lease_with_arguments_it_accepts() {
    for (file, text) in UNITS {
        let exec = one(text, "Service", "ExecStart");
        // %i is the instance: any lease name.
        let words: Vec<String> = exec
            .split_whitespace()
            .map(|w| w.replace("%i", "nightly-report"))
            .collect();
        assert_eq!(words[0], "/usr/local/bin/lease", "{file}");
        let matches = crate::cli::command()
            .try_get_matches_from(&words)
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        let cli = Cli::from_arg_matches(&matches).unwrap();
        assert!(
            cli.store.is_none(),
            "{file}: the store comes from LEASE_STORE"
        );
        let (ttl, cmd) = match &cli.command {
            Command::Run(args) => {
                assert!(file.starts_with("lease-run@"), "{file}");
                let conflict = Conflict::from_args(args).unwrap();
                assert!(
                    args.quiet && conflict.code == Some(0),
                    "{file}: quiet losers"
                );
                (&args.hold.ttl, &args.cmd)
            }
            Command::Elect(args) => {
                assert!(file.starts_with("lease-elect@"), "{file}");
                (&args.hold.ttl, &args.cmd)
            }
            other => panic!("{file}: {other:?}"),
        };
        timings(ttl).unwrap();
        assert_eq!(args_name(&cli.command), "nightly-report", "{file}");
        assert!(
            cmd[0]
                .to_string_lossy()
                .starts_with("/usr/local/lib/lease/"),
            "{file}: CMD by absolute path: {cmd:?}"
        );
        // The store every host shares comes from a file.
        assert_eq!(
            one(text, "Service", "EnvironmentFile"),
            "/etc/lease/store.env",
            "{file}"
        );
    }
}

fn args_name(command: &Command) -> &str {
    match command {
        Command::Run(args) => &args.name,
        Command::Elect(args) => &args.name,
        _ => "",
    }
}

#[test]
fn a_stop_is_a_success_and_lease_alone_gets_sigterm() {
    for (file, text) in UNITS {
        assert_eq!(
            format!(
                "SuccessExitStatus={}",
                one(text, "Service", "SuccessExitStatus")
            ),
            success_exit_status(),
            "{file}"
        );
        assert_eq!(one(text, "Service", "KillMode"), "mixed", "{file}");
        assert!(
            crate::exit::Exit::help_table().contains(&success_exit_status()),
            "lease help exit-codes gives the line"
        );
    }
}

#[test]
fn the_readme_shows_each_unit_as_it_is() {
    let readme = include_str!("../../README.md");
    for (file, text) in UNITS {
        assert!(
            readme.contains(&format!("```ini\n# {file}")),
            "README.md shows no {file}"
        );
        assert!(
            readme.contains(text),
            "README.md's {file} differs from the file"
        );
    }
}
