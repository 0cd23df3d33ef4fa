//! One grammar across `cairn`'s commands (issue 32 items 8 and 10): the database is the first
//! positional argument everywhere (`--db`/`--dir` kept as hidden aliases), a directory that
//! cannot be used gets one wording and one exit code whatever the command (4 not found, 5
//! locked, naming the holder's pid), an over-long key is never echoed whole, output paths are
//! checked before a run starts, sizes and thread counts read the same everywhere, and every
//! command that prints data has `--json`.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

#[allow(dead_code, reason = "this file shares only the lock holder's wording")]
mod common;

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::null())
        .env("NO_COLOR", "1")
        .output()
        .expect("run cairn")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Runs `args` and checks the exit code, showing stderr when it differs.
fn expect(args: &[&str], code: i32) -> Output {
    let out = cairn(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "cairn {args:?}\nstdout: {}\nstderr: {}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// A database with one key, `a`.
fn database(dir: &Path) {
    expect(&["put", "--create", s(dir), "a", "1"], 0);
}

/// A purger config: a purger that is on (so `purge DB --init` opens the database for writing)
/// or off (so a pass on a database with no tables is done at once, exit 0).
fn purge_config(dir: &Path, enable: bool) -> std::path::PathBuf {
    let path = dir.join(format!("purge-{enable}.yaml"));
    std::fs::write(&path, format!("soft_delete_purge:\n  enable: {enable}\n"))
        .expect("write config");
    path
}

/// Every command that works on a database, with `DB` where the directory goes.
fn commands_on(config: &str) -> Vec<Vec<String>> {
    let lines: &[&[&str]] = &[
        &["get", "DB", "a"],
        &["scan", "DB"],
        &["stats", "DB"],
        &["verify", "DB"],
        &["dump", "DB"],
        &["cf", "list", "DB"],
        &["inspect", "levels", "DB"],
        &["inspect", "manifest", "DB"],
        &["explain", "DB"],
        &["audit", "DB", "zzz"],
        &["compact", "DB"],
        &["flush", "DB"],
        &["put", "DB", "b", "2"],
        &["delete", "DB", "b"],
        &["delete-range", "DB", "x", "y"],
        &["load", "DB"],
        &["cf", "create", "DB", "extra"],
        &["ttl", "status", "DB"],
        &["ttl", "trigger", "DB", "--init", "--no-progress"],
        &["purge", "DB", "--config", config, "--once", "--init"],
    ];
    lines
        .iter()
        .map(|l| l.iter().map(|a| (*a).to_owned()).collect())
        .collect()
}

fn with_db(command: &[String], db: &str) -> Vec<String> {
    command
        .iter()
        .map(|a| if a == "DB" { db.to_owned() } else { a.clone() })
        .collect()
}

fn run(command: &[String]) -> Output {
    let args: Vec<&str> = command.iter().map(String::as_str).collect();
    cairn(&args)
}

#[test]
fn every_command_takes_the_database_first_by_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    let config = purge_config(dir.path(), false);
    for command in commands_on(s(&config)) {
        let command = with_db(&command, s(&db));
        let out = run(&command);
        // `audit` of a key never written exits 0 (no trace); every other command succeeds.
        assert_eq!(
            out.status.code(),
            Some(0),
            "cairn {command:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_old_db_and_dir_flags_are_hidden_aliases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    let d = s(&db);
    let config = purge_config(dir.path(), false);
    for args in [
        vec!["stats", "--db", d],
        vec!["stats", "--dir", d],
        vec!["verify", "--dir", d],
        vec!["ttl", "status", "--db", d],
        vec![
            "purge",
            "--db",
            d,
            "--config",
            s(&config),
            "--once",
            "--init",
        ],
    ] {
        expect(&args, 0);
    }
    // Both forms at once are refused as bad arguments.
    expect(&["stats", d, "--db", d], 3);
    for command in [
        vec!["stats", "--help"],
        vec!["ttl", "--help"],
        vec!["purge", "--help"],
        vec!["stress", "--help"],
        vec!["crashtest", "--help"],
    ] {
        let help = text(&expect(&command, 0).stdout);
        assert!(help.contains("[DB]") || help.contains("<DB>"), "{help}");
        assert!(
            !help.contains("--db") && !help.contains("--dir"),
            "{command:?} shows an alias: {help}"
        );
    }
}

#[test]
fn a_directory_that_holds_no_database_gets_one_wording_and_exit_4_from_every_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = purge_config(dir.path(), true);
    let missing = dir.path().join("missing");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "not a database").expect("write");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    let cases = [
        (&missing, "no such directory"),
        (&file, "not a directory (a database is a directory)"),
        (&empty, "not a Cairn database (no CURRENT file)"),
    ];
    for (db, says) in cases {
        let expected = format!("cairn: {}: {says}", db.display());
        for command in commands_on(s(&config)) {
            let command = with_db(&command, s(db));
            let out = run(&command);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(4), "cairn {command:?}: {stderr}");
            assert!(
                stderr.lines().any(|l| l.starts_with(&expected)),
                "cairn {command:?} should say {expected:?}: {stderr}"
            );
            assert!(!stderr.contains("Os {"), "Rust debug output: {stderr}");
        }
        assert!(!missing.exists(), "a command created the directory");
        assert_eq!(
            std::fs::read_dir(&empty).expect("list").count(),
            0,
            "a command wrote into the empty directory"
        );
    }
}

