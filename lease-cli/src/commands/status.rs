//! `lease status NAME… [--json]`: who holds what, by the store's clock.

use std::io::Write;

use lease_core::LeaseInfo;

use crate::cli::StatusArgs;
use crate::commands::open_for;
use crate::duration::human;
use crate::exit::{CliError, Exit};
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
    std::io::stdout()
        .lock()
        .write_all(text.as_bytes())
        .map_err(|e| CliError::new(Exit::StoreError, format!("cannot write the status: {e}")))?;
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
    let widths: Vec<usize> = (0..4)
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &cells {
        let line = format!(
            "{:<w0$}  {:<w1$}  {:<w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
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
    format!("[{}]\n", items.join(","))
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `s` with characters that would break a table row escaped.
fn printable(s: &str) -> String {
    s.chars().flat_map(char::escape_debug).collect::<String>()
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
