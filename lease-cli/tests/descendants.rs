//! Descendants of CMD that leave its process group (`setsid`, a double fork) never outlive
//! their term: they are ended before the release, on a loss, and when `lease` itself is
//! killed, and `lease elect` accumulates none across terms.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use rustix::process::Signal;

/// The worker's stdio: not the pipes the test reads `lease`'s output from (a worker that
/// outlived `lease` would hold them open).
const QUIET: &str = "</dev/null >/dev/null 2>&1";

/// A directory with an escaping worker: `esc.sh TAG` writes `TAG <ns>` to `esc.log`, records
/// its pid in `esc.pids`, then writes to the log every 20 ms, forever. Every recorded pid is SIGKILLed on
/// drop, so a failing test leaves nothing running.
struct Escapes {
    dir: TempDir,
}

impl Escapes {
    fn new(tag: &str) -> Escapes {
        let dir = TempDir::new(tag);
        let script = format!(
            "echo \"$1 $(date +%s%N)\" >> '{log}'\necho $$ >> '{pids}'\n\
             while :; do echo \"$1 $(date +%s%N)\" >> '{log}'; sleep 0.02; done\n",
            pids = dir.file("esc.pids").display(),
            log = dir.file("esc.log").display(),
        );
        std::fs::write(dir.file("esc.sh"), script).unwrap();
        Escapes { dir }
    }

    fn store(&self) -> String {
        self.dir.sqlite()
    }

    /// A CMD that starts the worker with `setsid` (tagged LEASE_TERM), waits until it runs,
    /// then does `then`.
    fn cmd_setsid(&self, then: &str) -> Vec<String> {
        self.cmd(
            &format!(
                "setsid sh '{}' $LEASE_TERM {QUIET} &",
                self.script().display()
            ),
            then,
        )
    }

    /// A CMD that starts the worker by a double fork and `setsid`, the way daemons detach.
    fn cmd_double_fork(&self, then: &str) -> Vec<String> {
        self.cmd(
            &format!(
                "( setsid sh '{}' $LEASE_TERM {QUIET} & ) &",
                self.script().display()
            ),
            then,
        )
    }

    fn cmd(&self, start: &str, then: &str) -> Vec<String> {
        let pids = self.dir.file("esc.pids");
        vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!(
                "n=$(cat '{p}' 2>/dev/null | wc -l); {start} \
                 while [ $(cat '{p}' 2>/dev/null | wc -l) -le $n ]; do sleep 0.01; done; {then}",
                p = pids.display()
            ),
        ]
    }

    fn script(&self) -> PathBuf {
        self.dir.file("esc.sh")
    }

    fn pids(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dir.file("esc.pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// (tag, ns) lines of the workers' log.
    fn log(&self) -> Vec<(u64, i128)> {
        log_lines(&self.dir.file("esc.log"))
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.file(name)
    }
}

impl Drop for Escapes {
    fn drop(&mut self) {
        for pid in self.pids() {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, Signal::KILL);
            }
        }
    }
}

fn log_lines(log: &Path) -> Vec<(u64, i128)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

fn args<'a>(head: &[&'a str], cmd: &'a [String]) -> Vec<&'a str> {
    let mut v = head.to_vec();
    v.extend(cmd.iter().map(String::as_str));
    v
}

/// CMD exits, leaving `escape`'s worker behind: once `lease run` has exited (it released the
/// name before), the worker is gone and writes nothing more; a successor runs alone. The lease
/// is the default 15 s: nothing here is about the TTL, and a 2 s lease renewed by a `lease`
/// starved of CPU is lost (exit 74).
fn ended_when_cmd_exits(esc: &Escapes, cmd: &[String]) {
    let store = esc.store();
    let out = lease_output(
        &store,
        &args(&["run", "esc", "--"], cmd),
        Duration::from_secs(20),
    );
    let exited_at = now_ns();
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let pids = esc.pids();
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert!(
        is_dead(pids[0]),
        "the escaped worker {} outlived its term",
        pids[0]
    );
    let marker = esc.file("next.log");
    let next = lease_output(
        &store,
        &[
            "run",
            "esc",
            "--",
            "sh",
            "-c",
            &format!("date +%s%N > '{}'; sleep 0.2", marker.display()),
        ],
        Duration::from_secs(20),
    );
    assert_eq!(code(next.status), 0, "{}", stderr(&next));
    let next_start: i128 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let log = esc.log();
    assert!(!log.is_empty(), "the worker never ran");
    let last = log.iter().map(|l| l.1).max().unwrap();
    assert!(
        last < exited_at && last < next_start,
        "the escaped worker wrote after its term ended: last {last}, lease exited {exited_at}, \
         successor started {next_start}"
    );
}

