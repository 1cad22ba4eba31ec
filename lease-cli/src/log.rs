//! One format for everything `lease` writes to stderr: its own notes, the line that announces
//! its exit code, and the log (`LEASE_LOG`) — as text or, with `--log-format json`
//! (`LEASE_LOG_FORMAT=json`), as one JSON object per line.
//!
//! Text lines all start with `lease: `; a log event at another level than info names its
//! level (`lease: warning: …`), and its fields follow the message as `key=value` (values with
//! spaces quoted). Text lines carry no time: journald, syslog and cron's mail add their own;
//! JSON objects do: `{"timestamp":"2026-12-07T13:45:01.123Z","level":"INFO","target":…,
//! "message":…,"fields":{…}}`, the fields being the event's and those of the spans it
//! happened in (a term's `name`, `term` and `instance`). Every line is scrubbed of the store
//! URL's secrets on its way out ([`crate::redact`]).

use std::fmt::{self, Write as _};
use std::sync::OnceLock;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use crate::commands::output::json_string;
use crate::exit::{CliError, Exit};
use crate::redact::MakeScrubbedStderr;
use crate::rfc3339;

/// The environment variable with the log filter (tracing's `EnvFilter` syntax).
pub(crate) const LOG_VAR: &str = "LEASE_LOG";

/// The environment variable with the log format, when `--log-format` is not given.
pub(crate) const FORMAT_VAR: &str = "LEASE_LOG_FORMAT";

/// The log filter when `LEASE_LOG` is unset: warnings from the lease crates, errors from the
/// rest.
pub(crate) const DEFAULT_LOG: &str = "error,lease=warn,lease_core=warn,lease_sql=warn,\
                                      lease_redis=warn,lease_mongo=warn";

/// How `lease` writes to stderr.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Lines starting with `lease: `, for people.
    #[default]
    Text,
    /// One JSON object per line (timestamp, level, target, message, fields), for journald,
    /// Loki and the like.
    Json,
}

static FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// The format chosen by [`init`]; text before it.
pub(crate) fn format() -> LogFormat {
    FORMAT.get().copied().unwrap_or_default()
}

/// Sets the format of the lines `lease` writes itself, before (or without) [`init`].
pub(crate) fn choose(format: LogFormat) {
    let _ = FORMAT.set(format);
}

/// Whether the command line or the environment asks for JSON, read without clap (for a command
/// line clap refused): `--log-format json`, `--log-format=json` or `LEASE_LOG_FORMAT=json`.
pub(crate) fn json_asked(args: &[std::ffi::OsString]) -> bool {
    let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    let flag = args
        .windows(2)
        .any(|w| w[0] == "--log-format" && w[1] == "json")
        || args.contains(&"--log-format=json");
    let env = std::env::var(FORMAT_VAR).is_ok_and(|v| v == "json");
    flag || (env && !args.iter().any(|a| a.starts_with("--log-format")))
}

/// Installs the log: the filter from `LEASE_LOG` (else [`DEFAULT_LOG`]), written in `format`.
pub(crate) fn init(format: LogFormat) {
    choose(format);
    let filter = EnvFilter::try_from_env(LOG_VAR).unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG));
    let json = format == LogFormat::Json;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(MakeScrubbedStderr)
        .fmt_fields(Fields)
        .event_format(Format { json })
        .try_init();
}

/// A note of `lease`'s own (`line` starts with `lease: `), in the chosen format: as it is in
/// text, an info object in JSON.
pub(crate) fn note(line: &str) -> String {
    match format() {
        LogFormat::Text => line.to_owned(),
        LogFormat::Json => {
            let message = line.strip_prefix("lease: ").unwrap_or(line);
            json_object(&rfc3339::now(), "INFO", "lease", message, &[])
        }
    }
}

/// The line that announces `lease`'s own exit code, in the chosen format: `lease: MESSAGE
/// (exit N: …)` in text; in JSON an object whose level is WARN for a name held by someone
/// else or a stop signal (outcomes a cron job expects), ERROR otherwise, with the code in the
/// field `exit`.
pub(crate) fn exit_line(e: &CliError) -> String {
    match format() {
        LogFormat::Text => e.to_string(),
        LogFormat::Json => {
            let level = match e.exit() {
                Exit::Held | Exit::Interrupted => "WARN",
                _ => "ERROR",
            };
            let code = e.code().to_string();
            json_object(
                &rfc3339::now(),
                level,
                "lease",
                e.message(),
                &[("exit".to_owned(), Value::Raw(code))],
            )
        }
    }
}

/// A field's value: a string, or a number or boolean written as it is.
#[derive(Debug, Clone, PartialEq)]
enum Value {
    Str(String),
    Raw(String),
}

impl Value {
    fn json(&self) -> String {
        match self {
            Value::Str(s) => json_string(s),
            Value::Raw(s) => s.clone(),
        }
    }

    fn text(&self) -> String {
        match self {
            Value::Raw(s) => s.clone(),
            Value::Str(s)
                if s.is_empty()
                    || s.contains(|c: char| c.is_whitespace() || c == '"' || c == '=') =>
            {
                format!("{s:?}")
            }
            Value::Str(s) => s.clone(),
        }
    }
}

/// One JSON object, without a line feed.
fn json_object(
    timestamp: &str,
    level: &str,
    target: &str,
    message: &str,
    fields: &[(String, Value)],
) -> String {
    let fields: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}:{}", json_string(k), v.json()))
        .collect();
    format!(
        "{{\"timestamp\":\"{timestamp}\",\"level\":\"{level}\",\"target\":{},\"message\":{},\
         \"fields\":{{{}}}}}",
        json_string(target),
        json_string(message),
        fields.join(",")
    )
}

