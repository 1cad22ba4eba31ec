//! SQLite's hints: shared by every store of this process on one file and table, and fed by one
//! poller of `PRAGMA data_version`, which sees this process's commits and other processes' alike.
//!
//! While anybody waits, a poller on a connection of its own reads `PRAGMA
//! data_version` every [`POLL`] (no table read: the value changes only when another connection
//! committed); on a change it reads the rows of the subscribed names and groups only, and
//! notifies just the topics whose holder, term or liveness changed (a renewal wakes nobody).
//! A topic subscribed between two reads is notified at its first read unless `data_version`
//! shows that nothing was committed since before it was subscribed. The poller ends
//! [`LINGER`] after the last waiter left, or when every store on the file is dropped.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};
use std::time::Duration;

use lease_core::backend::notify::Topic;
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

use crate::hints::{Hints, Subscribed};

/// How often the poller reads `PRAGMA data_version` while anybody waits.
pub(crate) const POLL: Duration = Duration::from_millis(15);
/// How long the poller goes on after the last waiter left (a waiter between two waits keeps
/// it, and its connection, warm).
const LINGER: Duration = Duration::from_secs(1);
/// Names per `IN (…)` list (SQLite takes 32,766 parameters a statement).
const CHUNK: usize = 500;

type Key = (String, String, bool);

/// The hints of every store of this process on one file and table.
static FILES: LazyLock<Mutex<HashMap<Key, Weak<Hints>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The hints shared by the stores of this process on `options`' file and the lease table
/// `table` (`on`: with a poller for other processes' changes).
pub(crate) async fn shared(options: &SqliteConnectOptions, table: &str, on: bool) -> Arc<Hints> {
    let file = options.get_filename().to_path_buf();
    // An in-memory database has no path: its name is unique to its pool.
    let canonical = tokio::task::spawn_blocking(move || std::fs::canonicalize(&file).ok())
        .await
        .ok()
        .flatten()
        .unwrap_or_else(|| options.get_filename().to_path_buf());
    let key = (
        canonical.to_string_lossy().into_owned(),
        table.to_lowercase(),
        on,
    );
    let mut files = FILES.lock().unwrap_or_else(PoisonError::into_inner);
    files.retain(|_, h| h.strong_count() > 0);
    if let Some(h) = files.get(&key).and_then(Weak::upgrade) {
        return h;
    }
    // On: connected (the poller says otherwise while it cannot read), and the poller alone
    // notifies: it sees this process's commits as any other connection's, so a store's own
    // write notifying too would wake every waiter twice (a second claim or read each). Off:
    // the stores' own writes only.
    let hints = Arc::new(Hints::per_topic(on, !on));
    files.insert(key, Arc::downgrade(&hints));
    hints
}

/// The tables the poller reads.
#[derive(Debug, Clone)]
pub(crate) struct Tables {
    pub(crate) leases: String,
    pub(crate) partitions: String,
    /// The permit table: a lease topic covers the permits of its name too.
    pub(crate) permits: String,
}

/// Starts the poller for `hints` on the current tokio runtime (`None` outside one).
pub(crate) fn start(
    options: SqliteConnectOptions,
    tables: Tables,
    hints: Weak<Hints>,
) -> Option<tokio::task::AbortHandle> {
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(runtime.spawn(poll(options, tables, hints)).abort_handle())
}

/// What the poller saw of one topic: per row, (partition or 0, holder, term or epoch, live).
type Seen = Vec<(i64, String, i64, bool)>;

struct Poller {
    tables: Tables,
    conn: Option<SqliteConnection>,
    /// Which connection: a `data_version` compares only with one read on the same connection.
    generation: u64,
    last: Option<i64>,
    seen: HashMap<u64, Seen>,
}

async fn poll(options: SqliteConnectOptions, tables: Tables, hints: Weak<Hints>) {
    let mut p = Poller {
        tables,
        conn: None,
        generation: 0,
        last: None,
        seen: HashMap::new(),
    };
    let mut idle_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(POLL).await;
        let Some(h) = hints.upgrade() else { return };
        let stop = idle_since.is_some_and(|t| t.elapsed() >= LINGER);
        let Some(subs) = h.subscribed(stop) else {
            return;
        };
        if subs.is_empty() {
            idle_since.get_or_insert_with(tokio::time::Instant::now);
            p.seen.clear();
            continue;
        }
        idle_since = None;
        if p.conn.is_none() {
            match options.connect().await {
                Ok(c) => {
                    p.conn = Some(c);
                    p.generation += 1;
                    p.last = None;
                    p.seen.clear();
                }
                Err(e) => {
                    tracing::debug!(error = %e, "lease-sql hints: the poller cannot open the file");
                    h.set_connected(false);
                    continue;
                }
            }
        }
        match p.tick(&h, &subs).await {
            Ok(()) => h.set_connected(true),
            Err(e) => {
                tracing::debug!(error = %e, "lease-sql hints: the poller's read failed");
                p.conn = None;
                h.set_mark(None);
                h.set_connected(false);
            }
        }
    }
}

