//! `lease`'s own metrics in Prometheus's text exposition format: a recorder for the `metrics`
//! facade, which lease-core records its terms through (see `lease::telemetry`: `lease_held`,
//! `lease_term`, `lease_claims_total`, `lease_losses_total`, the renewal histograms …), plus
//! two series derived from them — `lease_held_seconds_total` (how long this process held each
//! name) and `lease_renewals_total` (renewals that succeeded) — written to a file
//! (`--metrics-textfile`, replaced atomically on each change and at exit, for node_exporter's
//! textfile collector) and served over HTTP (`--metrics-listen`).
//!
//! Nothing is installed unless one of the two options is given.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lease::telemetry::{self, METRICS};
use metrics::{Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName};
use metrics::{Metadata, Recorder, SharedString, Unit};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::exit::{CliError, Exit};
use crate::observe::ObserveArgs;

/// Counter, derived from [`telemetry::HELD`]: seconds this process held `name` (any of its
/// terms), the running term included.
pub(crate) const HELD_SECONDS: &str = "lease_held_seconds_total";
/// Counter, derived from [`telemetry::RENEW_TIME_LEFT`]: renewals of `name` that succeeded.
pub(crate) const RENEWALS: &str = "lease_renewals_total";

/// The upper bounds of the histograms' buckets, in seconds (`+Inf` comes last).
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// A series' label pairs, in the order recorded.
type Labels = Vec<(String, String)>;

/// A family as rendered: its kind, its HELP text and its series.
type Rendered<'a> = (&'a str, Option<&'a str>, Vec<(Labels, Series)>);

/// One series' value.
#[derive(Debug, Clone)]
enum Series {
    Counter(u64),
    Gauge(f64),
    Histogram {
        /// Observations per bucket (not cumulative), the last one above every bound.
        counts: [u64; BUCKETS.len() + 1],
        sum: f64,
        count: u64,
    },
}

/// The series of one metric name.
#[derive(Debug, Default)]
struct Family {
    help: Option<String>,
    series: BTreeMap<Labels, Series>,
}

/// How long a name was held: the closed terms' total, and since when it is held now.
#[derive(Debug, Default, Clone, Copy)]
struct Held {
    total: Duration,
    since: Option<Instant>,
}

#[derive(Debug, Default)]
struct State {
    families: BTreeMap<String, Family>,
    held: BTreeMap<String, Held>,
    renewals: BTreeMap<String, u64>,
}

