//! [`LeaseStore`] on etcd: one key per name, hung on the store's session for its TTL (`holder_sessions.rs`).

use std::time::Duration;

use etcd_client::{Compare, CompareOp, DeleteOptions, KeyValue, PutOptions, Txn, TxnOp};
use lease_core::backend::{
    Grant, HolderToken, async_trait, check, clock::Stamp, partitions::BatchRenew,
};
use lease_core::layer::Operation;
use lease_core::{
    LeaseStore, Result,
    backend::{
        Capabilities, LeaseInfo, membership::MembershipStore, partitions::PartitionStore,
        permits::PermitStore,
    },
};

use std::sync::Arc;

use crate::error::{Site, lease_not_found};
use crate::holder_sessions::Session;
use crate::known_leases::Held;
use crate::store::{EtcdStore, Move, lock, revision};
use crate::wire::codec::LeaseValue;
use crate::wire::keys;

/// How many etcd leases a claim grants at most when each ends before the transaction hanging
/// the key on it lands (etcd refuses the transaction whole: "requested lease not found"); then
/// it answers a temporary error.
pub(crate) const GONE_TRIES: usize = 3;

/// `true` when the lease record at `kv` names `holder` (a value this store did not write names
/// nobody).
pub(crate) fn held_by(kv: &KeyValue, holder: &HolderToken) -> bool {
    LeaseValue::decode(kv.value()).is_some_and(|v| v.holder == *holder)
}

/// The key-value a transaction's `else` read found, if any.
pub(crate) fn first_kv(resp: &etcd_client::TxnResponse) -> Option<KeyValue> {
    resp.op_responses().into_iter().find_map(|op| match op {
        etcd_client::TxnOpResponse::Get(get) => get.kvs().first().cloned(),
        _ => None,
    })
}

/// The create revision of a key as a term.
pub(crate) fn term_of(kv: &KeyValue) -> u64 {
    u64::try_from(kv.create_revision()).unwrap_or(0)
}

impl EtcdStore {
    /// The time left on the holding at `kv`, held by `holder`, for a read-back of it: its etcd
    /// lease's, or, when that lease is gone because the key moved onto another meanwhile
    /// ([`EtcdStore::live`]), the new lease's — if the key still holds the same holding
    /// (`holder`'s, the same term). `None`: the holding is gone.
    pub(crate) async fn held_time_left(
        &self,
        site: Site<'_>,
        kv: &KeyValue,
        holder: &HolderToken,
    ) -> Result<Option<Duration>> {
        if let Some(left) = self.time_left(site, kv.lease()).await? {
            return Ok(Some(left));
        }
        Ok(self
            .followed(site, kv)
            .await?
            .filter(|(now, _)| {
                held_by(now, holder) && now.create_revision() == kv.create_revision()
            })
            .map(|(_, left)| left))
    }

    pub(crate) fn key(&self, name: &str) -> Vec<u8> {
        keys::lease(&self.inner.prefix, name)
    }

    /// The lease record in `kv`; an error for a value this store did not write.
    fn decode(site: Site<'_>, kv: &KeyValue) -> Result<LeaseValue> {
        LeaseValue::decode(kv.value()).ok_or_else(|| site.foreign_value(kv.key()))
    }

