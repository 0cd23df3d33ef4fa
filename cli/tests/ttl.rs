//! `cairn ttl`: the TTL task commands and views against a database built in the test.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairn::{CfOptions, Db, Options};
use cairn_purger::{ColumnType, Row, Schema, Tables, TablesOptions};
use common::{changed, contents};

mod common;

/// Held while a test opens a database in this process or runs `cairn`: a child forked while
/// another test's database is open inherits its lock's descriptor until it execs, and a close and
/// reopen of that database in that window finds it locked (the `flock` lock follows the open
/// file, which the child still holds). Serialising the two keeps the tests from each other.
static PROCESS: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    PROCESS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn cairn(args: &[&str], db: &Path) -> Output {
    let _serial = serial();
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("ttl")
        .args(args)
        .arg("--db")
        .arg(db)
        .output()
        .expect("run cairn")
}

fn json(out: &Output) -> Vec<serde_json::Value> {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON array of rows")
}

fn field<'a>(
    rows: &'a [serde_json::Value],
    tenant: bool,
    name: &str,
) -> Vec<&'a serde_json::Value> {
    rows.iter()
        .filter(|r| (r["table_id"] == -1) == tenant)
        .map(|r| &r[name])
        .collect()
}

/// A counter summed over every row, as an operator sums the view's column.
fn sum(rows: &[serde_json::Value], name: &str) -> u64 {
    rows.iter()
        .map(|r| r[name].as_u64().expect("a count"))
        .sum()
}

/// A family over `max_versions = 2` with three versions of 1000 keys, each version in its own
/// table. (Nothing expired: the `cairn` process's background compactions would reclaim expired
/// cells before the task could count them.)
fn build(dir: &Path) {
    let _serial = serial();
    let db = Db::open(dir, Options::default()).expect("open");
    let versions = CfOptions::default()
        .max_versions(2)
        .ttl(Duration::from_secs(3600));
    let cf = db.create_column_family("t1$cf1", versions).expect("create");
    for v in 0..3 {
        for i in 0..1000 {
            cf.put(format!("row{i:04}"), format!("v{v}")).expect("put");
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
}

#[test]
fn trigger_runs_a_task_to_history_and_the_views_show_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    assert!(json(&cairn(&["status", "--json"], dir.path())).is_empty());

    let refused = cairn(&["suspend"], dir.path());
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("NO_TASK_RUNNING"));

    let rows = json(&cairn(
        &["trigger", "--init", "--json", "--no-progress"],
        dir.path(),
    ));
    assert_eq!(field(&rows, true, "status"), ["FINISHED"]);
    assert_eq!(field(&rows, true, "trigger_type"), ["USER"]);
    assert_eq!(sum(&rows, "max_version_del_cnt"), 1000);
    assert_eq!(sum(&rows, "ttl_del_cnt"), 0);
    assert_eq!(sum(&rows, "scan_cnt"), 3000);
    assert_eq!(
        field(&rows, true, "max_version_del_cnt"),
        [0],
        "the tablet rows carry the counts"
    );
    assert_eq!(field(&rows, false, "status"), ["FINISHED"]);

    let history = json(&cairn(&["history", "--json"], dir.path()));
    assert_eq!(history, rows);
    let table = cairn(&["history"], dir.path());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.starts_with("| TABLE_NAME | TABLE_ID |"), "{text}");
    assert!(text.contains("| t1$cf1 "), "{text}");
    assert!(text.ends_with("2 rows\n"), "{text}");
}

#[test]
fn a_task_left_for_the_service_refuses_a_second_trigger_and_can_be_canceled() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let rows = json(&cairn(
        &["trigger", "--init", "--no-wait", "--json"],
        dir.path(),
    ));
    assert_eq!(field(&rows, true, "status"), ["RS_TRIGGERING"]);
    assert_eq!(field(&rows, false, "status"), ["PREPARED"]);
    let again = cairn(&["trigger", "--no-wait"], dir.path());
    assert_eq!(again.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&again.stderr).contains("CMD_NOT_ALLOWED"));
    let status = json(&cairn(&["status", "--json"], dir.path()));
    assert_eq!(status, rows, "status reads what trigger left");

    let rows = json(&cairn(&["suspend", "--json"], dir.path()));
    assert_eq!(field(&rows, true, "status"), ["RS_SUSPENDING"]);
    assert_eq!(field(&rows, false, "status"), ["PENDING"]);
    let rows = json(&cairn(&["cancel", "--json"], dir.path()));
    assert_eq!(field(&rows, true, "status"), ["CANCELED"]);
    assert!(json(&cairn(&["status", "--json"], dir.path())).is_empty());
}

#[test]
fn a_database_in_use_or_missing_is_an_engine_failure() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let db = {
        let _serial = serial();
        Db::open(dir.path(), Options::default()).expect("open")
    };
    let busy = cairn(&["trigger", "--init"], dir.path());
    assert_eq!(busy.status.code(), Some(5), "locked");
    assert!(!busy.stderr.is_empty());
    drop(db);
    let missing = cairn(&["trigger"], &dir.path().join("nope"));
    assert_eq!(missing.status.code(), Some(4), "not found");
    let bad = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["ttl", "explode", "--db", "x"])
        .output()
        .expect("run cairn");
    assert_eq!(bad.status.code(), Some(3));
}

