//! `lease members` and `lease owners`: records written through the library, then read by the
//! binary as a table and as JSON, on every store a server is there for.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use lease_conformance::GroupStore;

/// What the records were written with, and what the binary must show.
struct Written {
    service: String,
    group: String,
    ttl: Duration,
    /// `(partition, owner, epoch)` of the live leases, by partition.
    live: Vec<(u32, String, u64)>,
}

/// Writes members and partition leases through `store`: three members of which one left, and
/// four partitions of which one was released and one changed hands.
async fn populate(store: &dyn GroupStore) -> Written {
    let service = unique_name("svc");
    let group = unique_name("grp");
    let ttl = store
        .capabilities()
        .fixed_ttl
        .unwrap_or(Duration::from_secs(60));
    let groups = |gs: &[&str]| gs.iter().map(|g| (*g).to_owned()).collect::<Vec<_>>();
    store
        .heartbeat(&service, "node-b", "10.0.0.8:80", ttl, &groups(&[&group]))
        .await
        .unwrap();
    store
        .heartbeat(&service, "node-a", "", ttl, &groups(&[&group, "mail"]))
        .await
        .unwrap();
    store
        .heartbeat(&service, "node-c", "10.0.0.9:80", ttl, &[])
        .await
        .unwrap();
    assert!(store.leave(&service, "node-c").await.unwrap());

    let (a, b) = ("node-a@00000000000000aa", "node-b@00000000000000bb");
    let take = |p: u32, owner: &'static str| {
        let group = group.clone();
        async move {
            store
                .acquire_partition(&group, p, owner, ttl)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("partition {p} is free"))
        }
    };
    let p2 = take(2, a).await;
    let p0 = take(0, b).await;
    take(1, a).await;
    assert_eq!(store.release_partitions(&group, &[1], a).await.unwrap(), 1);
    // Partition 5 changes hands: b, released, then a with a higher epoch.
    let first = take(5, b).await;
    assert_eq!(store.release_partitions(&group, &[5], b).await.unwrap(), 1);
    let p5 = take(5, a).await;
    assert!(p5.epoch > first.epoch, "{p5:?} after {first:?}");
    Written {
        service,
        group,
        ttl,
        live: vec![
            (0, b.to_owned(), p0.epoch),
            (2, a.to_owned(), p2.epoch),
            (5, a.to_owned(), p5.epoch),
        ],
    }
}

/// Runs `lease ARGS…` on `url`, expecting exit 0 and nothing on stderr; returns stdout.
fn shown(url: &str, args: &[&str]) -> String {
    let out = lease_output(url, args, Duration::from_secs(30));
    assert_eq!(code(out.status), 0, "{args:?}: {}", stderr(&out));
    // Redis with allow_volatile logs one warning; nothing else may be said.
    let said: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| !l.contains("allow_volatile"))
        .map(str::to_owned)
        .collect();
    assert!(said.is_empty(), "{args:?}: {said:?}");
    stdout(&out)
}

/// Splits a table line at the start of its last column (`EXPIRES IN`, at `at` chars).
fn split_last(line: &str, at: usize) -> (&str, &str) {
    let byte = line.char_indices().nth(at).map_or(line.len(), |(i, _)| i);
    line.split_at(byte)
}

/// Parses a time left as the table shows it (`250ms`, `12.4s`, `1m05s`) into milliseconds.
fn left_ms(text: &str) -> u64 {
    if let Some(ms) = text.strip_suffix("ms") {
        return ms.parse().unwrap();
    }
    if let Some((m, s)) = text.split_once('m') {
        let s: u64 = s.strip_suffix('s').unwrap().parse().unwrap();
        return (m.parse::<u64>().unwrap() * 60 + s) * 1000;
    }
    let s: f64 = text.strip_suffix('s').unwrap().parse().unwrap();
    (s * 1000.0) as u64
}

/// Replaces every `"expires_in_ms":<n>` in `json` with `"expires_in_ms":N` and returns the
/// numbers.
fn take_expiries(json: &str) -> (String, Vec<u64>) {
    let key = "\"expires_in_ms\":";
    let mut out = String::new();
    let mut found = Vec::new();
    let mut rest = json;
    while let Some(at) = rest.find(key) {
        let (before, after) = rest.split_at(at + key.len());
        out.push_str(before);
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        found.push(digits.parse().unwrap());
        out.push('N');
        rest = &after[digits.len()..];
    }
    out.push_str(rest);
    (out, found)
}

/// Asserts a time left, in ms, is within the TTL the records were written with, and not long
/// gone by (the test takes seconds, not the TTL).
fn assert_left(ms: u64, ttl: Duration) {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap();
    assert!(ms <= ttl_ms, "{ms} ms left of a {ttl_ms} ms TTL");
    assert!(ms + 10_000 >= ttl_ms, "{ms} ms left of a {ttl_ms} ms TTL");
}

