//! Watching `lease` itself: its log in one format (text, or JSON with `--log-format json`), its
//! metrics in Prometheus's text format (`--metrics-textfile`, `--metrics-listen`) scraped
//! while `lease run` holds a name, and Redis servers that may lose records: refused in one
//! message for the commands that claim, and no obstacle to those that only read.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::time::Duration;

use common::*;
use rustix::process::Signal;

// ---------------------------------------------------------------------------------------------
// A small JSON reader: enough to check that a line is one well-formed object.

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Obj(m) => m.get(key),
            _ => None,
        }
    }

    fn str(&self) -> Option<&str> {
        match self {
            Json::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Parses `text` as exactly one JSON value; `Err` says where it is not.
fn parse_json(text: &str) -> Result<Json, String> {
    let b = text.as_bytes();
    let mut i = 0;
    let v = value(b, &mut i)?;
    ws(b, &mut i);
    if i != b.len() {
        return Err(format!("trailing text at {i}: {text}"));
    }
    Ok(v)
}

fn ws(b: &[u8], i: &mut usize) {
    while *i < b.len() && b" \t\r\n".contains(&b[*i]) {
        *i += 1;
    }
}

fn value(b: &[u8], i: &mut usize) -> Result<Json, String> {
    ws(b, i);
    match b.get(*i) {
        Some(b'{') => {
            *i += 1;
            let mut m = BTreeMap::new();
            ws(b, i);
            if b.get(*i) == Some(&b'}') {
                *i += 1;
                return Ok(Json::Obj(m));
            }
            loop {
                ws(b, i);
                let Json::Str(k) = value(b, i)? else {
                    return Err(format!("a key that is not a string at {i}"));
                };
                ws(b, i);
                if b.get(*i) != Some(&b':') {
                    return Err(format!("no ':' at {i}"));
                }
                *i += 1;
                let v = value(b, i)?;
                if m.insert(k.clone(), v).is_some() {
                    return Err(format!("key {k:?} twice"));
                }
                ws(b, i);
                match b.get(*i) {
                    Some(b',') => *i += 1,
                    Some(b'}') => {
                        *i += 1;
                        return Ok(Json::Obj(m));
                    }
                    _ => return Err(format!("no ',' or '}}' at {i}")),
                }
            }
        }
        Some(b'[') => {
            *i += 1;
            let mut a = Vec::new();
            ws(b, i);
            if b.get(*i) == Some(&b']') {
                *i += 1;
                return Ok(Json::Arr(a));
            }
            loop {
                a.push(value(b, i)?);
                ws(b, i);
                match b.get(*i) {
                    Some(b',') => *i += 1,
                    Some(b']') => {
                        *i += 1;
                        return Ok(Json::Arr(a));
                    }
                    _ => return Err(format!("no ',' or ']' at {i}")),
                }
            }
        }
        Some(b'"') => {
            *i += 1;
            let mut s = String::new();
            loop {
                match b.get(*i) {
                    None => return Err("unterminated string".into()),
                    Some(b'"') => {
                        *i += 1;
                        return Ok(Json::Str(s));
                    }
                    Some(b'\\') => {
                        let e = b.get(*i + 1).copied().ok_or("bad escape")?;
                        *i += 2;
                        match e {
                            b'"' => s.push('"'),
                            b'\\' => s.push('\\'),
                            b'/' => s.push('/'),
                            b'n' => s.push('\n'),
                            b'r' => s.push('\r'),
                            b't' => s.push('\t'),
                            b'b' => s.push('\u{8}'),
                            b'f' => s.push('\u{c}'),
                            b'u' => {
                                let hex = std::str::from_utf8(b.get(*i..*i + 4).ok_or("bad \\u")?)
                                    .map_err(|e| e.to_string())?;
                                let n = u32::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
                                s.push(char::from_u32(n).unwrap_or('\u{fffd}'));
                                *i += 4;
                            }
                            _ => return Err(format!("bad escape at {i}")),
                        }
                    }
                    Some(&c) if c < 0x20 => return Err(format!("raw control character at {i}")),
                    Some(_) => {
                        let rest = std::str::from_utf8(&b[*i..]).map_err(|e| e.to_string())?;
                        let c = rest.chars().next().unwrap();
                        s.push(c);
                        *i += c.len_utf8();
                    }
                }
            }
        }
        Some(b't') if b[*i..].starts_with(b"true") => {
            *i += 4;
            Ok(Json::Bool(true))
        }
        Some(b'f') if b[*i..].starts_with(b"false") => {
            *i += 5;
            Ok(Json::Bool(false))
        }
        Some(b'n') if b[*i..].starts_with(b"null") => {
            *i += 4;
            Ok(Json::Null)
        }
        Some(c) if *c == b'-' || c.is_ascii_digit() => {
            let start = *i;
            while *i < b.len() && (b[*i].is_ascii_digit() || b"+-.eE".contains(&b[*i])) {
                *i += 1;
            }
            let t = std::str::from_utf8(&b[start..*i]).unwrap();
            t.parse()
                .map(Json::Num)
                .map_err(|_| format!("bad number {t}"))
        }
        _ => Err(format!("no value at {i}")),
    }
}

/// Checks that `line` is one JSON object with an RFC 3339 UTC `timestamp`, a `level`, a
/// `message` and an object of `fields`, and returns it.
fn log_object(line: &str) -> Json {
    let v = parse_json(line).unwrap_or_else(|e| panic!("not one JSON value ({e}): {line}"));
    let ts = v
        .get("timestamp")
        .and_then(Json::str)
        .unwrap_or_else(|| panic!("no timestamp: {line}"));
    assert!(
        ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
        "timestamp not RFC 3339 UTC: {line}"
    );
    assert!(
        matches!(
            v.get("level").and_then(Json::str),
            Some("ERROR" | "WARN" | "INFO" | "DEBUG" | "TRACE")
        ),
        "{line}"
    );
    assert!(v.get("message").and_then(Json::str).is_some(), "{line}");
    assert!(matches!(v.get("fields"), Some(Json::Obj(_))), "{line}");
    v
}

// ---------------------------------------------------------------------------------------------
// The log.

/// With `--log-format json` (or `LEASE_LOG_FORMAT=json`) every line on stderr is one JSON
/// object: the audit lines of `LEASE_LOG=info` (the claim with its name and term, the
/// release) and the line announcing `lease`'s own exit code (exit in its fields).
#[test]
fn json_log_is_one_object_per_line() {
    let dir = TempDir::new("log-json");
    let store = dir.sqlite();
    let name = unique_name("json");
    let out = lease(
        &store,
        &[
            "--log-format",
            "json",
            "run",
            "--ttl",
            "15s",
            &name,
            "--",
            "true",
        ],
    )
    .env("LEASE_LOG", "info")
    .output()
    .unwrap();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let err = stderr(&out);
    let objects: Vec<Json> = err.lines().map(log_object).collect();
    let claimed = objects
        .iter()
        .find(|o| o.get("message").and_then(Json::str) == Some("lease claimed"))
        .unwrap_or_else(|| panic!("no claim in {err}"));
    let fields = claimed.get("fields").unwrap();
    assert_eq!(
        fields.get("name").and_then(Json::str),
        Some(name.as_str()),
        "{err}"
    );
    assert_eq!(fields.get("term"), Some(&Json::Num(1.0)), "{err}");
    assert_eq!(claimed.get("level").and_then(Json::str), Some("INFO"));
    // The release happens in the term's span: its name and term come from there.
    let released = objects
        .iter()
        .find(|o| o.get("message").and_then(Json::str) == Some("lease released"))
        .unwrap_or_else(|| panic!("no release in {err}"));
    let fields = released.get("fields").unwrap();
    assert_eq!(
        fields.get("name").and_then(Json::str),
        Some(name.as_str()),
        "{err}"
    );
    assert_eq!(fields.get("term"), Some(&Json::Num(1.0)), "{err}");

    // The environment variable, and lease's own exit line: a name held elsewhere.
    let mut holder = lease(&store, &["run", "--ttl", "15s", &name, "--", "sleep", "30"])
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || {
        let out = lease_output(
            &store,
            &["status", "--json", &name],
            Duration::from_secs(10),
        );
        json_u64(&stdout(&out), "term") == Some(2)
    }));
    let out = lease(&store, &["run", &name, "--", "true"])
        .env("LEASE_LOG_FORMAT", "json")
        .output()
        .unwrap();
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(code(out.status), 75, "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    let exit = log_object(lines[0]);
    assert_eq!(exit.get("level").and_then(Json::str), Some("WARN"), "{err}");
    assert_eq!(
        exit.get("fields").and_then(|f| f.get("exit")),
        Some(&Json::Num(75.0)),
        "{err}"
    );
    let message = exit.get("message").and_then(Json::str).unwrap();
    assert!(
        message.starts_with(&format!("lease '{name}' is held by ")),
        "{err}"
    );
}

/// A command line clap refuses is one JSON object too when the JSON log is asked for.
#[test]
fn json_log_covers_a_bad_command_line() {
    for (args, env) in [
        (vec!["--log-format", "json", "run", "job"], None),
        (
            vec!["run", "--no-such-option", "job", "--", "true"],
            Some("json"),
        ),
    ] {
        let mut cmd = lease("", &args);
        if let Some(v) = env {
            cmd.env("LEASE_LOG_FORMAT", v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(code(out.status), 64, "{}", stderr(&out));
        let err = stderr(&out);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{err}");
        let o = log_object(lines[0]);
        assert_eq!(
            o.get("fields").and_then(|f| f.get("exit")),
            Some(&Json::Num(64.0))
        );
        let message = o.get("message").and_then(Json::str).unwrap();
        assert!(
            message.starts_with("bad command line: error: ")
                && message.ends_with("see lease --help"),
            "{message}"
        );
    }
}

/// In text, every line `lease` writes to stderr starts with `lease: ` — the log's audit lines
/// (fields as key=value after the message) as well as its own — with no timestamp of the log
/// library; and a loss is said once, in the line of exit code 74, not also as a warning.
#[test]
fn text_log_is_one_format_and_says_a_loss_once() {
    let _serial = timing_lock();
    let dir = TempDir::new("log-text");
    let store = dir.sqlite();
    let name = unique_name("text");
    let mut run = lease(&store, &["run", "--ttl", "2s", &name, "--", "sleep", "30"]);
    run.env("LEASE_LOG", "info");
    let mut run = Talking::spawn(run);
    run.wait_for("lease claimed", Duration::from_secs(10));
    let out = lease_output(
        &store,
        &["release", "--force", &name],
        Duration::from_secs(10),
    );
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = run.finish(Duration::from_secs(20));
    assert_eq!(code(out.status), 74, "{}", stderr(&out));
    let err = stderr(&out);
    for line in err.lines() {
        assert!(
            line.starts_with("lease: "),
            "a line in another format: {line}\n{err}"
        );
        assert!(
            !line.as_bytes()[7..].first().is_some_and(u8::is_ascii_digit),
            "a timestamped line: {line}"
        );
    }
    assert!(
        err.lines()
            .any(|l| l.starts_with(&format!("lease: lease claimed name={name} term=1 "))),
        "{err}"
    );
    let losses = err.lines().filter(|l| l.contains(" lost")).count();
    assert_eq!(losses, 1, "the loss said {losses} times:\n{err}");
    assert!(
        err.lines()
            .last()
            .unwrap()
            .contains("lease's own exit code 74"),
        "{err}"
    );
}

/// The help of every subcommand names the log's format, its filter and the metrics' outlets.
#[test]
fn help_documents_the_log_and_the_metrics() {
    for sub in ["run", "elect", "status", "watch"] {
        let out = lease_output("", &[sub, "--help"], Duration::from_secs(10));
        let help = stdout(&out);
        for text in [
            "--log-format <FORMAT>",
            "LEASE_LOG_FORMAT",
            "LEASE_LOG sets the filter",
            "audit line per claim, release and loss",
            "--metrics-textfile <PATH>",
            "--metrics-listen <ADDR>",
        ] {
            assert!(
                help.contains(text),
                "lease {sub} --help lacks {text:?}:\n{help}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics.

/// One sample of a Prometheus text exposition.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parses Prometheus's text format (0.0.4) strictly enough for what lease writes: every
/// sample's family has a `# TYPE` line before it, once; metric and label names are valid;
/// label values are quoted; values are numbers. Panics naming the first bad line.
fn parse_exposition(text: &str) -> Vec<Sample> {
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "no final line feed:\n{text}"
    );
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or_else(|| panic!("{line}"));
            assert!(valid_name(name), "{line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "TYPE twice: {line}"
            );
            continue;
        }
        if line.starts_with("# HELP ") || line.is_empty() {
            continue;
        }
        assert!(!line.starts_with('#'), "{line}");
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("bad value: {line}")),
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("{line}"));
                let mut labels = BTreeMap::new();
                for pair in body.split("\",").filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
                    assert!(valid_name(k), "{line}");
                    labels.insert(k.to_owned(), v.trim_end_matches('"').to_owned());
                }
                (name, labels)
            }
            None => (series, BTreeMap::new()),
        };
        assert!(valid_name(name), "{line}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).is_some_and(|k| k == "histogram"))
            })
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "a sample before its TYPE: {line}"
        );
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

