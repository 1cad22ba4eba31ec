//! A fault-injecting TCP proxy for tests against real servers.
//!
//! [`FaultProxy`] listens on `127.0.0.1` on a port the system picks and
//! forwards every connection it accepts to one target address. A test points
//! its client at [`FaultProxy::local_addr`] instead of the server, then
//! switches the proxy between [`FaultMode::Pass`], [`FaultMode::Stall`],
//! [`FaultMode::Cut`], [`FaultMode::LoseAnswers`] and [`FaultMode::Chaos`] at
//! any moment to play a healthy network, a network that stops answering, one
//! that drops every connection, one that delivers requests and loses their
//! answers, or one that does any of these to single requests at random. The
//! modes are the ones the in-process [`Faults`](crate::faults::Faults) hook
//! takes; each mode's documentation says what the proxy does.
//!
//! The proxy sees bytes, not protocol messages: in chaos it draws an action
//! for each chunk it reads from a client (one read, up to 16 KiB), which may
//! hold several pipelined requests or part of one, and a held or lost answer
//! holds or loses whatever the server sends next on that connection.
//!
//! The proxy also counts what crosses it ([`ProxyStats`]), so a test can
//! assert how many round trips an operation costs on the wire.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use lease_conformance::proxy::{FaultMode, FaultProxy};
//!
//! let proxy = FaultProxy::start("127.0.0.1:6379").await?;
//! let url = format!("redis://{}", proxy.local_addr());
//! // ... connect a client to `url` and take a lease ...
//! proxy.reset_stats();
//! // ... renew once ...
//! assert_eq!(proxy.stats().round_trips, 1);
//!
//! proxy.set_mode(FaultMode::Stall); // the server stops answering
//! // ... the holder must notice the loss within its local deadline ...
//! proxy.set_mode(FaultMode::Pass); // held bytes flow again
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, ToSocketAddrs};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::chaos::{ChaosAction, ChaosCounts, Dice};
pub use crate::faults::FaultMode;

/// Size of the buffer each direction of a connection reads into.
const BUF_SIZE: usize = 16 * 1024;

/// Counters of what crossed a [`FaultProxy`] since it started or since the
/// last [`FaultProxy::reset_stats`].
///
/// The counters are read one by one without a common lock, so a snapshot taken
/// while traffic flows may mix values from slightly different instants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyStats {
    /// Client connections accepted, including those closed at once in
    /// [`FaultMode::Cut`].
    pub connections_accepted: u64,
    /// Bytes forwarded from clients to the target server.
    pub bytes_client_to_server: u64,
    /// Bytes forwarded from the target server to clients.
    pub bytes_server_to_client: u64,
    /// Times a client started sending after the server had sent, plus the
    /// first client bytes of each connection, summed over connections.
    ///
    /// A request/response exchange counts 1, and so does a burst of several
    /// client writes before any reply (pipelining). The proxy sees TCP reads,
    /// not protocol messages: a client that sends one request in two pieces
    /// with server bytes in between (say, a notification) counts 2. The
    /// direction is noted when the proxy reads from a socket, so bytes that a
    /// stall or a cut held back and never forwarded may still have counted.
    pub round_trips: u64,
}

impl fmt::Display for ProxyStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connections, {} bytes up, {} bytes down, {} round trips",
            self.connections_accepted,
            self.bytes_client_to_server,
            self.bytes_server_to_client,
            self.round_trips
        )
    }
}

/// The state every task of one proxy watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Control {
    mode: FaultMode,
    /// Incremented on every switch to [`FaultMode::Cut`], so a connection sees
    /// a cut even when the mode went back to Pass before it looked.
    cut_epoch: u64,
    /// Set by [`FaultProxy::shutdown`].
    shutdown: bool,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    up: AtomicU64,
    down: AtomicU64,
    round_trips: AtomicU64,
    open: AtomicUsize,
}

