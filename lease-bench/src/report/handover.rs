//! The hand-over sections of the markdown report: push against poll, and the CLI.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Report, fmt_dur, verdict};
use crate::cli::Backend;
use crate::handover::{Mode, quantile, secs};

/// The graceful hand-off bound of backends whose hints reach every process.
const GRACEFUL_P99: f64 = 0.100;
/// How late after the store's expiry a crashed holder's successor may start (p99).
const CRASH_P99: f64 = 0.150;
/// The CLI's hand-over bound (p99).
const CLI_P99: f64 = 0.200;

/// Backends whose graceful hand-off must beat [`GRACEFUL_P99`]: their hints reach every waiter.
/// MariaDB's hints are in-process only and the MongoDB emulator has none: at most the retry.
fn pushes(b: Backend) -> bool {
    matches!(
        b,
        Backend::Local
            | Backend::Sqlite
            | Backend::Postgres
            | Backend::Redis
            | Backend::Nats
            | Backend::Etcd
    )
}

fn ms(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{:.0} ms", v * 1000.0))
}

/// `p50 / p99 (min–max)` of seconds.
fn dist(v: &[f64]) -> String {
    if v.is_empty() {
        return "–".to_owned();
    }
    format!(
        "{} / {} ({}–{})",
        ms(quantile(v, 0.5)),
        ms(quantile(v, 0.99)),
        ms(quantile(v, 0.0)),
        ms(quantile(v, 1.0))
    )
}

/// The hand-over section.
pub(super) fn render(r: &Report, s: &mut String) {
    if r.handover.is_empty() && r.handover_cli.is_empty() {
        return;
    }
    let _ = writeln!(s, "## Hand-over: push against polling\n");
    if let Some(h) = r.handover.first() {
        let t = h.timings;
        let _ = writeln!(
            s,
            "Graceful and crash: lease {}, renew every {}, campaign retry {} + up to {} jitter; \
             {} samples per mode, push and poll alternating. Poll hides the store's hints \
             (waiters still sleep to the holder's expiry by the store's clock). Crash: successor \
             start − the store's expiry as the store answers it (the sending of the last read \
             that found the lease live, polled every 5 ms after the cut: at most one poll and \
             one round trip before the real expiry; negative would be before it); \"expired after its \
             report\": that expiry − the time left the store reported right after the cut. \
             Figures are p50 / p99 (min–max).\n",
            fmt_dur(t.lease()),
            fmt_dur(t.renew_every()),
            fmt_dur(t.retry()),
            fmt_dur(t.jitter()),
            h.push.graceful.len().max(h.poll.graceful.len()),
        );
        let _ = writeln!(
            s,
            "| backend | wake-up | graceful: push | graceful: poll | poll ÷ push (p50) | crash after expiry: push | crash: poll | expired after its report (p50) |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|");
        for h in &r.handover {
            let err = h
                .error
                .as_ref()
                .map(|e| format!(" (error: {e})"))
                .unwrap_or_default();
            let push = secs(&h.push.graceful);
            let poll = secs(&h.poll.graceful);
            let ratio = match (quantile(&poll, 0.5), quantile(&push, 0.5)) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.0}×", a / b),
                _ => "–".to_owned(),
            };
            let _ = writeln!(
                s,
                "| {}{err} | {} | {} | {} | {ratio} | {} | {} | {} |",
                h.backend.label(),
                h.mechanism,
                dist(&push),
                dist(&poll),
                dist(&h.push.crash),
                dist(&h.poll.crash),
                ms(quantile(
                    &[&h.push.crash_late[..], &h.poll.crash_late[..]].concat(),
                    0.5
                )),
            );
        }
        s.push('\n');
        idle(r, s);
    }
    cli(r, s);
    targets(r, s);
}

