//! The watchdog: the process that parents CMD and ends CMD and every descendant of it at the
//! term's local deadline, on `lease`'s order, and when `lease` dies — on its own, whether
//! `lease` is running, stopped or killed.
//!
//! `lease` starts its own binary as a hidden `__watchdog` child, in a process group of its own
//! (so a terminal's Ctrl-C or Ctrl-Z, or a signal to `lease`'s group, does not reach it). It
//! inherits `lease`'s stdin, stdout and stderr, which CMD inherits in turn, and talks to
//! `lease` over a Unix socket with an abstract name that `lease` listens on just long enough
//! for this one process to connect (checked by its process id). When `lease` dies, however it
//! dies, the kernel closes `lease`'s end and the watchdog reads end-of-file.
//!
//! The watchdog is a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): every descendant of CMD
//! that is orphaned — after `setsid` and a double fork, say — is re-parented to it rather than
//! to init. Its descendants are therefore exactly the processes CMD started that still run,
//! however they detached, and "none is left" is something it can confirm.
//!
//! Orders (one a line): `start DEADLINE GRACE K=HEX…` starts CMD for a term with those
//! environment variables; `deadline DEADLINE` moves the local deadline after a renewal;
//! `end` ends CMD and every descendant; `stop` and `cont` stop and continue them all;
//! `forward INT|TERM|HUP` sends a stop signal `lease` caught to CMD's group (after a SIGTERM
//! so sent, ending the term sends SIGTERM only to the descendants outside the group: no
//! process gets a second one).
//! DEADLINE is a point on `CLOCK_BOOTTIME` in nanoseconds (`-` for a lease that never
//! expires), so time the machine spends suspended counts, and an order that reaches the
//! watchdog late never stretches the deadline. Reports: `started PID`, `failed HEX`, `exited
//! RAW-STATUS`, `deadline` (the deadline passed; the watchdog is ending the term) and `gone`
//! (no descendant is left; only then does `lease` release the name).
//!
//! Ending is what `lease` does on a loss: SIGTERM (and SIGCONT, so a stopped process can act
//! on it) to CMD's group and to every descendant outside it — once to each process — then
//! SIGKILL to all that remain once the step-down grace has passed, repeated until none is
//! left. The local deadline plus the grace
//! ends before the store lets anyone else claim the name. When `lease` dies, the watchdog
//! SIGKILLs every descendant at once, reaps them and exits.

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::process::{Pid, PidfdFlags, Signal, WaitOptions, kill_process, pidfd_open, wait};
use rustix::time::{
    ClockId, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, clock_gettime,
    timerfd_create, timerfd_settime,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, Command};

use super::group::{descendants, descendants_outside, signal_group};
use super::{CmdLine, EXEC_SUBCOMMAND, self_exe};
use crate::cli::WatchdogArgs;
use crate::exit::{CliError, Exit};

/// The hidden subcommand that runs the watchdog (see `cli::Command::Watchdog`).
const WATCHDOG_SUBCOMMAND: &str = "__watchdog";

/// How often the watchdog looks at what is left while ending a term.
const TICK: Duration = Duration::from_millis(10);

/// How long `lease` waits for its watchdog to connect.
const CONNECT_WITHIN: Duration = Duration::from_secs(10);