/// Decrements the open-connections gauge when a connection task ends.
struct OpenGuard(Arc<Counters>);

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A TCP proxy that forwards to one target and injects faults on demand.
///
/// Start it with [`FaultProxy::start`] inside a tokio runtime. It serves until
/// [`FaultProxy::shutdown`] is called or the value is dropped; then the
/// listener closes and every connection it carries is closed. The proxy only
/// listens on the loopback interface.
#[derive(Debug)]
pub struct FaultProxy {
    control: watch::Sender<Control>,
    counters: Arc<Counters>,
    dice: Arc<Dice>,
    local_addr: SocketAddr,
    target: SocketAddr,
    accept_task: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `target` (a `SocketAddr` or a `"host:port"` string)
    /// on `127.0.0.1` with a port the system picks, in [`FaultMode::Pass`].
    ///
    /// The target name is resolved once, here, and the first address is used.
    /// Nothing connects to the target until a client connects to the proxy.
    /// Must be called within a tokio runtime, whose tasks then carry the
    /// proxy's traffic.
    ///
    /// # Errors
    ///
    /// Fails when the target cannot be resolved or the listener cannot bind.
    pub async fn start(target: impl ToSocketAddrs) -> io::Result<FaultProxy> {
        let target = tokio::net::lookup_host(target)
            .await?
            .next()
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "proxy target resolved to no address",
                )
            })?;
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let local_addr = listener.local_addr()?;
        let (control, rx) = watch::channel(Control {
            mode: FaultMode::Pass,
            cut_epoch: 0,
            shutdown: false,
        });
        let counters = Arc::new(Counters::default());
        let dice = Arc::new(Dice::default());
        let accept_task = tokio::spawn(accept_loop(
            listener,
            target,
            rx,
            Arc::clone(&counters),
            Arc::clone(&dice),
        ));
        tracing::debug!(%local_addr, %target, "fault proxy started");
        Ok(FaultProxy {
            control,
            counters,
            dice,
            local_addr,
            target,
            accept_task,
        })
    }

    /// The address clients connect to instead of the target.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address the proxy forwards to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Switches every connection, open or future, to `mode`.
    ///
    /// The call returns at once; the connection tasks act on the change as
    /// soon as they are scheduled, typically within microseconds, so a test
    /// should not rely on bytes already in flight being caught. A switch to
    /// [`FaultMode::Cut`] closes every connection open at that moment even if
    /// the mode changes again right after. A switch to [`FaultMode::Chaos`]
    /// starts its seed's sequence from the beginning and its counts
    /// ([`chaos_counts`](FaultProxy::chaos_counts)) from zero; one sequence
    /// serves every connection, drawn in the order the chunks are read. Has no
    /// effect after [`FaultProxy::shutdown`].
    pub fn set_mode(&self, mode: FaultMode) {
        if let FaultMode::Chaos(config) = mode {
            self.dice.reset(config);
        }
        self.control.send_modify(|c| {
            if mode == FaultMode::Cut {
                c.cut_epoch = c.cut_epoch.wrapping_add(1);
            }
            c.mode = mode;
        });
        tracing::debug!(local_addr = %self.local_addr, ?mode, "fault proxy mode");
    }

    /// The mode last set.
    pub fn mode(&self) -> FaultMode {
        self.control.borrow().mode
    }

    /// What the chaos did to the chunks read from clients since the mode was
    /// last switched to [`FaultMode::Chaos`] (all zero before). A lost answer
    /// counts when it was drawn, before the server answered.
    pub fn chaos_counts(&self) -> ChaosCounts {
        self.dice.counts()
    }

    /// A snapshot of the counters since start or the last
    /// [`FaultProxy::reset_stats`].
    pub fn stats(&self) -> ProxyStats {
        let c = &self.counters;
        ProxyStats {
            connections_accepted: c.accepted.load(Ordering::Relaxed),
            bytes_client_to_server: c.up.load(Ordering::Relaxed),
            bytes_server_to_client: c.down.load(Ordering::Relaxed),
            round_trips: c.round_trips.load(Ordering::Relaxed),
        }
    }

    /// Sets every counter of [`ProxyStats`] back to zero.
    ///
    /// Open connections keep their place in the request/response cycle: a
    /// client whose last bytes were a request that is still unanswered does
    /// not count a new round trip if it sends more before the reply.
    pub fn reset_stats(&self) {
        let c = &self.counters;
        c.accepted.store(0, Ordering::Relaxed);
        c.up.store(0, Ordering::Relaxed);
        c.down.store(0, Ordering::Relaxed);
        c.round_trips.store(0, Ordering::Relaxed);
    }

    /// Client connections the proxy holds open right now, in any mode.
    ///
    /// A connection counts from its accept until its task has closed both
    /// sockets, so the number drops shortly after a cut or a close, not at
    /// the same instant.
    pub fn connections_open(&self) -> usize {
        self.counters.open.load(Ordering::Relaxed)
    }

    /// Stops the listener and closes every connection, as dropping the proxy
    /// does. Idempotent.
    ///
    /// Returns at once; the sockets are closed by the proxy's tasks as soon
    /// as they run. Mode changes after this have no effect.
    pub fn shutdown(&self) {
        self.control.send_modify(|c| c.shutdown = true);
        self.accept_task.abort();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Why a connection stops: the proxy cut it or is shutting down.
fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "cut by fault proxy")
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mut rx: watch::Receiver<Control>,
    counters: Arc<Counters>,
    dice: Arc<Dice>,
) {
    loop {
        if rx.borrow_and_update().shutdown {
            return;
        }
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((client, peer)) => {
                    counters.accepted.fetch_add(1, Ordering::Relaxed);
                    let control = *rx.borrow();
                    if control.shutdown {
                        return;
                    }
                    if control.mode == FaultMode::Cut {
                        tracing::trace!(%peer, "fault proxy: closing new connection (cut)");
                        drop(client);
                        continue;
                    }
                    counters.open.fetch_add(1, Ordering::Relaxed);
                    let guard = OpenGuard(Arc::clone(&counters));
                    let rx = rx.clone();
                    let counters = Arc::clone(&counters);
                    let dice = Arc::clone(&dice);
                    tokio::spawn(async move {
                        let _guard = guard;
                        let served = serve(client, target, rx, control.cut_epoch, counters, dice);
                        if let Err(e) = served.await {
                            tracing::trace!(%peer, error = %e, "fault proxy connection ended");
                        }
                    });
                }
                Err(e) => {
                    // Typically out of file descriptors: back off instead of spinning.
                    tracing::debug!(error = %e, "fault proxy accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
        }
    }
}

/// Waits until bytes may flow in `direction` (Pass and Chaos; also
/// LoseAnswers, where the server's bytes are read and dropped) and returns the mode they flow
/// under. Fails when the connection was cut (the cut epoch moved on), when it
/// lost an answer (`lost`) and the mode left LoseAnswers, or when the proxy
/// shuts down.
async fn wait_flow(
    rx: &mut watch::Receiver<Control>,
    epoch: u64,
    lost: &AtomicBool,
) -> io::Result<FaultMode> {
    loop {
        let control = *rx.borrow_and_update();
        if control.shutdown || control.cut_epoch != epoch {
            return Err(aborted());
        }
        if control.mode != FaultMode::LoseAnswers && lost.load(Ordering::Relaxed) {
            return Err(aborted());
        }
        if matches!(
            control.mode,
            FaultMode::Pass | FaultMode::LoseAnswers | FaultMode::Chaos(_)
        ) {
            return Ok(control.mode);
        }
        if rx.changed().await.is_err() {
            return Err(aborted());
        }
    }
}

async fn serve(
    mut client: TcpStream,
    target: SocketAddr,
    mut rx: watch::Receiver<Control>,
    epoch: u64,
    counters: Arc<Counters>,
    dice: Arc<Dice>,
) -> io::Result<()> {
    let state = Connection::default();
    let mut server = loop {
        wait_flow(&mut rx, epoch, &state.lost).await?;
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return Err(aborted());
                }
            }
            connected = TcpStream::connect(target) => break connected?,
        }
    };
    // Latency matters more than throughput for lease traffic.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);

    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let up = pump(
        &mut client_read,
        &mut server_write,
        Direction::Up,
        (&state, &dice),
        rx.clone(),
        epoch,
        &counters,
    );
    let down = pump(
        &mut server_read,
        &mut client_write,
        Direction::Down,
        (&state, &dice),
        rx,
        epoch,
        &counters,
    );
    tokio::try_join!(up, down).map(|_| ())
}