#[test]
fn a_file_a_command_reads_alone_that_is_not_there_is_not_found_too() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("000001.log");
    for command in ["dump-log", "inspect sst"] {
        for (path, says) in [
            (&missing, "no such file"),
            (&dir.path().to_path_buf(), "not a file"),
        ] {
            let mut args: Vec<&str> = command.split(' ').collect();
            args.push(s(path));
            let out = cairn(&args);
            let stderr = text(&out.stderr);
            assert_eq!(out.status.code(), Some(4), "{args:?}: {stderr}");
            assert!(
                stderr.starts_with(&format!("cairn: {}: {says}", path.display())),
                "{args:?}: {stderr}"
            );
        }
    }
}

#[test]
fn a_database_open_elsewhere_is_locked_exit_5_naming_the_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db_dir = dir.path().join("db");
    database(&db_dir);
    let config = purge_config(dir.path(), true);
    let d = s(&db_dir);
    let held = cairn::Db::open(&db_dir, cairn::Options::default()).expect("open");
    let holder = format!("{} has the database open", common::this_process_as_holder());
    for args in [
        vec!["put", d, "k", "v"],
        vec!["delete", d, "a"],
        vec!["compact", d],
        vec!["flush", d],
        vec!["cf", "create", d, "x"],
        vec!["ttl", "trigger", d, "--init", "--no-progress"],
        vec!["purge", d, "--config", s(&config), "--once", "--init"],
    ] {
        let out = cairn(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "cairn {args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("cairn: {d}: locked: {holder}")),
            "cairn {args:?}: {stderr}"
        );
    }
    // What only reads works beside it.
    expect(&["get", d, "a"], 0);
    drop(held);
}

