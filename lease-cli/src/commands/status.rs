//! `lease status NAME… [--json]` or `lease status --prefix P [--json]`: who holds what, by the
//! store's clock; for a counted name, every permit.

use lease::LeaseStore;
use lease::backend::{LeaseInfo, LeaseStoreExt, permits::PermitInfo};

use crate::cli::StatusArgs;
use crate::commands::open_for;
use crate::commands::output::{self, json_string, printable};
use crate::duration::human;
use crate::exit::{CliError, Exit};
use crate::redact::eprintln_scrubbed;
use crate::store_url::StoreUrl;

/// The most names `status --prefix` shows; past it, the first ones and a line on stderr.
pub(crate) const MAX_PREFIX_NAMES: usize = 10_000;

/// One name's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    /// The name asked about.
    pub(crate) name: String,
    /// What the store keeps about it; `None` when it was never claimed.
    pub(crate) info: Option<LeaseInfo>,
    /// Its permits, by number, when it is a counted name (empty otherwise, and on a store
    /// without counted leases).
    pub(crate) permits: Vec<PermitInfo>,
}

impl Row {
    fn live(&self) -> Option<&LeaseInfo> {
        self.info.as_ref().filter(|i| i.live)
    }

    /// How many of its permits are held live.
    fn permits_held(&self) -> usize {
        self.permits.iter().filter(|p| p.live).count()
    }

    /// Whether anyone holds the name: its plain lease, or any of its permits.
    fn held(&self) -> bool {
        self.live().is_some() || self.permits_held() > 0
    }
}

/// Runs the `status` subcommand.
pub(crate) async fn status(url: &StoreUrl, args: StatusArgs) -> Result<u8, CliError> {
    let rows = match &args.prefix {
        Some(prefix) => under_prefix(url, prefix).await?,
        None => named(url, args.names).await?,
    };
    let text = if args.json { json(&rows) } else { table(&rows) };
    output::write_stdout(&text, "the status")?;
    Ok(0)
}

/// The rows of the names given.
async fn named(url: &StoreUrl, names: Vec<String>) -> Result<Vec<Row>, CliError> {
    let store = open_for(url, &names).await?;
    let counted = store.capabilities().permits;
    let mut rows = Vec::with_capacity(names.len());
    for name in names {
        rows.push(row(store.as_ref(), name, true, counted).await?);
    }
    Ok(rows)
}

/// The rows of every name under `prefix` the store lists (at most [`MAX_PREFIX_NAMES`], in byte
/// order): each name's lease where it has one, its permits where it is counted.
async fn under_prefix(url: &StoreUrl, prefix: &str) -> Result<Vec<Row>, CliError> {
    check_prefix(prefix)?;
    let store = open_for(url, &[]).await?;
    let listed = store
        .names_upto(prefix, MAX_PREFIX_NAMES)
        .await
        .map_err(|e| prefix_error(prefix, &e))?;
    if listed.more {
        eprintln_scrubbed(&format!(
            "lease: more than {MAX_PREFIX_NAMES} names start with {}; showing the first \
             {MAX_PREFIX_NAMES}: give a longer --prefix",
            json_string(prefix)
        ));
    }
    let mut rows = Vec::with_capacity(listed.names.len());
    for n in listed.names {
        rows.push(row(store.as_ref(), n.name, n.lease, n.counted).await?);
    }
    Ok(rows)
}

/// One name's row: its lease record when `lease`, its permits when `counted`.
async fn row(
    store: &dyn LeaseStore,
    name: String,
    lease: bool,
    counted: bool,
) -> Result<Row, CliError> {
    let info = if lease { store.get(&name).await? } else { None };
    let permits = if counted && store.capabilities().permits {
        store.permits(&name).await?
    } else {
        Vec::new()
    };
    Ok(Row {
        name,
        info,
        permits,
    })
}

/// Refuses a prefix no name can start with (a control character) before the store is opened.
fn check_prefix(prefix: &str) -> Result<(), CliError> {
    match prefix.char_indices().find(|(_, c)| c.is_control()) {
        Some((at, c)) => Err(CliError::new(
            Exit::BadName,
            format!(
                "--prefix {}: holds the control character {c:?} at byte {at}, which no lease \
                 name holds; use printable characters",
                json_string(prefix)
            ),
        )),
        None => Ok(()),
    }
}

/// The error of a listing, naming `--prefix` where the store refused the prefix.
fn prefix_error(prefix: &str, e: &lease::Error) -> CliError {
    match e.kind() {
        lease::ErrorKind::InvalidName => CliError::new(
            Exit::BadName,
            format!("--prefix {}: {}", json_string(prefix), e.message()),
        ),
        _ => CliError::from_lease(e),
    }
}

