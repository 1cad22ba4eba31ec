//! The sessions: one etcd lease per TTL (in whole seconds) per store object, which the lease
//! keys of every claim through the store hang on, whatever its holder token (see the crate
//! docs, *Sessions*).
//!
//! A session remembers the names it carries (`owned`: term and the name's own deadline) and the
//! keys whose term ended but which may still hang on it (`doomed`: a release that failed, a term
//! whose own deadline passed without a renewal). Every keep-alive of a session is a *flight*:
//! one keep-alive, one batched read of the names that asked to be checked, and the deletes of
//! the doomed keys, sent together; concurrent callers join the flight that has not left yet, and
//! at most one flight per session is in the air.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse};
use futures::future::{BoxFuture, FutureExt, Shared, join_all};
use lease_core::backend::HolderToken;
use lease_core::backend::clock::{Deadline, Stamp};
use lease_core::layer::Operation;
use lease_core::{Error, ErrorKind, Result};

use crate::error::Site;
use crate::leases::held_by;
use crate::store::{EtcdStore, Inner, lock, server_seconds};

/// How many names one session carries at most; the next claim opens a new session.
pub(crate) const MAX_KEYS_PER_SESSION: usize = 10_000;

/// How much of a session's last proof must be left for a claim to attach to it (at most a
/// quarter of its TTL).
const FRESH_MARGIN: Duration = Duration::from_secs(1);

/// What a flight answers every caller that joined it.
pub(crate) type FlightResult = std::result::Result<Arc<Flown>, Error>;

/// A flight, shared by the callers that joined it: whoever still waits drives it.
pub(crate) type Flight = Shared<BoxFuture<'static, FlightResult>>;

/// What one flight found.
#[derive(Debug)]
pub(crate) struct Flown {
    /// Taken before the keep-alive was sent: the session lives at least its TTL from here.
    pub(crate) stamp: Stamp,
    /// The TTL the keep-alive renewed the session for; `None`: the session was gone (expired
    /// or revoked), and every name on it ended with it.
    pub(crate) granted: Option<Duration>,
    /// The keys of the names the flight was asked to check, as read with the keep-alive
    /// (absent: no key).
    pub(crate) kvs: HashMap<String, KeyValue>,
}

/// A name a session carries: its term, its holder and its own deadline, `since + bound`.
#[derive(Debug, Clone)]
pub(crate) struct Owned {
    pub(crate) term: u64,
    pub(crate) holder: HolderToken,
    pub(crate) since: Stamp,
    pub(crate) bound: Duration,
    /// When the answer that set `since` arrived (etcd took the request before it): its key is
    /// deleted once `bound` passed from here, when etcd's clock surely passed the deadline.
    answered: Stamp,
}

impl Owned {
    /// `true` once the name's own deadline has passed: its term ended, whatever the session.
    pub(crate) fn ended(&self) -> bool {
        self.since.remaining(self.bound).is_zero()
    }

    /// When the key of a term not renewed is deleted: its TTL from the answer's arrival, so
    /// that another store, which counts the TTL from when its watch saw the put (see
    /// [`EtcdStore::time_left_of`]), sees the deletion after the deadline it counts. Later
    /// than the holder's deadline by a round trip: never sooner.
    fn sweep_at(&self) -> Deadline {
        Deadline::after(self.answered, self.bound)
    }
}

/// A claim sent on a session whose outcome is not known yet (or was lost).
#[derive(Debug, Clone, Copy)]
struct Pending {
    since: Stamp,
    bound: Duration,
}

/// A key to delete: its term (0: a claim of unknown outcome, resolved by a read) and holder.
#[derive(Debug, Clone)]
struct Doom {
    term: u64,
    holder: HolderToken,
}

/// A session: an etcd lease of the store object's, for its claims of one TTL, and what hangs
/// on it.
pub(crate) struct Session {
    pub(crate) id: i64,
    secs: i64,
    state: Mutex<State>,
    /// Held by the flight in the air.
    in_air: tokio::sync::Mutex<()>,
}

struct State {
    lost: bool,
    /// The last proof the session lives: a stamp before an accepted keep-alive (or the grant)
    /// and the TTL it gave.
    proven: (Stamp, Duration),
    owned: HashMap<String, Owned>,
    pending: HashMap<(String, HolderToken), Pending>,
    doomed: HashMap<String, Doom>,
    open: Option<Open>,
    flights: u64,
    /// A sweeper task runs (see [`sweep`]).
    sweeper: bool,
}

/// The flight that has not left yet: callers join it.
struct Open {
    id: u64,
    names: Vec<String>,
    flight: Flight,
}

