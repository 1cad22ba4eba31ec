//! `lease help [TOPIC | SUBCOMMAND…]`: the texts every subcommand shares, each in one place
//! (`lease help stores`, `lease help exit-codes`), and the help of each subcommand.

use std::ffi::OsString;

use crate::cli;
use crate::exit::{CliError, Exit};

/// The shared topics, with what each covers.
pub(crate) const TOPICS: [(&str, &str); 2] = [
    ("stores", "the store URLs and the default per-user store"),
    (
        "exit-codes",
        "every exit code, and those of a stop by a signal",
    ),
];

/// The text of a shared topic, `None` for a word that names none.
pub(crate) fn topic(word: &str) -> Option<String> {
    match word {
        "stores" => Some(cli::stores_help()),
        "exit-codes" => Some(Exit::help_table()),
        _ => None,
    }
}

/// Prints the help `words` ask for: a topic's text, or the `--help` of the subcommand they name
/// (`lease --help` for none). A word that names neither is a usage error listing what does.
pub(crate) fn print(words: &[String]) -> Result<(), CliError> {
    if let [word] = words
        && let Some(text) = topic(word)
    {
        println!("{text}");
        return Ok(());
    }
    let cmd = cli::command();
    let mut at = &cmd;
    for word in words {
        match at.find_subcommand(word) {
            Some(sub) if !sub.is_hide_set() && sub.get_name() != "help" => at = sub,
            _ => return Err(unknown(word)),
        }
    }
    // Through the parser, so the usage line names the whole command (`lease fence sql`).
    let mut args: Vec<OsString> = vec!["lease".into()];
    args.extend(words.iter().map(OsString::from));
    args.push("--help".into());
    match cli::command().try_get_matches_from(args) {
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => {
            let _ = e.print();
            Ok(())
        }
        _ => Err(unknown(&words.join(" "))),
    }
}

fn unknown(word: &str) -> CliError {
    let topics: Vec<&str> = TOPICS.iter().map(|(t, _)| *t).collect();
    let subcommands: Vec<String> = cli::command()
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_owned())
        .collect();
    CliError::new(
        Exit::Usage,
        format!(
            "no help for '{word}': give a topic ({}) or a subcommand ({})",
            topics.join(", "),
            subcommands.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_has_a_text() {
        for (name, _) in TOPICS {
            assert!(topic(name).is_some_and(|t| !t.is_empty()), "{name}");
        }
        assert!(topic("nothing").is_none());
    }

    #[test]
    fn exit_codes_lists_every_code() {
        let text = topic("exit-codes").unwrap_or_default();
        for exit in Exit::ALL {
            assert!(
                text.contains(&format!("  {:<7} {}", exit.code(), exit.meaning())),
                "{exit:?} missing from:\n{text}"
            );
        }
    }

    #[test]
    fn unknown_words_are_usage_errors() {
        assert_eq!(
            print(&["nothing".to_owned()]).unwrap_err().exit(),
            Exit::Usage
        );
        assert_eq!(
            print(&["run".to_owned(), "deeper".to_owned()])
                .unwrap_err()
                .exit(),
            Exit::Usage
        );
    }
}
