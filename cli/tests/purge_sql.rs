//! `cairn purge --database-url`: two purger processes on one MySQL/PostgreSQL database at one
//! tick (one purges, the other logs "skipping pass"), and a holder process whose connection an
//! operator kills (it fails, and the lock is free for the next). The servers come from
//! `CAIRN_MYSQL_URL` / `CAIRN_PG_URL`; without them these tests print a notice and pass.
//!
//! To make "at one tick" certain rather than likely, a third session holds a row lock on one
//! eligible row: the first process takes the advisory lock and then waits in its `DELETE`,
//! holding the lock for as long as the test needs.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

#[path = "../../purger/tests/common/sql.rs"]
mod sql;

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sql::SqlClient;

const TABLE: &str = "t_cube_sandbox_spec";

#[test]
fn mysql_two_processes_at_one_tick_purge_once() {
    two_processes_at_one_tick("CAIRN_MYSQL_URL");
}

#[test]
fn postgres_two_processes_at_one_tick_purge_once() {
    two_processes_at_one_tick("CAIRN_PG_URL");
}

/// A loop bounded by `--passes` over a server that is down: each pass fails (after a few
/// connection attempts), the loop goes on, and the exit status says so.
#[test]
fn a_loop_over_a_server_that_is_down_goes_on_and_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("purge.yaml");
    std::fs::write(
        &config,
        "soft_delete_purge:\n  enable: true\n  interval: 1m\n",
    )
    .expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args([
            "purge",
            "--database-url",
            "mysql://root:secret@127.0.0.1:1/test",
        ])
        .arg("--config")
        .arg(&config)
        .args(["--passes", "1", "--no-migrate"])
        .output()
        .expect("run cairn");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("purge pass failed"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
}

/// A database (MySQL) or schema (PostgreSQL) of the test's own, dropped afterwards.
struct Scratch {
    admin: SqlClient,
    client: SqlClient,
    url: String,
    drop_sql: String,
}

impl Scratch {
    fn new(var: &str) -> Option<Scratch> {
        let Ok(base) = std::env::var(var) else {
            eprintln!("skipped: {var} is not set (.ci/run sets it)");
            return None;
        };
        let admin = SqlClient::connect(&base)
            .unwrap_or_else(|e| panic!("{var} is set but the server cannot be reached: {e}"));
        let name = format!("cairn_cli_{}_{}", std::process::id(), var.len());
        let (url, drop_sql) = admin.scratch(&base, &name);
        let client = SqlClient::connect(&url).expect("connect to the scratch database");
        Some(Scratch {
            admin,
            client,
            url,
            drop_sql,
        })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.admin.try_exec(&self.drop_sql);
    }
}

fn purge(url: &str, config: &std::path::Path, lock: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_cairn"));
    command
        .args([
            "purge",
            "--once",
            "--json",
            "--database-url",
            url,
            "--config",
        ])
        .arg(config)
        // Migrating would wait for the blocking session's table lock (MySQL's metadata lock).
        .args(["--lock", lock, "--tables", TABLE, "--no-migrate"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn finish(child: Child) -> (i32, serde_json::Value, String) {
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&stderr).into_owned();
    let report = serde_json::from_slice(&stdout).unwrap_or_else(|e| {
        panic!(
            "report: {e}: {}\n{stderr}",
            String::from_utf8_lossy(&stdout)
        )
    });
    (status.code().unwrap_or(-1), report, stderr)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "timed out: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn two_processes_at_one_tick(var: &str) {
    let Some(db) = Scratch::new(var) else { return };
    let c = &db.client;
    c.exec(&c.soft_delete_table(TABLE));
    // Soft-deleted in 2020: long past the default 7-day retention on the system clock.
    let old = 1_577_836_800_000;
    let ids = c.fill(TABLE, "old", 20, |i| Some(old + i));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("purge.yaml");
    // The test writes its MySQL `DATETIME` values in UTC.
    std::fs::write(
        &config,
        "soft_delete_purge:\n  enable: true\n  time_zone: UTC\n",
    )
    .expect("config");
    let lock = format!("cli_two_{}_{}", std::process::id(), var.len());

    // One tick: the first takes the lock and waits behind the row lock; the second, started
    // meanwhile, skips.
    let blocker = SqlClient::connect(&db.url).expect("a third session");
    let t = c.quote(TABLE);
    blocker.lock_row(TABLE, ids[0]);
    let first = purge(&db.url, &config, &lock).spawn().expect("spawn");
    wait_until("the first process holds the lock", || {
        c.lock_holder(&lock).is_some()
    });
    let second = purge(&db.url, &config, &lock).spawn().expect("spawn");
    let (code, report, stderr) = finish(second);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["skipped"], true, "{report}");
    assert!(stderr.contains("skipping pass"), "{stderr}");
    blocker.exec("ROLLBACK");
    let (code, report, stderr) = finish(first);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["tables"][0]["purged"], 20, "{report}");
    assert_eq!(c.int(&format!("SELECT COUNT(*) FROM {t}")), 0);

    // The holder's connection killed: it fails, and the lock is the next process's. The first
    // process has exited, but the server frees its lock when it notices the closed connection:
    // until then the lock names that gone session, which never waits for the row (seen in CI).
    wait_until("the server frees the first process's lock", || {
        c.lock_holder(&lock).is_none()
    });
    let ids = c.fill(TABLE, "again", 20, |i| Some(old + i));
    blocker.lock_row(TABLE, ids[0]);
    let holder = purge(&db.url, &config, &lock).spawn().expect("spawn");
    let mut session = None;
    wait_until("the holder takes the lock", || {
        session = c.lock_holder(&lock);
        session.is_some()
    });
    let session = session.expect("a session");
    // Killed while its delete waits behind the row lock, not while it reads the server's
    // clock before it (a pass whose clock read fails has no table to report, exit 2).
    // This wait has timed out under heavy CPU load (1 run in 6 beside three busy loops), cause
    // unknown: on a timeout the holder's own words are in the failure.
    let mut holder = Some(holder);
    let start = Instant::now();
    while !c.waits_for_a_lock(session) {
        if start.elapsed() > Duration::from_secs(30) {
            let mut stuck = holder.take().expect("the holder");
            // Ended if it still runs, so its words can be read.
            let _ = stuck.kill();
            let (code, report, stderr) = finish(stuck);
            panic!(
                "timed out: the holder's delete waits for the row; the holder ended with \
                 {code}: {report}\n{stderr}"
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.kill(session);
    let (code, report, stderr) = finish(holder.take().expect("the holder"));
    assert_eq!(code, 1, "a table failed: {stderr}");
    assert!(report["tables"][0]["error"].is_string(), "{report}");
    blocker.exec("ROLLBACK");
    wait_until("the server frees the lock", || {
        c.lock_holder(&lock).is_none()
    });
    let next = purge(&db.url, &config, &lock).spawn().expect("spawn");
    let (code, report, stderr) = finish(next);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(report["tables"][0]["purged"], 20, "{report}");
}