/// What both directions of one connection share.
#[derive(Debug, Default)]
struct Connection {
    /// Which side sent last: 0 nobody, 1 client, 2 server.
    last: AtomicU8,
    /// An answer was dropped in [`FaultMode::LoseAnswers`].
    lost: AtomicBool,
    /// Chaos: the next bytes from the server are to be dropped and the
    /// connection closed.
    lose_next: AtomicBool,
    /// Chaos: nothing from the server is forwarded before this instant.
    hold_until: std::sync::Mutex<Option<Instant>>,
}

impl Connection {
    fn hold_until(&self) -> Option<Instant> {
        *self
            .hold_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn hold_for(&self, hold: Duration) {
        let mut until = self
            .hold_until
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let new = Instant::now() + hold;
        *until = Some(until.map_or(new, |old| old.max(new)));
    }
}

/// Sleeps until `until` unless the connection is cut or the proxy shuts
/// down first (then fails, as [`wait_flow`] does).
async fn sleep_unless_cut(
    rx: &mut watch::Receiver<Control>,
    epoch: u64,
    lost: &AtomicBool,
    until: Instant,
) -> io::Result<()> {
    loop {
        wait_flow(rx, epoch, lost).await?;
        if Instant::now() >= until {
            return Ok(());
        }
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return Err(aborted());
                }
            }
            () = tokio::time::sleep_until(until) => return Ok(()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// Client to server.
    Up,
    /// Server to client.
    Down,
}

/// Copies `src` to `dst` while the proxy is in Pass mode (in LoseAnswers: the
/// client's bytes, and drops the server's, noting the loss in `state`; in
/// Chaos: each chunk from the client as the next action drawn from `dice`
/// says), until end of file (then shuts down the write side of `dst`), an
/// error, or a cut.
async fn pump<R, W>(
    src: &mut R,
    dst: &mut W,
    direction: Direction,
    (state, dice): (&Connection, &Dice),
    mut rx: watch::Receiver<Control>,
    epoch: u64,
    counters: &Counters,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (last, lost) = (&state.last, &state.lost);
    let mut buf = vec![0u8; BUF_SIZE];
    loop {
        // Read only while bytes flow: in Stall, they wait in the kernel.
        let (n, mode) = loop {
            let mode = wait_flow(&mut rx, epoch, lost).await?;
            tokio::select! {
                biased;
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Err(aborted());
                    }
                }
                read = src.read(&mut buf) => break (read?, mode),
            }
        };
        if n == 0 {
            // Half close: pass the end of file on, keep the other direction.
            let _ = dst.shutdown().await;
            return Ok(());
        }
        match direction {
            Direction::Up => {
                if last.swap(1, Ordering::Relaxed) != 1 {
                    counters.round_trips.fetch_add(1, Ordering::Relaxed);
                }
            }
            Direction::Down => last.store(2, Ordering::Relaxed),
        }
        if direction == Direction::Down && mode == FaultMode::LoseAnswers {
            lost.store(true, Ordering::Relaxed);
            continue;
        }
        match direction {
            Direction::Up => {
                if let FaultMode::Chaos(config) = mode {
                    // Set before the chunk goes out, so its answer cannot come first.
                    match dice.draw(config, config.may_lose(&buf[..n])) {
                        ChaosAction::Pass => {}
                        ChaosAction::Delay(d) => {
                            sleep_unless_cut(&mut rx, epoch, lost, Instant::now() + d).await?;
                        }
                        ChaosAction::Hold(d) => state.hold_for(d),
                        ChaosAction::Lose => state.lose_next.store(true, Ordering::SeqCst),
                    }
                }
            }
            Direction::Down => {
                if state.lose_next.swap(false, Ordering::SeqCst) {
                    tracing::trace!("fault proxy: chaos lost an answer; closing the connection");
                    return Err(aborted());
                }
                if let Some(until) = state.hold_until() {
                    sleep_unless_cut(&mut rx, epoch, lost, until).await?;
                }
            }
        }
        let mut pos = 0;
        while pos < n {
            wait_flow(&mut rx, epoch, lost).await?;
            tokio::select! {
                biased;
                changed = rx.changed() => {
                    if changed.is_err() {
                        return Err(aborted());
                    }
                }
                written = dst.write(&buf[pos..n]) => {
                    let written = written?;
                    if written == 0 {
                        return Err(io::ErrorKind::WriteZero.into());
                    }
                    pos += written;
                    let counter = match direction {
                        Direction::Up => &counters.up,
                        Direction::Down => &counters.down,
                    };
                    counter.fetch_add(written as u64, Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;
    use std::future::Future;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::time::timeout;

    type TestResult = Result<(), Box<dyn Error + Send + Sync>>;

    const SHORT: Duration = Duration::from_millis(200);
    const LONG: Duration = Duration::from_secs(5);

    /// An echo server that answers each complete line with the same line, so
    /// a client controls exactly when the server replies.
    async fn line_echo_server() -> io::Result<SocketAddr> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut lines = BufReader::new(read);
                    let mut line = Vec::new();
                    loop {
                        line.clear();
                        match lines.read_until(b'\n', &mut line).await {
                            Ok(0) | Err(_) => return,
                            Ok(_) => {
                                if write.write_all(&line).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Ok(addr)
    }

    async fn read_exact_n(stream: &mut TcpStream, n: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; n];
        timeout(LONG, stream.read_exact(&mut buf))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no echo"))??;
        Ok(buf)
    }

    /// True when nothing arrives on `stream` within [`SHORT`].
    async fn silent(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        timeout(SHORT, stream.read(&mut byte)).await.is_err()
    }

    /// True when `stream` reports end of file or an error within [`LONG`].
    async fn closed(stream: &mut TcpStream) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match timeout(LONG, stream.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
            }
        }
    }

    async fn eventually<F, Fut>(mut check: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        for _ in 0..200 {
            if check().await {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    async fn exchange(stream: &mut TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(msg).await?;
        read_exact_n(stream, msg.len()).await
    }

    #[tokio::test]
    async fn pass_forwards_both_ways() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut conn, b"hello\n").await?, b"hello\n");
        let big: Vec<u8> = (0..200_000u32)
            .map(|i| b'a' + (i % 26) as u8)
            .chain([b'\n'])
            .collect();
        let (mut r, mut w) = conn.split();
        let write = async {
            w.write_all(&big).await?;
            Ok::<_, io::Error>(())
        };
        let read = async {
            let mut back = vec![0u8; big.len()];
            r.read_exact(&mut back).await?;
            Ok::<_, io::Error>(back)
        };
        let ((), back) = timeout(LONG, async { tokio::try_join!(write, read) }).await??;
        assert!(back == big, "large payload changed in transit");
        let stats = proxy.stats();
        assert_eq!(stats.connections_accepted, 1);
        assert_eq!(stats.bytes_client_to_server, 6 + big.len() as u64);
        assert_eq!(stats.bytes_server_to_client, 6 + big.len() as u64);
        assert_eq!(proxy.connections_open(), 1);
        Ok(())
    }

    #[tokio::test]
    async fn stall_holds_bytes_and_pass_resumes() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut old = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut old, b"before\n").await?, b"before\n");

        proxy.set_mode(FaultMode::Stall);
        old.write_all(b"held\n").await?;
        assert!(silent(&mut old).await, "stalled connection answered");
        // A new connection is accepted and stalled too.
        let mut new = timeout(LONG, TcpStream::connect(proxy.local_addr())).await??;
        new.write_all(b"new\n").await?;
        assert!(
            silent(&mut new).await,
            "connection accepted in stall answered"
        );
        assert!(eventually(|| async { proxy.connections_open() == 2 }).await);
        assert!(!closed_now(&mut old).await, "stall closed a connection");

        proxy.set_mode(FaultMode::Pass);
        assert_eq!(read_exact_n(&mut old, 5).await?, b"held\n");
        assert_eq!(read_exact_n(&mut new, 4).await?, b"new\n");
        assert_eq!(exchange(&mut old, b"after\n").await?, b"after\n");
        Ok(())
    }

