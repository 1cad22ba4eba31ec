//! The fences section of the markdown report: a fenced write against the same write unfenced,
//! per resource.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Report, fmt_dur, fmt_rate};
use crate::fences::{COUNTED_WRITES, Resource, Side, TOKEN, WARM_WRITES};
use crate::stats::Summary;

/// The section, when it ran.
pub(super) fn render(r: &Report, s: &mut String) {
    if r.fences.is_empty() {
        return;
    }
    let _ = writeln!(s, "## Fenced ÷ plain writes\n");
    let _ = writeln!(
        s,
        "Per resource, a plain write and the same write fenced by lease-fence, side by side: \
         {:.1} s each in {} interleaved rounds (a new random order each round), one write at a \
         time, each on a warm connection of its own, after a warm-up. Every fenced write offers \
         the same token ({TOKEN}): the fence is raised once, in the warm-up, and the measured \
         writes are the steady state of one term (a holder writing again under its token), so \
         the cost of a raise (once per term; two more `fsync`s for files) is not in these \
         figures. Client CPU is the benchmark process's CPU time per write (the in-process HTTP \
         server's included). Round trips are counted on the wire by the conformance suite's \
         `FaultProxy` over {COUNTED_WRITES} writes after {WARM_WRITES}, on subjects of their \
         own (– for SQLite and files: no connection on the wire).\n",
        r.seconds, r.rounds
    );
    let _ = writeln!(
        s,
        "| resource | write | writes | writes/s | p50 | p99 | client CPU / write | round trips / write |"
    );
    let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|");
    for row in &r.fences {
        if let Some(why) = &row.skipped {
            let _ = writeln!(
                s,
                "| {} | **SKIPPED**: {why} | – | – | – | – | – | – |",
                row.resource.label()
            );
            continue;
        }
        side_row(s, row.resource, "plain", &row.plain);
        side_row(s, row.resource, "fenced", &row.fenced);
    }
    s.push('\n');

    let _ = writeln!(s, "### Fenced ÷ plain (same run)\n");
    let _ = writeln!(
        s,
        "| resource | fenced ÷ plain (writes/s) | fenced − plain: client CPU / write | fenced − plain: round trips / write |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|");
    for row in r.fences.iter().filter(|row| row.skipped.is_none()) {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            row.resource.label(),
            ratio(&row.fenced, &row.plain),
            cpu_diff(&row.fenced, &row.plain),
            rt_diff(&row.fenced, &row.plain),
        );
    }
    s.push('\n');

    let _ = writeln!(s, "### The writes compared\n");
    let mut sql_done = false;
    for row in &r.fences {
        let resource = row.resource;
        let sql = matches!(
            resource,
            Resource::Postgres | Resource::Mysql | Resource::Sqlite
        );
        if sql && !sql_done {
            sql_done = true;
            let _ = writeln!(
                s,
                "- **PostgreSQL, MariaDB, SQLite** — plain: {}; fenced: {}. Both commit the \
                 same transaction on a pool of one connection (no ping on checkout; sqlx's pool \
                 pings a connection when it goes back to the pool after the commit, one more \
                 round trip per write on both sides).",
                resource.plain(),
                resource.fenced()
            );
        } else if !sql {
            let _ = writeln!(
                s,
                "- **{}** — plain: {}; fenced: {}.",
                resource.label(),
                resource.plain(),
                resource.fenced()
            );
        }
        if let Some(detail) = &row.detail {
            let _ = writeln!(s, "  {}: {detail}.", resource.label());
        }
    }
    s.push('\n');
}

fn opt_dur(d: Option<Duration>) -> String {
    d.map(fmt_dur).unwrap_or_else(|| "–".to_owned())
}

fn side_row(s: &mut String, resource: Resource, what: &str, side: &Side) {
    let rt = rt_cell(side);
    match &side.summary {
        Some(sum) => {
            let note = side
                .error
                .as_ref()
                .map(|e| format!(" (stopped: {e})"))
                .unwrap_or_default();
            let _ = writeln!(
                s,
                "| {} | {what}{note} | {} | {} | {} | {} | {} | {rt} |",
                resource.label(),
                fmt_rate(sum.count as f64),
                fmt_rate(sum.rate),
                opt_dur(sum.p50),
                opt_dur(sum.p99),
                opt_dur(sum.cpu_per_op),
            );
        }
        None => {
            let _ = writeln!(
                s,
                "| {} | {what} | – | error: {} | – | – | – | {rt} |",
                resource.label(),
                side.error.as_deref().unwrap_or("no writes")
            );
        }
    }
}

/// Round trips per write, with the connections opened while counting when there were any.
fn rt_cell(side: &Side) -> String {
    match (side.round_trips, &side.rt_error) {
        (Some(v), _) if side.connections > 0 => {
            format!("{v:.2} (+{} connections)", side.connections)
        }
        (Some(v), _) => format!("{v:.2}"),
        (None, Some(e)) => format!("error: {e}"),
        (None, None) => "–".to_owned(),
    }
}

/// A side's rate, when it measured one.
fn rate(side: &Side) -> Option<f64> {
    side.summary
        .as_ref()
        .map(|s: &Summary| s.rate)
        .filter(|r| *r > 0.0)
}

/// Fenced writes/s ÷ plain writes/s.
fn ratio(fenced: &Side, plain: &Side) -> String {
    match (rate(fenced), rate(plain)) {
        (Some(f), Some(p)) => format!("{:.2}×", f / p),
        _ => "–".to_owned(),
    }
}