/// The members table: a header, then the live members by node id, aligned; the one that left
/// is missing.
fn check_members(url: &str, w: &Written) {
    let table = shown(url, &["members", &w.service]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    let a_groups = format!("{},mail", w.group);
    let gw = a_groups.len();
    let header = format!(
        "{:<6}  {:<11}  {:<gw$}  EXPIRES IN",
        "NODE", "ADDRESS", "GROUPS"
    );
    assert_eq!(lines[0], header, "{table}");
    let at = header.len() - "EXPIRES IN".len();
    for (line, want) in lines[1..].iter().zip([
        format!("{:<6}  {:<11}  {:<gw$}  ", "node-a", "-", a_groups),
        format!("{:<6}  {:<11}  {:<gw$}  ", "node-b", "10.0.0.8:80", w.group),
    ]) {
        let (front, left) = split_last(line, at);
        assert_eq!(front, want, "{table}");
        assert_left(left_ms(left), w.ttl);
    }

    let json = shown(url, &["members", "--json", &w.service]);
    assert_eq!(json.lines().count(), 1, "{json}");
    let (json, left) = take_expiries(&json);
    assert_eq!(
        json,
        format!(
            "[{{\"node\":\"node-a\",\"address\":\"\",\"groups\":[\"{g}\",\"mail\"],\"expires_in_ms\":N}},\
             {{\"node\":\"node-b\",\"address\":\"10.0.0.8:80\",\"groups\":[\"{g}\"],\"expires_in_ms\":N}}]\n",
            g = w.group
        )
    );
    assert_eq!(left.len(), 2);
    left.iter().for_each(|ms| assert_left(*ms, w.ttl));
}

/// The owners table: a header, then the live leases by partition with their epochs; the
/// released one is missing.
fn check_owners(url: &str, w: &Written) {
    let table = shown(url, &["owners", &w.group]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1 + w.live.len(), "{table}");
    let ew = w
        .live
        .iter()
        .map(|(_, _, e)| e.to_string().len())
        .max()
        .unwrap()
        .max("EPOCH".len());
    let ow = "node-a@00000000000000aa".len();
    let header = format!("PARTITION  {:<ow$}  {:<ew$}  EXPIRES IN", "OWNER", "EPOCH");
    assert_eq!(lines[0], header, "{table}");
    let at = header.len() - "EXPIRES IN".len();
    for (line, (p, owner, epoch)) in lines[1..].iter().zip(&w.live) {
        let (front, left) = split_last(line, at);
        assert_eq!(
            front,
            format!("{p:<9}  {owner:<ow$}  {epoch:<ew$}  "),
            "{table}"
        );
        assert_left(left_ms(left), w.ttl);
    }

    let json = shown(url, &["owners", "--json", &w.group]);
    assert_eq!(json.lines().count(), 1, "{json}");
    let (json, left) = take_expiries(&json);
    let items: Vec<String> = w
        .live
        .iter()
        .map(|(p, owner, epoch)| {
            format!(
                "{{\"partition\":{p},\"owner\":\"{owner}\",\"epoch\":{epoch},\"expires_in_ms\":N}}"
            )
        })
        .collect();
    assert_eq!(json, format!("[{}]\n", items.join(",")));
    assert_eq!(left.len(), w.live.len());
    left.iter().for_each(|ms| assert_left(*ms, w.ttl));
}

/// Nothing live: exit 0, nothing on stdout for the table, `[]` for JSON, one note on stderr.
fn check_empty(url: &str) {
    let nobody = unique_name("nobody");
    for (cmd, note) in [
        (
            "members",
            format!("lease: service '{nobody}' has no live members"),
        ),
        (
            "owners",
            format!("lease: group '{nobody}' has no live partition leases"),
        ),
    ] {
        let out = lease_output(url, &[cmd, &nobody], Duration::from_secs(30));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        assert_eq!(stdout(&out), "");
        assert!(stderr(&out).contains(&note), "{}", stderr(&out));
        let out = lease_output(url, &[cmd, "--json", &nobody], Duration::from_secs(30));
        assert_eq!(code(out.status), 0, "{}", stderr(&out));
        assert_eq!(stdout(&out), "[]\n");
        assert!(stderr(&out).contains(&note), "{}", stderr(&out));
    }
}

/// Populates the store `connect` opens, then checks both commands against `url` (the same
/// store, for the binary). One runtime for both: the store's connections live on it.
fn members_and_owners_on<S, F>(connect: F, url: &str)
where
    S: GroupStore + 'static,
    F: std::future::Future<Output = lease::Result<S>>,
{
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let written = rt.block_on(async {
        let store = connect.await.unwrap();
        populate(&store).await
    });
    check_members(url, &written);
    check_owners(url, &written);
    check_empty(url);
}

#[test]
fn members_and_owners_on_sqlite() {
    let dir = TempDir::new("groups");
    let url = dir.sqlite();
    let connect = lease::sql::SqliteStore::connect(&url, lease::sql::SqlConfig::default());
    members_and_owners_on(connect, &url);
}

#[test]
fn members_and_owners_on_postgres() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    let connect = lease::sql::PostgresStore::connect(&url, lease::sql::SqlConfig::default());
    members_and_owners_on(connect, &url);
}

#[test]
fn members_and_owners_on_mysql() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    let connect = lease::sql::MySqlStore::connect(&url, lease::sql::SqlConfig::default());
    members_and_owners_on(connect, &url);
}

#[test]
fn members_and_owners_on_redis() {
    let Some(url) = lease_conformance::env::server_url("redis") else {
        return;
    };
    let config = lease::redis::RedisConfig::new().allow_volatile(true);
    let sep = if url.contains('?') { '&' } else { '?' };
    let for_cli = format!("{url}{sep}allow_volatile=1");
    members_and_owners_on(lease::redis::RedisStore::connect(&url, config), &for_cli);
}

#[test]
fn members_and_owners_on_nats() {
    let Some(url) = lease_conformance::env::server_url("nats") else {
        return;
    };
    // The bucket `lease members`/`owners` read: the one for the default 15 s leases.
    let config = lease::nats::NatsConfig::new(lease::Timings::default().lease());
    members_and_owners_on(lease::nats::NatsStore::connect(&url, config), &url);
}