impl Poller {
    async fn tick(&mut self, h: &Hints, subs: &[Subscribed]) -> Result<(), sqlx::Error> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(());
        };
        let before = data_version(conn).await?;
        h.set_mark(Some((self.generation, before)));
        let changed = self.last != Some(before);
        let new: HashSet<u64> = subs
            .iter()
            .map(|(id, _, _)| *id)
            .filter(|id| !self.seen.contains_key(id))
            .collect();
        if changed || !new.is_empty() {
            let read: Vec<&Subscribed> = subs
                .iter()
                .filter(|(id, _, _)| changed || new.contains(id))
                .collect();
            let now_seen = read_topics(conn, &self.tables, &read).await?;
            let after = if new.is_empty() {
                before
            } else {
                data_version(conn).await?
            };
            for (id, topic, since) in read {
                let now = now_seen.get(topic).cloned().unwrap_or_default();
                let notify = match self.seen.get(id) {
                    Some(old) => *old != now,
                    // Trusted only when nothing was committed since before it was subscribed.
                    None => *since != Some((self.generation, after)),
                };
                if notify {
                    h.notify(topic);
                    if let Topic::Slots(job) = topic {
                        h.notify(&Topic::lease(job.clone()));
                    }
                }
                self.seen.insert(*id, now);
            }
        }
        let live: HashSet<u64> = subs.iter().map(|(id, _, _)| *id).collect();
        self.seen.retain(|id, _| live.contains(id));
        self.last = Some(before);
        Ok(())
    }
}

async fn data_version(conn: &mut SqliteConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("PRAGMA data_version")
        .fetch_one(conn)
        .await
}

/// The rows of `topics`: a lease's (or a job's) row and the permits of its name, a group's
/// partitions.
async fn read_topics(
    conn: &mut SqliteConnection,
    tables: &Tables,
    topics: &[&Subscribed],
) -> Result<HashMap<Topic, Seen>, sqlx::Error> {
    let mut names = Vec::new();
    let mut groups = Vec::new();
    for (_, topic, _) in topics {
        match topic {
            Topic::Lease(n) | Topic::Slots(n) => names.push(n.as_str()),
            Topic::Group(g) => groups.push(g.as_str()),
            _ => {}
        }
    }
    let leases = format!(
        "SELECT name, 0, holder, term, expires_at_ms FROM {} WHERE name IN (/*keys*/)",
        tables.leases
    );
    // The permits of the same names (a counted name's topic is its lease topic), each after
    // the plain lease's row (its permit number + 1 in the second place).
    let permits = format!(
        "SELECT name, permit_no + 1, holder, term, expires_at_ms FROM {} \
         WHERE name IN (/*keys*/) AND permit_no >= 0 ORDER BY name, permit_no",
        tables.permits
    );
    let partitions = format!(
        "SELECT group_name, partition_no, owner, epoch, expires_at_ms FROM {} \
         WHERE group_name IN (/*keys*/) ORDER BY group_name, partition_no",
        tables.partitions
    );
    let mut by_name: HashMap<String, Seen> = HashMap::new();
    let mut by_group: HashMap<String, Seen> = HashMap::new();
    for (select, keys, group) in [
        (&leases, &names, false),
        (&permits, &names, false),
        (&partitions, &groups, true),
    ] {
        let into = if group { &mut by_group } else { &mut by_name };
        for chunk in keys.chunks(CHUNK) {
            let sql = select.replace("/*keys*/", &marks(chunk.len()));
            let mut q = sqlx::query_as::<_, (String, i64, String, i64, i64)>(&sql);
            for key in chunk {
                q = q.bind(*key);
            }
            let rows = match q.fetch_all(&mut *conn).await {
                Ok(rows) => rows,
                // No partition or permit table yet: none of those.
                Err(e) if crate::error::is_missing_table(&e) => Vec::new(),
                Err(e) => return Err(e),
            };
            let now = super::clock::now_ms();
            for (key, index, holder, term, expires) in rows {
                into.entry(key)
                    .or_default()
                    .push((index, holder, term, expires > now));
            }
        }
    }
    let mut out = HashMap::new();
    for (_, topic, _) in topics {
        let seen = match topic {
            Topic::Lease(n) | Topic::Slots(n) => by_name.get(n).cloned(),
            Topic::Group(g) => by_group.get(g).cloned(),
            _ => None,
        };
        out.insert(topic.clone(), seen.unwrap_or_default());
    }
    Ok(out)
}

/// `?, ?, …`, `n` of them.
fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}
