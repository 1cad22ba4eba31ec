//! Counted claims whose outcome is unknown, against a real server (`LEASE_TEST_NATS_URL`): the
//! coordinator reads such a claim back and adopts its permit only when the claim's "at most N"
//! rule was checked for it, and never while the claim's take-back of it may still land.
//!
//! The interleavings are built, not raced: the store under test talks to the server through
//! [`Holder`], a proxy that reads enough of the NATS protocol to hold back one chosen request
//! (the claim's create of its permit, the claim's purge that takes it back) until the test lets
//! it go, and to lose the server's answer to it. The claim itself is cut by its operation
//! timeout, as in production; a test checks by the clock it can read that the cut came after
//! what it had to follow, and builds the interleaving again with a longer timeout when not.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use lease_conformance::env;
use lease_core::backend::HolderToken;
use lease_core::backend::permits::PermitStore;
use lease_core::{Coordinator, Permits, Term, backend::permits::PermitGrant};
use lease_nats::{NatsConfig, NatsStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

/// The bucket's max age. Long, so that no permit of a test expires while it runs; the
/// coordinator's attempt timeout is a third of it (10 s), above every operation timeout tried.
const TTL: Duration = Duration::from_secs(30);

/// The operation timeouts a test builds its interleaving with, in turn: the claim must still be
/// waiting when the held request has gone through, and a slow machine gets a longer one. Both
/// cut the claim before the coordinator's attempt timeout (10 s) and async-nats's own request
/// timeout (5 s) would.
const OP_TIMEOUTS: [Duration; 2] = [Duration::from_secs(2), Duration::from_secs(4)];

/// How long a test waits for something the proxy or a task must do before it calls it stuck.
const STUCK: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The proxy

/// A client request the proxy holds back.
struct Held {
    /// The connection it came on.
    conn: u64,
    subject: String,
    reply: Option<String>,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct State {
    /// Subject prefixes of the requests to hold, in order: each one holds the first request of
    /// its prefix sent after the one before it was held.
    armed: Vec<String>,
    held: Option<Held>,
    /// Reply subjects whose answers are dropped.
    lose: HashSet<String>,
    /// The reply subject of the request last let go, and whether its answer came.
    watched: Option<String>,
    answered: Option<Instant>,
    /// Where each connection takes the requests let go, to send them on to the server.
    let_go: HashMap<u64, mpsc::UnboundedSender<Vec<u8>>>,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped on every change the test may wait for.
    changed: watch::Sender<u64>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }
}

/// A TCP proxy to the NATS server that holds back chosen requests of its clients (see the
/// module docs). Requests are forwarded in order, except the one held, which goes when let go;
/// answers are forwarded, except those to be lost.
struct Holder {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

impl Holder {
    async fn start(target: SocketAddr) -> Holder {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
        });
        let serving = shared.clone();
        tokio::spawn(async move {
            let mut conn = 0;
            while let Ok((client, _)) = listener.accept().await {
                conn += 1;
                tokio::spawn(serve(conn, client, target, serving.clone()));
            }
        });
        Holder { addr, shared }
    }

    fn url(&self) -> String {
        format!("nats://{}", self.addr)
    }

    /// Holds back the next requests to subjects starting with `prefixes`, one each, in turn.
    fn hold(&self, prefixes: &[&str]) {
        let mut st = self.shared.state();
        st.armed = prefixes.iter().map(|p| (*p).to_owned()).collect();
    }

    /// Waits until a request is held, or until `gave_up` (the claim's task) has ended:
    /// `Some(subject)` of the held request, `None` when the claim ended first.
    async fn held_unless(&self, gave_up: &tokio::task::JoinHandle<impl Send>) -> Option<String> {
        let mut changed = self.shared.changed.subscribe();
        let start = Instant::now();
        loop {
            if let Some(h) = &self.shared.state().held {
                return Some(h.subject.clone());
            }
            if gave_up.is_finished() {
                return None;
            }
            assert!(start.elapsed() < STUCK, "nothing was held within {STUCK:?}");
            let _ = tokio::time::timeout(Duration::from_millis(20), changed.changed()).await;
        }
    }

    /// Lets the held request go, its answer lost when `lose_answer`.
    fn let_go(&self, lose_answer: bool) {
        let mut st = self.shared.state();
        let held = st.held.take().expect("nothing is held");
        if let Some(reply) = &held.reply
            && lose_answer
        {
            st.lose.insert(reply.clone());
        }
        st.watched = held.reply;
        st.answered = None;
        if let Some(conn) = st.let_go.get(&held.conn) {
            let _ = conn.send(held.bytes);
        }
    }

    /// Waits until the server has answered the request let go last (forwarded or lost): it
    /// has been carried out. Returns when the answer came.
    async fn answered(&self) -> Instant {
        let mut changed = self.shared.changed.subscribe();
        tokio::time::timeout(STUCK, async {
            loop {
                if let Some(at) = self.shared.state().answered {
                    return at;
                }
                let _ = changed.changed().await;
            }
        })
        .await
        .expect("the server did not answer the request let go")
    }
}

