//! The markdown report.

use std::fmt::Write as _;
use std::time::Duration;

use lease::backend::partitions::BatchRenew;

use super::{Report, fmt_dur, fmt_rate, verdict};
use crate::cli::Backend;
use crate::peers::{Kind, SubjectId};
use crate::stats::{Spread, Summary};

/// The whole report.
pub(super) fn render(r: &Report) -> String {
    let mut s = String::new();
    header(r, &mut s);
    if !r.cycles.is_empty() {
        cycles(r, &mut s);
        ratios(r, &mut s);
    }
    if !r.op_rts.is_empty() {
        op_round_trips(r, &mut s);
    }
    if !r.failover.is_empty() {
        failover(r, &mut s);
    }
    if !r.renew.is_empty() {
        renew(r, &mut s);
    }
    if !r.held.is_empty() {
        held(r, &mut s);
    }
    if !r.contention.is_empty() {
        contention(r, &mut s);
    }
    if !r.partitions.is_empty() {
        partitions(r, &mut s);
    }
    super::handover::render(r, &mut s);
    super::fences::render(r, &mut s);
    targets(r, &mut s);
    s
}

fn header(r: &Report, s: &mut String) {
    let _ = writeln!(s, "# lease-bench results\n");
    let _ = writeln!(
        s,
        "- Started: {} UTC; took {:.0} s",
        utc(r.started_unix),
        r.elapsed.as_secs_f64()
    );
    let _ = writeln!(s, "- Machine: {}", r.machine.describe());
    let _ = writeln!(s, "- Command: `{}`", r.command);
    let _ = writeln!(
        s,
        "- Cycles: each subject measured {:.1} s in {} interleaved rounds (random order each \
         round), one cycle at a time on a warm connection, all clients on one current-thread \
         tokio runtime; client CPU is the benchmark process's CPU time (user + system, so it \
         includes the kernel's loopback TCP work) per cycle",
        r.seconds, r.rounds
    );
    for (b, why) in &r.skipped {
        let _ = writeln!(s, "- SKIPPED {}: {why}", b.label());
    }
    s.push('\n');
}

fn opt_dur(d: Option<Duration>) -> String {
    d.map(fmt_dur).unwrap_or_else(|| "–".to_owned())
}

fn cycles(r: &Report, s: &mut String) {
    let _ = writeln!(s, "## Acquire+release cycles\n");
    for &b in &r.backends {
        let rows: Vec<_> = r.cycles.iter().filter(|c| c.backend == b).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(s, "### {}\n", b.label());
        let _ = writeln!(
            s,
            "| subject | fencing token | cycles | cycles/s | p50 | p99 | client CPU / cycle | round trips / cycle |"
        );
        let _ = writeln!(s, "|---|---|--:|--:|--:|--:|--:|--:|");
        for c in rows {
            let rt = r.cycle_rt(b, c.id);
            match (&c.summary, &c.error) {
                (Some(sum), err) => {
                    let note = err
                        .as_ref()
                        .map(|e| format!(" (stopped: {e})"))
                        .unwrap_or_default();
                    let _ = writeln!(
                        s,
                        "| {}{note} | {} | {} | {} | {} | {} | {} | {rt} |",
                        c.id.label(),
                        if c.id.fenced() { "yes" } else { "no" },
                        fmt_rate(sum.count as f64),
                        fmt_rate(sum.rate),
                        opt_dur(sum.p50),
                        opt_dur(sum.p99),
                        opt_dur(sum.cpu_per_op),
                    );
                }
                (None, err) => {
                    let _ = writeln!(
                        s,
                        "| {} | – | – | error: {} | – | – | – | {rt} |",
                        c.id.label(),
                        err.as_deref().unwrap_or("no cycles")
                    );
                }
            }
        }
        s.push('\n');
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_owned(),
    }
}

/// The subject of `kind` on `backend`, if that backend has one.
fn of_kind(backend: Backend, kind: Kind) -> Option<SubjectId> {
    SubjectId::on(backend)
        .into_iter()
        .find(|id| id.kind() == kind)
}

