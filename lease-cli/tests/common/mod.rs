//! Helpers for the end-to-end tests: real `lease` processes on a private store.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The `lease` binary under test.
pub(crate) const LEASE: &str = env!("CARGO_BIN_EXE_lease");

/// The TTL the tests hold leases with, and the timings `Timings::from_lease` derives from it.
pub(crate) const TTL: Duration = Duration::from_secs(2);
/// Renew every 2/15 of the TTL.
pub(crate) const RENEW: Duration = Duration::from_millis(2000 * 2 / 15);
/// Campaign retry 2/15 of the TTL, plus up to a quarter of that as jitter.
pub(crate) const RETRY: Duration = Duration::from_millis(2000 * 2 / 15);
/// The most jitter added to the retry.
pub(crate) const JITTER: Duration = Duration::from_millis(2000 * 2 / 15 / 4);

/// Timing tests share two cores with other work: they run one at a time.
pub(crate) fn timing_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A directory of its own under the system temp dir, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    /// A fresh directory named after `tag`.
    pub(crate) fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!(
            "lease-cli-{tag}-{}-{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    /// A SQLite store URL on a file in this directory.
    pub(crate) fn sqlite(&self) -> String {
        format!("sqlite://{}/leases.db", self.0.display())
    }

    /// A file in this directory.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A number unique within this process.
pub(crate) fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    u64::from(nanos) * 1000 + N.fetch_add(1, Ordering::Relaxed)
}

/// A lease name unique to this test run (for shared servers).
pub(crate) fn unique_name(tag: &str) -> String {
    format!("cli-{tag}-{}-{}", std::process::id(), unique())
}

/// `lease ARGS…` on `store`, with stdin closed and output captured; nothing of the user's
/// environment chooses the store.
pub(crate) fn lease(store: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(LEASE);
    cmd.args(args)
        .env("LEASE_STORE", store)
        .env_remove("LEASE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Runs `lease ARGS…` to the end (at most `limit`).
pub(crate) fn lease_output(store: &str, args: &[&str], limit: Duration) -> Output {
    let child = lease(store, args).spawn().unwrap();
    finish(child, limit)
}

/// Waits for `child` to exit within `limit` and collects its output; kills it and fails
/// otherwise.
pub(crate) fn finish(mut child: Child, limit: Duration) -> Output {
    let until = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if Instant::now() > until {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "lease did not exit within {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The exit code, failing on a signal.
pub(crate) fn code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| panic!("lease died of a signal: {status:?}"))
}

/// Stderr as text.
pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stdout as text.
pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A shell command for CMD that appends `start <term> <ns>` to `log`, runs `body`, then
/// appends `end <term> <ns>` (nanoseconds of the wall clock, as `date +%s%N` prints them).
pub(crate) fn logged(log: &Path, body: &str) -> Vec<String> {
    let log = log.display();
    vec![
        "sh".to_owned(),
        "-c".to_owned(),
        format!(
            "echo \"start $LEASE_TERM $(date +%s%N)\" >> '{log}'; {body}; \
             echo \"end $LEASE_TERM $(date +%s%N)\" >> '{log}'"
        ),
    ]
}

/// Now on the wall clock, in nanoseconds (comparable with `date +%s%N`).
pub(crate) fn now_ns() -> i128 {
    i128::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    )
    .unwrap()
}

/// One line of a CMD log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Event {
    /// `true` for `start`, `false` for `end`.
    pub(crate) start: bool,
    /// LEASE_TERM.
    pub(crate) term: u64,
    /// Wall clock, nanoseconds.
    pub(crate) ns: i128,
}