#[test]
fn a_setsid_descendant_is_ended_before_the_release() {
    let esc = Escapes::new("esc-setsid");
    let cmd = esc.cmd_setsid("exit 0");
    ended_when_cmd_exits(&esc, &cmd);
}

#[test]
fn a_double_forked_descendant_is_ended_before_the_release() {
    let esc = Escapes::new("esc-double");
    let cmd = esc.cmd_double_fork("exit 0");
    ended_when_cmd_exits(&esc, &cmd);
}

#[test]
fn a_setsid_descendant_is_ended_on_a_loss() {
    let _serial = timing_lock();
    let esc = Escapes::new("esc-loss");
    let store = esc.store();
    let cmd = esc.cmd_setsid("exec sleep 30");
    let holder = lease(&store, &args(&["run", "--ttl", "2s", "lost", "--"], &cmd))
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || !esc
        .pids()
        .is_empty()));
    let forced = lease_output(
        &store,
        &["release", "lost", "--force"],
        Duration::from_secs(10),
    );
    assert_eq!(code(forced.status), 0, "{}", stderr(&forced));
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(code(out.status), 74, "{}", stderr(&out));
    let pid = esc.pids()[0];
    assert!(is_dead(pid), "the escaped worker {pid} outlived the loss");
}

#[test]
fn a_setsid_descendant_dies_with_a_killed_lease() {
    let esc = Escapes::new("esc-kill9");
    let store = esc.store();
    let cmd = esc.cmd_setsid("exec sleep 30");
    let mut holder = lease(&store, &args(&["run", "killed", "--"], &cmd))
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || !esc
        .pids()
        .is_empty()));
    let pid = esc.pids()[0];
    assert!(!is_dead(pid));
    holder.kill().unwrap();
    let _ = holder.wait();
    assert!(
        wait_until(Duration::from_secs(1), || is_dead(pid)),
        "the escaped worker {pid} outlived a kill -9 of lease by more than 1 s"
    );
}

#[test]
fn elect_accumulates_no_escaped_workers() {
    let _serial = timing_lock();
    let esc = Escapes::new("esc-elect");
    let store = esc.store();
    let cmd = esc.cmd_setsid("sleep 0.2");
    let elector = lease(&store, &args(&["elect", "--ttl", "2s", "boss", "--"], &cmd))
        .spawn()
        .unwrap();
    assert!(
        wait_until(Duration::from_secs(20), || esc.pids().len() >= 3),
        "three terms never started: {:?}",
        esc.pids()
    );
    // While the third term runs, the workers of the first two are gone.
    let pids = esc.pids();
    for pid in &pids[..pids.len() - 1] {
        assert!(
            is_dead(*pid),
            "worker {pid} of an earlier term is alive: {pids:?}"
        );
    }
    send(elector.id(), Signal::TERM);
    let out = finish(elector, Duration::from_secs(10));
    assert!(
        [0, 72, 143].contains(&code(out.status)),
        "{:?}: {}",
        out.status,
        stderr(&out)
    );
    let pids = esc.pids();
    for pid in &pids {
        assert!(is_dead(*pid), "worker {pid} outlived lease elect: {pids:?}");
    }
    // Each term's worker stopped writing before the next term's began.
    let log = esc.log();
    let mut terms: Vec<u64> = log.iter().map(|l| l.0).collect();
    terms.sort_unstable();
    terms.dedup();
    for pair in terms.windows(2) {
        let last = log
            .iter()
            .filter(|l| l.0 == pair[0])
            .map(|l| l.1)
            .max()
            .unwrap();
        let first = log
            .iter()
            .filter(|l| l.0 == pair[1])
            .map(|l| l.1)
            .min()
            .unwrap();
        assert!(
            last < first,
            "the worker of term {} wrote after the worker of term {} started",
            pair[0],
            pair[1]
        );
    }
}

/// The children of `pid`, from `/proc/PID/task/*/children`.
fn children_of(pid: u32) -> Vec<i32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    out
}