/// Now on `CLOCK_BOOTTIME`, which keeps counting while the machine is suspended.
pub(crate) fn boot_now() -> Duration {
    let ts = clock_gettime(ClockId::Boottime);
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// What the watchdog reports to `lease`.
#[derive(Debug)]
pub(crate) enum Report {
    /// CMD runs with this process id (it leads its own process group).
    Started(Pid),
    /// CMD could not be started.
    Failed(String),
    /// CMD itself exited.
    Exited(ExitStatus),
    /// The local deadline passed: the watchdog is ending CMD and its descendants.
    Deadline,
    /// No descendant of CMD is left.
    Gone,
}

/// `lease`'s handle on its watchdog.
#[derive(Debug)]
pub(crate) struct Watchdog {
    /// Kept so the process is reaped; never waited for.
    _child: Child,
    orders: OwnedWriteHalf,
    reports: Lines<BufReader<OwnedReadHalf>>,
}

impl Watchdog {
    /// Starts the watchdog, which will run `cmd` for each term, and connects to it.
    pub(crate) async fn spawn(cmd: &CmdLine) -> Result<Watchdog, CliError> {
        let cannot = |e: io::Error| {
            CliError::new(
                Exit::CannotStart,
                format!("cannot start lease's watchdog process: {e}"),
            )
        };
        // Should the watchdog be killed, CMD's descendants come to `lease` rather than to
        // init, and `lease` kills them (see `supervise`).
        rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
            .map_err(|e| cannot(e.into()))?;
        let name = socket_name();
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).map_err(cannot)?;
        let listener = std::os::unix::net::UnixListener::bind_addr(&addr).map_err(cannot)?;
        listener.set_nonblocking(true).map_err(cannot)?;
        let listener = UnixListener::from_std(listener).map_err(cannot)?;
        let child = Command::new(self_exe())
            .arg0("lease")
            .arg(WATCHDOG_SUBCOMMAND)
            .arg("--socket")
            .arg(&name)
            .arg("--")
            .arg(cmd.program())
            .args(cmd.arguments())
            .process_group(0)
            .spawn()
            .map_err(cannot)?;
        let want = child.id();
        let stream = tokio::time::timeout(CONNECT_WITHIN, async {
            loop {
                let (stream, _) = listener.accept().await?;
                // Anyone on this host may connect to an abstract name: only the watchdog
                // this process started is let in.
                let pid = stream.peer_cred()?.pid();
                if pid.and_then(|p| u32::try_from(p).ok()) == want {
                    return Ok::<_, io::Error>(stream);
                }
            }
        })
        .await
        .map_err(|_| cannot(io::Error::other("it did not connect within 10s")))?
        .map_err(cannot)?;
        drop(listener);
        let (reports, orders) = stream.into_split();
        Ok(Watchdog {
            _child: child,
            orders,
            reports: BufReader::new(reports).lines(),
        })
    }

    async fn order(&mut self, line: &str) -> io::Result<()> {
        self.orders
            .write_all(format!("{line}\n").as_bytes())
            .await?;
        self.orders.flush().await
    }

    /// Starts CMD with `env` added to its environment, to be ended at `deadline` (a point on
    /// [`boot_now`]'s clock; `None` for a lease that never expires), with `grace` between
    /// SIGTERM and SIGKILL. Returns CMD's process id.
    pub(crate) async fn start(
        &mut self,
        env: &[(&str, String)],
        deadline: Option<Duration>,
        grace: Duration,
    ) -> Result<Pid, CliError> {
        let mut line = format!("start {} {}", nanos_word(deadline), grace.as_nanos());
        for (k, v) in env {
            line.push_str(&format!(" {k}={}", hex(v.as_bytes())));
        }
        let gone = |e: &dyn std::fmt::Display| {
            CliError::new(
                Exit::CannotStart,
                format!("cannot start CMD: lease's watchdog process is gone ({e})"),
            )
        };
        self.order(&line).await.map_err(|e| gone(&e))?;
        loop {
            match self.report().await {
                Some(Report::Started(pid)) => return Ok(pid),
                Some(Report::Failed(why)) => return Err(CliError::new(Exit::CannotStart, why)),
                Some(_) => {}
                None => return Err(gone(&"end of its reports")),
            }
        }
    }

    /// Moves the local deadline (after a successful renewal).
    pub(crate) async fn deadline(&mut self, deadline: Duration) -> io::Result<()> {
        self.order(&format!("deadline {}", deadline.as_nanos()))
            .await
    }

    /// Orders the end of CMD and every descendant: SIGTERM now (not again to CMD's group
    /// after a [`forward`](Self::forward)ed SIGTERM), SIGKILL after the grace.
    /// [`Report::Gone`] follows once none is left.
    pub(crate) async fn end(&mut self) -> io::Result<()> {
        self.order("end").await
    }

    /// Sends a stop signal `lease` caught (SIGINT, SIGTERM or SIGHUP) to CMD's group,
    /// through the watchdog, which remembers a SIGTERM so sent.
    pub(crate) async fn forward(&mut self, sig: Signal) -> io::Result<()> {
        let word = forward_word(sig)
            .ok_or_else(|| io::Error::other(format!("signal {} is not forwarded", sig.as_raw())))?;
        self.order(&format!("forward {word}")).await
    }

    /// Stops CMD and every descendant (SIGSTOP).
    pub(crate) async fn stop(&mut self) -> io::Result<()> {
        self.order("stop").await
    }

    /// Continues CMD and every descendant (SIGCONT).
    pub(crate) async fn cont(&mut self) -> io::Result<()> {
        self.order("cont").await
    }

    /// The next report; `None` once the watchdog is gone. Cancel safe.
    pub(crate) async fn report(&mut self) -> Option<Report> {
        loop {
            let line = self.reports.next_line().await.ok()??;
            if let Some(report) = parse_report(&line) {
                return Some(report);
            }
        }
    }
}