/// The sessions of a store object.
#[derive(Default)]
pub(crate) struct HolderSessions {
    current: Mutex<HashMap<i64, Arc<Session>>>,
    by_id: Mutex<HashMap<i64, Arc<Session>>>,
    /// How many sessions this store object granted.
    opened: AtomicU64,
    /// How many flights (session keep-alives) this store object sent.
    flights: AtomicU64,
}

impl Session {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The name's entry, if the session carries it.
    pub(crate) fn owned(&self, name: &str) -> Option<Owned> {
        self.state().owned.get(name).cloned()
    }

    /// A claim of `name` by `holder` is about to be sent: remembered until its outcome is
    /// known, so a claim of unknown outcome is read back, or deleted once its deadline passed.
    pub(crate) fn begin_claim(
        &self,
        name: &str,
        holder: &HolderToken,
        since: Stamp,
        bound: Duration,
    ) {
        self.state()
            .pending
            .insert((name.to_owned(), holder.clone()), Pending { since, bound });
    }

    /// The claim found the name held: nothing was written.
    pub(crate) fn claim_failed(&self, name: &str, holder: &HolderToken) {
        self.state()
            .pending
            .remove(&(name.to_owned(), holder.clone()));
    }

    /// The claim landed with term `term`; the name is carried, its deadline `since + bound`.
    pub(crate) fn claimed(
        &self,
        name: &str,
        holder: &HolderToken,
        term: u64,
        since: Stamp,
        bound: Duration,
    ) {
        let mut st = self.state();
        st.pending.remove(&(name.to_owned(), holder.clone()));
        // A claim of unknown outcome of the name is moot: the key was vacant.
        if st.doomed.get(name).is_some_and(|d| d.term == 0) {
            st.doomed.remove(name);
        }
        st.owned.insert(
            name.to_owned(),
            Owned {
                term,
                holder: holder.clone(),
                since,
                bound,
                answered: Stamp::now(),
            },
        );
    }

    /// `holder`'s key of `name` with term `term` was read on this session: a claim of unknown
    /// outcome is carried from now on. `true` when the session carries that term (now, or
    /// already).
    pub(crate) fn resolve(&self, name: &str, holder: &HolderToken, term: u64) -> bool {
        let mut st = self.state();
        if let Some(p) = st.pending.remove(&(name.to_owned(), holder.clone())) {
            st.owned.insert(
                name.to_owned(),
                Owned {
                    term,
                    holder: holder.clone(),
                    since: p.since,
                    bound: p.bound,
                    answered: Stamp::now(),
                },
            );
            return true;
        }
        st.owned
            .get(name)
            .is_some_and(|o| o.term == term && o.holder == *holder)
    }

    /// A renewal of `name`'s term `term` answered: its own deadline counts from `since`.
    pub(crate) fn renewed(&self, name: &str, term: u64, since: Stamp, bound: Duration) -> bool {
        let mut st = self.state();
        match st.owned.get_mut(name) {
            Some(o) if o.term == term => {
                o.since = since;
                o.bound = bound;
                o.answered = Stamp::now();
                true
            }
            _ => false,
        }
    }

    /// `name`'s term `term` was just written (a renewal's move landed): its key is swept
    /// counting from now ([`Owned::sweep_at`]).
    pub(crate) fn answered(&self, name: &str, term: u64) {
        if let Some(o) = self.state().owned.get_mut(name)
            && o.term == term
        {
            o.answered = Stamp::now();
        }
    }

    /// `name`'s term `term` is over and its key gone (or another's): forgotten.
    pub(crate) fn forget(&self, name: &str, term: u64) {
        let mut st = self.state();
        if st.owned.get(name).is_some_and(|o| o.term == term) {
            st.owned.remove(name);
        }
        if st.doomed.get(name).is_some_and(|d| d.term == term) {
            st.doomed.remove(name);
        }
    }

    /// Every entry of `name` forgotten (a forced release deleted its key).
    pub(crate) fn forget_name(&self, name: &str) {
        let mut st = self.state();
        st.owned.remove(name);
        st.doomed.remove(name);
        st.pending.retain(|(n, _), _| n != name);
    }

    /// The time the session is known to live from now: its last proof (a stamp before an
    /// accepted keep-alive, or the grant) plus the TTL that gave.
    pub(crate) fn proven_left(&self) -> Duration {
        let (since, ttl) = self.state().proven;
        since.remaining(ttl)
    }