/// Every series recorded in this process, and a signal of each change.
#[derive(Debug)]
pub(crate) struct Registry {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl Registry {
    fn new() -> Registry {
        let mut families = BTreeMap::new();
        for m in METRICS {
            families.insert(
                m.name.to_owned(),
                Family {
                    help: Some(m.help.to_owned()),
                    series: BTreeMap::new(),
                },
            );
        }
        Registry {
            state: Mutex::new(State {
                families,
                ..State::default()
            }),
            changed: watch::channel(0).0,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Applies `f` to the series `name`/`labels` (made with `fresh` when missing), keeps the
    /// derived series, and signals the change.
    fn update(
        &self,
        name: &str,
        labels: &Labels,
        fresh: fn() -> Series,
        f: impl FnOnce(&mut Series),
    ) {
        {
            let mut state = self.state();
            let series = state
                .families
                .entry(name.to_owned())
                .or_default()
                .series
                .entry(labels.clone())
                .or_insert_with(fresh);
            f(series);
            let value = series.clone();
            let lease = labels
                .iter()
                .find(|(k, _)| k == "name")
                .map(|(_, v)| v.clone());
            if let Some(lease) = lease {
                if name == telemetry::HELD
                    && let Series::Gauge(v) = value
                {
                    let now = Instant::now();
                    let held = state.held.entry(lease).or_default();
                    match (v > 0.0, held.since) {
                        (true, None) => held.since = Some(now),
                        (false, Some(since)) => {
                            held.total += now.duration_since(since);
                            held.since = None;
                        }
                        _ => {}
                    }
                } else if name == telemetry::RENEW_TIME_LEFT {
                    let n = state.renewals.entry(lease).or_default();
                    *n = n.saturating_add(1);
                }
            }
        }
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Makes the series `name`/`labels` appear (at zero) without changing it.
    fn register(&self, name: &str, labels: &Labels, fresh: fn() -> Series) {
        let mut state = self.state();
        state
            .families
            .entry(name.to_owned())
            .or_default()
            .series
            .entry(labels.clone())
            .or_insert_with(fresh);
    }

    fn describe(&self, name: &str, help: &str) {
        let mut state = self.state();
        let family = state.families.entry(name.to_owned()).or_default();
        if family.help.is_none() {
            family.help = Some(help.to_owned());
        }
    }

    /// Every series with at least one sample, in Prometheus's text exposition format
    /// (version 0.0.4).
    pub(crate) fn render(&self) -> String {
        let state = self.state();
        let now = Instant::now();
        let mut out = String::new();
        let mut families: BTreeMap<&str, Rendered<'_>> = BTreeMap::new();
        for (name, family) in &state.families {
            if family.series.is_empty() {
                continue;
            }
            let kind = match family.series.values().next() {
                Some(Series::Counter(_)) => "counter",
                Some(Series::Gauge(_)) => "gauge",
                _ => "histogram",
            };
            let series = family
                .series
                .iter()
                .map(|(l, s)| (l.clone(), s.clone()))
                .collect();
            families.insert(name, (kind, family.help.as_deref(), series));
        }
        let held: Vec<(Labels, Series)> = state
            .held
            .iter()
            .map(|(name, h)| {
                let running = h.since.map_or(Duration::ZERO, |s| now.duration_since(s));
                let secs = (h.total + running).as_secs_f64();
                (vec![("name".to_owned(), name.clone())], Series::Gauge(secs))
            })
            .collect();
        if !held.is_empty() {
            families.insert(
                HELD_SECONDS,
                (
                    "counter",
                    Some("seconds this process held the lease (its current term included)"),
                    held,
                ),
            );
        }
        let renewals: Vec<(Labels, Series)> = state
            .renewals
            .iter()
            .map(|(name, n)| (vec![("name".to_owned(), name.clone())], Series::Counter(*n)))
            .collect();
        if !renewals.is_empty() {
            families.insert(
                RENEWALS,
                ("counter", Some("renewals that succeeded"), renewals),
            );
        }
        for (name, (kind, help, series)) in families {
            if let Some(help) = help {
                let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (labels, value) in series {
                match value {
                    Series::Counter(n) => {
                        let _ = writeln!(out, "{name}{} {n}", label_text(&labels, None));
                    }
                    Series::Gauge(v) => {
                        let _ = writeln!(out, "{name}{} {}", label_text(&labels, None), number(v));
                    }
                    Series::Histogram { counts, sum, count } => {
                        let mut cumulative = 0u64;
                        for (i, n) in counts.iter().enumerate() {
                            cumulative += n;
                            let le = BUCKETS.get(i).map_or("+Inf".to_owned(), |b| number(*b));
                            let _ = writeln!(
                                out,
                                "{name}_bucket{} {cumulative}",
                                label_text(&labels, Some(&le))
                            );
                        }
                        let l = label_text(&labels, None);
                        let _ = writeln!(out, "{name}_sum{l} {}", number(sum));
                        let _ = writeln!(out, "{name}_count{l} {count}");
                    }
                }
            }
        }
        out
    }
}

/// A sample value as Prometheus reads it.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

fn escape_help(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `{k="v",…}` (with `le` last when given), or nothing when there are no labels.
fn label_text(labels: &Labels, le: Option<&str>) -> String {
    let mut parts: Vec<String> = labels
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    if let Some(le) = le {
        parts.push(format!("le=\"{le}\""));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", parts.join(","))
    }
}

/// A handle the facade's macros record through.
struct Handle {
    registry: Arc<Registry>,
    name: String,
    labels: Labels,
}

fn counter() -> Series {
    Series::Counter(0)
}

fn gauge() -> Series {
    Series::Gauge(0.0)
}

fn histogram() -> Series {
    Series::Histogram {
        counts: [0; BUCKETS.len() + 1],
        sum: 0.0,
        count: 0,
    }
}

impl CounterFn for Handle {
    fn increment(&self, value: u64) {
        self.registry
            .update(&self.name, &self.labels, counter, |s| {
                if let Series::Counter(n) = s {
                    *n = n.saturating_add(value);
                }
            });
    }

    fn absolute(&self, value: u64) {
        self.registry
            .update(&self.name, &self.labels, counter, |s| {
                if let Series::Counter(n) = s {
                    *n = (*n).max(value);
                }
            });
    }
}

impl GaugeFn for Handle {
    fn increment(&self, value: f64) {
        self.registry.update(&self.name, &self.labels, gauge, |s| {
            if let Series::Gauge(v) = s {
                *v += value;
            }
        });
    }

    fn decrement(&self, value: f64) {
        self.registry.update(&self.name, &self.labels, gauge, |s| {
            if let Series::Gauge(v) = s {
                *v -= value;
            }
        });
    }

    fn set(&self, value: f64) {
        self.registry.update(&self.name, &self.labels, gauge, |s| {
            if let Series::Gauge(v) = s {
                *v = value;
            }
        });
    }
}

impl HistogramFn for Handle {
    fn record(&self, value: f64) {
        self.registry
            .update(&self.name, &self.labels, histogram, |s| {
                if let Series::Histogram { counts, sum, count } = s {
                    let i = BUCKETS
                        .iter()
                        .position(|b| value <= *b)
                        .unwrap_or(BUCKETS.len());
                    counts[i] += 1;
                    *sum += value;
                    *count += 1;
                }
            });
    }
}

/// The recorder installed for the `metrics` facade.
struct Record(Arc<Registry>);

impl Record {
    fn handle(&self, key: &Key, fresh: fn() -> Series) -> Arc<Handle> {
        let labels: Labels = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        self.0.register(key.name(), &labels, fresh);
        Arc::new(Handle {
            registry: self.0.clone(),
            name: key.name().to_owned(),
            labels,
        })
    }
}

impl Recorder for Record {
    fn describe_counter(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.0.describe(key.as_str(), &description);
    }

    fn describe_gauge(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.0.describe(key.as_str(), &description);
    }

    fn describe_histogram(&self, key: KeyName, _unit: Option<Unit>, description: SharedString) {
        self.0.describe(key.as_str(), &description);
    }

    fn register_counter(&self, key: &Key, _metadata: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.handle(key, counter))
    }

    fn register_gauge(&self, key: &Key, _metadata: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.handle(key, gauge))
    }

    fn register_histogram(&self, key: &Key, _metadata: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.handle(key, histogram))
    }
}

/// Where the metrics go while `lease` runs; [`finish`](Exporter::finish) writes the file a
/// last time.
pub(crate) struct Exporter {
    registry: Arc<Registry>,
    textfile: Option<PathBuf>,
    tasks: Vec<JoinHandle<()>>,
}

/// Installs the recorder and starts the outlets the options ask for; `None` when they ask
/// for none. A file that cannot be written or an address that cannot be listened on is a
/// usage error saying what to change.
pub(crate) async fn start(args: &ObserveArgs) -> Result<Option<Exporter>, CliError> {
    if args.metrics_textfile.is_none() && args.metrics_listen.is_none() {
        return Ok(None);
    }
    let registry = Arc::new(Registry::new());
    let mut tasks = Vec::new();
    let listener = match &args.metrics_listen {
        Some(addr) => Some(TcpListener::bind(addr.as_str()).await.map_err(|e| {
            CliError::new(
                Exit::Usage,
                format!(
                    "--metrics-listen {addr}: cannot listen there: {e}; give a free host:port \
                     of this host (e.g. 127.0.0.1:9464)"
                ),
            )
        })?),
        None => None,
    };
    if let Some(path) = &args.metrics_textfile {
        write_textfile(path, &registry.render()).map_err(|e| {
            CliError::new(
                Exit::Usage,
                format!(
                    "--metrics-textfile {}: cannot write it: {e}; give a file in a directory \
                     that exists and that lease may write to",
                    path.display()
                ),
            )
        })?;
    }
    if metrics::set_global_recorder(Record(registry.clone())).is_err() {
        return Err(CliError::new(
            Exit::CannotStart,
            "a metrics recorder was already installed",
        ));
    }
    telemetry::describe();
    if let Some(path) = args.metrics_textfile.clone() {
        let registry = registry.clone();
        let mut changed = registry.changed.subscribe();
        tasks.push(tokio::spawn(async move {
            let mut warned = false;
            while changed.changed().await.is_ok() {
                let text = registry.render();
                let path = path.clone();
                let written = tokio::task::spawn_blocking(move || write_textfile(&path, &text)).await;
                if let Ok(Err(e)) = written
                    && !warned
                {
                    tracing::warn!(error = %e, "cannot write the metrics textfile; retrying at the next change");
                    warned = true;
                }
            }
        }));
    }
    if let Some(listener) = listener {
        let registry = registry.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                tokio::spawn(serve(conn, registry.clone()));
            }
        }));
    }
    Ok(Some(Exporter {
        registry,
        textfile: args.metrics_textfile.clone(),
        tasks,
    }))
}

