//! MariaDB: `mariadb-install-db` into the temporary directory, then `mariadbd` with no option
//! files on its own port and socket (as root, `--user=root`). Root connects from 127.0.0.1
//! without a password; an init file creates the `soak` database at every start. Stopped with
//! SIGTERM (sessions killed, InnoDB shut down cleanly; every commit was flushed).

use std::fs;
use std::path::{Path, PathBuf};

use super::{Launch, SetupError, args, find_program, run_setup, running_as_root};

/// Creates the data directory in `dir/data` and returns how to start it on `port`.
pub(super) fn prepare(dir: &Path, port: u16, log: PathBuf) -> Result<Launch, SetupError> {
    let server = find_program(&["mariadbd", "mysqld"])
        .ok_or_else(|| SetupError::Missing("no mariadbd or mysqld".to_owned()))?;
    let install = find_program(&["mariadb-install-db", "mysql_install_db"]).ok_or_else(|| {
        SetupError::Missing("no mariadb-install-db or mysql_install_db".to_owned())
    })?;
    let root = running_as_root();
    let data = dir.join("data");
    let mut install_args = args([
        "--no-defaults".to_owned(),
        format!("--datadir={}", data.display()),
        "--auth-root-authentication-method=normal".to_owned(),
        "--skip-test-db".to_owned(),
    ]);
    if root {
        install_args.push("--user=root".into());
    }
    run_setup(&install, &install_args, None)?;
    let init = dir.join("init.sql");
    fs::write(&init, "CREATE DATABASE IF NOT EXISTS soak;\n")
        .map_err(|e| SetupError::Failed(format!("writing {}: {e}", init.display())))?;
    let mut server_args = args([
        "--no-defaults".to_owned(),
        format!("--datadir={}", data.display()),
        format!("--port={port}"),
        format!("--socket={}", dir.join("mysqld.sock").display()),
        format!("--pid-file={}", dir.join("mysqld.pid").display()),
        format!("--init-file={}", init.display()),
        "--bind-address=127.0.0.1".to_owned(),
        "--skip-name-resolve".to_owned(),
        "--performance-schema=off".to_owned(),
        "--innodb-buffer-pool-size=32M".to_owned(),
        "--innodb-flush-log-at-trx-commit=1".to_owned(),
    ]);
    if root {
        server_args.push("--user=root".into());
    }
    Ok(Launch {
        program: server,
        args: server_args,
        user: None,
        stop_signal: "TERM",
        log,
    })
}

/// The URL of the server at `addr` (the server itself or a proxy in front of it).
pub(super) fn url(addr: std::net::SocketAddr) -> String {
    format!("mysql://root@{addr}/soak")
}