/// The value of `metric{name="lease"}` in `samples`.
fn value_of(samples: &[Sample], metric: &str, lease: &str) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == metric && s.labels.get("name").map(String::as_str) == Some(lease))
        .map(|s| s.value)
}

/// `GET /metrics` on `addr`: the body of a 200 answer.
fn scrape(addr: &str) -> String {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_owned()
}

/// A free TCP port on 127.0.0.1 (free when asked; tests run one at a time under the lock).
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// While `lease run` holds a name, its textfile and its HTTP endpoint both show it held, its
/// term, one claim and renewals; at exit the file is left with the name released and the time
/// it was held.
#[test]
fn metrics_are_scraped_during_a_run_and_written_at_exit() {
    let _serial = timing_lock();
    let dir = TempDir::new("metrics");
    let store = dir.sqlite();
    let name = unique_name("metrics");
    let file = dir.file("lease.prom");
    let file_arg = file.display().to_string();
    let addr = free_addr();
    let run = lease(
        &store,
        &[
            "--metrics-textfile",
            &file_arg,
            "--metrics-listen",
            &addr,
            "run",
            "--ttl",
            "1500ms",
            &name,
            "--",
            "sleep",
            "2",
        ],
    )
    .spawn()
    .unwrap();
    // Held, with at least one renewal (every 200 ms at this TTL).
    assert!(
        wait_until(Duration::from_secs(10), || {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let samples = parse_exposition(&text);
            value_of(&samples, "lease_held", &name) == Some(1.0)
                && value_of(&samples, "lease_renewals_total", &name).is_some_and(|n| n >= 1.0)
        }),
        "the textfile never showed the name held and renewed:\n{}",
        std::fs::read_to_string(&file).unwrap_or_default()
    );
    let text = std::fs::read_to_string(&file).unwrap();
    let samples = parse_exposition(&text);
    assert_eq!(value_of(&samples, "lease_term", &name), Some(1.0), "{text}");
    assert_eq!(
        value_of(&samples, "lease_claims_total", &name),
        Some(1.0),
        "{text}"
    );
    let scraped = scrape(&addr);
    let samples = parse_exposition(&scraped);
    assert_eq!(
        value_of(&samples, "lease_held", &name),
        Some(1.0),
        "{scraped}"
    );
    assert_eq!(
        value_of(&samples, "lease_term", &name),
        Some(1.0),
        "{scraped}"
    );
    assert!(
        value_of(&samples, "lease_held_seconds_total", &name).is_some_and(|s| s > 0.0),
        "{scraped}"
    );
    assert!(
        samples
            .iter()
            .any(|s| s.name == "lease_renew_seconds_count" && s.value >= 1.0),
        "{scraped}"
    );

    let out = finish(run, Duration::from_secs(20));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let text = std::fs::read_to_string(&file).unwrap();
    let samples = parse_exposition(&text);
    assert_eq!(value_of(&samples, "lease_held", &name), Some(0.0), "{text}");
    assert_eq!(value_of(&samples, "lease_term", &name), Some(0.0), "{text}");
    assert_eq!(
        value_of(&samples, "lease_claims_total", &name),
        Some(1.0),
        "{text}"
    );
    let held = value_of(&samples, "lease_held_seconds_total", &name).unwrap();
    assert!(
        (1.5..10.0).contains(&held),
        "held {held} s for a 2 s CMD:\n{text}"
    );
    // Nothing but the file itself is left in its directory (no temporary file).
    let stray: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".prom."))
        .collect();
    assert!(stray.is_empty(), "{stray:?}");
}