impl Exporter {
    /// Stops the outlets and writes the textfile a last time, with the values at exit.
    pub(crate) fn finish(self) {
        for task in &self.tasks {
            task.abort();
        }
        if let Some(path) = &self.textfile
            && let Err(e) = write_textfile(path, &self.registry.render())
        {
            tracing::warn!(error = %e, "cannot write the metrics textfile at exit");
        }
    }
}

/// Replaces `path` with `text` atomically: written to a hidden temporary file beside it (not
/// ending in `.prom`, so the textfile collector never reads it half-written), then renamed.
fn write_textfile(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let file = path.file_name().ok_or_else(|| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path names no file")
    })?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        file.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

/// Answers one HTTP request on `conn` with the metrics (any path; GET or HEAD), then closes.
async fn serve(mut conn: TcpStream, registry: Arc<Registry>) {
    let mut buf = vec![0u8; 8192];
    let mut n = 0;
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            let got = conn.read(&mut buf[n..]).await?;
            n += got;
            if got == 0 || buf[..n].windows(4).any(|w| w == b"\r\n\r\n") || n == buf.len() {
                return Ok::<(), std::io::Error>(());
            }
        }
    })
    .await;
    if !matches!(read, Ok(Ok(()))) || n == 0 {
        return;
    }
    let head = String::from_utf8_lossy(&buf[..n]);
    let method = head.split_whitespace().next().unwrap_or("");
    let response = match method {
        "GET" | "HEAD" => {
            let body = registry.render();
            let mut r = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            if method == "GET" {
                r.push_str(&body);
            }
            r
        }
        _ => "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 0\r\n\
              Connection: close\r\n\r\n"
            .to_owned(),
    };
    let _ = conn.write_all(response.as_bytes()).await;
    let _ = conn.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(registry: &Arc<Registry>, name: &str, lease: &str) -> Handle {
        Handle {
            registry: registry.clone(),
            name: name.to_owned(),
            labels: vec![("name".to_owned(), lease.to_owned())],
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_exposition_has_types_help_and_derived_series() {
        let registry = Arc::new(Registry::new());
        let held = handle(&registry, telemetry::HELD, "job");
        let claims = handle(&registry, telemetry::CLAIMS, "job");
        let left = handle(&registry, telemetry::RENEW_TIME_LEFT, "job");
        GaugeFn::set(&held, 1.0);
        CounterFn::increment(&claims, 1);
        left.record(9.5);
        left.record(0.2);
        tokio::time::advance(Duration::from_secs(3)).await;
        GaugeFn::set(&held, 0.0);
        tokio::time::advance(Duration::from_secs(10)).await;
        let text = registry.render();
        for line in [
            "# TYPE lease_held gauge",
            "lease_held{name=\"job\"} 0",
            "# TYPE lease_claims_total counter",
            "lease_claims_total{name=\"job\"} 1",
            "# TYPE lease_renew_time_left_seconds histogram",
            "lease_renew_time_left_seconds_bucket{name=\"job\",le=\"0.25\"} 1",
            "lease_renew_time_left_seconds_bucket{name=\"job\",le=\"10\"} 2",
            "lease_renew_time_left_seconds_bucket{name=\"job\",le=\"+Inf\"} 2",
            "lease_renew_time_left_seconds_count{name=\"job\"} 2",
            "lease_renewals_total{name=\"job\"} 2",
            "# TYPE lease_held_seconds_total counter",
            "lease_held_seconds_total{name=\"job\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(
            text.contains("# HELP lease_claims_total successful claims\n"),
            "{text}"
        );
        // A family's TYPE comes before its samples, once.
        assert_eq!(text.matches("# TYPE lease_held gauge").count(), 1);
    }

    #[test]
    fn labels_are_escaped() {
        let labels = vec![("name".to_owned(), "a\"b\\c\nd".to_owned())];
        assert_eq!(label_text(&labels, None), "{name=\"a\\\"b\\\\c\\nd\"}");
        assert_eq!(label_text(&Vec::new(), None), "");
        assert_eq!(number(0.5), "0.5");
        assert_eq!(number(3.0), "3");
    }

    #[test]
    fn the_textfile_is_replaced_whole() {
        let dir = std::env::temp_dir().join(format!("lease-prom-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lease.prom");
        write_textfile(&path, "a 1\n").unwrap();
        write_textfile(&path, "b 2\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "b 2\n");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "a temporary file was left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