/// The message and fields of an event or a span.
#[derive(Debug, Default)]
struct Collect {
    message: Option<String>,
    fields: Vec<(String, Value)>,
}

impl Collect {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            let text = match value {
                Value::Str(s) | Value::Raw(s) => s,
            };
            self.message = Some(text);
        } else {
            self.fields.push((field.name().to_owned(), value));
        }
    }
}

impl Visit for Collect {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::Str(format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::Str(value.to_owned()));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::Raw(value.to_string()));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::Raw(value.to_string()));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        let raw = if value.is_finite() {
            value.to_string()
        } else {
            format!("\"{value}\"")
        };
        self.put(field, Value::Raw(raw));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Raw(value.to_string()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, Value::Str(value.to_string()));
    }
}

/// Separates a span's fields, as [`Fields`] stores them for [`Format`] to read back.
const FIELD_END: char = '\u{1e}';
/// Separates a field's key from its value.
const KEY_END: char = '\u{1f}';

/// Stores the fields of spans so that [`Format`] can read them back one by one: each as
/// `key US kind value RS`, where kind is `s` (string) or `r` (raw).
#[derive(Debug, Clone, Copy, Default)]
struct Fields;

impl<'writer> FormatFields<'writer> for Fields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let mut collect = Collect::default();
        fields.record(&mut collect);
        if let Some(message) = collect.message.take() {
            collect
                .fields
                .insert(0, ("message".to_owned(), Value::Str(message)));
        }
        for (key, value) in &collect.fields {
            let (kind, text) = match value {
                Value::Str(s) => ('s', s),
                Value::Raw(s) => ('r', s),
            };
            write!(writer, "{key}{KEY_END}{kind}{text}{FIELD_END}")?;
        }
        Ok(())
    }
}

/// Reads back what [`Fields`] stored.
fn stored_fields(text: &str) -> Vec<(String, Value)> {
    text.split(FIELD_END)
        .filter_map(|f| {
            let (key, rest) = f.split_once(KEY_END)?;
            // Fields recorded later are appended after a space.
            let key = key.trim_start();
            let mut chars = rest.chars();
            let value = match chars.next()? {
                'r' => Value::Raw(chars.as_str().to_owned()),
                _ => Value::Str(chars.as_str().to_owned()),
            };
            Some((key.to_owned(), value))
        })
        .collect()
}

/// Writes each event as one text line or one JSON object (see the module documentation).
#[derive(Debug, Clone, Copy)]
struct Format {
    json: bool,
}

impl<S, N> FormatEvent<S, N> for Format
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut collect = Collect::default();
        event.record(&mut collect);
        let message = collect.message.take().unwrap_or_default();
        if reported_by_lease(meta, &message) {
            return Ok(());
        }
        let mut fields = collect.fields;
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let ext = span.extensions();
                let Some(stored) = ext.get::<FormattedFields<N>>() else {
                    continue;
                };
                for (key, value) in stored_fields(stored.as_str()) {
                    if !fields.iter().any(|(k, _)| *k == key) {
                        fields.push((key, value));
                    }
                }
            }
        }
        if self.json {
            let level = meta.level().as_str();
            let line = json_object(&rfc3339::now(), level, meta.target(), &message, &fields);
            return writeln!(writer, "{line}");
        }
        let level = match *meta.level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            Level::INFO => "",
            Level::DEBUG => "debug: ",
            Level::TRACE => "trace: ",
        };
        let mut line = format!("lease: {level}{message}");
        for (key, value) in &fields {
            let _ = write!(line, " {key}={}", value.text());
        }
        writeln!(writer, "{line}")
    }
}

/// Whether an event only repeats what `lease` itself says: lease-core's warning that a term
/// was lost (`lease 'NAME' lost: …`), which `lease run` announces in the line of its exit
/// code 74 and `lease elect` in its note before campaigning again.
fn reported_by_lease(meta: &tracing::Metadata<'_>, message: &str) -> bool {
    *meta.level() == Level::WARN
        && meta.target() == "lease_core::engine::term"
        && message.starts_with("lease '")
        && message.contains("' lost")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_in_text_only_when_needed() {
        assert_eq!(Value::Str("job".into()).text(), "job");
        assert_eq!(Value::Str("a b".into()).text(), "\"a b\"");
        assert_eq!(Value::Str(String::new()).text(), "\"\"");
        assert_eq!(Value::Raw("3".into()).text(), "3");
        assert_eq!(Value::Str("a\"b".into()).json(), "\"a\\\"b\"");
    }

    #[test]
    fn stored_fields_read_back() {
        let stored = format!("name{KEY_END}sjob{FIELD_END}term{KEY_END}r3{FIELD_END}");
        assert_eq!(
            stored_fields(&stored),
            [
                ("name".to_owned(), Value::Str("job".into())),
                ("term".to_owned(), Value::Raw("3".into()))
            ]
        );
    }

    #[test]
    fn json_objects_have_the_four_members() {
        let line = json_object(
            "2026-12-07T13:45:01.123Z",
            "INFO",
            "lease_core::engine::coordinator",
            "lease claimed",
            &[
                ("name".into(), Value::Str("job".into())),
                ("term".into(), Value::Raw("3".into())),
            ],
        );
        assert_eq!(
            line,
            "{\"timestamp\":\"2026-12-07T13:45:01.123Z\",\"level\":\"INFO\",\"target\":\
             \"lease_core::engine::coordinator\",\"message\":\"lease claimed\",\"fields\":\
             {\"name\":\"job\",\"term\":3}}"
        );
    }
}