/// A socket name no other process uses: this process id and 64 random bits.
fn socket_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(boot_now().as_nanos());
    format!("lease-watchdog/{}/{:016x}", std::process::id(), h.finish())
}

/// The word for a stop signal in a `forward` order.
fn forward_word(sig: Signal) -> Option<&'static str> {
    [
        (Signal::INT, "INT"),
        (Signal::TERM, "TERM"),
        (Signal::HUP, "HUP"),
    ]
    .into_iter()
    .find(|&(s, _)| s == sig)
    .map(|(_, w)| w)
}

fn nanos_word(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), |d| d.as_nanos().to_string())
}

fn parse_report(line: &str) -> Option<Report> {
    let mut words = line.split_whitespace();
    Some(match (words.next()?, words.next()) {
        ("started", Some(pid)) => Report::Started(Pid::from_raw(pid.parse().ok()?)?),
        ("failed", Some(why)) => Report::Failed(String::from_utf8_lossy(&unhex(why)?).into_owned()),
        ("exited", Some(raw)) => Report::Exited(ExitStatus::from_raw(raw.parse().ok()?)),
        ("deadline", None) => Report::Deadline,
        ("gone", None) => Report::Gone,
        _ => return None,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A duration in nanoseconds, or `-` for none.
fn parse_nanos(word: &str) -> Option<Option<Duration>> {
    if word == "-" {
        return Some(None);
    }
    let n: u128 = word.parse().ok()?;
    let secs = u64::try_from(n / 1_000_000_000).ok()?;
    let nanos = u32::try_from(n % 1_000_000_000).ok()?;
    Some(Some(Duration::new(secs, nanos)))
}

/// The watchdog's state.
struct Guard {
    cmd: Vec<OsString>,
    socket: UnixStream,
    timer: OwnedFd,
    /// CMD and a pidfd that reads ready when it exits, until CMD is reaped.
    child: Option<(Pid, Option<OwnedFd>)>,
    /// CMD's process group, from its start until nothing of the term is left.
    pgid: Option<Pid>,
    grace: Duration,
    /// The local deadline on the boot clock, while a term's processes may live.
    deadline: Option<Duration>,
    /// While ending: when to SIGKILL what is left (boot clock).
    kill_at: Option<Duration>,
    /// CMD's group got a forwarded SIGTERM this term: ending sends it no second one.
    group_termed: bool,
    /// Whether `lease` is still there (its end of the socket open).
    lease_alive: bool,
}

impl Guard {
    fn report(&mut self, line: &str) {
        // When `lease` is gone there is nobody to tell; carry on.
        let _ = self.socket.write_all(format!("{line}\n").as_bytes());
    }

    fn fail(&mut self, why: &str) {
        self.report(&format!("failed {}", hex(why.as_bytes())));
    }

    fn set_timer(&self, at: Option<Duration>) {
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let value = at.map_or(zero, |d| Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            // An all-zero value disarms the timer: at least 1 ns.
            tv_nsec: i64::from(d.subsec_nanos().max(u32::from(d.as_secs() == 0))),
        });
        let spec = Itimerspec {
            it_interval: zero,
            it_value: value,
        };
        if let Err(e) = timerfd_settime(&self.timer, TimerfdTimerFlags::ABSTIME, &spec) {
            guard_error(&format!("cannot set the deadline timer: {e}"));
        }
    }

    fn start(&mut self, words: &[&str]) {
        if self.pgid.is_some() {
            self.fail("lease's watchdog still guards the previous term's CMD");
            return;
        }
        let parsed = (|| {
            let deadline = parse_nanos(words.first()?)?;
            let grace = parse_nanos(words.get(1)?)??;
            let mut env = Vec::new();
            for kv in words.get(2..)? {
                let (k, v) = kv.split_once('=')?;
                env.push((k.to_owned(), OsString::from_vec(unhex(v)?)));
            }
            Some((deadline, grace, env))
        })();
        let Some((deadline, grace, env)) = parsed else {
            self.fail("lease's watchdog got an order it does not understand");
            return;
        };
        let Some((program, args)) = self.cmd.split_first() else {
            self.fail("no command given");
            return;
        };
        // Armed before CMD exists, so CMD never runs without its deadline.
        self.grace = grace;
        self.deadline = deadline;
        self.set_timer(deadline);
        let me = rustix::process::getpid();
        // The shim ties CMD to this process's life, then becomes CMD.
        let spawned = std::process::Command::new(self_exe())
            .arg0("lease")
            .arg(EXEC_SUBCOMMAND)
            .arg("--parent")
            .arg(me.as_raw_nonzero().to_string())
            .arg("--")
            .arg(program)
            .args(args)
            .envs(env)
            .process_group(0)
            .spawn();
        let pid = match spawned {
            // Reaped by `waitpid` in `reap`, never through the `Child`.
            Ok(child) => i32::try_from(child.id()).ok().and_then(Pid::from_raw),
            Err(e) => {
                let why = format!("cannot start '{}': {e}", program.to_string_lossy());
                self.deadline = None;
                self.set_timer(None);
                self.fail(&why);
                return;
            }
        };
        let Some(pid) = pid else {
            self.fail("CMD has no process id");
            return;
        };
        // Without a pidfd, CMD's exit is noticed at the next tick instead.
        let pidfd = pidfd_open(pid, PidfdFlags::empty()).ok();
        self.child = Some((pid, pidfd));
        self.pgid = Some(pid);
        self.group_termed = false;
        self.report(&format!("started {}", pid.as_raw_nonzero()));
        if deadline.is_some_and(|d| boot_now() >= d) {
            self.begin_end(true);
        }
    }

    /// Sends `sig` once to each process of the term: to everything in CMD's group by one
    /// signal to the group, then to each descendant outside the group (one that called
    /// `setsid` or `setpgid`) by a signal of its own. A process in the group is not signalled
    /// again on its own: a program that takes a second SIGTERM as "exit now" would skip its
    /// cleanup.
    ///
    /// The group is signalled first, atomically for all its members (a fork racing with it
    /// is restarted by the kernel), and the group of each descendant is read from `/proc`
    /// after it. A process that leaves the group in the moment between the two gets `sig`
    /// twice; one started after the signal gets none (the SIGKILL after the grace still
    /// reaches it).
    fn signal_all(&self, sig: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = signal_group(pgid, sig);
        }
        self.signal_outside(sig);
    }

    /// Sends `sig` to each descendant outside CMD's group (to every descendant when there is
    /// no group), each by a signal of its own.
    fn signal_outside(&self, sig: Signal) {
        let me = rustix::process::getpid();
        let outside = match self.pgid {
            Some(pgid) => descendants_outside(me, pgid),
            None => descendants(me),
        };
        for pid in outside {
            let _ = kill_process(pid, sig);
        }
    }

    /// Starts ending the term: SIGTERM and SIGCONT now, SIGKILL after the grace. After a
    /// forwarded SIGTERM, SIGTERM goes only to the descendants outside CMD's group.
    fn begin_end(&mut self, at_deadline: bool) {
        if self.pgid.is_none() {
            self.report("gone");
            return;
        }
        if at_deadline {
            self.report("deadline");
        }
        if self.kill_at.is_some() {
            return;
        }
        self.kill_at = Some(boot_now() + self.grace);
        if self.group_termed {
            self.signal_outside(Signal::TERM);
        } else {
            self.signal_all(Signal::TERM);
        }
        self.signal_all(Signal::CONT);
    }

    /// Reaps every child that has exited, reporting CMD's status.
    fn reap(&mut self) {
        while let Ok(Some((pid, status))) = wait(WaitOptions::NOHANG) {
            if self.child.as_ref().is_some_and(|(c, _)| *c == pid) {
                self.child = None;
                self.report(&format!("exited {}", status.as_raw()));
            }
        }
    }

    /// One step of ending: SIGKILL to all once the grace has passed; `gone` once nothing of
    /// the term is left.
    fn step_end(&mut self) {
        self.reap();
        let left = descendants(rustix::process::getpid());
        if left.is_empty() && self.child.is_none() {
            self.kill_at = None;
            self.pgid = None;
            self.deadline = None;
            self.set_timer(None);
            self.report("gone");
            return;
        }
        if self.kill_at.is_some_and(|at| boot_now() >= at) {
            if let Some(pgid) = self.pgid {
                let _ = signal_group(pgid, Signal::KILL);
            }
            for pid in left {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
    }

    fn order(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.split_first() {
            Some((&"start", rest)) => self.start(rest),
            Some((&"deadline", [at])) => {
                // Once ending, the end stands: a late renewal does not bring CMD back.
                if let Some(Some(at)) = parse_nanos(at)
                    && self.pgid.is_some()
                    && self.kill_at.is_none()
                {
                    self.deadline = Some(at);
                    self.set_timer(Some(at));
                }
            }
            Some((&"end", [])) => self.begin_end(false),
            Some((&"forward", [word])) => {
                let sig = [Signal::INT, Signal::TERM, Signal::HUP]
                    .into_iter()
                    .find(|&s| forward_word(s) == Some(*word));
                if let (Some(sig), Some(pgid)) = (sig, self.pgid) {
                    let _ = signal_group(pgid, sig);
                    self.group_termed |= sig == Signal::TERM;
                }
            }
            // Once ending, stopping would only delay the end.
            Some((&"stop", [])) if self.kill_at.is_none() => self.signal_all(Signal::STOP),
            Some((&"cont", [])) => self.signal_all(Signal::CONT),
            _ => {}
        }
    }

    /// Whether the term's processes are being ended (or must be, `lease` being gone).
    fn ending(&self) -> bool {
        self.kill_at.is_some()
    }
}

fn guard_error(text: &str) {
    let _ = io::stderr().write_all(format!("lease watchdog: {text}\n").as_bytes());
}

/// The watchdog's main loop (the `__watchdog` subcommand). Returns its exit code.
pub(crate) fn watch(args: &WatchdogArgs) -> u8 {
    match run_guard(args) {
        Ok(()) => 0,
        Err(e) => {
            guard_error(&e.to_string());
            1
        }
    }
}

fn run_guard(args: &WatchdogArgs) -> io::Result<()> {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))?;
    let addr = SocketAddr::from_abstract_name(args.socket.as_bytes())?;
    let socket = UnixStream::connect_addr(&addr)?;
    let timer = timerfd_create(
        TimerfdClockId::Boottime,
        TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
    )?;
    let mut guard = Guard {
        cmd: args.cmd.clone(),
        socket,
        timer,
        child: None,
        pgid: None,
        grace: Duration::ZERO,
        deadline: None,
        kill_at: None,
        group_termed: false,
        lease_alive: true,
    };
    let mut reader = guard.socket.try_clone()?;
    let mut pending = Vec::new();
    loop {
        let (orders_ready, timer_ready) = {
            let tick = Timespec {
                tv_sec: 0,
                tv_nsec: i64::from(TICK.subsec_nanos()),
            };
            // Without a pidfd for CMD, look every tick whether it exited.
            let blind = guard.child.as_ref().is_some_and(|(_, fd)| fd.is_none());
            let timeout = (guard.ending() || blind).then_some(&tick);
            let mut fds = vec![
                PollFd::from_borrowed_fd(guard.timer.as_fd(), PollFlags::IN),
                PollFd::from_borrowed_fd(reader.as_fd(), PollFlags::IN),
            ];
            if let Some((_, Some(fd))) = &guard.child {
                fds.push(PollFd::from_borrowed_fd(fd.as_fd(), PollFlags::IN));
            }
            if !guard.lease_alive {
                // Nothing more will come: do not wake on the closed socket.
                fds.truncate(1);
            }
            match poll(&mut fds, timeout) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
            let ready = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
            (guard.lease_alive && ready(1), ready(0))
        };
        if orders_ready {
            let mut buf = [0u8; 4096];
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => {
                    // `lease` is gone: kill everything at once.
                    guard.lease_alive = false;
                    if guard.pgid.is_some() {
                        guard.kill_at = Some(Duration::ZERO);
                        guard.signal_all(Signal::KILL);
                    }
                }
                Ok(n) => {
                    pending.extend_from_slice(buf.get(..n).unwrap_or_default());
                    while let Some(at) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=at).collect();
                        guard.order(&String::from_utf8_lossy(&line));
                    }
                }
            }
        }
        if timer_ready {
            let mut ticks = [0u8; 8];
            let _ = rustix::io::read(&guard.timer, &mut ticks);
            if guard.pgid.is_some() && guard.deadline.is_some_and(|d| boot_now() >= d) {
                guard.begin_end(true);
            }
        }
        guard.reap();
        if guard.ending() {
            guard.step_end();
        }
        if !guard.lease_alive && guard.pgid.is_none() {
            // Everything of the last term is gone, and no order can come.
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let text = "name with spaces/and ünïcode";
        assert_eq!(unhex(&hex(text.as_bytes())).unwrap(), text.as_bytes());
        assert!(unhex("abc").is_none());
        assert!(unhex("zz").is_none());
    }

    #[test]
    fn reports_parse() {
        assert!(
            matches!(parse_report("started 42"), Some(Report::Started(p)) if p.as_raw_nonzero().get() == 42)
        );
        assert!(
            matches!(parse_report("exited 256"), Some(Report::Exited(s)) if s.code() == Some(1))
        );
        assert!(matches!(parse_report("gone"), Some(Report::Gone)));
        assert!(matches!(parse_report("deadline"), Some(Report::Deadline)));
        assert!(parse_report("nonsense").is_none());
        assert_eq!(parse_nanos("-"), Some(None));
        assert_eq!(
            parse_nanos("1500000000"),
            Some(Some(Duration::from_millis(1500)))
        );
    }
}