/// Options that cannot work are refused before anything runs, saying what to change.
#[test]
fn metrics_options_that_cannot_work_are_refused() {
    let dir = TempDir::new("metrics-bad");
    let store = dir.sqlite();
    let missing = dir.file("no-such-dir/lease.prom");
    let out = lease_output(
        &store,
        &[
            "--metrics-textfile",
            &missing.display().to_string(),
            "run",
            "job",
            "--",
            "true",
        ],
        Duration::from_secs(10),
    );
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--metrics-textfile")
            && stderr(&out).contains("directory that exists"),
        "{}",
        stderr(&out)
    );
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = lease_output(
        &store,
        &["--metrics-listen", &addr, "run", "job", "--", "true"],
        Duration::from_secs(10),
    );
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("--metrics-listen {addr}: cannot listen there")),
        "{}",
        stderr(&out)
    );
}

// ---------------------------------------------------------------------------------------------
// Redis servers that may lose records.

/// A Redis user that may do everything but CONFIG, as on many managed services: the store
/// cannot check the server's persistence, so a claiming command is refused whatever the
/// server's AOF settings. Returns the user and its URL.
async fn user_without_config(url: &str) -> (String, String) {
    use lease::redis::redis;
    let user = unique_name("nocfg");
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("&*")
        .arg("+@all")
        .arg("-config")
        .query_async(&mut raw)
        .await
        .unwrap();
    let with_user = url.replacen("redis://", &format!("redis://{user}:pw@"), 1);
    (user, with_user)
}