/// The rows as an aligned table with a header. When some name is counted, a PERMIT column
/// follows NAME: one row per permit of a counted name ('-' for a plain lease), and a counted
/// name's plain lease gets a row only when it was ever claimed.
pub(crate) fn table(rows: &[Row]) -> String {
    let counted = rows.iter().any(|r| !r.permits.is_empty());
    let mut cells: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["NAME".to_owned()];
    if counted {
        header.push("PERMIT".to_owned());
    }
    header.extend(["HOLDER", "TERM", "EXPIRES IN"].map(str::to_owned));
    cells.push(header);
    for row in rows {
        if row.permits.is_empty() || row.info.is_some() {
            let term = row
                .info
                .as_ref()
                .map_or_else(|| "-".to_owned(), |i| i.term.to_string());
            let (holder, expires) = match row.live() {
                Some(i) => (i.instance.clone(), human(i.expires_in)),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let mut line = vec![printable(&row.name)];
            if counted {
                line.push("-".to_owned());
            }
            line.extend([printable(&holder), term, expires]);
            cells.push(line);
        }
        for p in &row.permits {
            let (holder, expires) = if p.live {
                (printable(&p.instance), human(p.expires_in))
            } else {
                ("-".to_owned(), "-".to_owned())
            };
            cells.push(vec![
                printable(&row.name),
                p.permit.to_string(),
                holder,
                p.term.to_string(),
                expires,
            ]);
        }
    }
    output::table(&cells)
}

/// The rows as a JSON array: `name`; `held`, true when anyone holds the name — its plain
/// lease or any of its permits; `holder` (null when free), `term` (the last one issued; null
/// when never claimed) and `expires_in_ms` (null when free) of the name's plain lease; and,
/// for a counted name, `permits_held` (how many of its permits are live) and `permits`: an
/// array of `permit`, `held`, `holder`, `term` and `expires_in_ms`, one per permit.
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
            let permits = if row.permits.is_empty() {
                String::new()
            } else {
                let each: Vec<String> = row
                    .permits
                    .iter()
                    .map(|p| {
                        let (holder, expires) = if p.live {
                            (
                                json_string(&p.instance),
                                p.expires_in.as_millis().to_string(),
                            )
                        } else {
                            ("null".to_owned(), "null".to_owned())
                        };
                        format!(
                            "{{\"permit\":{},\"held\":{},\"holder\":{holder},\"term\":{},\"expires_in_ms\":{expires}}}",
                            p.permit, p.live, p.term
                        )
                    })
                    .collect();
                format!(
                    ",\"permits_held\":{},\"permits\":[{}]",
                    row.permits_held(),
                    each.join(",")
                )
            };
            format!(
                "{{\"name\":{},\"held\":{},\"holder\":{holder},\"term\":{term},\"expires_in_ms\":{expires}{permits}}}",
                json_string(&row.name),
                row.held()
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
                permits: Vec::new(),
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
                permits: Vec::new(),
            },
            Row {
                name: "never".to_owned(),
                info: None,
                permits: Vec::new(),
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

    fn counted() -> Row {
        let permit = |permit, instance: &str, term, live, ms| PermitInfo {
            permit,
            instance: instance.to_owned(),
            term,
            live,
            expires_in: Duration::from_millis(ms),
        };
        Row {
            name: "pool".to_owned(),
            info: None,
            permits: vec![
                permit(0, "a", 4, true, 9_000),
                permit(1, "b", 2, false, 0),
                permit(2, "c", 5, true, 14_100),
            ],
        }
    }

    #[test]
    fn a_counted_name_shows_every_permit() {
        let mut all = rows();
        all.truncate(1);
        all.push(counted());
        let t = table(&all);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines,
            [
                "NAME  PERMIT  HOLDER     TERM  EXPIRES IN",
                "job   -       host/1/ab  7     12.4s",
                "pool  0       a          4     9.0s",
                "pool  1       -          2     -",
                "pool  2       c          5     14.1s",
            ]
        );
        let j = json(&[counted()]);
        assert_eq!(
            j,
            "[{\"name\":\"pool\",\"held\":true,\"holder\":null,\"term\":null,\"expires_in_ms\":null,\
             \"permits_held\":2,\"permits\":[{\"permit\":0,\"held\":true,\"holder\":\"a\",\"term\":4,\"expires_in_ms\":9000},\
             {\"permit\":1,\"held\":false,\"holder\":null,\"term\":2,\"expires_in_ms\":null},\
             {\"permit\":2,\"held\":true,\"holder\":\"c\",\"term\":5,\"expires_in_ms\":14100}]}]\n"
        );
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