#[test]
fn run_finishes_a_task_left_behind_and_a_refusal_on_a_bare_database_writes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let refused = cairn(&["cancel"], dir.path());
    assert_eq!(refused.status.code(), Some(1));
    {
        let _serial = serial();
        let db = Db::open(dir.path(), Options::default()).expect("open");
        assert!(
            !db.list_column_families()
                .iter()
                .any(|n| n == "cairn.tables"),
            "a refused command created the tables"
        );
    }
    assert_eq!(
        cairn(&["run"], dir.path()).status.code(),
        Some(1),
        "no task to run"
    );
    json(&cairn(
        &["trigger", "--init", "--no-wait", "--json"],
        dir.path(),
    ));
    let rows = json(&cairn(&["run", "--json", "--no-progress"], dir.path()));
    assert_eq!(field(&rows, true, "status"), ["FINISHED"]);
    assert_eq!(sum(&rows, "max_version_del_cnt"), 1000);
}

#[test]
fn a_command_on_a_database_without_the_table_layer_needs_init_and_writes_nothing_without_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    build(dir.path());
    let before = contents(dir.path());
    for (action, why) in [
        ("trigger", "--init"),
        ("run", "NO_TASK_RUNNING"),
        ("resume", "NO_TASK_RUNNING"),
    ] {
        let out = cairn(&[action, "--no-progress"], dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{action}: {stderr}");
        assert!(stderr.contains(why), "{action}: {stderr}");
    }
    assert_eq!(
        changed(&before, &contents(dir.path())),
        Vec::<String>::new()
    );
    let rows = json(&cairn(
        &["trigger", "--init", "--json", "--no-progress"],
        dir.path(),
    ));
    assert_eq!(field(&rows, true, "status"), ["FINISHED"]);
}

/// Gives the database of `build` a table the purger's `deleted_at` index migration has not
/// reached: a soft-deleting purge target with a soft-deleted row, opened without migrating. A
/// tool that applied the migration would write the index and its entry.
fn needing_a_migration(dir: &Path) {
    let _serial = serial();
    let db = Arc::new(Db::open(dir, Options::default()).expect("open"));
    let as_they_are = TablesOptions::default().auto_migration(false);
    let tables = Tables::open_with(Arc::clone(&db), &as_they_are).expect("tables");
    let target = cairn_purger::cube_master_purge_tables(false)
        .into_iter()
        .next()
        .expect("a purge target");
    tables
        .create_table(
            Schema::new(&target)
                .column("name", ColumnType::Text)
                .soft_delete(),
        )
        .expect("create table");
    let table = tables.table(&target).expect("table");
    let id = table.insert(Row::new().set("name", "a")).expect("insert");
    table.soft_delete(id).expect("soft delete");
    assert!(tables.applied_migrations().is_empty());
    drop((table, tables));
    Arc::into_inner(db)
        .expect("one handle")
        .close()
        .expect("close");
}

/// Runs `cairn ttl <args>` and checks that it exits with `code`, says `says` on stderr, and
/// leaves every file of the database as it was, byte for byte.
fn changes_nothing(dir: &Path, args: &[&str], code: i32, says: &str) -> Output {
    let before = contents(dir);
    let out = cairn(args, dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "cairn ttl {args:?}: {stderr}"
    );
    assert!(stderr.contains(says), "cairn ttl {args:?}: {stderr}");
    assert_eq!(
        changed(&before, &contents(dir)),
        Vec::<String>::new(),
        "cairn ttl {args:?} changed these files"
    );
    out
}

/// Every view, and every command the task's state refuses, on `dir`: each leaves every file
/// as it was. Returns what `status --json` and `history --json` read.
fn look_and_be_refused(
    dir: &Path,
    refused: &[(&str, &str)],
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    for view in [["status"], ["history"]] {
        changes_nothing(dir, &view, 0, "");
    }
    for (command, says) in refused {
        changes_nothing(dir, &[command], 1, says);
        changes_nothing(dir, &[command, "--json", "--no-progress"], 1, says);
    }
    let status = changes_nothing(dir, &["status", "--json"], 0, "");
    let history = changes_nothing(dir, &["history", "--json"], 0, "");
    (json(&status), json(&history))
}

#[test]
fn views_and_refused_commands_leave_every_file_of_the_database_byte_identical() {
    const NO_TASK: &str = "NO_TASK_RUNNING";
    const NOT_ALLOWED: &str = "CMD_NOT_ALLOWED";
    for migration_pending in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        build(dir.path());
        if migration_pending {
            needing_a_migration(dir.path());
        }
        let none = [
            ("suspend", NO_TASK),
            ("resume", NO_TASK),
            ("cancel", NO_TASK),
            ("run", NO_TASK),
        ];
        let (status, history) = look_and_be_refused(dir.path(), &none);
        assert!(
            status.is_empty() && history.is_empty(),
            "no task tables yet"
        );

        let triggered = json(&cairn(
            &["trigger", "--init", "--no-wait", "--json"],
            dir.path(),
        ));
        let (status, _) = look_and_be_refused(
            dir.path(),
            &[("trigger", NOT_ALLOWED), ("resume", NOT_ALLOWED)],
        );
        assert_eq!(status, triggered, "migration pending: {migration_pending}");

        json(&cairn(&["suspend", "--json"], dir.path()));
        let (status, _) = look_and_be_refused(
            dir.path(),
            &[("trigger", NOT_ALLOWED), ("suspend", NOT_ALLOWED)],
        );
        assert_eq!(field(&status, true, "status"), ["RS_SUSPENDING"]);

        json(&cairn(&["cancel", "--json"], dir.path()));
        let (status, history) = look_and_be_refused(dir.path(), &none);
        assert!(status.is_empty());
        assert_eq!(field(&history, true, "status"), ["CANCELED"]);

        if migration_pending {
            let _serial = serial();
            let db = Arc::new(Db::open_read_only(dir.path(), Options::default()).expect("open"));
            let as_they_are = TablesOptions::default().auto_migration(false);
            let tables = Tables::open_with(db, &as_they_are).expect("tables");
            assert!(
                tables.applied_migrations().is_empty(),
                "the TTL commands left the purger's migration to the purger"
            );
        }
    }
}
