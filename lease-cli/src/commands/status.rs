//! `lease status NAME… [--json]`: who holds what, by the store's clock.

use lease_core::LeaseInfo;

use crate::cli::StatusArgs;
use crate::commands::open_for;
use crate::commands::output::{self, json_string, printable};
use crate::duration::human;
use crate::exit::CliError;
use crate::store_url::StoreUrl;

/// One name's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// The name asked about.
    pub(crate) name: String,
    /// What the store keeps about it; `None` when it was never claimed.
    pub(crate) info: Option<LeaseInfo>,
}

impl Row {
    fn live(&self) -> Option<&LeaseInfo> {
        self.info.as_ref().filter(|i| i.live)
    }
}

/// Runs the `status` subcommand.
pub(crate) async fn status(url: &StoreUrl, args: StatusArgs) -> Result<u8, CliError> {
    let store = open_for(url, &args.names).await?;
    let mut rows = Vec::with_capacity(args.names.len());
    for name in args.names {
        let info = store.get(&name).await?;
        rows.push(Row { name, info });
    }
    let text = if args.json { json(&rows) } else { table(&rows) };
    output::write_stdout(&text, "the status")?;
    Ok(0)
}

/// The rows as an aligned table with a header.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut cells = vec![[
        "NAME".to_owned(),
        "HOLDER".to_owned(),
        "TERM".to_owned(),
        "EXPIRES IN".to_owned(),
    ]];
    for row in rows {
        let term = row
            .info
            .as_ref()
            .map_or_else(|| "-".to_owned(), |i| i.term.to_string());
        let (holder, expires) = match row.live() {
            Some(i) => (i.instance.clone(), human(i.expires_in)),
            None => ("-".to_owned(), "-".to_owned()),
        };
        cells.push([printable(&row.name), printable(&holder), term, expires]);
    }
    output::table(&cells)
}

/// The rows as a JSON array: `name`, `held`, `holder` (null when free), `term` (the last one
/// issued; null when never claimed), `expires_in_ms` (null when free).
pub(crate) fn json(rows: &[Row]) -> String {
    let items: Vec<String> = rows
        .iter()
        .map(|row| {
            let live = row.live();
            let holder = live.map_or_else(|| "null".to_owned(), |i| json_string(&i.instance));
            let term = row
                .info
                .as_ref()
                .map_or_else(|| "null".to_owned(), |i| i.term.to_string());
            let expires = live.map_or_else(
                || "null".to_owned(),
                |i| i.expires_in.as_millis().to_string(),
            );
            format!(
                "{{\"name\":{},\"held\":{},\"holder\":{holder},\"term\":{term},\"expires_in_ms\":{expires}}}",
                json_string(&row.name),
                live.is_some()
            )
        })
        .collect();
    output::json_array(&items)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn rows() -> Vec<Row> {
        vec![
            Row {
                name: "job".to_owned(),
                info: Some(LeaseInfo {
                    name: "job".to_owned(),
                    instance: "host/1/ab".to_owned(),
                    term: 7,
                    live: true,
                    expires_in: Duration::from_millis(12_400),
                }),
            },
            Row {
                name: "free \"one\"".to_owned(),
                info: Some(LeaseInfo {
                    name: "free".to_owned(),
                    instance: "old".to_owned(),
                    term: 3,
                    live: false,
                    expires_in: Duration::ZERO,
                }),
            },
            Row {
                name: "never".to_owned(),
                info: None,
            },
        ]
    }

    #[test]
    fn table_is_aligned() {
        let t = table(&rows());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "NAME          HOLDER     TERM  EXPIRES IN");
        assert_eq!(lines[1], "job           host/1/ab  7     12.4s");
        assert_eq!(lines[3], "never         -          -     -");
    }

    #[test]
    fn json_escapes_and_nulls() {
        let j = json(&rows());
        assert!(j.starts_with(
            "[{\"name\":\"job\",\"held\":true,\"holder\":\"host/1/ab\",\"term\":7,\"expires_in_ms\":12400}"
        ));
        assert!(j.contains(
            "{\"name\":\"free \\\"one\\\"\",\"held\":false,\"holder\":null,\"term\":3,\"expires_in_ms\":null}"
        ));
        assert!(j.contains("\"term\":null"));
    }
}
