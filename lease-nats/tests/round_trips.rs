//! Round trips per operation, counted twice: on the wire by a proxy in front of the server
//! (`stats().round_trips`), and by the server itself — the stream's last sequence (one per
//! message stored) and the account's JetStream API counter (`$JS.API.INFO`, `api.total`: purges
//! and stream look-ups count, direct gets and publishes do not).
//!
//! One test in its own binary, on a private bucket, so no other test's traffic shows in the
//! server's counters.
//!
//! A store that purged a lease also publishes the key on the hint subject (`_LEASE_HINTS.<bucket>`,
//! see the crate docs, *Hints*), fire and forget, on its listener's client. The stores' listeners
//! run on a client of their own, straight to the server, and are connected before any count: so
//! the proxy sees exactly the exchanges each operation waits for, and the test's own subscriber
//! counts the hints (the releases assert how many there were). Hints sent through the proxy on
//! the stores' own clients would count one exchange more or not, as async-nats flushed them
//! alone or with the next request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;

use async_nats::jetstream;
use lease_conformance::{FaultProxy, env};
use lease_core::backend::permits::PermitStore;
use lease_core::{
    LeaseStore,
    backend::{
        HolderToken,
        membership::MembershipStore,
        partitions::PartitionStore,
        slots::{SlotClaim, SlotStore},
    },
};
use lease_nats::{NatsConfig, NatsStore};

const TTL: Duration = Duration::from_secs(5);
/// When nats-server's first PING to a new client has surely come and been answered: it sends
/// it 2 s after the client connects.
const FIRST_PING: Duration = Duration::from_millis(2_500);

/// What the server says: (JetStream API requests so far, the stream's last sequence, the
/// messages it holds).
struct Server {
    client: async_nats::Client,
    js: jetstream::Context,
    stream: String,
    /// Hints heard on the bucket's hint subject so far.
    hints: Arc<AtomicU64>,
    /// Hints heard during the last [`cost`].
    last_hints: AtomicU64,
    /// The stores behind the proxy, each opening a [`cost`] with a read of its own.
    openers: std::sync::Mutex<Vec<NatsStore>>,
}

