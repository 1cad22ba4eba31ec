//! `lease fence`: scripts under `lease run` write through a fence (SQLite, PostgreSQL, MySQL,
//! Redis, a file) with nothing but the target on their command line; a zombie of an older term
//! is refused with exit 76 and one line on stderr, and nothing it sent is written; bad input is
//! refused before any I/O.
//!
//! Each refusal here was seen to fail with the fences' checks removed: `cargo test -p lease-cli
//! --features break-fence-check-for-tests --test fence` (the zombie's write then lands).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use lease::redis::redis;
use lease::sql::sqlx;

use common::*;

/// `lease ARGS…` with none of the variables a surrounding `lease run` would have set (the test
/// itself may run under one), and `env` added.
fn lease_with(store: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = lease(store, args);
    for var in ["LEASE_TERM", "LEASE_NAME", "LEASE_PERMIT", "LEASE_INSTANCE"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}

fn run_to_end(mut cmd: Command) -> Output {
    finish(cmd.spawn().unwrap(), Duration::from_secs(60))
}

/// `lease run --ttl 15s NAME -- sh -c SCRIPT` on `store`, with `$LEASE_BIN` the binary under
/// test and `env` in the script's environment; fails unless it exits 0.
fn run_script(store: &str, name: &str, script: &str, env: &[(&str, &str)]) {
    let mut env = env.to_vec();
    env.push(("LEASE_BIN", LEASE));
    let out = run_to_end(lease_with(
        store,
        &["run", "--ttl", "15s", name, "--", "sh", "-ec", script],
        &env,
    ));
    assert_eq!(
        code(out.status),
        0,
        "the script under lease run failed: {}",
        stderr(&out)
    );
}

/// Asserts `out` is a refusal: exit 76, one line on stderr naming the resource and the tokens.
fn assert_refused(out: &Output, resource: &str, fence: u64, offered: u64) {
    let err = stderr(out);
    assert_eq!(code(out.status), 76, "not refused: {err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let said =
        format!("lease: refused: resource '{resource}' has seen token {fence} > {offered}; stop");
    assert!(err.starts_with(&said), "{err}");
    assert!(err.contains("lease's own exit code 76"), "{err}");
    assert!(stdout(out).is_empty(), "{}", stdout(out));
}

/// A database the test reads and sets up directly (sqlx, on a runtime of its own).
struct Db {
    rt: tokio::runtime::Runtime,
    pool: Pool,
}

enum Pool {
    Postgres(sqlx::PgPool),
    MySql(sqlx::MySqlPool),
    Sqlite(sqlx::SqlitePool),
}

impl Db {
    fn connect(url: &str) -> Db {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let pool = rt.block_on(async {
            if url.starts_with("postgres") {
                Pool::Postgres(sqlx::PgPool::connect(url).await.unwrap())
            } else if url.starts_with("mysql") {
                Pool::MySql(sqlx::MySqlPool::connect(url).await.unwrap())
            } else {
                Pool::Sqlite(sqlx::SqlitePool::connect(url).await.unwrap())
            }
        });
        Db { rt, pool }
    }

    fn exec(&self, sql: &str) {
        self.rt.block_on(async {
            match &self.pool {
                Pool::Postgres(p) => sqlx::raw_sql(sql).execute(p).await.map(drop),
                Pool::MySql(p) => sqlx::raw_sql(sql).execute(p).await.map(drop),
                Pool::Sqlite(p) => sqlx::raw_sql(sql).execute(p).await.map(drop),
            }
            .unwrap()
        });
    }

    /// The first column of `sql`'s rows, as integers.
    fn ints(&self, sql: &str) -> Vec<i64> {
        self.rt.block_on(async {
            match &self.pool {
                Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_all(p).await,
                Pool::MySql(p) => sqlx::query_scalar(sql).fetch_all(p).await,
                Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_all(p).await,
            }
            .unwrap()
        })
    }
}

/// Two scripts under `lease run` (two terms) insert their `$LEASE_TERM` into a table of `url`
/// through `lease fence sql URL -- 'INSERT …'`; then the first term's zombie (its
/// `LEASE_TERM` and `LEASE_NAME`) is refused, with one statement and with two, and nothing of
/// it is written; a failing statement rolls the fence's raise back; the newest term writes
/// again.
fn sql_under_lease_run(url: &str) {
    let dir = TempDir::new("fence-sql");
    let store = dir.sqlite();
    let name = unique_name("fence-sql");
    let table = format!("cli_fence_{}", unique());
    let db = Db::connect(url);
    db.exec(&format!("CREATE TABLE {table} (term BIGINT NOT NULL)"));
    let script = format!(
        "\"$LEASE_BIN\" fence sql \"$DB\" -- \"INSERT INTO {table} (term) VALUES ($LEASE_TERM)\""
    );
    run_script(&store, &name, &script, &[("DB", url)]);
    run_script(&store, &name, &script, &[("DB", url)]);
    let select = format!("SELECT term FROM {table} ORDER BY term");
    let terms = db.ints(&select);
    assert_eq!(terms.len(), 2, "{terms:?}");
    let (old, new) = (terms[0], terms[1]);
    assert!(old < new, "{terms:?}");
    let fence = db.ints(&format!(
        "SELECT token FROM lease_fences WHERE resource = '{name}'"
    ));
    assert_eq!(fence, [new], "the fence holds the newest term's token");

    // The first term's zombie, as its script would run it after a pause.
    let insert = format!("INSERT INTO {table} (term) VALUES (-1)");
    let (old_token, new_token) = (old.to_string(), new.to_string());
    let zombie_env = [
        ("LEASE_TERM", old_token.as_str()),
        ("LEASE_NAME", name.as_str()),
    ];
    let out = run_to_end(lease_with(
        &store,
        &["fence", "sql", url, "--", &insert],
        &zombie_env,
    ));
    assert_refused(&out, &name, new as u64, old as u64);
    let out = run_to_end(lease_with(
        &store,
        &[
            "fence",
            "sql",
            url,
            "--resource",
            &name,
            "--token",
            &old_token,
            "--",
            &insert,
            &insert,
        ],
        &[],
    ));
    assert_refused(&out, &name, new as u64, old as u64);
    assert_eq!(
        db.ints(&select),
        [old, new],
        "a refused statement was written"
    );

    // A statement that fails: exit 70, and the fence's raise is rolled back with it.
    let higher = (new + 5).to_string();
    let out = run_to_end(lease_with(
        &store,
        &[
            "fence",
            "sql",
            url,
            "--resource",
            &name,
            "--token",
            &higher,
            "--",
            &insert,
            "INSERT INTO no_such_table_here VALUES (1)",
        ],
        &[],
    ));
    assert_eq!(code(out.status), 70, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("statement 2 of 2"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        db.ints(&select),
        [old, new],
        "a failed transaction was committed"
    );

    // The newest term writes again (an equal token).
    let new_env = [
        ("LEASE_TERM", new_token.as_str()),
        ("LEASE_NAME", name.as_str()),
    ];
    let out = run_to_end(lease_with(
        &store,
        &["fence", "sql", url, "--", &insert],
        &new_env,
    ));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
    assert_eq!(db.ints(&select), [-1, old, new]);
    db.exec(&format!("DROP TABLE {table}"));
    db.exec(&format!(
        "DELETE FROM lease_fences WHERE resource = '{name}'"
    ));
}

#[test]
fn sql_on_sqlite_under_lease_run_and_a_zombie_refused() {
    let dir = TempDir::new("fence-sqlite-db");
    let url = format!("sqlite://{}?mode=rwc", dir.file("app.db").display());
    sql_under_lease_run(&url);
}

#[test]
fn sql_on_postgres_under_lease_run_and_a_zombie_refused() {
    let Some(url) = lease_conformance::env::server_url("postgres") else {
        return;
    };
    sql_under_lease_run(&url);
}

#[test]
fn sql_on_mysql_under_lease_run_and_a_zombie_refused() {
    let Some(url) = lease_conformance::env::server_url("mysql") else {
        return;
    };
    sql_under_lease_run(&url);

    // The same server as mariadb://, as the store URLs take it.
    let Some(rest) = url.strip_prefix("mysql://") else {
        panic!("{url}")
    };
    let mariadb = format!("mariadb://{rest}");
    let resource = unique_name("fence-mariadb");
    let out = run_to_end(lease_with(
        "sqlite:///nonexistent/unused.db",
        &[
            "fence",
            "sql",
            &mariadb,
            "--resource",
            &resource,
            "--token",
            "1",
            "--",
            "SELECT 1",
        ],
        &[],
    ));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let db = Db::connect(&url);
    let fence = db.ints(&format!(
        "SELECT token FROM lease_fences WHERE resource = '{resource}'"
    ));
    assert_eq!(fence, [1]);
    db.exec(&format!(
        "DELETE FROM lease_fences WHERE resource = '{resource}'"
    ));
}

/// Two scripts under `lease run` set a key through `lease fence redis URL set KEY VALUE`; the
/// first term's zombie is refused for `set` and `del`, and the key keeps the newest value.
#[test]
fn redis_under_lease_run_and_a_zombie_refused() {
    let Some(url) = lease_conformance::env::server_url("redis") else {
        return;
    };
    let dir = TempDir::new("fence-redis");
    let store = dir.sqlite();
    let name = unique_name("fence-redis");
    let key = format!("{name}:value");
    let script = "\"$LEASE_BIN\" fence redis \"$REDIS\" set \"$KEY\" \"term $LEASE_TERM\"";
    let env = [("REDIS", url.as_str()), ("KEY", key.as_str())];
    run_script(&store, &name, script, &env);
    run_script(&store, &name, script, &env);
    let mut conn = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    // A key the zombie's HSET turned into a hash answers its error, not a panic.
    let get = |conn: &mut redis::Connection| -> Option<String> {
        redis::cmd("GET")
            .arg(&key)
            .query::<Option<String>>(conn)
            .unwrap_or_else(|e| Some(format!("<{e}>")))
    };
    let value = get(&mut conn).unwrap();
    let new: u64 = value.strip_prefix("term ").unwrap().parse().unwrap();
    let fence: String = redis::cmd("GET")
        .arg(format!("lease-fence:{name}"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(fence, new.to_string());
    let (old, new_token) = ((new - 1).to_string(), new.to_string());
    let k = key.as_str();

    let zombie_env = [("LEASE_TERM", old.as_str()), ("LEASE_NAME", name.as_str())];
    for write in [
        &["set", k, "zombie"][..],
        &["del", k],
        &["hset", k, "f", "zombie"],
    ] {
        let mut args = vec!["fence", "redis", &url];
        args.extend_from_slice(write);
        let out = run_to_end(lease_with(&store, &args, &zombie_env));
        assert_refused(&out, &name, new, new - 1);
    }
    assert_eq!(
        get(&mut conn).as_deref(),
        Some(&*value),
        "a refused write landed"
    );

    let new_env = [
        ("LEASE_TERM", new_token.as_str()),
        ("LEASE_NAME", name.as_str()),
    ];
    let out = run_to_end(lease_with(
        &store,
        &["fence", "redis", &url, "del", k],
        &new_env,
    ));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    assert_eq!(get(&mut conn), None);
    let _: () = redis::cmd("DEL")
        .arg(format!("lease-fence:{name}"))
        .query(&mut conn)
        .unwrap();
}

/// Two scripts under `lease run` write a file from their stdin through `lease fence file
/// PATH`; the first term's zombie is refused and the file keeps the newest contents, with no
/// temporary file left behind.
#[test]
fn file_under_lease_run_and_a_zombie_refused() {
    let dir = TempDir::new("fence-file");
    let store = dir.sqlite();
    let name = unique_name("fence-file");
    let out_file = dir.file("report.txt");
    let out_path = out_file.display().to_string();
    let script =
        "printf 'written under term %s\\n' \"$LEASE_TERM\" | \"$LEASE_BIN\" fence file \"$OUT\"";
    run_script(&store, &name, script, &[("OUT", &out_path)]);
    run_script(&store, &name, script, &[("OUT", &out_path)]);
    let contents = std::fs::read_to_string(&out_file).unwrap();
    let new: u64 = contents
        .trim()
        .strip_prefix("written under term ")
        .unwrap()
        .parse()
        .unwrap();

    let old = (new - 1).to_string();
    let mut zombie = lease_with(
        &store,
        &["fence", "file", &out_path],
        &[("LEASE_TERM", &old)],
    );
    zombie.stdin(std::process::Stdio::piped());
    let mut child = zombie.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"the zombie's report\n").unwrap();
    let out = finish(child, Duration::from_secs(30));
    assert_refused(&out, &out_path, new, new - 1);
    assert_eq!(std::fs::read_to_string(&out_file).unwrap(), contents);
    let mut left: Vec<String> = std::fs::read_dir(dir.file(".lease-fence"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["report.txt.lock", "report.txt.token"]);
}

/// Under `lease run --permits 2`, the default resource is the permit's own
/// (`NAME#permit-N`), so two permits' scripts write side by side.
#[test]
fn the_default_resource_under_permits_is_the_permits() {
    let dir = TempDir::new("fence-permits");
    let store = dir.sqlite();
    let db_url = format!("sqlite://{}?mode=rwc", dir.file("app.db").display());
    let name = unique_name("fence-permits");
    let out = run_to_end(lease_with(
        &store,
        &[
            "run",
            "--ttl",
            "15s",
            "--permits",
            "2",
            &name,
            "--",
            "sh",
            "-ec",
            "\"$LEASE_BIN\" fence sql \"$DB\" -- 'SELECT 1'",
        ],
        &[("LEASE_BIN", LEASE), ("DB", &db_url)],
    ));
    assert_eq!(code(out.status), 0, "{}", stderr(&out));
    let db = Db::connect(&db_url);
    let resources = db.rt.block_on(async {
        let Pool::Sqlite(p) = &db.pool else {
            unreachable!()
        };
        sqlx::query_scalar::<_, String>("SELECT resource FROM lease_fences")
            .fetch_all(p)
            .await
            .unwrap()
    });
    assert_eq!(resources, [format!("{name}#permit-0")]);
}

/// A command line's extra arguments, its environment, the exit code and what stderr says.
type BadCase<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], i32, &'a str);

/// A token of 0, not a number or missing is a usage error (64); an empty or control-character
/// resource name a bad name (65); a URL of another kind 68 — all before any I/O (the database
/// URL points at a closed port: a connection attempt would exit 69).
#[test]
fn bad_input_is_refused_before_any_io() {
    let dir = TempDir::new("fence-bad");
    let store = dir.sqlite();
    let closed = "postgres://nobody@127.0.0.1:1/none";
    let cases: &[BadCase] = &[
        (
            &["--resource", "r", "--token", "0"],
            &[],
            64,
            "0 is not a fencing token",
        ),
        (
            &["--resource", "r"],
            &[("LEASE_TERM", "0")],
            64,
            "LEASE_TERM 0",
        ),
        (
            &["--resource", "r", "--token", "abc"],
            &[],
            64,
            "is not a fencing token",
        ),
        (
            &["--resource", "r", "--token=-3"],
            &[],
            64,
            "is not a fencing token",
        ),
        (&["--resource", "r"], &[], 64, "no fencing token"),
        (&["--token", "3"], &[], 64, "no resource to fence"),
        (
            &["--resource", "", "--token", "3"],
            &[],
            65,
            "name is empty",
        ),
        (
            &["--resource", "a\nb", "--token", "3"],
            &[],
            65,
            "control character",
        ),
        (
            &[],
            &[("LEASE_TERM", "3"), ("LEASE_NAME", "a\u{1b}b")],
            65,
            "control character",
        ),
    ];
    for (extra, env, want, says) in cases {
        let mut args = vec!["fence", "sql", closed];
        args.extend_from_slice(extra);
        args.extend(["--", "SELECT 1"]);
        let out = run_to_end(lease_with(&store, &args, env));
        let err = stderr(&out);
        assert_eq!(code(out.status), *want, "{extra:?} {env:?}: {err}");
        assert!(err.contains(says), "{extra:?} {env:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    let ok = ["--resource", "r", "--token", "3"];
    for (args, want, says) in [
        (
            vec!["fence", "sql", "redis://127.0.0.1:1"],
            68,
            "use `lease fence redis`",
        ),
        (
            vec!["fence", "redis", "postgres://127.0.0.1:1/x"],
            68,
            "lease fence sql",
        ),
        (vec!["fence", "sql", "not a url"], 67, "not a database URL"),
        (
            vec![
                "fence",
                "sql",
                closed,
                "--table",
                "no;such",
                "--token",
                "3",
                "--resource",
                "r",
            ],
            65,
            "fence table name",
        ),
    ] {
        let mut args = args.clone();
        if !args.contains(&"--token") {
            args.extend(ok);
        }
        if args[1] == "sql" {
            args.extend(["--", "SELECT 1"]);
        } else {
            args.extend(["set", "k", "v"]);
        }
        let out = run_to_end(lease_with(&store, &args, &[]));
        let err = stderr(&out);
        assert_eq!(code(out.status), want, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }

    // A file path that names no file, and the fences' own folder.
    for path in [
        dir.path().display().to_string() + "/..",
        dir.file(".lease-fence").display().to_string(),
    ] {
        let out = run_to_end(lease_with(
            &store,
            &["fence", "file", &path, "--token", "3"],
            &[],
        ));
        assert_eq!(code(out.status), 65, "{path}: {}", stderr(&out));
    }
    // Without `--`, the statement is not taken as one.
    let out = run_to_end(lease_with(
        &store,
        &[
            "fence",
            "sql",
            closed,
            "--token",
            "3",
            "--resource",
            "r",
            "SELECT 1",
        ],
        &[],
    ));
    assert_eq!(code(out.status), 64, "{}", stderr(&out));
}

/// Refused writes and the help name the exit code.
#[test]
fn the_help_documents_the_fence_and_its_exit_code() {
    let out = run_to_end(lease_with(
        "sqlite:///nonexistent",
        &["fence", "--help"],
        &[],
    ));
    assert_eq!(code(out.status), 0);
    let help = stdout(&out);
    for says in ["LEASE_TERM", "76", "lease fence sql URL", "#permit-N"] {
        assert!(help.contains(says), "{says}: {help}");
    }
    let out = run_to_end(lease_with(
        "sqlite:///nonexistent",
        &["fence", "sql", "--help"],
        &[],
    ));
    assert!(stdout(&out).contains("76"), "{}", stdout(&out));
}