    /// When the etcd lease `lease` (renewed for `granted` by a keep-alive sent after `sent`)
    /// is shorter than `ttl`, moves the key to a new etcd lease of `ttl` (the key and its
    /// create revision stay: the term is kept), if it still hangs on `lease` and the move
    /// lands while `lease` is live ([`move_live`](EtcdStore::move_live): an expired lease is
    /// never revived through a move, even before etcd's sweep deleted its key). `revoke_old`:
    /// the old etcd lease carried this key alone (a permit's), so it is revoked once the key
    /// left it; a lease key's may be a session other keys hang on, never revoked. Answers the
    /// lease the key hangs on, the TTL it counts and the stamp taken before that TTL started;
    /// `None` when the key moved on or lapsed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn fit(
        &self,
        site: Site<'_>,
        key: &[u8],
        lease: i64,
        granted: Duration,
        sent: Stamp,
        ttl: Duration,
        revoke_old: bool,
    ) -> Result<Option<(i64, Duration, Stamp)>> {
        if granted >= ttl {
            return Ok(Some((lease, granted, sent)));
        }
        let since = Stamp::now();
        let (longer, longer_granted) = self.grant(site, ttl).await?;
        match self
            .move_live(site, key, Vec::new(), lease, (sent, granted), longer)
            .await?
        {
            Move::Moved => {
                if revoke_old {
                    self.revoke_later(lease);
                }
                Ok(Some((longer, longer_granted, since)))
            }
            Move::Changed => {
                self.revoke_later(longer);
                Ok(None)
            }
            Move::Lapsed => {
                self.revoke_later(longer);
                if revoke_old {
                    self.revoke_later(lease);
                }
                Ok(None)
            }
            // The new etcd lease ended before the move landed (nothing was written): a
            // temporary error, the renewal is tried again.
            Move::TargetGone(e) => Err(site.etcd(e)),
        }
    }

    /// Forgets `holder`'s claim of `name`: answers `None`, the lease being lost.
    fn lost<T>(&self, name: &str, holder: &HolderToken) -> Option<T> {
        lock(&self.inner.known).remove(name, holder, None);
        None
    }

    /// A claim found `name` held by `kv`: when that key is on a session of this store object's
    /// that does not carry it as a live term, it is a claim of unknown outcome (the session
    /// carries it from now on, to its own deadline) or a term that ended (deleted at the
    /// session's next flight).
    fn own_key_seen(&self, name: &str, kv: &KeyValue) {
        let Some(value) = LeaseValue::decode(kv.value()) else {
            return;
        };
        let Some(session) = self.session_by_id(kv.lease()) else {
            return;
        };
        let term = term_of(kv);
        if !session.resolve(name, &value.holder, term) {
            session.doom(name, term, &value.holder);
        }
    }

    /// A renewal of `holder`'s term `term` of `name` on `session`: one flight (the session's
    /// keep-alive and a read of the key, shared with every renewal on the session that joins
    /// it). `Some` only when the session lived, the key is still that term's on it, and the
    /// term's own deadline had not passed.
    #[allow(clippy::too_many_arguments)]
    async fn renew_on_session(
        &self,
        site: Site<'_>,
        name: &str,
        holder: &HolderToken,
        key: &[u8],
        session: &Arc<Session>,
        term: u64,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        match session.owned(name) {
            Some(o) if o.term == term && !o.ended() => {}
            // Its own deadline passed: the term ended, its key goes.
            Some(o) if o.term == term => {
                session.doom(name, term, holder);
                return Ok(self.lost(name, holder));
            }
            _ => return Ok(self.lost(name, holder)),
        }
        let flown = self.fly(session, Some(name)).await?;
        // The session ended: every name on it ended with it.
        let Some(granted) = flown.granted else {
            return Ok(self.lost(name, holder));
        };
        let live = flown
            .kvs
            .get(name)
            .is_some_and(|kv| kv.lease() == session.id && term_of(kv) == term);
        if !live {
            // Released, forced out, or another's now.
            session.forget(name, term);
            return Ok(self.lost(name, holder));
        }
        // Its own deadline passed before the flight's keep-alive was sent: the term ended (its
        // key goes at its sweep, `Owned::sweep_at`, or went with the flight).
        let ended_before = |o: &crate::holder_sessions::Owned| {
            o.since.elapsed() >= o.bound.saturating_add(flown.stamp.elapsed())
        };
        if session
            .owned(name)
            .is_none_or(|o| o.term != term || ended_before(&o))
        {
            return Ok(self.lost(name, holder));
        }
        if granted < ttl {
            return self
                .move_to_session(
                    site,
                    name,
                    holder,
                    key,
                    session,
                    term,
                    (flown.stamp, granted),
                    ttl,
                )
                .await;
        }
        let bound = ttl.min(granted);
        session.renewed(name, term, flown.stamp, bound);
        lock(&self.inner.known).insert(
            name,
            holder,
            Held {
                lease: session.id,
                term,
                bound,
                since: flown.stamp,
            },
        );
        Ok(Some(Grant {
            term,
            expires_in: flown.stamp.remaining(bound),
        }))
    }

    /// A renewal asking a longer TTL than `from`'s: the key moves onto the store's session of
    /// that TTL, its create revision (the term) kept, if the move lands while `from` is live
    /// (`live`: the keep-alive's stamp and TTL; see [`move_live`](EtcdStore::move_live)).
    #[allow(clippy::too_many_arguments)]
    async fn move_to_session(
        &self,
        site: Site<'_>,
        name: &str,
        holder: &HolderToken,
        key: &[u8],
        from: &Arc<Session>,
        term: u64,
        live: (Stamp, Duration),
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let sent = Stamp::now();
        let current = self.current_session(ttl).filter(|s| s.id != from.id);
        let (target, proof) = match current {
            Some(target) => {
                let flown = self.fly(&target, None).await?;
                match flown.granted {
                    Some(granted) => (target, (flown.stamp, granted)),
                    None => return Err(site.session_ended()),
                }
            }
            None => {
                let (target, granted) = self.open_session(site, ttl).await?;
                (target, (sent, granted))
            }
        };
        let bound = ttl.min(proof.1);
        target.claimed(name, holder, term, proof.0, bound);
        self.arm_sweeper(&target);
        let same_term = Compare::create_revision(
            key.to_vec(),
            CompareOp::Equal,
            i64::try_from(term).unwrap_or(i64::MAX),
        );
        match self
            .move_live(site, key, vec![same_term], from.id, live, target.id)
            .await?
        {
            Move::Moved => {
                from.forget(name, term);
                target.answered(name, term);
                lock(&self.inner.known).insert(
                    name,
                    holder,
                    Held {
                        lease: target.id,
                        term,
                        bound,
                        since: proof.0,
                    },
                );
                Ok(Some(Grant {
                    term,
                    expires_in: proof.0.remaining(bound),
                }))
            }
            Move::Changed | Move::Lapsed => {
                target.forget(name, term);
                from.forget(name, term);
                Ok(self.lost(name, holder))
            }
            Move::TargetGone(e) => {
                target.forget(name, term);
                self.lose_session(&target);
                Err(site.etcd(e))
            }
        }
    }

    /// A renewal of a key on an etcd lease this store object did not grant (another store
    /// object's claim under this holder token): a keep-alive of that lease, then a move onto a
    /// longer one if the TTL asks it. That lease is never revoked (other names may hang on it).
    #[allow(clippy::too_many_arguments)]
    async fn renew_elsewhere(
        &self,
        site: Site<'_>,
        name: &str,
        holder: &HolderToken,
        key: &[u8],
        kv: &KeyValue,
        sent: Stamp,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        let Some(granted) = self.keep_alive(site, kv.lease()).await? else {
            return Ok(self.lost(name, holder));
        };
        let term = term_of(kv);
        let Some((lease, granted, since)) = self
            .fit(site, key, kv.lease(), granted, sent, ttl, false)
            .await?
        else {
            return Ok(self.lost(name, holder));
        };
        let bound = ttl.min(granted);
        lock(&self.inner.known).insert(
            name,
            holder,
            Held {
                lease,
                term,
                bound,
                since,
            },
        );
        Ok(Some(Grant {
            term,
            expires_in: since.remaining(bound),
        }))
    }

    /// A verify of a claim this store object made on one of its sessions. A claim of unknown
    /// outcome (term 0) is read back with a flight (the session's keep-alive and a read of the
    /// key): adopted only when the session lives and the key is this holder's on it; a known
    /// one by a read. `Some` only within the term's own deadline.
    async fn verify_on_session(
        &self,
        site: Site<'_>,
        name: &str,
        holder: &HolderToken,
        held: Held,
        session: &Arc<Session>,
    ) -> Result<Option<Grant>> {
        let kv = if held.term == 0 {
            let flown = self.fly(session, Some(name)).await?;
            if flown.granted.is_none() {
                return Ok(self.lost(name, holder));
            }
            flown.kvs.get(name).cloned()
        } else {
            self.get_key(site, &self.key(name)).await?
        };
        let Some(kv) = kv.filter(|kv| kv.lease() == session.id && held_by(kv, holder)) else {
            return Ok(self.lost(name, holder));
        };
        let term = term_of(&kv);
        let known = if held.term == 0 {
            session.resolve(name, holder, term)
        } else {
            held.term == term
        };
        let owned = session
            .owned(name)
            .filter(|o| known && o.term == term && !o.ended());
        let Some(owned) = owned else {
            return Ok(self.lost(name, holder));
        };
        if held.term == 0 {
            lock(&self.inner.known).insert(name, holder, Held { term, ..held });
        }
        let expires_in = held
            .since
            .remaining(held.bound)
            .min(owned.since.remaining(owned.bound));
        Ok(Some(Grant { term, expires_in }))
    }
}