/// A message's subject and reply subject.
type Addressed = (String, Option<String>);

/// The length of the protocol message at the start of `buf`, and for one that carries a subject
/// (`PUB`, `HPUB`, `MSG`, `HMSG`) its subject and reply subject; `None` until it is all in.
fn next_message(buf: &[u8]) -> Option<(usize, Option<Addressed>)> {
    let eol = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&buf[..eol]);
    let args: Vec<&str> = line.split_ascii_whitespace().collect();
    let op = args
        .first()
        .map(|s| s.to_ascii_uppercase())
        .unwrap_or_default();
    // Arguments after the op: subject, [sid,] [reply,] [header size,] size.
    let (reply_at, fixed) = match op.as_str() {
        "PUB" => (2, 3),
        "HPUB" => (2, 4),
        "MSG" => (3, 4),
        "HMSG" => (3, 5),
        _ => return Some((eol + 2, None)),
    };
    let size: usize = args.last()?.parse().ok()?;
    let total = eol + 2 + size + 2;
    if buf.len() < total {
        return None;
    }
    let subject = args.get(1)?.to_string();
    let reply = (args.len() == fixed + 1).then(|| args[reply_at].to_string());
    Some((total, Some((subject, reply))))
}

async fn serve(conn: u64, client: TcpStream, target: SocketAddr, shared: Arc<Shared>) {
    let Ok(server) = TcpStream::connect(target).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let (go, mut gone) = mpsc::unbounded_channel();
    shared.state().let_go.insert(conn, go);
    let up = {
        let shared = shared.clone();
        async move {
            let mut buf = Vec::new();
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                tokio::select! {
                    n = from_client.read(&mut chunk) => {
                        let n = match n {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        buf.extend_from_slice(&chunk[..n]);
                        while let Some((len, about)) = next_message(&buf) {
                            let bytes: Vec<u8> = buf.drain(..len).collect();
                            if let Some((subject, reply)) = about {
                                let mut st = shared.state();
                                let hold = st.held.is_none()
                                    && st.armed.first().is_some_and(|p| subject.starts_with(p));
                                if hold {
                                    st.armed.remove(0);
                                    st.held = Some(Held { conn, subject, reply, bytes });
                                    drop(st);
                                    shared.bump();
                                    continue;
                                }
                            }
                            if to_server.write_all(&bytes).await.is_err() {
                                return;
                            }
                        }
                    }
                    bytes = gone.recv() => {
                        let Some(bytes) = bytes else { return };
                        if to_server.write_all(&bytes).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    };
    let down = async move {
        let mut buf = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let n = match from_server.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            while let Some((len, about)) = next_message(&buf) {
                let bytes: Vec<u8> = buf.drain(..len).collect();
                let mut lost = false;
                if let Some((subject, _)) = about {
                    let mut st = shared.state();
                    lost = st.lose.remove(&subject);
                    if st.watched.as_deref() == Some(subject.as_str()) {
                        st.watched = None;
                        st.answered = Some(Instant::now());
                        drop(st);
                        shared.bump();
                    }
                }
                if !lost && to_client.write_all(&bytes).await.is_err() {
                    return;
                }
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The scenes

/// A private bucket, a store straight to the server (the other claimants) and one through a
/// [`Holder`] (the claim whose outcome is unknown), with a coordinator over it.
struct Scene {
    js: jetstream::Context,
    bucket: String,
    direct: NatsStore,
    proxy: Holder,
    coordinator: Coordinator,
    /// The subject prefix of the bucket's permit keys: a claim's create goes to one.
    permit_subjects: String,
    /// The subject of a purge request on the bucket's stream.
    purge_subject: String,
}

impl Scene {
    async fn new(what: &str, op_timeout: Duration) -> Option<Scene> {
        let url = env::server_url("nats")?;
        let client = match async_nats::connect(&url).await {
            Ok(client) => client,
            Err(e) => {
                env::skip("nats", &format!("cannot connect to {url}: {e}"));
                return None;
            }
        };
        let target = tokio::net::lookup_host(url.trim_start_matches("nats://"))
            .await
            .unwrap()
            .next()
            .unwrap();
        let bucket = format!("lease_test_{what}_{:08x}", rand::random::<u32>());
        let direct = NatsStore::connect(&url, NatsConfig::new(TTL).bucket(&bucket))
            .await
            .unwrap();
        let proxy = Holder::start(target).await;
        let through = NatsStore::connect(
            &proxy.url(),
            NatsConfig::new(TTL).bucket(&bucket).op_timeout(op_timeout),
        )
        .await
        .unwrap();
        let coordinator = Coordinator::builder(through.clone())
            .timings(through.timings().unwrap())
            .instance("unknown")
            .build()
            .unwrap();
        Some(Scene {
            js: jetstream::new(client),
            permit_subjects: format!("$KV.{bucket}.permit."),
            purge_subject: format!("$JS.API.STREAM.PURGE.KV_{bucket}"),
            bucket,
            direct,
            proxy,
            coordinator,
        })
    }

    async fn claim(&self, name: &str, permits: u32, holder: &HolderToken) -> PermitGrant {
        self.direct
            .claim_permit(name, permits, holder, "direct", TTL)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("a claim of {permits} permits was refused"))
    }

    /// The live permits of `name` by the store: (permit, term).
    async fn live(&self, name: &str) -> Vec<(u32, u64)> {
        let list = self.direct.permits(name).await.unwrap();
        list.iter()
            .filter(|p| p.live)
            .map(|p| (p.permit, p.term))
            .collect()
    }

    async fn end(self) {
        let _ = self.coordinator.close().await;
        let _ = self.js.delete_stream(format!("KV_{}", self.bucket)).await;
        let _ = self
            .js
            .delete_stream(format!("KV_{}", lease_nats::slot_bucket_for(&self.bucket)))
            .await;
    }
}

/// The coordinator's claim of one of 3 permits of `name`, in a task: it reads back on an
/// unknown outcome as every acquire does.
fn acquire(
    scene: &Scene,
    name: &str,
) -> (Instant, tokio::task::JoinHandle<lease_core::Result<Term>>) {
    let coordinator = scene.coordinator.clone();
    let target = Permits::new(name, 3).unwrap();
    let sent = Instant::now();
    (
        sent,
        tokio::spawn(async move { coordinator.try_acquire(&target).await }),
    )
}

/// While the claim's create of permit 2 is held back (its scan found permits 0 and 1 live):
/// a claim of 3 takes permit 2, a claim of 5 takes permit 3, and permit 2 is released, so that
/// permits 0, 1 and 3 are live when the create lands. Returns the claim of 5's holder token.
async fn fill_while_create_held(scene: &Scene, name: &str, held: &str) -> HolderToken {
    assert!(
        held.ends_with(".2"),
        "the held request was not the create of permit 2: {held}"
    );
    let c = HolderToken::mint();
    assert_eq!(scene.claim(name, 3, &c).await.permit, 2);
    let b = HolderToken::mint();
    assert_eq!(scene.claim(name, 5, &b).await.permit, 3);
    assert!(scene.direct.release_permit(name, 2, &c).await.unwrap());
    b
}

/// Path (a): the answer to a claim's create is lost, so the claim ends with a timeout before
/// its re-count; the create landed while permits 0, 1 and 3 (the last taken by a claim of 5,
/// after the claim of 3 had scanned) were live. The coordinator's read-back finds the permit by
/// its token; adopting it would give a claim of 3 a fourth live permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_create_answer_is_lost_is_not_adopted_over_its_count() {
    for op_timeout in OP_TIMEOUTS {
        let Some(scene) = Scene::new("lost_create", op_timeout).await else {
            return;
        };
        let name = "reports";
        assert_eq!(scene.claim(name, 3, &HolderToken::mint()).await.permit, 0);
        assert_eq!(scene.claim(name, 3, &HolderToken::mint()).await.permit, 1);
        scene.proxy.hold(&[&scene.permit_subjects]);
        let (sent, claim) = acquire(&scene, name);
        let Some(held) = scene.proxy.held_unless(&claim).await else {
            panic!(
                "the claim ended before it sent its create: {:?}",
                claim.await
            );
        };
        fill_while_create_held(&scene, name, &held).await;
        scene.proxy.let_go(true);
        let landed = scene.proxy.answered().await;
        // The claim's operation timeout started after `sent`: if the create was answered
        // before `sent + op_timeout`, the claim was still waiting for that answer (which was
        // lost) and reads back only after the create landed.
        if landed >= sent + op_timeout {
            eprintln!("the create landed after {op_timeout:?}: building it again, longer");
            let _ = claim.await;
            scene.end().await;
            continue;
        }
        let live = scene.live(name).await;
        assert_eq!(
            live.iter().map(|p| p.0).collect::<Vec<_>>(),
            [0, 1, 2, 3],
            "the lost create did not land beside permits 0, 1 and 3"
        );
        let outcome = tokio::time::timeout(STUCK, claim).await.unwrap().unwrap();
        if let Ok(term) = &outcome {
            panic!(
                "a claim of 3 permits whose create's answer was lost was adopted on permit {:?} \
                 (term {}) while permits 0, 1 and 3 were live: 4 live permits of a claim of 3 \
                 ({live:?})",
                term.permit(),
                term.token()
            );
        }
        let e = outcome.err().unwrap();
        assert!(e.is_temporary(), "not an unknown outcome: {e}");
        // The permit is left to expire under a token nobody uses.
        assert_eq!(scene.live(name).await, live);
        scene.end().await;
        return;
    }
    panic!("the interleaving could not be built within the longest operation timeout");
}

/// Path (b): a claim's re-count finds 3 others live (a claim of 5 took permit 3 after its scan)
/// and sends the purge that takes its permit back, but the purge is held back and the claim ends
/// with a timeout; meanwhile permit 3 is released, so a re-count at the read-back finds room.
/// Whatever the read-back decides, the purge that lands after it must not take the permit from
/// under an adopted term: two holders of permit 2 at once, the first learning of it only at
/// its next renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_back_cut_short_never_leaves_two_holders_of_a_permit() {
    for op_timeout in OP_TIMEOUTS {
        let Some(scene) = Scene::new("cut_purge", op_timeout).await else {
            return;
        };
        let name = "reports";
        assert_eq!(scene.claim(name, 3, &HolderToken::mint()).await.permit, 0);
        assert_eq!(scene.claim(name, 3, &HolderToken::mint()).await.permit, 1);
        scene
            .proxy
            .hold(&[&scene.permit_subjects, &scene.purge_subject]);
        let (sent, claim) = acquire(&scene, name);
        let Some(held) = scene.proxy.held_unless(&claim).await else {
            panic!(
                "the claim ended before it sent its create: {:?}",
                claim.await
            );
        };
        let b = fill_while_create_held(&scene, name, &held).await;
        scene.proxy.let_go(false);
        let Some(purge) = scene.proxy.held_unless(&claim).await else {
            eprintln!("the claim ended before its take-back: building it again, longer");
            let _ = claim.await;
            scene.end().await;
            continue;
        };
        assert_eq!(purge, scene.purge_subject);
        assert!(scene.direct.release_permit(name, 3, &b).await.unwrap());
        // The read-back starts when the claim's timeout cuts it, after `sent + op_timeout`.
        if Instant::now() >= sent + op_timeout {
            eprintln!("permit 3 was released after {op_timeout:?}: building it again, longer");
            scene.proxy.let_go(false);
            let _ = claim.await;
            scene.end().await;
            continue;
        }
        let outcome = tokio::time::timeout(STUCK, claim).await.unwrap().unwrap();
        // The take-back lands now, after the read-back.
        scene.proxy.let_go(false);
        scene.proxy.answered().await;
        let live = scene.live(name).await;
        if let Ok(term) = &outcome {
            let d = HolderToken::mint();
            let next = scene.claim(name, 5, &d).await;
            assert!(
                next.permit != 2 || term.is_lost(),
                "two holders of permit 2 at once: the read-back adopted it (term {}), then the \
                 claim's take-back purge landed and a claim of 5 was granted permit 2 (term {}); \
                 live before that claim: {live:?}",
                term.token(),
                next.grant.term
            );
            assert!(
                live.contains(&(2, term.token())),
                "the adopted permit 2 (term {}) is gone from the store: {live:?}",
                term.token()
            );
            let v = scene
                .direct
                .verify_permit(name, term.holder())
                .await
                .unwrap()
                .map(|g| (g.permit, g.grant.term));
            assert_eq!(
                v,
                Some((2, term.token())),
                "the adopted term does not verify"
            );
            let _ = term.resign().await;
        }
        eprintln!(
            "the claim cut short during its take-back: {}",
            match &outcome {
                Ok(t) => format!("adopted on permit {:?} (term {})", t.permit(), t.token()),
                Err(e) => format!("not adopted: {e}"),
            }
        );
        scene.end().await;
        return;
    }
    panic!("the interleaving could not be built within the longest operation timeout");
}