/// Fenced minus plain client CPU per write, signed.
fn cpu_diff(fenced: &Side, plain: &Side) -> String {
    let cpu = |side: &Side| side.summary.as_ref().and_then(|s| s.cpu_per_op);
    match (cpu(fenced), cpu(plain)) {
        (Some(f), Some(p)) if f >= p => format!("+{}", fmt_dur(f - p)),
        (Some(f), Some(p)) => format!("−{}", fmt_dur(p - f)),
        _ => "–".to_owned(),
    }
}

/// Fenced minus plain round trips per write, signed.
fn rt_diff(fenced: &Side, plain: &Side) -> String {
    match (fenced.round_trips, plain.round_trips) {
        (Some(f), Some(p)) if f >= p => format!("+{:.2}", f - p),
        (Some(f), Some(p)) => format!("−{:.2}", p - f),
        _ => "–".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fences::FenceRow;

    fn side(rate: f64, cpu_us: u64, rts: Option<f64>) -> Side {
        Side {
            summary: Some(Summary {
                count: 1000,
                rate,
                p50: Some(Duration::from_micros(100)),
                p99: Some(Duration::from_micros(300)),
                cpu_per_op: Some(Duration::from_micros(cpu_us)),
            }),
            round_trips: rts,
            connections: 0,
            error: None,
            rt_error: None,
        }
    }

    fn row(resource: Resource, plain: Side, fenced: Side) -> FenceRow {
        FenceRow {
            resource,
            skipped: None,
            detail: None,
            plain,
            fenced,
        }
    }

    #[test]
    fn the_ratio_is_fenced_over_plain_and_the_differences_are_signed() {
        let plain = side(2000.0, 50, Some(1.0));
        let fenced = side(1500.0, 62, Some(1.0));
        assert_eq!(ratio(&fenced, &plain), "0.75×");
        assert_eq!(cpu_diff(&fenced, &plain), "+12 µs");
        assert_eq!(cpu_diff(&plain, &fenced), "−12 µs");
        assert_eq!(rt_diff(&fenced, &plain), "+0.00");
        assert_eq!(
            rt_diff(&side(1.0, 1, Some(4.0)), &side(1.0, 1, Some(3.0))),
            "+1.00"
        );
        assert_eq!(ratio(&Side::default(), &plain), "–");
        assert_eq!(
            rt_diff(&side(1.0, 1, Some(1.95)), &side(1.0, 1, Some(2.0))),
            "−0.05"
        );
        assert_eq!(rt_diff(&side(1.0, 1, None), &plain), "–");
    }

    #[test]
    fn the_section_shows_both_writes_the_ratio_and_skipped_resources() {
        let mut r = Report {
            seconds: 2.0,
            rounds: 4,
            ..Report::default()
        };
        let mut pg = row(
            Resource::Postgres,
            side(1000.0, 100, Some(3.0)),
            side(800.0, 120, Some(4.0)),
        );
        pg.fenced.connections = 1;
        r.fences.push(pg);
        let mut sqlite = row(
            Resource::Sqlite,
            side(1000.0, 100, None),
            side(900.0, 110, None),
        );
        sqlite.detail = Some("journal_mode = wal".to_owned());
        r.fences.push(sqlite);
        r.fences.push(FenceRow {
            skipped: Some("connecting to etcd: refused".to_owned()),
            ..row(Resource::Etcd, Side::default(), Side::default())
        });
        let mut http = row(Resource::Http, side(5000.0, 40, Some(1.0)), Side::default());
        http.fenced.error = Some("the server answered 409".to_owned());
        http.fenced.rt_error = Some("the server answered 409".to_owned());
        r.fences.push(http);

        let mut s = String::new();
        render(&r, &mut s);
        assert!(s.contains("## Fenced ÷ plain writes"), "{s}");
        assert!(s.contains("2.0 s each in 4 interleaved rounds"), "{s}");
        assert!(
            s.contains("| PostgreSQL | plain | 1,000 | 1,000 | 100 µs | 300 µs | 100 µs | 3.00 |"),
            "{s}"
        );
        assert!(
            s.contains("| PostgreSQL | fenced | 1,000 | 800 | 100 µs | 300 µs | 120 µs | 4.00 (+1 connections) |"),
            "{s}"
        );
        assert!(s.contains("| PostgreSQL | 0.80× | +20 µs | +1.00 |"), "{s}");
        assert!(s.contains("| SQLite | 0.90× | +10 µs | – |"), "{s}");
        assert!(
            s.contains("| etcd | **SKIPPED**: connecting to etcd: refused |"),
            "{s}"
        );
        assert!(
            !s.contains("| etcd | –"),
            "a skipped resource has no ratio row: {s}"
        );
        assert!(
            s.contains(
                "| HTTP (in-process server) | fenced | – | error: the server answered 409 |"
            ),
            "{s}"
        );
        assert!(
            s.contains("| HTTP (in-process server) | – | – | – |"),
            "{s}"
        );
        // The SQL writes are described once, SQLite's set-up under them.
        assert_eq!(
            s.matches("**PostgreSQL, MariaDB, SQLite**").count(),
            1,
            "{s}"
        );
        assert!(s.contains("SQLite: journal_mode = wal."), "{s}");
        assert!(
            s.contains("- **HTTP (in-process server)** — plain: "),
            "{s}"
        );
    }

    #[test]
    fn nothing_is_written_when_the_section_did_not_run() {
        let mut s = String::new();
        render(&Report::default(), &mut s);
        assert!(s.is_empty());
    }
}