/// The events in `log` (none when it does not exist yet).
pub(crate) fn events(log: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut w = line.split_whitespace();
            let start = match w.next()? {
                "start" => true,
                "end" => false,
                _ => return None,
            };
            Some(Event {
                start,
                term: w.next()?.parse().ok()?,
                ns: w.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// The runs in `log`, as (term, start ns, end ns), in order of start; panics on a start
/// without an end.
pub(crate) fn runs(log: &Path) -> Vec<(u64, i128, i128)> {
    let ev = events(log);
    let mut out: Vec<(u64, i128, i128)> = ev
        .iter()
        .filter(|e| e.start)
        .map(|s| {
            let end = ev
                .iter()
                .find(|e| !e.start && e.term == s.term)
                .unwrap_or_else(|| panic!("run of term {} never ended: {ev:?}", s.term));
            (s.term, s.ns, end.ns)
        })
        .collect();
    out.sort_by_key(|r| r.1);
    out
}

/// Asserts that runs never overlap and their terms strictly increase in the order they ran.
pub(crate) fn assert_one_at_a_time(runs: &[(u64, i128, i128)]) {
    for pair in runs.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        assert!(
            b.0 > a.0,
            "terms must strictly increase in run order: {runs:?}"
        );
        assert!(
            b.1 > a.2,
            "term {} started before term {} ended: {runs:?}",
            b.0,
            a.0
        );
    }
}

/// Waits until `cond` holds, at most `limit`; `false` on timeout.
pub(crate) fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// `true` when process `pid` has exited (gone, or a zombie nobody reaped).
pub(crate) fn is_dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Reads a pid written by CMD into `file`, waiting for it.
pub(crate) fn read_pid(file: &Path) -> i32 {
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(file)
            .is_ok_and(|s| s.trim().parse::<i32>().is_ok())),
        "{} was never written",
        file.display()
    );
    std::fs::read_to_string(file)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Sends `sig` to process `pid`.
pub(crate) fn send(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    rustix::process::kill_process(pid, sig).unwrap();
}

/// A JSON number field's value in `json` (the first one named `field`).
pub(crate) fn json_u64(json: &str, field: &str) -> Option<u64> {
    let key = format!("\"{field}\":");
    let at = json.find(&key)? + key.len();
    let digits: String = json[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The log filter that makes `lease` say on stderr each time a claim finds the name held
/// (lease-core's debug line "lease is held by another holder"), besides its usual warnings.
pub(crate) const LOG_HELD: &str = "warn,lease_core::engine::coordinator=debug";

/// What `lease` logs (with [`LOG_HELD`]) when a claim of its finds the name held: from then on
/// a `--wait` is waiting.
pub(crate) const HELD_LINE: &str = "lease is held by another holder";

/// A spawned `lease` whose stderr is read line by line on a thread of its own, so that a test
/// can wait for what it says while it runs.
pub(crate) struct Talking {
    child: Child,
    lines: mpsc::Receiver<String>,
    said: Vec<String>,
}

impl Talking {
    /// Spawns `cmd` (made by [`lease`]: stderr piped).
    pub(crate) fn spawn(mut cmd: Command) -> Talking {
        let mut child = cmd.spawn().unwrap();
        let err = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Talking {
            child,
            lines,
            said: Vec::new(),
        }
    }

    /// The process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits until a line on stderr contains `text`, at most `limit`; fails with what it said
    /// otherwise.
    pub(crate) fn wait_for(&mut self, text: &str, limit: Duration) {
        let until = Instant::now() + limit;
        if self.said.iter().any(|l| l.contains(text)) {
            return;
        }
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(text);
                    self.said.push(line);
                    if found {
                        return;
                    }
                }
                Err(e) => panic!(
                    "lease did not say {text:?} within {limit:?} ({e}); it said: {:?}",
                    self.said
                ),
            }
        }
    }

    /// Waits for it to exit within `limit` ([`finish`]); its stderr is all it said.
    pub(crate) fn finish(mut self, limit: Duration) -> Output {
        let stdout = self.child.stdout.take();
        let status = finish_status(&mut self.child, limit, || self.said.join("\n"));
        let mut out = Vec::new();
        if let Some(mut stdout) = stdout {
            let _ = stdout.read_to_end(&mut out);
        }
        // The reader ends at EOF: `lease` and everything it started have closed stderr.
        while let Ok(line) = self.lines.recv_timeout(limit) {
            self.said.push(line);
        }
        let mut err = self.said.join("\n");
        if !err.is_empty() {
            err.push('\n');
        }
        Output {
            status,
            stdout: out,
            stderr: err.into_bytes(),
        }
    }
}

/// Waits for `child` to exit within `limit`; kills it and fails (with `said`) otherwise.
fn finish_status(child: &mut Child, limit: Duration, said: impl FnOnce() -> String) -> ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("lease did not exit within {limit:?}; stderr: {}", said());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until `file` exists (CMD wrote it: the lease is held), at most `limit`.
pub(crate) fn wait_for_file(file: &Path, limit: Duration) {
    assert!(
        wait_until(limit, || file.exists()),
        "{} was never written: CMD did not start",
        file.display()
    );
}

/// The server stores a default `lease` binary reaches whose `LEASE_TEST_<BACKEND>_URL` is set
/// (each absent one skipped loudly by `server_url`), as (backend, URL for `--store`). Not etcd:
/// the binary has it only when built with lease's `etcd` feature. Redis gets
/// `allow_volatile=1`: the test server runs without AOF, as the CLI tests accept it.
pub(crate) fn cli_servers() -> Vec<(&'static str, String)> {
    ["postgres", "mysql", "redis", "nats", "mongodb"]
        .into_iter()
        .filter_map(|backend| {
            let url = lease_conformance::env::server_url(backend)?;
            if backend != "redis" {
                return Some((backend, url));
            }
            let sep = if url.contains('?') { '&' } else { '?' };
            Some((backend, format!("{url}{sep}allow_volatile=1")))
        })
        .collect()
}