    #[tokio::test]
    async fn lose_answers_delivers_requests_and_closes_on_leaving() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut old = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut old, b"before\n").await?, b"before\n");

        proxy.set_mode(FaultMode::LoseAnswers);
        old.write_all(b"lost\n").await?;
        assert!(silent(&mut old).await, "an answer came through");
        // The request went on to the server; its answer was not forwarded.
        assert!(eventually(|| async { proxy.stats().bytes_client_to_server == 7 + 5 }).await);
        assert_eq!(proxy.stats().bytes_server_to_client, 7);
        // A connection that lost nothing stays usable across the switch back.
        let mut quiet = timeout(LONG, TcpStream::connect(proxy.local_addr())).await??;

        proxy.set_mode(FaultMode::Pass);
        assert!(
            closed(&mut old).await,
            "a connection that lost an answer stayed open"
        );
        assert_eq!(exchange(&mut quiet, b"after\n").await?, b"after\n");
        Ok(())
    }

    /// True when `stream` is at end of file right now (checked without waiting long).
    async fn closed_now(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            timeout(Duration::from_millis(20), stream.peek(&mut byte)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    #[tokio::test]
    async fn stall_then_pass_mid_write_keeps_all_bytes() -> TestResult {
        // Toggle modes while a large payload is in flight: nothing is lost or reordered.
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        let big: Vec<u8> = (0..2_000_000u32)
            .map(|i| b'a' + (i % 26) as u8)
            .chain([b'\n'])
            .collect();
        let (mut r, mut w) = conn.split();
        let write = async {
            w.write_all(&big).await?;
            Ok::<_, io::Error>(())
        };
        let read = async {
            let mut back = vec![0u8; big.len()];
            r.read_exact(&mut back).await?;
            Ok::<_, io::Error>(back)
        };
        let toggle = async {
            for _ in 0..10 {
                proxy.set_mode(FaultMode::Stall);
                tokio::time::sleep(Duration::from_millis(5)).await;
                proxy.set_mode(FaultMode::Pass);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, io::Error>(())
        };
        let ((), back, ()) =
            timeout(LONG, async { tokio::try_join!(write, read, toggle) }).await??;
        assert!(back == big, "payload changed across stalls");
        Ok(())
    }

    #[tokio::test]
    async fn cut_closes_existing_and_new_connections() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut a = TcpStream::connect(proxy.local_addr()).await?;
        let mut b = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut a, b"a\n").await?, b"a\n");
        assert_eq!(exchange(&mut b, b"b\n").await?, b"b\n");
        // A connection stalled before the cut is cut as well.
        proxy.set_mode(FaultMode::Stall);
        b.write_all(b"held\n").await?;

        proxy.set_mode(FaultMode::Cut);
        assert!(closed(&mut a).await, "open connection survived the cut");
        assert!(closed(&mut b).await, "stalled connection survived the cut");
        assert!(eventually(|| async { proxy.connections_open() == 0 }).await);

        let mut c = timeout(LONG, TcpStream::connect(proxy.local_addr())).await??;
        assert!(
            closed(&mut c).await,
            "connection accepted during cut stayed open"
        );
        assert_eq!(proxy.stats().connections_accepted, 3);

        proxy.set_mode(FaultMode::Pass);
        let mut d = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut d, b"again\n").await?, b"again\n");
        Ok(())
    }

    #[tokio::test]
    async fn cut_then_pass_at_once_still_cuts() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut a = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut a, b"a\n").await?, b"a\n");
        proxy.set_mode(FaultMode::Cut);
        proxy.set_mode(FaultMode::Pass);
        assert!(closed(&mut a).await, "a cut followed by pass was missed");
        Ok(())
    }

    #[tokio::test]
    async fn round_trips_count_exchanges_not_writes() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        for msg in [&b"one\n"[..], b"two\n", b"three\n"] {
            assert_eq!(exchange(&mut conn, msg).await?, msg);
        }
        assert_eq!(proxy.stats().round_trips, 3);

        // Pipelined: two writes, well apart, before any reply: one round trip.
        proxy.reset_stats();
        conn.write_all(b"pipe").await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        conn.write_all(b"lined\n").await?;
        assert_eq!(read_exact_n(&mut conn, 10).await?, b"pipelined\n");
        let stats = proxy.stats();
        assert_eq!(stats.round_trips, 1);
        assert_eq!(stats.bytes_client_to_server, 10);
        assert_eq!(stats.bytes_server_to_client, 10);
        assert_eq!(stats.connections_accepted, 0);

        // Two requests in one write, two replies: still one round trip.
        proxy.reset_stats();
        conn.write_all(b"x\ny\n").await?;
        assert_eq!(read_exact_n(&mut conn, 4).await?, b"x\ny\n");
        assert_eq!(proxy.stats().round_trips, 1);

        // Summed over connections: the first bytes of a connection count.
        proxy.reset_stats();
        let mut other = TcpStream::connect(proxy.local_addr()).await?;
        assert_eq!(exchange(&mut other, b"o\n").await?, b"o\n");
        assert_eq!(exchange(&mut conn, b"c\n").await?, b"c\n");
        assert_eq!(proxy.stats().round_trips, 2);
        Ok(())
    }

    #[tokio::test]
    async fn half_close_is_forwarded() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        conn.write_all(b"last\n").await?;
        conn.shutdown().await?;
        let mut back = Vec::new();
        timeout(LONG, conn.read_to_end(&mut back)).await??;
        assert_eq!(back, b"last\n");
        assert!(eventually(|| async { proxy.connections_open() == 0 }).await);
        Ok(())
    }

    #[tokio::test]
    async fn drop_stops_listener_and_connections() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        let addr = proxy.local_addr();
        let mut conn = TcpStream::connect(addr).await?;
        assert_eq!(exchange(&mut conn, b"x\n").await?, b"x\n");
        drop(proxy);
        assert!(closed(&mut conn).await, "connection survived drop");
        let refused = eventually(|| async { TcpStream::connect(addr).await.is_err() }).await;
        assert!(refused, "listener still accepts after drop");
        Ok(())
    }

    #[tokio::test]
    async fn shutdown_closes_stalled_connections() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        proxy.set_mode(FaultMode::Stall);
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        conn.write_all(b"x\n").await?;
        proxy.shutdown();
        assert!(
            closed(&mut conn).await,
            "stalled connection survived shutdown"
        );
        assert!(eventually(|| async { proxy.connections_open() == 0 }).await);
        Ok(())
    }

    #[tokio::test]
    async fn unreachable_target_closes_client() -> TestResult {
        // Bind then drop a listener to get a port that refuses connections.
        let dead = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
        let proxy = FaultProxy::start(dead).await?;
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        assert!(closed(&mut conn).await);
        Ok(())
    }

    #[tokio::test]
    async fn start_accepts_host_port_string() -> TestResult {
        let target = line_echo_server().await?;
        let proxy = FaultProxy::start(format!("localhost:{}", target.port())).await?;
        assert_eq!(proxy.target().port(), target.port());
        assert!(FaultProxy::start("no-port-given").await.is_err());
        Ok(())
    }

    /// A chaos configuration doing only `action`'s kind to every chunk.
    fn chaos_only(lose: u16, hold: Duration, delay: Duration) -> crate::ChaosConfig {
        let whole = crate::chaos::WHOLE;
        let (hold_chance, delay_chance) = match (hold.is_zero(), delay.is_zero()) {
            (false, _) => (whole - lose, 0),
            (true, false) => (0, whole - lose),
            (true, true) => (0, 0),
        };
        crate::ChaosConfig::builder(5)
            .lose(lose)
            .hold(hold_chance, hold, hold)
            .delay(delay_chance, delay, delay)
            .build()
            .unwrap_or_default()
    }

    #[tokio::test]
    async fn chaos_loses_holds_and_delays_per_chunk() -> TestResult {
        let proxy = FaultProxy::start(line_echo_server().await?).await?;
        // Lost: the request reaches the server, its answer never comes, the connection closes.
        proxy.set_mode(FaultMode::Chaos(chaos_only(
            1000,
            Duration::ZERO,
            Duration::ZERO,
        )));
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        conn.write_all(b"lost\n").await?;
        assert!(
            closed(&mut conn).await,
            "a lost answer left the connection open"
        );
        assert_eq!(proxy.stats().bytes_client_to_server, 5);
        assert_eq!(proxy.stats().bytes_server_to_client, 0);
        assert_eq!(proxy.chaos_counts().lost, 1);

        // Held: the answer comes, late.
        let hold = Duration::from_millis(300);
        proxy.set_mode(FaultMode::Chaos(chaos_only(0, hold, Duration::ZERO)));
        assert_eq!(
            proxy.chaos_counts().total(),
            0,
            "a switch starts the counts again"
        );
        let mut conn = TcpStream::connect(proxy.local_addr()).await?;
        let began = std::time::Instant::now();
        conn.write_all(b"held\n").await?;
        assert!(silent(&mut conn).await, "a held answer came at once");
        assert_eq!(read_exact_n(&mut conn, 5).await?, b"held\n");
        assert!(began.elapsed() >= hold);

        // Delayed: the request waits, then passes.
        let delay = Duration::from_millis(250);
        proxy.set_mode(FaultMode::Chaos(chaos_only(0, Duration::ZERO, delay)));
        let began = std::time::Instant::now();
        assert_eq!(exchange(&mut conn, b"late\n").await?, b"late\n");
        assert!(began.elapsed() >= delay);
        let counts = proxy.chaos_counts();
        assert_eq!((counts.delayed, counts.held, counts.lost), (1, 0, 0));

        // A cut still cuts a connection in chaos.
        proxy.set_mode(FaultMode::Cut);
        assert!(closed(&mut conn).await);
        Ok(())
    }
}