impl Server {
    /// Hints heard during the last [`cost`].
    fn hinted(&self) -> u64 {
        self.last_hints.load(Ordering::SeqCst)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    api: u64,
    last_seq: u64,
    messages: u64,
}

impl Server {
    async fn counts(&self) -> Counts {
        // `$JS.API.INFO` counts itself; the stream look-up after it counts once more.
        let reply = self
            .client
            .request("$JS.API.INFO", "".into())
            .await
            .unwrap();
        let info: serde_json::Value = serde_json::from_slice(&reply.payload).unwrap();
        let api = info["api"]["total"].as_u64().expect("api.total");
        let state = self
            .js
            .get_stream(&self.stream)
            .await
            .unwrap()
            .cached_info()
            .state
            .clone();
        Counts {
            api,
            last_seq: state.last_sequence,
            messages: state.messages,
        }
    }
}

/// What one operation cost: (round trips on the wire, messages stored, API requests).
async fn cost<T>(
    proxy: &FaultProxy,
    server: &Server,
    op: impl std::future::Future<Output = T>,
) -> ((u64, u64, u64), T) {
    let before = server.counts().await;
    // Every connection through the proxy starts the count answered: a read each.
    let openers = server.openers.lock().unwrap().clone();
    for s in &openers {
        s.get("warm").await.unwrap();
    }
    let hints_before = server.hints.load(Ordering::SeqCst);
    proxy.reset_stats();
    let out = op.await;
    let trips = proxy.stats().round_trips;
    let after = server.counts().await;
    // Let a hint published at the operation's end reach the subscriber.
    tokio::time::sleep(Duration::from_millis(30)).await;
    let hinted = server.hints.load(Ordering::SeqCst) - hints_before;
    server.last_hints.store(hinted, Ordering::SeqCst);
    let api = after.api - before.api - 2; // the INFO and stream look-up of `counts`
    ((trips, after.last_seq - before.last_seq, api), out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_costs_what_the_docs_say() {
    let Some(url) = env::server_url("nats") else {
        return;
    };
    let bucket = format!("lease_test_rt_{:08x}", rand::random::<u32>());
    let config = NatsConfig::new(TTL).bucket(&bucket);
    let direct = match NatsStore::connect(&url, config.clone()).await {
        Ok(s) => s,
        Err(e) => {
            env::skip("nats", &format!("cannot open a store at {url}: {e}"));
            return;
        }
    };
    let client = async_nats::connect(&url).await.unwrap();
    let hints = Arc::new(AtomicU64::new(0));
    let mut heard = client
        .subscribe(format!("_LEASE_HINTS.{bucket}"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let counted = Arc::clone(&hints);
    tokio::spawn(async move {
        while heard.next().await.is_some() {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });
    let server = Server {
        js: jetstream::new(client.clone()),
        client,
        stream: format!("KV_{bucket}"),
        hints,
        last_hints: AtomicU64::new(0),
        openers: std::sync::Mutex::new(Vec::new()),
    };
    let proxy = FaultProxy::start(direct.server().to_owned()).await.unwrap();
    let via = format!("nats://{}", proxy.local_addr());
    // The stores' listeners (their KV watches and release hints) run straight to the server:
    // the proxy then counts only the stores' requests.
    let listening = |s: NatsStore| {
        let client = server.client.clone();
        async move { s.with_listener_client(client).await.unwrap() }
    };
    let connected = std::time::Instant::now();
    let store = listening(NatsStore::connect(&via, config.clone()).await.unwrap()).await;
    let other = listening(NatsStore::connect(&via, config.clone()).await.unwrap()).await;
    let third = listening(NatsStore::connect(&via, config).await.unwrap()).await;
    *server.openers.lock().unwrap() = vec![store.clone(), other.clone(), third.clone()];
    // Warm the connections; wait for the listeners.
    for s in [&store, &other, &third] {
        s.get("warm").await.unwrap();
        let mut w = s
            .changes(&lease_core::backend::notify::Topic::lease("warm"))
            .unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !w.is_connected() {
            assert!(std::time::Instant::now() < until, "listener not connected");
            let _ = tokio::time::timeout(Duration::from_millis(20), w.changed()).await;
        }
    }
    // nats-server PINGs a new client 2 s after it connects (then every 2 minutes), and the
    // client's PONG is one more exchange on the wire: past that first PING, no count catches
    // one (the counts that follow take about 2.5 s).
    tokio::time::sleep(FIRST_PING.saturating_sub(connected.elapsed())).await;

    let a = HolderToken::mint();
    let b = HolderToken::mint();

    let (c, g) = cost(&proxy, &server, store.claim("n", &a, "a", TTL)).await;
    let term = g.unwrap().unwrap().term;
    assert_eq!(c, (1, 1, 0), "claim of a free name");
    let (c, g) = cost(&proxy, &server, store.claim("n", &b, "b", TTL)).await;
    assert_eq!(g.unwrap(), None);
    assert_eq!(c, (1, 0, 0), "claim of a held name");
    let (c, g) = cost(&proxy, &server, store.renew("n", &a, TTL)).await;
    assert_eq!(g.unwrap().unwrap().term, term);
    assert_eq!(c, (1, 1, 0), "renew");
    let (c, g) = cost(&proxy, &server, store.verify("n", &a)).await;
    assert_eq!(g.unwrap().unwrap().term, term);
    assert_eq!(c, (1, 0, 0), "verify");
    let (c, g) = cost(&proxy, &server, store.get("n")).await;
    assert!(g.unwrap().unwrap().live);
    assert_eq!(c, (1, 0, 0), "get");
    let (c, g) = cost(&proxy, &server, store.release("n", &a)).await;
    assert!(g.unwrap());
    assert_eq!(c, (1, 0, 1), "release: one purge");
    assert_eq!(server.hinted(), 1, "release: one hint");
    assert_eq!(
        server.counts().await.messages,
        0,
        "a released lease leaves no message"
    );

    // A claim over a released name is a plain create: the key is gone.
    let (c, g) = cost(&proxy, &server, store.claim("n", &b, "b", TTL)).await;
    assert!(g.unwrap().unwrap().term > term);
    assert_eq!(c, (1, 1, 0), "claim over a released name");

    // A store that did not write the lease reads it first.
    let (c, g) = cost(&proxy, &server, other.renew("n", &b, TTL)).await;
    assert!(g.unwrap().is_some());
    assert_eq!(c, (2, 1, 0), "renew by another store object: get + update");
    // A store whose last write was superseded misses, reads, and writes again.
    let (c, g) = cost(&proxy, &server, store.renew("n", &b, TTL)).await;
    assert!(g.unwrap().is_some());
    assert_eq!(
        c,
        (3, 1, 0),
        "renew after another store renewed: update, get, update"
    );
    let (c, g) = cost(&proxy, &server, other.release("n", &a)).await;
    assert!(!g.unwrap());
    assert_eq!(c, (1, 0, 0), "release by a non-holder: get");
    assert_eq!(server.hinted(), 0, "release by a non-holder: no hint");
    let (c, g) = cost(&proxy, &server, third.release("n", &b)).await;
    assert!(g.unwrap());
    assert_eq!(c, (2, 0, 1), "release by another store object: get + purge");
    let (c, g) = cost(&proxy, &server, third.release("n", &b)).await;
    assert!(!g.unwrap());
    assert_eq!(c, (1, 0, 0), "a second release: get");

    // The cycle the protocol runs most: claim + release.
    for _ in 0..3 {
        let (c, _) = cost(&proxy, &server, async {
            assert!(store.claim("cycle", &a, "a", TTL).await.unwrap().is_some());
            assert!(store.release("cycle", &a).await.unwrap());
        })
        .await;
        assert_eq!(c, (2, 1, 1), "claim + release");
        assert_eq!(
            server.hinted(),
            1,
            "claim + release: one hint (the claim's is the watch's)"
        );
    }

    store.claim("f", &a, "a", TTL).await.unwrap().unwrap();
    let (c, g) = cost(&proxy, &server, other.force_release("f")).await;
    assert!(g.unwrap());
    assert_eq!(c, (2, 0, 1), "force release: get + purge");
    assert_eq!(server.hinted(), 1, "force release: one hint");

    // For contrast: the KV API's own create over a deleted key, which this store avoids by
    // releasing with a purge instead of a delete marker.
    let kv = jetstream::new(async_nats::connect(&via).await.unwrap())
        .get_key_value(&bucket)
        .await
        .unwrap();
    kv.put("kv", "v".into()).await.unwrap();
    kv.delete("kv").await.unwrap();
    let (c, _) = cost(&proxy, &server, async {
        kv.create("kv", "v".into()).await.unwrap()
    })
    .await;
    assert_eq!(
        c,
        (3, 1, 0),
        "KV create over a delete marker: update, get, update"
    );

    renew_many_costs_what_the_docs_say(&proxy, &server, &store, &other).await;
    groups_cost_what_the_docs_say(&proxy, &server, &store, &other).await;
    permits_cost_what_the_docs_say(&proxy, &server, &store).await;
    slots_cost_what_the_docs_say(&proxy, &server, &store, &other, store.slot_bucket()).await;

    let _ = server.js.delete_stream(&server.stream).await;
    let _ = server
        .js
        .delete_stream(format!("KV_{}", store.slot_bucket()))
        .await;
}

/// What a slot operation cost: (round trips on the wire, messages stored in the lease bucket,
/// messages stored in the slot bucket, API requests).
async fn slot_cost<T>(
    proxy: &FaultProxy,
    server: &Server,
    slot_bucket: &str,
    op: impl std::future::Future<Output = T>,
) -> ((u64, u64, u64, u64), T) {
    let stream = format!("KV_{slot_bucket}");
    let last = || async {
        server
            .js
            .get_stream(&stream)
            .await
            .unwrap()
            .cached_info()
            .state
            .last_sequence
    };
    let before = last().await;
    let ((trips, stored, api), out) = cost(proxy, server, op).await;
    let slots = last().await - before;
    ((trips, stored, slots, api), out)
}

/// Scheduler slots, as the crate docs' table says. `store` and `other` are two store objects
/// through the proxy. The operations that read the lease and the record together send two
/// direct gets at once, which cost one or two round trips on the wire.
async fn slots_cost_what_the_docs_say(
    proxy: &FaultProxy,
    server: &Server,
    store: &NatsStore,
    other: &NatsStore,
    slots: &str,
) {
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let (c, g) = slot_cost(proxy, server, slots, store.last_slot("job")).await;
    assert_eq!(g.unwrap(), None);
    assert_eq!(c, (1, 0, 0, 0), "last slot of a job that never ran: a get");

    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        store.claim_slot("job", &a, "a", TTL, i64::MAX / 4),
    )
    .await;
    let SlotClaim::Early { now_ms } = g.unwrap() else {
        panic!("a far-future instant was not early")
    };
    assert_eq!(
        c,
        (4, 1, 0, 1),
        "early: get record, create lease, get its stamp, purge it"
    );
    let at = now_ms - 10_000;
    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        store.claim_slot("job", &a, "a", TTL, at),
    )
    .await;
    assert!(matches!(g.unwrap(), SlotClaim::Claimed { .. }));
    assert_eq!(
        c,
        (4, 1, 1, 0),
        "claimed: get record, create lease, get its stamp, write record"
    );
    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        other.claim_slot("job", &b, "b", TTL, at + 1),
    )
    .await;
    assert_eq!(g.unwrap(), SlotClaim::Held);
    assert_eq!(c, (2, 0, 0, 0), "held: get record, a create that fails");
    let (c, g) = slot_cost(proxy, server, slots, store.verify("job", &a)).await;
    assert!(g.unwrap().is_some());
    assert_eq!(
        c,
        (2, 0, 0, 0),
        "verify of a job's lease: get lease, get record"
    );
    let (c, g) = slot_cost(proxy, server, slots, store.finish_slot("job", &a, at, None)).await;
    let f = g.unwrap();
    assert!(f.recorded && f.released, "{f:?}");
    let (trips, lease, slot, api) = c;
    assert_eq!(
        (lease, slot, api),
        (0, 1, 1),
        "finish: a record write and a purge"
    );
    assert!(
        (3..=4).contains(&trips),
        "finish: gets of lease and record together, write record, purge; took {trips}"
    );
    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        other.claim_slot("job", &b, "b", TTL, at),
    )
    .await;
    assert_eq!(g.unwrap(), SlotClaim::Taken { last_ms: at });
    assert_eq!(c, (1, 0, 0, 0), "taken: get record");

    // A finish whose `passed` is later than the lease's stamp renews it for a fresh one.
    let at2 = at + 1_000;
    other.claim_slot("job", &b, "b", TTL, at2).await.unwrap();
    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        other.finish_slot("job", &b, at2, Some(now_ms + 3_600_000)),
    )
    .await;
    let f = g.unwrap();
    assert!(f.recorded && !f.passed_taken && f.released, "{f:?}");
    let (trips, lease, slot, api) = c;
    assert_eq!(
        (lease, slot, api),
        (1, 1, 1),
        "finish with a fresh stamp: a renewal, a record write, a purge"
    );
    assert!(
        (5..=6).contains(&trips),
        "finish with a fresh stamp: gets together, renew, get, write record, purge; took {trips}"
    );

    // A round cut short: unfinished, then its one rerun.
    let at3 = at + 2_000;
    store.claim_slot("cut", &a, "a", TTL, at3).await.unwrap();
    store.force_release("cut").await.unwrap();
    let names: Vec<String> = ["cut", "job", "never"].map(String::from).to_vec();
    let (c, g) = slot_cost(proxy, server, slots, other.unfinished(&names)).await;
    assert_eq!(g.unwrap(), vec![("cut".to_string(), at3)]);
    let (trips, lease, slot, api) = c;
    assert_eq!(
        (lease, slot, api),
        (0, 0, 0),
        "unfinished: direct gets only"
    );
    assert!(
        (1..=6).contains(&trips),
        "unfinished: 6 gets in one burst; took {trips}"
    );
    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        other.claim_rerun("cut", &b, "b", TTL, at3),
    )
    .await;
    assert!(g.unwrap().is_some());
    assert_eq!(
        c,
        (3, 1, 1, 0),
        "rerun: get record, create lease, write record"
    );
    let (c, g) = slot_cost(
        proxy,
        server,
        slots,
        store.claim_rerun("cut", &a, "a", TTL, at3),
    )
    .await;
    assert_eq!(g.unwrap(), None);
    assert_eq!(c, (1, 0, 0, 0), "a second rerun: get record");
    other.finish_slot("cut", &b, at3, None).await.unwrap();
}

