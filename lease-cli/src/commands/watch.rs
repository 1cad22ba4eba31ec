//! `lease watch NAME… [--json]`: one line per change of each name's holder, until stopped.

use lease_core::{HolderChange, Observer};
use tokio::sync::mpsc;

use crate::cli::WatchArgs;
use crate::commands::open_for;
use crate::commands::output::{self, json_string, printable};
use crate::duration::human;
use crate::exit::CliError;
use crate::signals::StopSignals;
use crate::store_url::StoreUrl;

/// One line of the watch: a name's state as first read, or a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// Nobody held the name at the first read; `term` is the last one issued, if any.
    Free {
        /// The last term issued (`None`: never claimed, or the store keeps no ended record).
        term: Option<u64>,
    },
    /// A change.
    Change(HolderChange),
}

/// Runs the `watch` subcommand: until SIGINT, SIGTERM or SIGHUP, which end it with code 0.
pub(crate) async fn watch(url: &StoreUrl, args: WatchArgs) -> Result<u8, CliError> {
    let mut signals = StopSignals::install()?;
    let store = open_for(url, &args.names).await?;
    let observer = Observer::from_arc(store);
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let mut tasks = tokio::task::JoinSet::new();
    for name in &args.names {
        let mut watch = observer.watch(name).map_err(|e| CliError::from_lease(&e))?;
        let first = observer.get(name).await?;
        let json = args.json;
        let tx = tx.clone();
        let name = name.clone();
        if !first.as_ref().is_some_and(|i| i.live) {
            let term = first.map(|i| i.term);
            let _ = tx.send(line(&name, &Event::Free { term }, json));
        }
        tasks.spawn(async move {
            let mut failing = false;
            loop {
                match watch.next().await {
                    Ok(change) => {
                        failing = false;
                        if tx.send(line(&name, &Event::Change(change), json)).is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        if !failing {
                            tracing::warn!(name = %name, error = %e, "reading the holder failed; retrying");
                        }
                        failing = true;
                    }
                }
            }
        });
    }
    drop(tx);
    loop {
        tokio::select! {
            text = rx.recv() => match text {
                Some(text) => output::write_stdout(&text, "the watch")?,
                None => return Ok(0),
            },
            _ = signals.recv() => return Ok(0),
        }
    }
}

/// One line for `event` of `name`, with its line feed.
pub(crate) fn line(name: &str, event: &Event, json: bool) -> String {
    if json {
        let n = json_string(name);
        let body = match event {
            Event::Free { term } => format!(
                "\"event\":\"free\",\"holder\":null,\"term\":{},\"expires_in_ms\":null",
                term.map_or_else(|| "null".to_owned(), |t| t.to_string())
            ),
            Event::Change(HolderChange::Claimed {
                instance,
                term,
                expires_in,
            }) => format!(
                "\"event\":\"claimed\",\"holder\":{},\"term\":{term},\"expires_in_ms\":{}",
                json_string(instance),
                expires_in.as_millis()
            ),
            Event::Change(HolderChange::Released { term }) => format!(
                "\"event\":\"released\",\"holder\":null,\"term\":{term},\"expires_in_ms\":null"
            ),
            Event::Change(HolderChange::Expired { term }) => format!(
                "\"event\":\"expired\",\"holder\":null,\"term\":{term},\"expires_in_ms\":null"
            ),
            Event::Change(_) => "\"event\":\"unknown\"".to_owned(),
        };
        return format!("{{\"name\":{n},{body}}}\n");
    }
    let n = printable(name);
    match event {
        Event::Free { term: Some(t) } => format!("{n}: free (last term {t})\n"),
        Event::Free { term: None } => format!("{n}: free\n"),
        Event::Change(HolderChange::Claimed {
            instance,
            term,
            expires_in,
        }) => format!(
            "{n}: claimed by {} (term {term}, expires in {})\n",
            printable(instance),
            human(*expires_in)
        ),
        Event::Change(HolderChange::Released { term }) => {
            format!("{n}: released (term {term})\n")
        }
        Event::Change(HolderChange::Expired { term }) => {
            format!("{n}: expired (term {term}): the holder stopped renewing\n")
        }
        Event::Change(other) => format!("{n}: {other:?}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn lines_in_both_forms() {
        let claimed = Event::Change(HolderChange::Claimed {
            instance: "web-1".into(),
            term: 7,
            expires_in: Duration::from_millis(14_900),
        });
        assert_eq!(
            line("job", &claimed, false),
            "job: claimed by web-1 (term 7, expires in 14.9s)\n"
        );
        assert_eq!(
            line("job", &claimed, true),
            "{\"name\":\"job\",\"event\":\"claimed\",\"holder\":\"web-1\",\"term\":7,\"expires_in_ms\":14900}\n"
        );
        let released = Event::Change(HolderChange::Released { term: 7 });
        assert_eq!(line("job", &released, false), "job: released (term 7)\n");
        assert_eq!(
            line("job", &released, true),
            "{\"name\":\"job\",\"event\":\"released\",\"holder\":null,\"term\":7,\"expires_in_ms\":null}\n"
        );
        let expired = Event::Change(HolderChange::Expired { term: 8 });
        assert!(line("job", &expired, false).starts_with("job: expired (term 8)"));
        assert_eq!(
            line("a\nb", &Event::Free { term: None }, false),
            "a\\nb: free\n"
        );
        assert_eq!(
            line("job", &Event::Free { term: Some(3) }, true),
            "{\"name\":\"job\",\"event\":\"free\",\"holder\":null,\"term\":3,\"expires_in_ms\":null}\n"
        );
    }
}