async fn drop_user(url: &str, user: &str) {
    use lease::redis::redis;
    let mut raw = redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: i64 = redis::cmd("ACL")
        .arg("DELUSER")
        .arg(user)
        .query_async(&mut raw)
        .await
        .unwrap();
}

/// Checks the refusal of a claiming command on `url`: one line, short, said once, in terms of
/// the URL's parameters (naming the safe one), with no Rust API item and no password.
fn assert_refused_well(url: &str, why: &str) {
    let name = unique_name("refused");
    let out = lease_output(url, &["run", &name, "--", "true"], Duration::from_secs(20));
    let err = stderr(&out);
    assert_eq!(code(out.status), 78, "{err}");
    eprintln!("the refusal, {} bytes:\n{err}", err.len());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.len() < 1000, "{} bytes: {err}", err.len());
    assert_eq!(err.matches(why).count(), 1, "{err}");
    assert_eq!(err.matches("may lose lease records").count(), 1, "{err}");
    let mut sentences: Vec<&str> = err.split(". ").map(str::trim).collect();
    let n = sentences.len();
    sentences.sort_unstable();
    sentences.dedup();
    assert_eq!(sentences.len(), n, "a sentence said twice: {err}");
    for rust in [
        "::",
        "TermScheme",
        "RedisConfig",
        "ClockFloor",
        "(true)",
        "allow_volatile(",
    ] {
        assert!(!err.contains(rust), "names {rust}: {err}");
    }
    for param in [
        "?terms=clock_floor",
        "?allow_volatile=1",
        "appendfsync always",
    ] {
        assert!(err.contains(param), "no {param}: {err}");
    }
    assert!(err.contains("Safe"), "which is safe? {err}");
    assert!(!err.contains(":pw@"), "{err}");
}