/// Partitions and membership. `store` and `other` are two store objects through the proxy.
///
/// Batch operations send one request per partition, pipelined: the server's counters say how
/// many requests of each kind went out, and the proxy shows that they did not wait for each
/// other (far fewer round trips than requests; how few depends on how the client's writes and
/// the server's answers interleave, so only a bound is asserted).
/// `renew_many`: one compare-and-set per name, pipelined (with the `renew_partitions` burst's
/// bound of two requests per round trip at most); by a store object that did not write the
/// keys last, pipelined gets first. A name of another holder is answered `None` and not
/// written; with the trait's default loop each name was a round trip of its own.
async fn renew_many_costs_what_the_docs_say(
    proxy: &FaultProxy,
    server: &Server,
    store: &NatsStore,
    other: &NatsStore,
) {
    use lease_core::backend::RenewItem;
    const N: usize = 100;
    assert!(store.capabilities().renew_many);
    let (a, b) = (HolderToken::mint(), HolderToken::mint());
    let names: Vec<String> = (0..N).map(|i| format!("many-{i}")).collect();
    let mut terms = Vec::new();
    for name in &names {
        terms.push(store.claim(name, &a, "a", TTL).await.unwrap().unwrap().term);
    }
    store
        .claim("many-theirs", &b, "b", TTL)
        .await
        .unwrap()
        .unwrap();
    let mut items: Vec<RenewItem<'_>> = names
        .iter()
        .map(|name| RenewItem { name, holder: &a })
        .collect();
    items.push(RenewItem {
        name: "many-theirs",
        holder: &a,
    });
    let pipelined = |what: &str, trips: u64, requests: u64| {
        eprintln!("{what}: {requests} requests in {trips} round trips");
        assert!(
            trips > 0 && 2 * trips <= requests,
            "{what}: {requests} requests took {trips} round trips: not pipelined"
        );
    };
    let check = |answers: Vec<lease_core::Result<Option<lease_core::backend::Grant>>>| {
        assert_eq!(answers.len(), N + 1);
        for (i, term) in terms.iter().enumerate() {
            let grant = answers[i]
                .as_ref()
                .unwrap()
                .expect("a held name is renewed");
            assert_eq!(grant.term, *term, "{}", names[i]);
        }
        assert_eq!(answers[N].as_ref().unwrap(), &None, "another holder's name");
    };

    // `store` made every key's last write but the other holder's: updates, and one get.
    let (c, g) = cost(proxy, server, store.renew_many(&items, TTL)).await;
    check(g.unwrap());
    let (trips, stored, api) = c;
    assert_eq!((stored, api), (N as u64, 0), "one update per held name");
    pipelined("renew_many, revisions known", trips, N as u64 + 1);
    // `other` knows none: pipelined gets, then pipelined updates.
    let (c, g) = cost(proxy, server, other.renew_many(&items, TTL)).await;
    check(g.unwrap());
    let (trips, stored, api) = c;
    assert_eq!((stored, api), (N as u64, 0), "one update per held name");
    pipelined("renew_many, revisions unknown", trips, 2 * N as u64 + 1);
    // `store`'s revisions are stale now: updates that miss, gets, updates.
    let (c, g) = cost(proxy, server, store.renew_many(&items, TTL)).await;
    check(g.unwrap());
    let (trips, stored, _) = c;
    assert_eq!(stored, N as u64, "one update per held name");
    pipelined("renew_many, revisions stale", trips, 3 * N as u64 + 1);
    for name in names.iter().map(String::as_str).chain(["many-theirs"]) {
        store.force_release(name).await.unwrap();
    }
}