fn ratios(r: &Report, s: &mut String) {
    let _ = writeln!(s, "## Ratios (same run)\n");
    let _ = writeln!(
        s,
        "| backend | store ÷ raw protocol | Coordinator ÷ raw protocol | store ÷ raw lock floor | \
         raw protocol ÷ floor | store ÷ rslock | store ÷ distributed-lock | Coordinator ÷ rslock | \
         Coordinator ÷ distributed-lock |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for &b in &r.backends {
        let rate = |id: Option<SubjectId>| id.and_then(|id| r.rate(b, id));
        let store = r.rate(b, SubjectId::Store);
        let coord = r.rate(b, SubjectId::Coordinator);
        let raw = rate(of_kind(b, Kind::RawProtocol));
        let floor = rate(of_kind(b, Kind::RawLock));
        let rslock = r.rate(b, SubjectId::Rslock);
        let dl = r.rate(b, SubjectId::DistributedLock);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            b.label(),
            ratio(store, raw),
            ratio(coord, raw),
            ratio(store, floor),
            ratio(raw, floor),
            ratio(store, rslock),
            ratio(store, dl),
            ratio(coord, rslock),
            ratio(coord, dl),
        );
    }
    s.push('\n');
    let store = r.rate(Backend::Postgres, SubjectId::StoreNoSync);
    let raw = r.rate(Backend::Postgres, SubjectId::RawRowNoSync);
    if let (Some(st), Some(raw)) = (store, raw) {
        let floor = r.rate(Backend::Postgres, SubjectId::Advisory);
        let _ = writeln!(
            s,
            "PostgreSQL with `synchronous_commit = off` (diagnostic, not durable): store ÷ raw \
             protocol {}, raw protocol ÷ floor {}.\n",
            ratio(Some(st), Some(raw)),
            ratio(Some(raw), floor),
        );
    }
    let b = Backend::Redis;
    let store = r.rate(b, SubjectId::Store);
    let managed = r.rate(b, SubjectId::RawLuaManaged);
    let raw = r.rate(b, SubjectId::RawLua);
    let untimed = r.rate(b, SubjectId::StoreNoTimeout);
    if store.is_some() && (managed.is_some() || untimed.is_some()) {
        let _ = writeln!(
            s,
            "Redis diagnostics: raw Lua on the store's ConnectionManager ÷ raw Lua on a plain \
             multiplexed connection {}; store ÷ raw Lua on the store's ConnectionManager {}; \
             store without operation timeouts ÷ store {}.\n",
            ratio(managed, raw),
            ratio(store, managed),
            ratio(untimed, store),
        );
    }
}

fn op_round_trips(r: &Report, s: &mut String) {
    let _ = writeln!(
        s,
        "## Round trips per operation (counted on the wire by a proxy)\n"
    );
    let _ = writeln!(
        s,
        "| backend | claim | renew | verify | release | claim of a released name | connections opened |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|");
    for o in &r.op_rts {
        let label = o.backend.map(Backend::label).unwrap_or("?");
        if let Some(e) = &o.error {
            let _ = writeln!(s, "| {label} | error: {e} | | | | | |");
        } else {
            let _ = writeln!(
                s,
                "| {label} | {} | {} | {} | {} | {} | {} |",
                o.claim, o.renew, o.verify, o.release, o.reclaim, o.connections
            );
        }
    }
    s.push('\n');
}

fn spread(samples: &[Duration]) -> String {
    match Spread::of(samples) {
        Some(sp) => format!(
            "{} ({}–{})",
            fmt_dur(sp.mean),
            fmt_dur(sp.min),
            fmt_dur(sp.max)
        ),
        None => "–".to_owned(),
    }
}