/// The commands that claim nothing (status, release, members, owners, watch) work on a Redis
/// server that may lose records without any opt-in, and `status`, `release` and `watch` say
/// nothing on stderr.
fn assert_reads_without_opt_in(url: &str) {
    let name = unique_name("reads");
    let out = lease_output(url, &["status", &name], Duration::from_secs(20));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains(&name), "{}", stdout(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let out = lease_output(url, &["release", "--force", &name], Duration::from_secs(20));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    let out = lease_output(url, &["members", &name], Duration::from_secs(20));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let out = lease_output(url, &["owners", &name], Duration::from_secs(20));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let mut watch = lease(url, &["watch", &name]).spawn().unwrap();
    let mut first = [0u8; 200];
    let n = watch.stdout.as_mut().unwrap().read(&mut first).unwrap();
    let line = String::from_utf8_lossy(&first[..n]).into_owned();
    assert!(line.contains(&format!(" {name}: free")), "{line}");
    send(watch.id(), Signal::TERM);
    let out = finish(watch, Duration::from_secs(10));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_refuses_claims_in_one_message_and_lets_reads_through() {
    let Some(url) = lease_conformance::env::server_url("redis") else {
        return;
    };
    let (user, restricted) = user_without_config(&url).await;
    let checks = {
        let restricted = restricted.clone();
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let _serial = timing_lock();
            assert_refused_well(&restricted, "cannot be checked");
            assert_reads_without_opt_in(&restricted);
            // The server as it is: refused when it has no AOF synced on every write (as on
            // the test machines).
            let probe = lease_output(
                &url,
                &["run", &unique_name("probe"), "--", "true"],
                Duration::from_secs(20),
            );
            if code(probe.status) == 78 {
                let why = if stderr(&probe).contains("appendonly is off") {
                    "appendonly is off"
                } else {
                    "appendfsync is"
                };
                assert_refused_well(&url, why);
                assert_reads_without_opt_in(&url);
            } else {
                eprintln!("the test Redis keeps records (AOF always): only the ACL case ran");
            }
        })
        .await
    };
    drop_user(&url, &user).await;
    checks.unwrap();
}