async fn groups_cost_what_the_docs_say(
    proxy: &FaultProxy,
    server: &Server,
    store: &NatsStore,
    other: &NatsStore,
) {
    let (a, b) = ("node-a@1", "node-b@1");

    let (c, g) = cost(proxy, server, store.acquire_partition("g", 0, a, TTL)).await;
    let first = g.unwrap().unwrap();
    assert_eq!(c, (1, 1, 0), "acquire of a free partition: a create");
    let (c, g) = cost(proxy, server, store.acquire_partition("g", 0, a, TTL)).await;
    assert_eq!(g.unwrap().unwrap().epoch, first.epoch);
    assert_eq!(
        c,
        (1, 1, 0),
        "re-acquire of the owner's live lease: an update"
    );
    let (c, g) = cost(proxy, server, other.acquire_partition("g", 0, b, TTL)).await;
    assert_eq!(g.unwrap(), None);
    assert_eq!(c, (2, 0, 0), "acquire of a held partition: create, get");
    let (c, g) = cost(proxy, server, other.acquire_partition("g", 0, a, TTL)).await;
    assert_eq!(g.unwrap().unwrap().epoch, first.epoch);
    assert_eq!(
        c,
        (3, 1, 0),
        "re-acquire through another store object: create, get, update"
    );

    let (c, g) = cost(proxy, server, store.renew_partitions("g", &[], a, TTL)).await;
    assert!(g.unwrap().is_empty());
    assert_eq!(c, (0, 0, 0), "an empty renewal does no I/O");
    let (c, g) = cost(proxy, server, other.renew_partitions("g", &[0, 0], a, TTL)).await;
    assert_eq!(g.unwrap().len(), 1);
    assert_eq!(c, (1, 1, 0), "renewal of one known partition: an update");
    let (c, g) = cost(proxy, server, store.renew_partitions("g", &[0], a, TTL)).await;
    assert_eq!(g.unwrap().len(), 1);
    assert_eq!(
        c,
        (3, 1, 0),
        "renewal after another store object renewed: update, get, update"
    );

    const N: u32 = 100;
    let all: Vec<u32> = (0..N).collect();
    let half = usize::try_from(N / 2).unwrap();
    for &p in &all[1..] {
        store
            .acquire_partition("g", p, a, TTL)
            .await
            .unwrap()
            .unwrap();
    }
    let pipelined = |what: &str, trips: u64, requests: u64| {
        eprintln!("{what}: {requests} requests in {trips} round trips");
        assert!(
            trips > 0 && 2 * trips <= requests,
            "{what}: {requests} requests took {trips} round trips: not pipelined"
        );
    };

    // `other` knows none of these revisions: pipelined gets, then pipelined updates.
    let (c, g) = cost(proxy, server, other.renew_partitions("g", &all, a, TTL)).await;
    assert_eq!(g.unwrap().len(), all.len());
    let (trips, stored, api) = c;
    assert_eq!((stored, api), (u64::from(N), 0), "one update per partition");
    pipelined("renewal, revisions unknown", trips, 2 * u64::from(N));
    // Now it knows them: pipelined updates alone.
    let (c, g) = cost(proxy, server, other.renew_partitions("g", &all, a, TTL)).await;
    assert_eq!(g.unwrap().len(), all.len());
    let (trips, stored, api) = c;
    assert_eq!((stored, api), (u64::from(N), 0));
    pipelined("renewal, revisions known", trips, u64::from(N));
    let (c, g) = cost(proxy, server, store.renew_partitions("g", &all, b, TTL)).await;
    assert!(g.unwrap().is_empty());
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, 0),
        "a non-owner's renewal writes nothing"
    );
    pipelined("renewal by a non-owner", trips, u64::from(N));

    let (c, g) = cost(proxy, server, store.owners("g")).await;
    assert_eq!(g.unwrap().len(), all.len());
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, 1),
        "owners: one STREAM.INFO, then direct gets"
    );
    pipelined("owners", trips, 1 + u64::from(N));
    let (c, g) = cost(proxy, server, store.owners("nothing-here")).await;
    assert!(g.unwrap().is_empty());
    assert_eq!(c, (1, 0, 1), "owners of an empty group: the listing alone");

    // `store`'s remembered revisions are stale (`other` renewed last): purges that miss, then
    // gets, then purges.
    let (c, g) = cost(
        proxy,
        server,
        store.release_partitions("g", &all[..half], a),
    )
    .await;
    assert_eq!(g.unwrap(), half);
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, u64::from(N)),
        "purges that missed, purges that hit"
    );
    pipelined("release, revisions stale", trips, 3 * u64::from(N) / 2);
    let (c, g) = cost(
        proxy,
        server,
        other.release_partitions("g", &all[half..], a),
    )
    .await;
    assert_eq!(g.unwrap(), half);
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, u64::from(N) / 2),
        "one purge per partition"
    );
    pipelined("release, revisions known", trips, u64::from(N) / 2);
    let (c, g) = cost(proxy, server, store.release_partitions("g", &all, a)).await;
    assert_eq!(g.unwrap(), 0);
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, u64::from(N) / 2),
        "nothing live: purges at the revisions `store` still remembers (which miss), then gets"
    );
    pipelined("release of nothing", trips, 3 * u64::from(N) / 2);
    let (c, g) = cost(proxy, server, store.release_partitions("g", &all, a)).await;
    assert_eq!(g.unwrap(), 0);
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, 0),
        "nothing live, nothing remembered: gets only"
    );
    pipelined("release of nothing, again", trips, u64::from(N));
    assert!(
        store.owners("g").await.unwrap().is_empty(),
        "released leases leave no record"
    );

    let (c, g) = cost(proxy, server, store.acquire_partition("g", 0, b, TTL)).await;
    assert!(g.unwrap().unwrap().epoch > first.epoch);
    assert_eq!(c, (1, 1, 0), "acquire of a released partition: a create");
    let (c, g) = cost(proxy, server, store.release_partitions("g", &[0], b)).await;
    assert_eq!(g.unwrap(), 1);
    assert_eq!(c, (1, 0, 1), "release of one known partition: a purge");

    let groups = vec!["g".to_string()];
    let (c, g) = cost(
        proxy,
        server,
        store.heartbeat("svc", "n1", "10.0.0.1:1", TTL, &groups),
    )
    .await;
    g.unwrap();
    assert_eq!(c, (1, 1, 0), "heartbeat: a put");
    other.heartbeat("svc", "n2", "", TTL, &[]).await.unwrap();
    let (c, g) = cost(proxy, server, other.members("svc")).await;
    assert_eq!(g.unwrap().len(), 2);
    let (trips, stored, api) = c;
    assert_eq!(
        (stored, api),
        (0, 1),
        "members: one STREAM.INFO, then direct gets"
    );
    assert!(
        (2..=3).contains(&trips),
        "members: the listing, then 2 pipelined gets; took {trips}"
    );
    let (c, g) = cost(proxy, server, store.members("nobody")).await;
    assert!(g.unwrap().is_empty());
    assert_eq!(
        c,
        (1, 0, 1),
        "members of an empty service: the listing alone"
    );
    let (c, g) = cost(proxy, server, store.leave("svc", "n2")).await;
    assert!(g.unwrap());
    assert_eq!(c, (1, 0, 1), "leave: a purge");
    let (c, g) = cost(proxy, server, store.leave("svc", "n2")).await;
    assert!(!g.unwrap());
    assert_eq!(c, (1, 0, 1), "a second leave: a purge that finds nothing");
    store.leave("svc", "n1").await.unwrap();
}