    /// `holder`'s term `term` of `name` ended but its key may still hang on the session: the
    /// next flight deletes it.
    pub(crate) fn doom(&self, name: &str, term: u64, holder: &HolderToken) {
        let mut st = self.state();
        if st.owned.get(name).is_some_and(|o| o.term == term) {
            st.owned.remove(name);
        }
        st.doomed.insert(
            name.to_owned(),
            Doom {
                term,
                holder: holder.clone(),
            },
        );
    }
}

impl EtcdStore {
    fn sessions(&self) -> &HolderSessions {
        &self.inner.holder_sessions
    }

    /// How many sessions (etcd leases its lease keys hang on) this store object granted so
    /// far: one per TTL while the session lives and carries fewer than 10,000 names. For tests
    /// and monitoring.
    pub fn sessions_opened(&self) -> u64 {
        self.sessions().opened.load(Ordering::Relaxed)
    }

    /// How many session keep-alives this store object sent so far: one per flight, shared by
    /// every claim and renewal on the session that joined it. For tests and monitoring.
    pub fn session_keep_alives(&self) -> u64 {
        self.sessions().flights.load(Ordering::Relaxed)
    }

    /// The session with etcd lease id `id`, when it is one of this store object's and not lost.
    pub(crate) fn session_by_id(&self, id: i64) -> Option<Arc<Session>> {
        if id == 0 {
            return None;
        }
        lock(&self.sessions().by_id).get(&id).cloned()
    }

    /// The session this store object's claims of `ttl` attach to now, when there is one that
    /// takes more.
    pub(crate) fn current_session(&self, ttl: Duration) -> Option<Arc<Session>> {
        let current = lock(&self.sessions().current);
        current
            .get(&server_seconds(ttl))
            .filter(|s| {
                // A session whose last proof is about to run out may be gone by the time the
                // claim's keep-alive lands (and nobody kept it alive lately): a new one is
                // granted instead.
                let st = s.state();
                let (since, ttl) = st.proven;
                let margin = (ttl / 4).min(FRESH_MARGIN);
                !st.lost
                    && st.owned.len() + st.pending.len() < MAX_KEYS_PER_SESSION
                    && since.remaining(ttl) > margin
            })
            .cloned()
    }

    /// Grants a new session for this store object's claims of `ttl` and makes it the current
    /// one. Answers it and the TTL etcd granted; the session lives at least that long from a
    /// stamp taken before this call.
    pub(crate) async fn open_session(
        &self,
        site: Site<'_>,
        ttl: Duration,
    ) -> Result<(Arc<Session>, Duration)> {
        let sent = Stamp::now();
        let (id, granted) = self
            .grant(site, ttl.saturating_add(self.inner.session_slack))
            .await?;
        let secs = server_seconds(ttl);
        let session = Arc::new(Session {
            id,
            secs,
            state: Mutex::new(State {
                lost: false,
                proven: (sent, granted),
                owned: HashMap::new(),
                pending: HashMap::new(),
                doomed: HashMap::new(),
                open: None,
                flights: 0,
                sweeper: false,
            }),
            in_air: tokio::sync::Mutex::new(()),
        });
        self.sessions().opened.fetch_add(1, Ordering::Relaxed);
        {
            // Sessions whose last proof ran out with nothing left to delete are dropped: no
            // flight keeps them alive, so etcd ends them (and what hangs on them) by their TTL.
            let mut by_id = lock(&self.sessions().by_id);
            by_id.retain(|_, s| {
                let st = s.state();
                !(st.lost
                    || (st.proven.0.remaining(st.proven.1).is_zero()
                        && st.doomed.is_empty()
                        && st.open.is_none()))
            });
            by_id.insert(id, session.clone());
            let mut current = lock(&self.sessions().current);
            current.retain(|_, s| by_id.contains_key(&s.id));
            current.insert(secs, session.clone());
        }
        Ok((session, granted))
    }

    /// Makes sure a sweeper runs for `session` (see [`sweep`]), now that it carries a name.
    pub(crate) fn arm_sweeper(&self, session: &Arc<Session>) {
        {
            let mut st = session.state();
            if st.sweeper || st.lost {
                return;
            }
            st.sweeper = true;
        }
        tokio::spawn(sweep(Arc::downgrade(&self.inner), session.clone()));
    }

    /// The session is gone (a keep-alive found it expired or revoked, or etcd refused a write
    /// hanging on it): every name on it ended with it.
    pub(crate) fn lose_session(&self, session: &Session) {
        {
            let mut st = session.state();
            st.lost = true;
            st.owned.clear();
            st.pending.clear();
            st.doomed.clear();
        }
        lock(&self.sessions().by_id).remove(&session.id);
        let mut current = lock(&self.sessions().current);
        if current
            .get(&session.secs)
            .is_some_and(|s| s.id == session.id)
        {
            current.remove(&session.secs);
        }
        drop(current);
        self.forget_lease(session.id);
    }