#[test]
fn a_killed_watchdog_takes_every_descendant_with_it() {
    let esc = Escapes::new("esc-watchdog");
    let store = esc.store();
    let cmd = esc.cmd_setsid("exec sleep 30");
    let holder = lease(&store, &args(&["run", "dogless", "--"], &cmd))
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || !esc
        .pids()
        .is_empty()));
    let pid = esc.pids()[0];
    // `lease`'s only child is its watchdog (CMD is the watchdog's child).
    let kids = children_of(holder.id());
    assert_eq!(kids.len(), 1, "{kids:?}");
    let watchdog = rustix::process::Pid::from_raw(kids[0]).unwrap();
    rustix::process::kill_process(watchdog, Signal::KILL).unwrap();
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(code(out.status), 71, "{}", stderr(&out));
    assert!(stderr(&out).contains("watchdog"), "{}", stderr(&out));
    assert!(
        is_dead(pid),
        "the escaped worker {pid} outlived the watchdog"
    );
    // The lease was released (or is free by now): the next run gets it.
    let next = lease_output(
        &store,
        &["run", "--wait", "dogless", "--", "true"],
        Duration::from_secs(30),
    );
    assert_eq!(code(next.status), 0, "{}", stderr(&next));
}

/// Processes that count the SIGTERMs they get: `counter.sh LOG TAG` traps SIGTERM, logs
/// `ready TAG PID PGID`, then one `term TAG PID` line per delivery, and runs until SIGKILLed
/// (so a second SIGTERM is counted too) — at the end of the step-down grace, 4 s for a 15 s
/// lease: time enough for a trap to run however busy the machine. `lease` exits only once all
/// are gone, so the log is complete by then.
struct Counters {
    dir: TempDir,
}

impl Counters {
    fn new(tag: &str) -> Counters {
        let dir = TempDir::new(tag);
        std::fs::write(
            dir.file("counter.sh"),
            "trap 'echo \"term $2 $$\" >> \"$1\"' TERM\n\
             echo \"ready $2 $$ $(cut -d' ' -f5 /proc/$$/stat)\" >> \"$1\"\n\
             while :; do sleep 1 & wait $!; done\n",
        )
        .unwrap();
        Counters { dir }
    }

    fn store(&self) -> String {
        self.dir.sqlite()
    }

    /// A CMD (for `sh -c`) that starts a counter `child` in its group and a counter `escaped`
    /// with `setsid`, then does `then`.
    fn cmd(&self, then: &str) -> String {
        format!(
            "{c} child & setsid {c} escaped {QUIET} & {then}",
            c = self.counter()
        )
    }

    /// `sh counter.sh LOG` (a TAG follows).
    fn counter(&self) -> String {
        format!(
            "sh '{}' '{}'",
            self.dir.file("counter.sh").display(),
            self.dir.file("terms.log").display()
        )
    }

