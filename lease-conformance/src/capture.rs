//! Capturing what the engine publishes, for tests: a `metrics` recorder that keeps every
//! counter, gauge, histogram and description ([`MetricsCapture`]), and a `tracing` layer that
//! keeps every event ([`LogCapture`]).
//!
//! Both install for the current thread only, so paused-time tests (one thread each) running
//! in parallel never see each other's metrics or lines:
//!
//! ```
//! use lease_conformance::capture::{LogCapture, MetricsCapture};
//!
//! let metrics = MetricsCapture::default();
//! let logs = LogCapture::default();
//! let _m = metrics.install_local();
//! let _l = logs.install_local();
//! metrics::counter!("demo_total", "name" => "x").increment(2);
//! tracing::warn!(name = "x", "something happened");
//! assert_eq!(metrics.counter("demo_total", &[("name", "x")]), 2);
//! assert_eq!(logs.find("something happened")[0].level, tracing::Level::WARN);
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

/// One series: the metric's name and its labels, sorted by key.
type SeriesId = (String, Vec<(String, String)>);

#[derive(Default)]
struct Metrics {
    /// Counters and gauges (a gauge keeps its `f64` bits).
    cells: BTreeMap<SeriesId, Arc<AtomicU64>>,
    histograms: BTreeMap<SeriesId, Arc<Observations>>,
    descriptions: BTreeMap<String, (Option<Unit>, String)>,
}

#[derive(Default)]
struct Observations(Mutex<Vec<f64>>);

impl HistogramFn for Observations {
    fn record(&self, value: f64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(value);
    }
}

/// A `metrics` recorder that keeps everything, readable by metric name and labels.
#[derive(Clone, Default)]
pub struct MetricsCapture(Arc<Mutex<Metrics>>);

fn series(key: &Key) -> SeriesId {
    let mut labels: Vec<(String, String)> = key
        .labels()
        .map(|l| (l.key().to_owned(), l.value().to_owned()))
        .collect();
    labels.sort();
    (key.name().to_owned(), labels)
}

/// `true` when every label of `want` is among `labels`.
fn matches(labels: &[(String, String)], want: &[(&str, &str)]) -> bool {
    want.iter()
        .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
}

impl MetricsCapture {
    fn lock(&self) -> MutexGuard<'_, Metrics> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Installs this recorder for the current thread until the guard is dropped.
    pub fn install_local(&self) -> metrics::LocalRecorderGuard<'_> {
        metrics::set_default_local_recorder(self)
    }

    /// The sum of the counter `metric` over every series that carries all of `labels` (0 when
    /// none does).
    pub fn counter(&self, metric: &str, labels: &[(&str, &str)]) -> u64 {
        self.lock()
            .cells
            .iter()
            .filter(|((name, l), _)| name == metric && matches(l, labels))
            .map(|(_, c)| c.load(Ordering::SeqCst))
            .sum()
    }

    /// The gauge `metric` of the one series that carries all of `labels`; `None` when no
    /// series does (never set).
    pub fn gauge(&self, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.lock()
            .cells
            .iter()
            .find(|((name, l), _)| name == metric && matches(l, labels))
            .map(|(_, c)| f64::from_bits(c.load(Ordering::SeqCst)))
    }

    /// Every value recorded in the histogram `metric`, over the series that carry all of
    /// `labels`, in the order recorded within each series.
    pub fn histogram(&self, metric: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.lock()
            .histograms
            .iter()
            .filter(|((name, l), _)| name == metric && matches(l, labels))
            .flat_map(|(_, h)| h.0.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect()
    }

    /// Every label set recorded for `metric`, each sorted by key.
    pub fn series(&self, metric: &str) -> Vec<Vec<(String, String)>> {
        let m = self.lock();
        m.cells
            .keys()
            .chain(m.histograms.keys())
            .filter(|(name, _)| name == metric)
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// The unit and HELP text `metric` was described with, if it was.
    pub fn description(&self, metric: &str) -> Option<(Option<Unit>, String)> {
        self.lock().descriptions.get(metric).cloned()
    }

    fn cell(&self, key: &Key) -> Arc<AtomicU64> {
        Arc::clone(self.lock().cells.entry(series(key)).or_default())
    }

    fn describe(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.lock()
            .descriptions
            .insert(key.as_str().to_owned(), (unit, help.into_owned()));
    }
}

impl fmt::Debug for MetricsCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.lock();
        f.debug_struct("MetricsCapture")
            .field("series", &(m.cells.len() + m.histograms.len()))
            .field("described", &m.descriptions.len())
            .finish()
    }
}

impl Recorder for MetricsCapture {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(key, unit, help);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(key, unit, help);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, help: SharedString) {
        self.describe(key, unit, help);
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let h = Arc::clone(self.lock().histograms.entry(series(key)).or_default());
        Histogram::from_arc(h)
    }
}

/// One captured event.
#[derive(Debug, Clone)]
pub struct LogLine {
    /// Its level.
    pub level: Level,
    /// Its target (the module path by default).
    pub target: String,
    /// Its message.
    pub message: String,
    /// Its other fields, as displayed (strings without quotes, the rest in `Debug` form).
    pub fields: BTreeMap<String, String>,
    /// The tokio instant it was written at (paused time in tests).
    pub at: tokio::time::Instant,
}

impl LogLine {
    /// The field `key`, as displayed.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
}

/// A `tracing` layer that keeps every event of every level.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<LogLine>>>);

impl fmt::Debug for LogCapture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogCapture")
            .field("lines", &self.lines().len())
            .finish()
    }
}

impl LogCapture {
    /// Installs a subscriber with this layer for the current thread until the guard is dropped.
    pub fn install_local(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    /// Every line so far.
    pub fn lines(&self) -> Vec<LogLine> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The lines whose message contains `text`.
    pub fn find(&self, text: &str) -> Vec<LogLine> {
        self.lines()
            .into_iter()
            .filter(|l| l.message.contains(text))
            .collect()
    }

    /// Forgets every line so far.
    pub fn clear(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.fields
                .insert(field.name().to_owned(), value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields
                .insert(field.name().to_owned(), format!("{value:?}"));
        }
    }
}

impl<S: Subscriber> Layer<S> for LogCapture {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let line = LogLine {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message: fields.message,
            fields: fields.fields,
            at: tokio::time::Instant::now(),
        };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(line);
    }
}