    /// Joins the flight of `session` that has not left yet (or starts one), asking it to read
    /// `name`'s key too.
    pub(crate) fn fly(&self, session: &Arc<Session>, name: Option<&str>) -> Flight {
        let mut st = session.state();
        if let Some(open) = st.open.as_mut() {
            if let Some(name) = name {
                open.names.push(name.to_owned());
            }
            return open.flight.clone();
        }
        st.flights += 1;
        let id = st.flights;
        let flight = run_flight(Arc::downgrade(&self.inner), session.clone(), id)
            .boxed()
            .shared();
        st.open = Some(Open {
            id,
            names: name.into_iter().map(str::to_owned).collect(),
            flight: flight.clone(),
        });
        flight
    }

    /// The keys of `names`, read together (one read-only transaction per
    /// [`max_txn_ops`](crate::EtcdConfig::max_txn_ops) keys, all sent at once).
    async fn read_names(
        &self,
        site: Site<'_>,
        names: &[String],
    ) -> Result<HashMap<String, KeyValue>> {
        let mut out = HashMap::new();
        if names.is_empty() {
            return Ok(out);
        }
        let chunks: Vec<&[String]> = names.chunks(self.inner.max_txn_ops.max(1)).collect();
        let answers = join_all(chunks.iter().map(|chunk| {
            let txn = Txn::new().and_then(
                chunk
                    .iter()
                    .map(|n| TxnOp::get(self.key(n), None))
                    .collect::<Vec<_>>(),
            );
            self.txn(site, txn)
        }))
        .await;
        for (chunk, answer) in chunks.iter().zip(answers) {
            let resp = answer?;
            for (name, op) in chunk.iter().zip(resp.op_responses()) {
                if let TxnOpResponse::Get(get) = op
                    && let Some(kv) = get.kvs().first()
                {
                    out.insert(name.clone(), kv.clone());
                }
            }
        }
        Ok(out)
    }

    /// Deletes each `(name, term)`'s key if it still has that create revision; answers, per
    /// name, whether etcd answered (deleted, or the key was not that term's any more).
    pub(crate) async fn delete_terms(
        &self,
        site: Site<'_>,
        doomed: &[(String, u64)],
    ) -> Vec<(String, u64, bool)> {
        let answers = join_all(doomed.iter().map(|(name, term)| {
            let key = self.key(name);
            let term = i64::try_from(*term).unwrap_or(i64::MAX);
            self.txn(
                site,
                Txn::new()
                    .when([Compare::create_revision(
                        key.clone(),
                        CompareOp::Equal,
                        term,
                    )])
                    .and_then([TxnOp::delete(key, None)]),
            )
        }))
        .await;
        doomed
            .iter()
            .zip(answers)
            .map(|((name, term), a)| (name.clone(), *term, a.is_ok()))
            .collect()
    }
}