#[test]
fn a_database_that_lost_its_current_file_is_damaged_and_never_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    expect(&["flush", s(&db)], 0);
    std::fs::remove_file(db.join("CURRENT")).expect("remove CURRENT");
    let before = std::fs::read_dir(&db).expect("list").count();
    for args in [
        vec!["put", "--create", s(&db), "k2", "v2"],
        vec!["get", s(&db), "a"],
        vec!["stats", s(&db)],
    ] {
        let out = cairn(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("damaged"), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("--create` makes one"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(std::fs::read_dir(&db).expect("list").count(), before);
    let tables = std::fs::read_dir(&db)
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
        .count();
    assert!(tables > 0, "the data is still there");
}

#[test]
fn a_database_missing_its_manifest_is_damage_not_absence() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    for entry in std::fs::read_dir(&db).expect("list").filter_map(Result::ok) {
        if entry.file_name().to_string_lossy().starts_with("MANIFEST-") {
            std::fs::remove_file(entry.path()).expect("remove MANIFEST");
        }
    }
    for args in [vec!["get", s(&db), "a"], vec!["put", s(&db), "b", "2"]] {
        let out = cairn(&args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn the_harness_refuses_a_file_as_its_directory_and_a_database_with_replay() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").expect("write");
    let f = s(&file);
    for args in [
        vec!["stress", f, "--ops", "10"],
        vec!["crashtest", f, "--cycles", "1"],
        vec!["stress", "replay", "--log", f, f],
    ] {
        let out = cairn(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(4), "{args:?}: {stderr}");
        assert!(stderr.contains("not a directory"), "{args:?}: {stderr}");
    }
    // `stress DB replay`: the DB would be ignored (the replay names its own).
    let out = cairn(&["stress", s(dir.path()), "replay", "--log", f]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = cairn(&["ttl", "status", s(dir.path()), "--init"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
}

#[test]
fn an_over_long_key_is_refused_and_never_echoed_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    let d = s(&db);
    let key = "k".repeat(70_000);
    for args in [
        vec!["get", d, &key],
        vec!["put", d, &key, "v"],
        vec!["delete", d, &key],
        vec!["audit", d, &key],
        vec!["scan", d, "--from", &key],
        vec!["scan", d, "--prefix", &key],
        vec!["explain", d, "--to", &key],
        vec!["compact", d, "--from", &key],
    ] {
        let out = cairn(&args);
        let said = out.stdout.len() + out.stderr.len();
        assert_eq!(out.status.code(), Some(3), "cairn {}", args[0]);
        assert!(
            said < 1_000,
            "cairn {} echoed {said} bytes: {}",
            args[0],
            text(&out.stderr).chars().take(200).collect::<String>()
        );
        assert!(text(&out.stderr).contains("70000 bytes"), "{}", args[0]);
    }
}

#[test]
fn output_paths_are_checked_before_a_run_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nowhere = dir.path().join("no-such-dir").join("out.json");
    let nowhere = s(&nowhere);
    let a_dir = s(dir.path());
    for (args, flag) in [
        (
            vec!["stress", "--ops", "100000000", "--report", nowhere],
            "--report",
        ),
        (
            vec!["stress", "--ops", "100000000", "--op-log", a_dir],
            "--op-log",
        ),
        (
            vec![
                "stress",
                "--ops",
                "100000000",
                "--expected-journal",
                nowhere,
            ],
            "--expected-journal",
        ),
        (
            vec!["crashtest", "--cycles", "1000", "--report", nowhere],
            "--report",
        ),
    ] {
        let started = std::time::Instant::now();
        let out = cairn(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
        // Refused up front: a run of 10^8 operations or 1000 cycles would take minutes.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{args:?} ran first"
        );
    }
    // A directory that refuses new files, and a FIFO (writing it would block at the end).
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    for path in ["/proc/cairn-report.json", s(&fifo)] {
        let out = cairn(&["stress", "--ops", "100000000", "--report", path]);
        assert_eq!(out.status.code(), Some(3), "{path}: {}", text(&out.stderr));
    }
    // A file in the current directory, and an existing file, are fine (and the probe leaves
    // nothing behind).
    let existing = dir.path().join("old.json");
    std::fs::write(&existing, "{}").expect("write");
    let fresh = dir.path().join("new.json");
    for path in [&existing, &fresh] {
        expect(
            &[
                "stress",
                "--ops",
                "200",
                "--no-ttl",
                "--report",
                s(path),
                "--quiet",
            ],
            0,
        );
        assert!(path.exists(), "the report was written");
    }
    let db = dir.path().join("db");
    database(&db);
    let out = cairn(&["inspect", "levels", s(&db), "--plot", nowhere]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--plot"));
}

#[test]
fn sizes_and_thread_counts_read_the_same_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    for args in [
        vec!["stress", "--threads", "0"],
        vec!["stress", "--threads", "65"],
        vec!["crashtest", "--threads", "0"],
        vec!["ttl", "status", s(&db), "--threads", "65"],
        vec!["stress", "--memtable-size", "lots"],
        vec!["stress", "--max-value-size", "1.5MiB"],
    ] {
        let out = cairn(&args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = expect(
        &[
            "stress",
            "--ops",
            "300",
            "--no-ttl",
            "--memtable-size",
            "64KiB",
            "--max-value-size",
            "1KiB",
            "--json",
            "--no-progress",
        ],
        0,
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stress --json");
    let ops: u64 = report["ops"]
        .as_object()
        .expect("ops by type")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert!(ops >= 300, "{report}");
}

#[test]
fn the_harness_commands_and_the_demo_print_json_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let op_log = dir.path().join("ops.log");
    let out = expect(
        &[
            "stress",
            "--ops",
            "300",
            "--no-ttl",
            "--op-log",
            s(&op_log),
            "--json",
            "--no-progress",
        ],
        0,
    );
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stress --json");
    let out = expect(&["stress", "replay", "--log", s(&op_log), "--json"], 0);
    let replayed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("replay --json");
    assert!(replayed.is_object(), "{replayed}");
    let out = expect(
        &[
            "crashtest",
            "--mode",
            "power-loss",
            "--cycles",
            "1",
            "--keys",
            "500",
            "--json",
        ],
        0,
    );
    let crash: serde_json::Value = serde_json::from_slice(&out.stdout).expect("crashtest --json");
    assert_eq!(crash["passed"], true, "{crash}");
    assert_eq!(crash["modes"][0]["cycles"], 1, "{crash}");
    let out = expect(
        &["purge", "demo", "--rows", "40", "--no-progress", "--json"],
        0,
    );
    let demo: serde_json::Value = serde_json::from_slice(&out.stdout).expect("demo --json");
    assert_eq!(demo["passed"], true, "{demo}");
    assert_eq!(demo["audited"]["traces_after_grace_and_deadline"], 0);
}

/// Every file's name and bytes under `dir`, for "nothing changed" checks.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.path().is_file())
        .map(|e| {
            let bytes = std::fs::read(e.path()).expect("read");
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn the_newcomers_mistakes_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    database(&db);
    let d = s(&db);
    let op_log = dir.path().join("ops.jsonl");
    expect(
        &[
            "stress",
            "--ops",
            "200",
            "--no-ttl",
            "--op-log",
            s(&op_log),
            "--quiet",
        ],
        0,
    );
    let before = snapshot(&db);
    for args in [
        // A TTL that expires before anyone can read the value.
        vec!["put", d, "a", "gone", "--ttl", "1ms"],
        // A replay and a crash test write fresh databases, never into a user's.
        vec!["stress", "replay", d, "--log", s(&op_log)],
        vec!["crashtest", d, "--cycles", "1", "--mode", "power-loss"],
        // A chart that is not a PNG, a memtable that holds nothing.
        vec!["inspect", "levels", d, "--plot", "/tmp/levels.txt"],
        vec!["stress", "--memtable-size", "0", "--ops", "10"],
    ] {
        let out = cairn(&args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        snapshot(&db),
        before,
        "a refused command changed the database"
    );
    assert_eq!(text(&expect(&["get", d, "a"], 0).stdout).trim(), "1");

    // `put --create` into a directory of other files: not a database, nothing written.
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).expect("mkdir");
    std::fs::write(notes.join("todo.txt"), "mine").expect("write");
    let out = cairn(&["put", "--create", s(&notes), "k", "v"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_dir(&notes).expect("list").count(), 1);

    // `scan` has DB as its only argument: the old `--db` works there too.
    expect(&["scan", "--db", d], 0);
}

#[test]
fn a_stress_on_a_directory_another_process_holds_is_locked_exit_5() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    expect(
        &["stress", s(&db), "--ops", "100", "--no-ttl", "--quiet"],
        0,
    );
    let held = cairn::Db::open(&db, cairn::Options::default()).expect("open");
    let out = cairn(&["stress", s(&db), "--ops", "100", "--no-ttl", "--quiet"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("locked: process"), "{stderr}");
    drop(held);
}