/// How many permit keys one read of a listing of names takes.
const PERMIT_KEYS_PER_READ: usize = 1000;

#[async_trait]
impl LeaseStore for EtcdStore {
    fn backend(&self) -> &'static str {
        "etcd"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // etcd counts a lease's TTL in whole seconds but rounds it up and expires it in a
            // sweep: never before the TTL asked for, so the default clock granularity.
            // The term is the key's create revision: the cluster's revision at the claim.
            consecutive_terms: false,
            // etcd deletes the key when its lease ends.
            keeps_ended_records: false,
            force_release: true,
            list_names: true,
            // A key per permit (see `permits.rs`).
            // A range read of the group, then the keep-alives of the owner's etcd leases it
            // found (sent with the read when this store renewed the group before): at most two
            // exchanges one after the other, plus at most one that HTTP/2's control frames
            // (gRPC's PING acknowledgements, window updates) add on the wire.
            batch_renew: BatchRenew::Fixed { round_trips: 3 },
            // A watch on the prefix (see `hints.rs`).
            watch: true,
            ..lease_core::backend::derived_capabilities(self)
        }
    }

    fn permit_store(&self) -> Option<&dyn PermitStore> {
        Some(self)
    }

    fn partition_store(&self) -> Option<&dyn PartitionStore> {
        Some(self)
    }

    fn membership_store(&self) -> Option<&dyn MembershipStore> {
        Some(self)
    }

    async fn available(&self) -> Result<()> {
        self.check(Some(Operation::Available)).await
    }

    async fn claim(
        &self,
        name: &str,
        holder: &HolderToken,
        instance: &str,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::claim(self, name, instance, ttl)?;
        let site = self.site(Operation::Claim, name);
        let key = self.key(name);
        let mut tries = 0;
        loop {
            let sent = Stamp::now();
            let (session, granted) = match self.current_session(ttl) {
                // Known to live the claim's whole TTL from before the claim (a session granted
                // longer than asked, kept alive lately): no keep-alive needed.
                Some(session) if session.proven_left() >= ttl => {
                    let left = session.proven_left();
                    (session, Some(left))
                }
                Some(session) => (session, None),
                None => {
                    let (session, granted) = self.open_session(site, ttl).await?;
                    (session, Some(granted))
                }
            };
            let bound = ttl.min(granted.unwrap_or(ttl));
            // Remembered before the transaction is sent, so that a claim of unknown outcome is
            // read back (`verify`) or, when nobody adopts it, deleted once its deadline passed.
            session.begin_claim(name, holder, sent, bound);
            let prev_held = lock(&self.inner.known).get(name, holder);
            lock(&self.inner.known).insert(
                name,
                holder,
                Held {
                    lease: session.id,
                    term: 0,
                    bound,
                    since: sent,
                },
            );
            let restore_held = |prev: Option<Held>| {
                let mut known = lock(&self.inner.known);
                match prev {
                    Some(held) => known.insert(name, holder, held),
                    None => known.remove(name, holder, None),
                }
            };
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    LeaseValue::encode_claim(holder, instance, bound),
                    Some(PutOptions::new().with_lease(session.id)),
                )])
                .or_else([TxnOp::get(key.clone(), None)]);
            // A session granted for this claim is proven live by its grant (and one known to
            // live the TTL already, by its last keep-alive); any other is kept alive together
            // with the transaction (joining its flight that has not left yet), so the name lives
            // its TTL from before the claim was sent.
            let (alive, answer) = match granted {
                Some(granted) => (Ok(Some(granted)), self.txn_raw(site, txn).await),
                None => {
                    let (flown, answer) =
                        tokio::join!(self.fly(&session, None), self.txn_raw(site, txn));
                    (flown.map(|f| f.granted), answer)
                }
            };
            // No answer in time: the outcome is unknown, both memories stay (term 0).
            let resp = match answer? {
                Ok(resp) => resp,
                // The session ended before the transaction landed (etcd refused it whole,
                // nothing was written): claim again on a new one.
                Err(e) if lease_not_found(&e) => {
                    self.lose_session(&session);
                    restore_held(prev_held.filter(|h| h.lease != session.id));
                    tries += 1;
                    if tries < GONE_TRIES {
                        continue;
                    }
                    return Err(site.etcd(e));
                }
                Err(e) => return Err(site.etcd(e)),
            };
            if !resp.succeeded() {
                session.claim_failed(name, holder);
                restore_held(prev_held);
                if let Some(kv) = first_kv(&resp) {
                    self.own_key_seen(name, &kv);
                }
                return Ok(None);
            }
            let term = revision(site, &resp)?;
            session.claimed(name, holder, term, sent, bound);
            self.arm_sweeper(&session);
            return match alive {
                Ok(Some(granted)) => {
                    let bound = ttl.min(granted);
                    session.renewed(name, term, sent, bound);
                    lock(&self.inner.known).insert(
                        name,
                        holder,
                        Held {
                            lease: session.id,
                            term,
                            bound,
                            since: sent,
                        },
                    );
                    Ok(Some(Grant {
                        term,
                        expires_in: sent.remaining(bound),
                    }))
                }
                // The session ended as the claim landed: nothing is held. The key (on an
                // expired etcd lease etcd has not swept yet) is deleted now, and the claim made
                // again on a new session.
                Ok(None) => {
                    lock(&self.inner.known).remove(name, holder, Some(session.id));
                    self.delete_terms(site, &[(name.to_owned(), term)]).await;
                    tries += 1;
                    if tries < GONE_TRIES {
                        continue;
                    }
                    Err(site.session_ended())
                }
                // The key is there but the session's keep-alive got no answer: the claim is
                // read back (`verify` proves the session first: the memory keeps term 0).
                Err(e) => Err(e),
            };
        }
    }

    async fn renew(
        &self,
        name: &str,
        holder: &HolderToken,
        ttl: Duration,
    ) -> Result<Option<Grant>> {
        check::renew(self, name, ttl)?;
        let site = self.site(Operation::Renew, name);
        let key = self.key(name);
        let known = lock(&self.inner.known)
            .get(name, holder)
            .filter(|h| h.term > 0);
        let on_session = known.and_then(|h| self.session_by_id(h.lease).map(|s| (s, h.term)));
        let (session, term) = match on_session {
            Some(found) => found,
            // Not a claim this store object remembers on one of its sessions: read the key.
            None => {
                let sent = Stamp::now();
                let kv = self
                    .get_key(site, &key)
                    .await?
                    .filter(|kv| held_by(kv, holder));
                match kv {
                    Some(kv) => match self.session_by_id(kv.lease()) {
                        Some(session) => (session, term_of(&kv)),
                        None if kv.lease() != 0 => {
                            return self
                                .renew_elsewhere(site, name, holder, &key, &kv, sent, ttl)
                                .await;
                        }
                        None => return Ok(self.lost(name, holder)),
                    },
                    None => return Ok(self.lost(name, holder)),
                }
            }
        };
        self.renew_on_session(site, name, holder, &key, &session, term, ttl)
            .await
    }

    async fn release(&self, name: &str, holder: &HolderToken) -> Result<bool> {
        check::name(self, name)?;
        let site = self.site(Operation::Release, name);
        let key = self.key(name);
        let known = lock(&self.inner.known)
            .get(name, holder)
            .filter(|h| h.term > 0);
        let found = known.and_then(|h| self.session_by_id(h.lease).map(|s| (h.term, Some(s))));
        let (term, session) = match found {
            Some(found) => found,
            None => match self.get_key(site, &key).await? {
                Some(kv) if held_by(&kv, holder) => (term_of(&kv), self.session_by_id(kv.lease())),
                _ => {
                    lock(&self.inner.known).remove(name, holder, None);
                    return Ok(false);
                }
            },
        };
        // On a session of this store's, the term is live until its own deadline.
        let live = session
            .as_ref()
            .is_none_or(|s| s.owned(name).is_some_and(|o| o.term == term && !o.ended()));
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                i64::try_from(term).unwrap_or(i64::MAX),
            )])
            .and_then([TxnOp::delete(key, None)]);
        // The session is never revoked: other names hang on it.
        match self.txn(site, txn).await {
            Ok(resp) => {
                if let Some(session) = &session {
                    session.forget(name, term);
                }
                lock(&self.inner.known).remove(name, holder, None);
                Ok(resp.succeeded() && live)
            }
            Err(e) => {
                // The term ended but its key may stay on a session that lives on: the
                // session's next keep-alive deletes it.
                if let Some(session) = &session {
                    session.doom(name, term, holder);
                }
                Err(e)
            }
        }
    }

    async fn verify(&self, name: &str, holder: &HolderToken) -> Result<Option<Grant>> {
        check::name(self, name)?;
        let site = self.site(Operation::Verify, name);
        let known = lock(&self.inner.known).get(name, holder);
        if let Some(held) = known
            && let Some(session) = self.session_by_id(held.lease)
        {
            return self
                .verify_on_session(site, name, holder, held, &session)
                .await;
        }
        let Some(kv) = self.get_key(site, &self.key(name)).await? else {
            return Ok(self.lost(name, holder));
        };
        if !held_by(&kv, holder) {
            return Ok(self.lost(name, holder));
        }
        let term = term_of(&kv);
        let expires_in = match self.held_time_left(site, &kv, holder).await? {
            Some(left) => left,
            None => return Ok(None),
        };
        Ok(Some(Grant { term, expires_in }))
    }

    async fn get(&self, name: &str) -> Result<Option<LeaseInfo>> {
        check::name(self, name)?;
        let site = self.site(Operation::Get, name);
        let Some(kv) = self.get_key(site, &self.key(name)).await? else {
            return Ok(None);
        };
        let known = lock(&self.inner.known).by_lease(name, kv.lease());
        let (kv, left) = match known {
            Some(held) => (kv, Some(held.since.remaining(held.bound))),
            None => match self.time_left_of(site, &kv).await? {
                Some(left) => (kv, Some(left)),
                // Gone, or the key moved onto another etcd lease since it was read.
                None => match self.followed(site, &kv).await? {
                    Some((now, left)) => (now, Some(left)),
                    None => (kv, None),
                },
            },
        };
        let value = Self::decode(site, &kv)?;
        Ok(Some(LeaseInfo {
            name: name.to_owned(),
            instance: value.instance,
            term: term_of(&kv),
            live: left.is_some(),
            expires_in: left.unwrap_or_default(),
        }))
    }

    /// Range reads of the key space, never a pattern: the lease keys from `<prefix>l/<name
    /// prefix>` to its range end (one read of at most `limit + 1` keys), and the permit keys from
    /// `<prefix>c/<name prefix>` the same way, 1,000 keys per read, each read starting past the
    /// last counted name seen (`<name>\x01`: its permit keys end with `\0` and digits). Keys are
    /// the names' bytes, so the range is exactly the names under the prefix, in byte order, and
    /// no character of the prefix is special. A key is there while its etcd lease lives (and
    /// until etcd's sweep removes it once expired): held names show, released ones do not.
    async fn names(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<lease_core::backend::names::NamePage> {
        use lease_core::backend::names::{NamePage, counted_name, lease_name};
        check::names(self, prefix, after, limit)?;
        let site = self.site(Operation::Names, prefix);
        let store_prefix = &self.inner.prefix;
        // From the prefix, or from past `after` (`trailer`: the least byte past a name's keys).
        let bounds = |space: Vec<u8>, trailer: u8| {
            let mut from = space.clone();
            from.extend_from_slice(prefix.as_bytes());
            let end = keys::range_end(&from);
            if let Some(after) = after {
                let mut past = space;
                past.extend_from_slice(after.as_bytes());
                past.push(trailer);
                from = from.max(past);
            }
            (from, end)
        };
        let space = keys::lease_space(store_prefix);
        let (from, end) = bounds(space.clone(), 0);
        let lease_keys = self.range_keys(site, &from, &end, limit + 1).await?;
        let mut found: Vec<_> = lease_keys
            .iter()
            .filter_map(|k| k.strip_prefix(space.as_slice()))
            .filter_map(|n| String::from_utf8(n.to_vec()).ok())
            .map(lease_name)
            .collect();
        let space = keys::permit_space(store_prefix);
        let (mut from, end) = bounds(space.clone(), 1);
        let mut counted = 0;
        loop {
            let page = self
                .range_keys(site, &from, &end, PERMIT_KEYS_PER_READ)
                .await?;
            let mut last = None;
            for key in &page {
                let Some(name) = key
                    .strip_prefix(space.as_slice())
                    .and_then(keys::counted_of)
                else {
                    continue;
                };
                if last.as_ref() != Some(&name) {
                    counted += 1;
                    last = Some(name.clone());
                    found.push(counted_name(name));
                }
            }
            let Some(last) = last else { break };
            if page.len() < PERMIT_KEYS_PER_READ || counted > limit {
                break;
            }
            from = space.clone();
            from.extend_from_slice(last.as_bytes());
            from.push(1);
        }
        Ok(NamePage::from_found(found, limit))
    }

    async fn force_release(&self, name: &str) -> Result<bool> {
        check::name(self, name)?;
        let site = self.site(Operation::ForceRelease, name);
        let mut kv = self.inner.client.kv_client();
        let mut resp = self
            .bounded(
                site,
                kv.delete(self.key(name), Some(DeleteOptions::new().with_prev_key())),
            )
            .await?;
        lock(&self.inner.known).remove_name(name);
        let Some(prev) = resp.take_prev_kvs().into_iter().next() else {
            return Ok(false);
        };
        // The holder's etcd lease is not revoked: it may be a session other names hang on. The
        // holder's next renewal reads the key and finds it gone.
        if let Some(session) = self.session_by_id(prev.lease()) {
            session.forget_name(name);
        }
        Ok(true)
    }

    /// Hints from a watch on the store's prefix (see the crate docs, *Hints*): claims, releases
    /// and expiries by any process.
    fn changes(
        &self,
        topic: &lease_core::backend::notify::Topic,
    ) -> Option<lease_core::backend::notify::Wakeups> {
        Some(self.watch(topic))
    }
}