/// One flight of `session` (see the module docs).
async fn run_flight(store: Weak<Inner>, session: Arc<Session>, id: u64) -> FlightResult {
    let Some(inner) = store.upgrade() else {
        return Err(Error::new(
            ErrorKind::Unavailable,
            "the etcd lease store was dropped while a renewal waited",
        ));
    };
    let store = EtcdStore { inner };
    let _in_air = session.in_air.lock().await;
    let (names, known, unknown) = {
        let mut st = session.state();
        let names = match st.open.take() {
            Some(open) if open.id == id => open.names,
            other => {
                st.open = other;
                Vec::new()
            }
        };
        // Terms whose own deadline passed, and claims of unknown outcome whose deadline
        // passed: their keys go, whatever the session does.
        ended_terms(&mut st);
        let lapsed: Vec<(String, HolderToken)> = st
            .pending
            .iter()
            .filter(|(_, p)| p.since.remaining(p.bound).is_zero())
            .map(|(k, _)| k.clone())
            .collect();
        for (name, holder) in lapsed {
            st.pending.remove(&(name.clone(), holder.clone()));
            st.doomed.entry(name).or_insert(Doom { term: 0, holder });
        }
        let (known, unknown): (Vec<_>, Vec<_>) = st
            .doomed
            .iter()
            .map(|(n, d)| (n.clone(), d.clone()))
            .partition(|(_, d)| d.term > 0);
        let known: Vec<(String, u64)> = known.into_iter().map(|(n, d)| (n, d.term)).collect();
        (names, known, unknown)
    };
    store.sessions().flights.fetch_add(1, Ordering::Relaxed);
    let site = store.site(Operation::Renew, "");
    let mut read: Vec<String> = names.clone();
    read.extend(unknown.iter().map(|(n, _)| n.clone()));
    read.sort_unstable();
    read.dedup();
    let stamp = Stamp::now();
    let (alive, kvs, deleted) = tokio::join!(
        store.keep_alive(site, session.id),
        store.read_names(site, &read),
        store.delete_terms(site, &known),
    );
    // Claims of unknown outcome whose deadline passed: their key, when it is there on this
    // session under their holder and the session carries no live term of it, is deleted by its
    // create revision now read.
    let mut resolved = Vec::new();
    if let Ok(kvs) = &kvs {
        let st = session.state();
        for (name, doom) in &unknown {
            match kvs.get(name) {
                Some(kv)
                    if kv.lease() == session.id
                        && held_by(kv, &doom.holder)
                        && !st.owned.contains_key(name) =>
                {
                    resolved.push((
                        name.clone(),
                        u64::try_from(kv.create_revision()).unwrap_or(0),
                    ));
                }
                _ => {}
            }
        }
    }
    let resolved_answers = store.delete_terms(site, &resolved).await;
    {
        let mut st = session.state();
        for (name, term, answered) in deleted {
            if answered && st.doomed.get(&name).is_some_and(|d| d.term == term) {
                st.doomed.remove(&name);
            }
        }
        if kvs.is_ok() {
            for (name, doom) in &unknown {
                let failed = resolved_answers
                    .iter()
                    .any(|(n, _, answered)| n == name && !answered);
                if st.doomed.get(name).is_some_and(|d| d.term == 0) {
                    st.doomed.remove(name);
                }
                if failed
                    && let Some((_, term, _)) = resolved_answers.iter().find(|(n, _, _)| n == name)
                {
                    let doom = Doom {
                        term: *term,
                        holder: doom.holder.clone(),
                    };
                    st.doomed.insert(name.clone(), doom);
                }
            }
        }
    }
    let granted = alive?;
    match granted {
        Some(ttl) => session.state().proven = (stamp, ttl),
        None => store.lose_session(&session),
    }
    let mut kvs = kvs?;
    let wanted: std::collections::HashSet<&String> = names.iter().collect();
    kvs.retain(|n, _| wanted.contains(n));
    Ok(Arc::new(Flown {
        stamp,
        granted,
        kvs,
    }))
}

/// Moves the terms whose own deadline passed from what the session carries to what it deletes;
/// answers the keys to delete whose term is known.
fn ended_terms(st: &mut State) -> Vec<(String, u64)> {
    let ended: Vec<(String, Doom)> = st
        .owned
        .iter()
        .filter(|(_, o)| o.sweep_at().has_passed())
        .map(|(n, o)| {
            let doom = Doom {
                term: o.term,
                holder: o.holder.clone(),
            };
            (n.clone(), doom)
        })
        .collect();
    for (name, doom) in ended {
        st.owned.remove(&name);
        st.doomed.insert(name, doom);
    }
    st.doomed
        .iter()
        .filter(|(_, d)| d.term > 0)
        .map(|(n, d)| (n.clone(), d.term))
        .collect()
}

/// The session's sweeper: a task per session that carries names, waking at the earliest of its
/// names' own deadlines to delete the keys of those whose deadline passed without a renewal —
/// at their deadline (counted from the answer's arrival, [`Owned::sweep_at`]), as an expiry
/// would, rather than at the session's next keep-alive (which siblings renewing every period
/// would otherwise delay). Ends when the session carries nothing
/// (a claim starts it again), is lost, or the store is dropped.
async fn sweep(store: Weak<Inner>, session: Arc<Session>) {
    loop {
        let next = {
            let mut st = session.state();
            let next = st.owned.values().map(Owned::sweep_at).reduce(Deadline::min);
            match next {
                Some(next) if !st.lost => next,
                _ => {
                    st.sweeper = false;
                    return;
                }
            }
        };
        next.reached().await;
        let Some(inner) = store.upgrade() else {
            lock(&session.state).sweeper = false;
            return;
        };
        let store = EtcdStore { inner };
        let known = ended_terms(&mut session.state());
        if known.is_empty() {
            continue;
        }
        let site = store.site(Operation::Release, "");
        let deleted = store.delete_terms(site, &known).await;
        let mut st = session.state();
        for (name, term, answered) in deleted {
            if answered && st.doomed.get(&name).is_some_and(|d| d.term == term) {
                st.doomed.remove(&name);
            }
        }
    }
}