    /// The log's lines, split in words.
    fn lines(&self) -> Vec<Vec<String>> {
        std::fs::read_to_string(self.dir.file("terms.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.split_whitespace().map(str::to_owned).collect())
            .collect()
    }

    /// Waits until `n` counters are ready.
    fn wait_ready(&self, n: usize) {
        let ready = || {
            self.lines()
                .iter()
                .filter(|l| l.first().is_some_and(|w| w == "ready"))
                .count()
        };
        assert!(
            wait_until(Duration::from_secs(20), || ready() == n),
            "{n} counters did not start: {:?}",
            self.lines()
        );
    }

    /// The pid and process group of counter `tag`.
    fn ready(&self, tag: &str) -> (String, String) {
        let lines = self.lines();
        lines
            .iter()
            .find(|l| l[0] == "ready" && l[1] == tag)
            .map(|l| (l[2].clone(), l[3].clone()))
            .unwrap_or_else(|| panic!("no ready line of {tag}: {lines:?}"))
    }

    /// How many SIGTERMs counter `tag` logged.
    fn terms(&self, tag: &str) -> usize {
        let (pid, _) = self.ready(tag);
        self.lines()
            .iter()
            .filter(|l| l[0] == "term" && l[1] == tag && l[2] == pid)
            .count()
    }

    /// Asserts that each counter of `tags` got SIGTERM exactly once.
    fn assert_once_each(&self, tags: &[&str]) {
        for tag in tags {
            let terms = self.terms(tag);
            assert_eq!(
                terms,
                1,
                "{tag} got SIGTERM {terms} times, not once: {:?}",
                self.lines()
            );
        }
    }
}

/// On a loss each process of the term gets SIGTERM exactly once — CMD and a child in its
/// group through the group signal, a `setsid` descendant by a signal of its own — not the
/// group's and then each descendant's again (a program that takes a second SIGTERM as "exit
/// now" would skip its cleanup).
#[test]
fn on_a_loss_each_process_gets_sigterm_once() {
    let _serial = timing_lock();
    let counters = Counters::new("term-once");
    let store = counters.store();
    let cmd = counters.cmd(&format!("exec {} cmd", counters.counter()));
    let holder = lease(
        &store,
        &["run", "--ttl", "15s", "counted", "--", "sh", "-c", &cmd],
    )
    .spawn()
    .unwrap();
    counters.wait_ready(3);
    let forced = lease_output(
        &store,
        &["release", "counted", "--force"],
        Duration::from_secs(10),
    );
    assert_eq!(code(forced.status), 0, "{}", stderr(&forced));
    let out = finish(holder, Duration::from_secs(30));
    assert_eq!(code(out.status), 74, "{}", stderr(&out));

    let lines = counters.lines();
    let (cmd_pid, cmd_group) = counters.ready("cmd");
    let (_, child_group) = counters.ready("child");
    let (_, escaped_group) = counters.ready("escaped");
    assert_eq!(cmd_group, cmd_pid, "CMD leads its group: {lines:?}");
    assert_eq!(
        child_group, cmd_group,
        "the child is in CMD's group: {lines:?}"
    );
    assert_ne!(
        escaped_group, cmd_group,
        "the setsid one left it: {lines:?}"
    );
    counters.assert_once_each(&["cmd", "child", "escaped"]);
}

/// A SIGTERM to `lease` is forwarded to CMD's group; once CMD has exited, what is left of the
/// term is ended — but the processes in the group, which had the forwarded SIGTERM, get no
/// second one; the `setsid` descendant, which had none, gets its one then.
#[test]
fn after_a_forwarded_sigterm_no_process_gets_a_second() {
    let _serial = timing_lock();
    let counters = Counters::new("term-forwarded");
    let store = counters.store();
    // CMD, a shell without a trap, dies of the forwarded SIGTERM; its children run on.
    let cmd = counters.cmd("wait");
    let holder = lease(
        &store,
        &["run", "--ttl", "15s", "forwarded", "--", "sh", "-c", &cmd],
    )
    .spawn()
    .unwrap();
    counters.wait_ready(2);
    send(holder.id(), Signal::TERM);
    let out = finish(holder, Duration::from_secs(30));
    assert_eq!(code(out.status), 128 + 15, "{}", stderr(&out));
    let lines = counters.lines();
    let (_, child_group) = counters.ready("child");
    let (_, escaped_group) = counters.ready("escaped");
    assert_ne!(
        escaped_group, child_group,
        "the setsid one left the group: {lines:?}"
    );
    counters.assert_once_each(&["child", "escaped"]);
}

/// After a SIGTERM to `lease` was forwarded to CMD's group, the term may still end at its
/// local deadline (here: `lease` is frozen by SIGSTOP while CMD cleans up, so no renewal moves
/// it): the watchdog then sends the group no second SIGTERM either. CMD and its child logged
/// their one before `lease` was frozen. The `setsid` descendant gets its SIGTERM at the
/// deadline and SIGKILL 0.8 s later (a 3 s lease keeps the test short), so it is only checked
/// not to get two: on a busy machine its trap may not run before the SIGKILL.
#[test]
fn after_a_forwarded_sigterm_the_deadline_sends_no_second() {
    let _serial = timing_lock();
    let counters = Counters::new("term-deadline");
    let store = counters.store();
    let cmd = counters.cmd(&format!("exec {} cmd", counters.counter()));
    let holder = lease(
        &store,
        &[
            "run",
            "--ttl",
            "3s",
            "frozen-after-term",
            "--",
            "sh",
            "-c",
            &cmd,
        ],
    )
    .spawn()
    .unwrap();
    counters.wait_ready(3);
    send(holder.id(), Signal::TERM);
    let termed = |tag: &str| {
        counters
            .lines()
            .iter()
            .any(|l| l[0] == "term" && l[1] == tag)
    };
    assert!(
        wait_until(Duration::from_secs(20), || termed("cmd") && termed("child")),
        "the forwarded SIGTERM was not logged: {:?}",
        counters.lines()
    );
    send(holder.id(), Signal::STOP);
    let pids: Vec<i32> = ["cmd", "child", "escaped"]
        .iter()
        .map(|t| counters.ready(t).0.parse().unwrap())
        .collect();
    let gone = wait_until(Duration::from_secs(30), || pids.iter().all(|&p| is_dead(p)));
    send(holder.id(), Signal::CONT);
    assert!(gone, "the term's processes outlived its deadline: {pids:?}");
    let out = finish(holder, Duration::from_secs(30));
    assert_eq!(code(out.status), 74, "{}", stderr(&out));
    counters.assert_once_each(&["cmd", "child"]);
    assert!(counters.terms("escaped") <= 1, "{:?}", counters.lines());
}