/// Counted leases: a scan is one `STREAM.INFO` (an API request) and one burst of direct gets (none
/// when the name has no permit key); a claim adds one create; renew and release read the permit's
/// key, then update or purge it; the read-back of a claim adds an update to a scan. A burst of two
/// gets is one exchange on the wire or two, as the answers interleave with the requests (see the
/// crate docs, *Partitions*): the round trips of a scan over two keys are asserted as 2 or 3.
async fn permits_cost_what_the_docs_say(proxy: &FaultProxy, server: &Server, store: &NatsStore) {
    let (a, b, c) = (
        HolderToken::mint(),
        HolderToken::mint(),
        HolderToken::mint(),
    );
    // (round trips at least, at most), messages stored, API requests.
    let check = |what: &str, (trips, stored, api): (u64, u64, u64), want: (u64, u64, u64, u64)| {
        let (least, most, want_stored, want_api) = want;
        assert!(
            (least..=most).contains(&trips) && (stored, api) == (want_stored, want_api),
            "{what}: {trips} round trips, {stored} messages, {api} API requests; \
             want {least}..={most}, {want_stored}, {want_api}"
        );
    };
    let (cost_of, g) = cost(proxy, server, store.claim_permit("p", 2, &a, "a", TTL)).await;
    let first = g.unwrap().unwrap();
    assert_eq!(first.permit, 0);
    check(
        "claim of a name with no permit: list + create + the re-count's list",
        cost_of,
        (3, 3, 1, 2),
    );
    let (cost_of, g) = cost(proxy, server, store.claim_permit("p", 2, &b, "b", TTL)).await;
    assert_eq!(g.unwrap().unwrap().permit, 1);
    check(
        "claim beside a live permit: list + get + create + the re-count's list",
        cost_of,
        (4, 4, 1, 2),
    );
    let (cost_of, g) = cost(proxy, server, store.claim_permit("p", 2, &c, "c", TTL)).await;
    assert_eq!(g.unwrap(), None);
    check("claim of a full name: list + 2 gets", cost_of, (2, 3, 0, 1));
    let (cost_of, g) = cost(proxy, server, store.renew_permit("p", 0, &a, TTL)).await;
    assert_eq!(g.unwrap().unwrap().term, first.grant.term);
    check("renew_permit: get + update", cost_of, (2, 2, 1, 0));
    let (cost_of, g) = cost(proxy, server, store.verify_permit("p", &a)).await;
    assert_eq!(g.unwrap().unwrap().permit, 0);
    check("verify_permit: list + 2 gets", cost_of, (2, 3, 0, 1));
    // The read-back after a claim whose outcome is unknown: the scan, then an update that adopts
    // the permit (the term kept); with too many others live, the scan alone.
    let (cost_of, g) = cost(proxy, server, store.read_back_permit("p", 2, &a)).await;
    assert_eq!(g.unwrap().unwrap().grant.term, first.grant.term);
    check(
        "read_back_permit: list + 2 gets + update",
        cost_of,
        (3, 4, 1, 1),
    );
    let (cost_of, g) = cost(proxy, server, store.read_back_permit("p", 1, &a)).await;
    assert_eq!(g.unwrap(), None);
    check(
        "read_back_permit over its count: list + 2 gets",
        cost_of,
        (2, 3, 0, 1),
    );
    let (cost_of, g) = cost(proxy, server, store.permits("p")).await;
    assert_eq!(g.unwrap().len(), 2);
    check("permits: list + 2 gets", cost_of, (2, 3, 0, 1));
    let (cost_of, g) = cost(proxy, server, store.release_permit("p", 0, &a)).await;
    assert!(g.unwrap());
    check("release_permit: get + purge", cost_of, (2, 2, 0, 1));
    assert_eq!(server.hinted(), 1, "release_permit: one hint");
    assert!(store.release_permit("p", 1, &b).await.unwrap());
}