fn idle(r: &Report, s: &mut String) {
    let Some(h) = r.handover.iter().find(|h| h.push.idle.is_some()) else {
        return;
    };
    let t = h.idle_timings;
    let _ = writeln!(
        s,
        "### {} idle waiters on one held name\n\nLease {}, retry {} + {}; the waiters' store \
         operations over {} after a warm-up of one lease (the holder's renewals are not \
         counted); then the holder resigns and the claims of the next second are counted. The \
         bound is one attempt (claim + read) per waiter per lease period.\n",
        h.waiters,
        fmt_dur(t.lease()),
        fmt_dur(t.retry()),
        fmt_dur(t.jitter()),
        fmt_dur(h.push.idle.as_ref().map_or(Duration::ZERO, |i| i.window)),
    );
    let _ = writeln!(
        s,
        "| backend | mode | ops/s | claims/s | reads/s | per waiter per lease | hints seen | claims in 1 s after the release | release → work |"
    );
    let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for h in &r.handover {
        for mode in Mode::BOTH {
            let Some(i) = &h.mode(mode).idle else {
                continue;
            };
            let w = i.window.as_secs_f64().max(1e-9);
            let per_waiter = i.claims_per_waiter_per_lease(h.waiters, t.lease());
            let _ = writeln!(
                s,
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} claims | {} | {} | {} |",
                h.backend.label(),
                mode.label(),
                i.ops_per_sec(),
                i.counts.claims as f64 / w,
                i.counts.reads as f64 / w,
                per_waiter,
                i.hints,
                i.burst_claims,
                i.burst_handover.map_or("–".to_owned(), fmt_dur),
            );
        }
    }
    s.push('\n');
}

fn cli(r: &Report, s: &mut String) {
    if r.handover_cli.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "### `lease run --wait` between two processes\n\nThe holder's command ends → the waiting \
         contender's command starts, both stamped by `date +%s%N`; includes the holder's \
         release, the contender's wake-up, claim and the spawn of its command. p50 / p99 \
         (min–max).\n"
    );
    let _ = writeln!(s, "| backend | binary | samples | hand-over |");
    let _ = writeln!(s, "|---|---|--:|--:|");
    for c in &r.handover_cli {
        let err = c
            .error
            .as_ref()
            .map(|e| format!(" (error: {e})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {}{err} | {} | {} | {} |",
            c.backend.label(),
            c.binary,
            c.handover.len(),
            dist(&secs(&c.handover))
        );
    }
    s.push('\n');
}

fn targets(r: &Report, s: &mut String) {
    let _ = writeln!(s, "### Hand-over targets\n");
    let _ = writeln!(s, "| target | backend | measured | verdict |");
    let _ = writeln!(s, "|---|---|---|---|");
    for h in r.handover.iter().filter(|h| h.error.is_none()) {
        let t = h.timings;
        let push = secs(&h.push.graceful);
        if let Some(p99) = quantile(&push, 0.99) {
            let (target, bound) = if pushes(h.backend) {
                ("graceful p99 < 100 ms", GRACEFUL_P99)
            } else {
                (
                    "graceful p99 ≤ the retry + jitter",
                    (t.retry() + t.jitter()).as_secs_f64(),
                )
            };
            let _ = writeln!(
                s,
                "| {target} | {} | {} | {} |",
                h.backend.label(),
                ms(Some(p99)),
                verdict(p99 < bound)
            );
        }
        if let (Some(min), Some(p99)) =
            (quantile(&h.push.crash, 0.0), quantile(&h.push.crash, 0.99))
        {
            let _ = writeln!(
                s,
                "| crash: successor within [expiry, expiry + 150 ms] (p99), never before | {} | min {}, p99 {} (expiry − ≤ 5 ms poll) | {} |",
                h.backend.label(),
                ms(Some(min)),
                ms(Some(p99)),
                verdict(min >= 0.0 && p99 <= CRASH_P99)
            );
        }
        if let Some(i) = &h.push.idle {
            let per_waiter = i.claims_per_waiter_per_lease(h.waiters, h.idle_timings.lease());
            let verdict = if pushes(h.backend) {
                verdict(per_waiter <= 1.5)
            } else {
                "n/a: no hints across processes, so waiters poll at the retry"
            };
            let _ = writeln!(
                s,
                "| idle waiters: ≤ about 1 claim per waiter per lease | {} | {per_waiter:.2} | {verdict} |",
                h.backend.label(),
            );
        }
    }
    for c in r
        .handover_cli
        .iter()
        .filter(|c| c.binary == "push" && c.error.is_none())
    {
        if let Some(p99) = quantile(&secs(&c.handover), 0.99) {
            let _ = writeln!(
                s,
                "| `lease run --wait` p99 < 200 ms | {} | {} | {} |",
                c.backend.label(),
                ms(Some(p99)),
                verdict(p99 < CLI_P99)
            );
        }
    }
    s.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mariadb_and_mongodb_are_held_to_the_retry_only() {
        assert!(pushes(Backend::Postgres));
        assert!(!pushes(Backend::Mysql));
        assert!(!pushes(Backend::Mongodb));
    }
}