fn failover(r: &Report, s: &mut String) {
    let _ = writeln!(s, "## Failover (candidate polling with run_elected)\n");
    let _ = writeln!(
        s,
        "| backend | lease | renew every | retry + jitter | holder killed: mean (min–max) | expected | \
         graceful resign: mean (min–max) | bound |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|");
    for f in &r.failover {
        let t = f.timings;
        let err = f
            .error
            .as_ref()
            .map(|e| format!(" (error: {e})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {}{err} | {} | {} | {} + {} | {} | {}–{} | {} | ≤ {} |",
            f.backend.label(),
            fmt_dur(t.lease()),
            fmt_dur(t.renew_every()),
            fmt_dur(t.retry()),
            fmt_dur(t.jitter()),
            spread(&f.dead),
            fmt_dur(t.lease().saturating_sub(t.renew_every())),
            fmt_dur(t.lease() + t.retry() + t.jitter()),
            spread(&f.graceful),
            fmt_dur(t.retry() + t.jitter()),
        );
    }
    s.push('\n');
}

fn renew(r: &Report, s: &mut String) {
    let _ = writeln!(s, "## Renew cost against held leases (each renewed once)\n");
    let _ = writeln!(
        s,
        "| backend | held | all once, 1 in flight | per renewal | share of a 2 s renew period | \
         all once, bounded concurrency | all once, renew_many | round trips, 1 in flight | \
         round trips, concurrent | round trips, renew_many |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for x in &r.renew {
        let per = x
            .sequential
            .map(|d| fmt_dur(d / u32::try_from(x.held.max(1)).unwrap_or(u32::MAX)))
            .unwrap_or_else(|| "–".to_owned());
        let share = x
            .sequential
            .map(|d| format!("{:.1} %", d.as_secs_f64() / 2.0 * 100.0))
            .unwrap_or_else(|| "–".to_owned());
        let rt = |v: Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "–".to_owned());
        let err = x
            .error
            .as_ref()
            .map(|e| format!(" (error: {e})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {}{err} | {} | {} | {per} | {share} | {} ({} in flight) | {} ({}) | {} | {} | {} |",
            x.backend.label(),
            fmt_rate(x.held as f64),
            opt_dur(x.sequential),
            opt_dur(x.concurrent),
            x.concurrency,
            opt_dur(x.batched),
            if x.native_batch { "native" } else { "loop" },
            rt(x.rt_sequential),
            rt(x.rt_concurrent),
            rt(x.rt_batched),
        );
    }
    s.push('\n');
}

fn held(r: &Report, s: &mut String) {
    let _ = writeln!(
        s,
        "## Held names (one coordinator, three renew periods of the default timings)\n"
    );
    let _ = writeln!(
        s,
        "| backend | held | renewals | terms lost | store renewal operations per renew period | \
         one renewal call, mean / longest | client CPU per held name per period | \
         client memory per held name |"
    );
    let _ = writeln!(s, "|---|--:|---|--:|--:|--:|--:|--:|");
    for x in &r.held {
        let err = x
            .error
            .as_ref()
            .map(|e| format!(" (error: {e})"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "| {}{err} | {} | {} | {} | {} | {} | {} | {} |",
            x.backend.label(),
            fmt_rate(x.held as f64),
            x.renewals,
            x.lost
                .map(|n| n.to_string())
                .unwrap_or_else(|| "–".to_owned()),
            x.ops_per_period
                .map(|n| format!("{n:.1}"))
                .unwrap_or_else(|| "–".to_owned()),
            x.call_time
                .map(|(mean, max)| format!("{} / {}", fmt_dur(mean), fmt_dur(max)))
                .unwrap_or_else(|| "–".to_owned()),
            x.cpu_per_name
                .map(fmt_dur)
                .unwrap_or_else(|| "–".to_owned()),
            x.rss_per_name
                .map(|b| format!("{:.0} B", b.max(0.0)))
                .unwrap_or_else(|| "–".to_owned()),
        );
    }
    s.push('\n');
}

/// The renew period of the default timings (the group worker's).
fn renew_period() -> Duration {
    lease::Timings::default().renew_every()
}

fn mode(m: Option<BatchRenew>) -> String {
    match m {
        Some(BatchRenew::Fixed { round_trips }) => format!("fixed, {round_trips} RT"),
        Some(BatchRenew::Pipelined) => "pipelined".to_owned(),
        None => "–".to_owned(),
    }
}

fn partitions(r: &Report, s: &mut String) {
    let period = renew_period();
    let _ = writeln!(
        s,
        "## Partitions: one batch renewal against single renewals\n"
    );
    let _ = writeln!(
        s,
        "(a) one `renew_partitions` call renewing K partitions of one group; (b) K leases \
         (claimed beforehand) renewed one after the other with `LeaseStore::renew`. Both through \
         one store object on a warm connection, leases of {}, in interleaved rounds (one (a) and one (b) per \
         round, the order alternating), at most {} rounds per K or until {:.0} s are spent \
         (at least {} rounds). Times are per batch of K; renewals/s = K × batches ÷ their wall \
         time; (b) ÷ (a) compares the medians. Round trips counted on the wire in a second pass \
         through a proxy (one batch of each). Share of the period: (a)'s p99 against the default \
         {} renew period.\n",
        fmt_dur(crate::renew_cost::PARTITION_TTL),
        r.partition_rounds,
        r.partition_seconds,
        crate::renew_cost::MIN_PARTITION_ROUNDS,
        fmt_dur(period),
    );
    let _ = writeln!(
        s,
        "| backend | K | batch mode | rounds | (a) batch p50 / p99 | (a) renewals/s | \
         (b) one by one p50 / p99 | (b) renewals/s | (b) ÷ (a) | round trips (a) / (b) | \
         (a) p99 share of the {} period |",
        fmt_dur(period)
    );
    let _ = writeln!(s, "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    let rt = |v: Option<u64>| {
        v.map(|n| fmt_rate(n as f64))
            .unwrap_or_else(|| "–".to_owned())
    };
    let pair = |sum: Option<Summary>| match sum {
        Some(x) => format!("{} / {}", opt_dur(x.p50), opt_dur(x.p99)),
        None => "–".to_owned(),
    };
    for x in &r.partitions {
        let err = x
            .error
            .as_ref()
            .map(|e| format!(" (error: {e})"))
            .unwrap_or_default();
        let rts = if x.backend.has_server() {
            let conns = if x.connections > 0 {
                format!(" (+{} connections)", x.connections)
            } else {
                String::new()
            };
            format!("{} / {}{conns}", rt(x.rt_batch), rt(x.rt_single))
        } else {
            "–".to_owned()
        };
        let share = x
            .batch
            .and_then(|b| b.p99)
            .map(|d| format!("{:.2} %", d.as_secs_f64() / period.as_secs_f64() * 100.0))
            .unwrap_or_else(|| "–".to_owned());
        let _ = writeln!(
            s,
            "| {}{err} | {} | {} | {} | {} | {} | {} | {} | {} | {rts} | {share} |",
            x.backend.label(),
            fmt_rate(x.k as f64),
            mode(x.mode),
            x.rounds,
            pair(x.batch),
            x.batch_rate()
                .map(fmt_rate)
                .unwrap_or_else(|| "–".to_owned()),
            pair(x.single),
            x.single_rate()
                .map(fmt_rate)
                .unwrap_or_else(|| "–".to_owned()),
            x.ratio()
                .map(|v| format!("{v:.1}×"))
                .unwrap_or_else(|| "–".to_owned()),
        );
    }
    s.push('\n');
}

fn contention(r: &Report, s: &mut String) {
    let _ = writeln!(s, "## Contention (one name, run_elected)\n");
    let _ = writeln!(
        s,
        "| backend | candidates | retry + jitter | window | store ops/s | claims/s | bound N ÷ retry | \
         claims | won | renewals | releases | claims per 100 ms: mean / peak | claims in the first 100 ms |"
    );
    let _ = writeln!(s, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for c in &r.contention {
        if let Some(e) = &c.error {
            let _ = writeln!(s, "| {} | error: {e} |||||||||||| ", c.backend.label());
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} + {} | {:.1} s | {:.1} | {:.1} | {:.1} | {} | {} | {} | {} | {:.1} / {} | {} |",
            c.backend.label(),
            c.candidates,
            fmt_dur(c.timings.retry()),
            fmt_dur(c.timings.jitter()),
            c.window.as_secs_f64(),
            c.ops_per_sec(),
            c.claims_per_sec(),
            c.bound(),
            c.counts.claims,
            c.counts.won,
            c.counts.renews,
            c.counts.releases,
            c.mean_bucket(),
            c.peak_bucket,
            c.first_bucket,
        );
    }
    s.push('\n');
}

fn targets(r: &Report, s: &mut String) {
    let _ = writeln!(s, "## Targets\n");
    let _ = writeln!(s, "| target | backend | measured | verdict |");
    let _ = writeln!(s, "|---|---|---|---|");
    for o in &r.op_rts {
        if o.error.is_some() {
            continue;
        }
        let label = o.backend.map(Backend::label).unwrap_or("?");
        let ok = [o.claim, o.renew, o.release, o.verify, o.reclaim]
            .iter()
            .all(|n| *n == 1);
        let _ = writeln!(
            s,
            "| claim, renew, verify, release: 1 round trip each | {label} | {} / {} / {} / {} (re-claim {}) | {} |",
            o.claim,
            o.renew,
            o.verify,
            o.release,
            o.reclaim,
            verdict(ok)
        );
    }
    for &b in &r.backends {
        let store = r.rate(b, SubjectId::Store);
        for peer in [
            SubjectId::Rslock,
            SubjectId::DistributedLock,
            SubjectId::EtcdLock,
        ] {
            if let (Some(st), Some(p)) = (store, r.rate(b, peer)) {
                let _ = writeln!(
                    s,
                    "| store cycles/s ≥ {} (fenced) | {} | {} vs {} ({:.2}×) | {} |",
                    peer.label(),
                    b.label(),
                    fmt_rate(st),
                    fmt_rate(p),
                    st / p,
                    verdict(st >= p)
                );
            }
        }
        let raw = of_kind(b, Kind::RawProtocol).and_then(|id| r.rate(b, id));
        if let (Some(st), Some(raw)) = (store, raw) {
            let _ = writeln!(
                s,
                "| store ≥ 0.9× raw protocol by hand | {} | {:.2}× | {} |",
                b.label(),
                st / raw,
                verdict(st >= 0.9 * raw)
            );
        }
        let store_ns = r.rate(b, SubjectId::StoreNoSync);
        let raw_ns = r.rate(b, SubjectId::RawRowNoSync);
        if let (Some(st), Some(raw)) = (store_ns, raw_ns) {
            let _ = writeln!(
                s,
                "| store ≥ 0.9× raw protocol, synchronous_commit=off (diagnostic) | {} | {:.2}× | {} |",
                b.label(),
                st / raw,
                verdict(st >= 0.9 * raw)
            );
        }
        let floor = of_kind(b, Kind::RawLock).and_then(|id| r.rate(b, id));
        if let (Some(st), Some(fl)) = (store, floor) {
            let _ = writeln!(
                s,
                "| ratio to the raw-lock floor (reported) | {} | {:.2}× | reported |",
                b.label(),
                st / fl
            );
        }
    }
    for c in &r.contention {
        if c.error.is_some() {
            continue;
        }
        let _ = writeln!(
            s,
            "| store ops/s ≤ candidates ÷ retry | {} | {:.1} ≤ {:.1} | {} |",
            c.backend.label(),
            c.ops_per_sec(),
            c.bound(),
            verdict(c.ops_per_sec() <= c.bound())
        );
    }
    let period = renew_period();
    for x in &r.partitions {
        let Some(p99) = x.batch.and_then(|b| b.p99) else {
            continue;
        };
        if x.k != lease::backend::partitions::MAX_PARTITIONS_PER_CALL || x.error.is_some() {
            continue;
        }
        let _ = writeln!(
            s,
            "| one batch renewal of {} partitions inside the {} renew period | {} | p99 {} ({:.2} % of the period; p50 {}) | {} |",
            fmt_rate(x.k as f64),
            fmt_dur(period),
            x.backend.label(),
            fmt_dur(p99),
            p99.as_secs_f64() / period.as_secs_f64() * 100.0,
            opt_dur(x.batch.and_then(|b| b.p50)),
            verdict(p99 < period)
        );
    }
    for f in &r.failover {
        if let Some(sp) = Spread::of(&f.graceful) {
            let bound = f.timings.retry() + f.timings.jitter();
            let _ = writeln!(
                s,
                "| graceful hand-off bounded by the campaign retry + jitter | {} | max {} ≤ {} (mean {}) | {} |",
                f.backend.label(),
                fmt_dur(sp.max),
                fmt_dur(bound),
                fmt_dur(sp.mean),
                verdict(sp.max <= bound + Duration::from_millis(100))
            );
        }
    }
    s.push('\n');
}

/// `YYYY-MM-DD HH:MM:SS` of a Unix time (UTC).
fn utc(unix: u64) -> String {
    let days = i64::try_from(unix / 86_400).unwrap_or(0);
    let secs = unix % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20");
    }
}
