//! The key-value commands of issue 32: ad hoc writes that never hang and keep level 0 bounded,
//! refused commands that change no file, `put --ttl 0` refused and huge TTLs in human units,
//! `scan --limit/--prefix/--reverse/--keys-only`, `get --meta`, `compact`, `flush`, `verify`
//! (and a scan that meets damage), `dump`/`load`, `dump-log`, `put --value-file` and `cf`.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use cairn::{Db, Options};
use common::{changed, contents};
use serde_json::Value;

mod common;

fn cairn(args: &[&str]) -> Output {
    cairn_with_input(args, b"")
}

/// Runs `cairn args` with `input` on stdin; a command still running after two minutes is a
/// hang (a deadlock guard, not a timing claim): killed, and the test fails.
fn cairn_with_input(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run cairn");
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(input).expect("stdin");
    }
    // Read the output on another thread, so a full pipe cannot block the child.
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    if let Ok(out) = rx.recv_timeout(Duration::from_secs(120)) {
        return out.expect("output");
    }
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    panic!("cairn {args:?} hangs");
}

fn code(args: &[&str]) -> (i32, String, String) {
    let out = cairn(args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `cairn args`, expects exit `want`, and parses stdout as JSON.
fn json(args: &[&str], want: i32) -> Value {
    let (got, stdout, stderr) = code(args);
    assert_eq!(
        got, want,
        "cairn {args:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("cairn {args:?}: {e}: {stdout}"))
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn level0_files(dir: &Path) -> u64 {
    let stats = json(&["stats", s(dir), "--json"], 0);
    stats["levels"]
        .as_array()
        .expect("levels")
        .iter()
        .filter(|l| l["level"] == 0)
        .map(|l| l["files"].as_u64().expect("files"))
        .sum()
}

#[test]
fn forty_ad_hoc_puts_in_a_row_each_return_and_leave_a_bounded_number_of_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = s(dir.path());
    for i in 0..40 {
        // Keys out of order, so each write lands between, before or after earlier ones.
        let key = format!("key{:02}", (i * 17) % 40);
        let mut args = vec!["put", d, &key, "v"];
        if i == 0 {
            args.push("--create");
        }
        let (got, _, stderr) = code(&args);
        assert_eq!(got, 0, "put #{i}: {stderr}");
        assert!(level0_files(dir.path()) <= 1, "level 0 grows at put #{i}");
    }
    // Not a table per put (a thousand of those exhaust a process's descriptors at the open).
    let tables = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().ends_with(".sst"))
        .count();
    assert!(tables <= 2, "{tables} tables after 40 puts");
    let rows = json(&["scan", d, "--limit", "0", "--json"], 0);
    assert_eq!(rows["rows"].as_array().map(Vec::len), Some(40));
}

#[test]
fn a_write_the_engine_stalls_fails_at_once_and_says_what_to_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(
        dir.path(),
        Options::default().disable_auto_compactions(true),
    )
    .expect("open");
    // Level 0 at the default l0_stop (36): every ad hoc write is stalled.
    for i in 0..36 {
        db.put(format!("k{i}"), "v").expect("put");
        db.flush().expect("flush");
    }
    db.close().expect("close");
    let (got, _, stderr) = code(&["put", s(dir.path()), "x", "1"]);
    assert_eq!(got, 2, "{stderr}");
    assert!(stderr.contains("cairn compact"), "{stderr}");
    assert_eq!(code(&["compact", s(dir.path())]).0, 0);
    assert_eq!(code(&["put", s(dir.path()), "x", "1"]).0, 0);
}

/// A database with a key in a table and one in the log.
fn small_db(dir: &Path) {
    let db = Db::open(dir, Options::default()).expect("open");
    db.put("a", "1").expect("put");
    db.flush().expect("flush");
    db.put("b", "2").expect("put");
    db.close().expect("close");
}

#[test]
fn refused_commands_change_no_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    small_db(dir.path());
    let d = s(dir.path());
    let long_key = "k".repeat(70_000);
    let before = contents(dir.path());
    for args in [
        &["put", d, &long_key, "v"][..],
        &["put", d, "--cf", "nope", "k", "v"],
        &["put", d, "k", "v", "--ttl", "0"],
        &["put", d, "--hex", "k", "zz"],
        &["delete", d, "--cf", "nope", "k"],
        &["delete", d, &long_key],
        &["delete-range", d, "z", "a"],
        &["delete-range", d, "--cf", "nope", "a", "z"],
        &["delete-range", d, "a", &long_key],
        &["compact", d, "--cf", "nope"],
        &["cf", "drop", d, "nope"],
        &["cf", "drop", d, "default"],
        &["cf", "create", d, "default"],
    ] {
        let (got, _, stderr) = code(args);
        assert_eq!(got, 3, "{:?}: {stderr}", &args[..2]);
        assert!(stderr.len() < 1000, "an over-long key is echoed: {stderr}");
        assert_eq!(
            changed(&before, &contents(dir.path())),
            Vec::<String>::new(),
            "{:?} changed files",
            &args[..2]
        );
    }
}

#[test]
fn a_ttl_of_zero_is_refused_and_huge_ttls_print_in_human_units() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = s(dir.path());
    let (got, _, stderr) = code(&["put", "--create", d, "k", "v", "--ttl", "0s"]);
    assert_eq!(got, 3);
    assert!(stderr.contains("a TTL under 1s expires"), "{stderr}");
    let (got, _, stderr) = code(&["put", "--create", d, "k", "v", "--ttl", "20000years"]);
    assert_eq!(got, 0, "{stderr}");
    assert!(stderr.contains("expires in 20000years"), "{stderr}");
    let meta = json(&["get", d, "k", "--meta", "--json"], 0);
    assert_eq!(meta["expires_at"], "after 9999-12-31");
    assert!(
        meta["expires_in"]
            .as_str()
            .expect("in")
            .starts_with("19999years"),
        "{meta}"
    );
}

#[test]
fn scan_says_when_it_stopped_at_the_limit_and_reads_prefix_reverse_keys_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    for k in ["a1", "a2", "a3", "b1", "b2"] {
        db.put(k, format!("v{k}")).expect("put");
    }
    db.close().expect("close");
    let d = s(dir.path());
    let (got, stdout, stderr) = code(&["scan", d, "--limit", "2"]);
    assert_eq!(got, 0);
    assert_eq!(stdout, "a1\tva1\na2\tva2\n");
    assert!(stderr.contains("stopped at --limit 2"), "{stderr}");
    let limited = json(&["scan", d, "--limit", "2", "--json"], 0);
    assert_eq!(limited["limited"], true);
    let all = json(&["scan", d, "--limit", "0", "--json"], 0);
    assert_eq!(all["limited"], false);
    assert_eq!(all["rows"].as_array().map(Vec::len), Some(5));
    let (_, exact, stderr) = code(&["scan", d, "--limit", "5"]);
    assert_eq!(exact.lines().count(), 5);
    assert!(!stderr.contains("--limit"), "{stderr}");
    let (_, stdout, _) = code(&["scan", d, "--prefix", "a", "--reverse", "--keys-only"]);
    assert_eq!(stdout, "a3\na2\na1\n");
    let (_, stdout, _) = code(&[
        "scan",
        d,
        "--from",
        "a2",
        "--to",
        "b2",
        "--reverse",
        "--keys-only",
    ]);
    assert_eq!(stdout, "b1\na3\na2\n");
}

#[test]
fn get_meta_shows_the_seqno_write_time_and_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = s(dir.path());
    assert_eq!(code(&["put", "--create", d, "k", "v"]).0, 0);
    assert_eq!(code(&["put", d, "t", "v", "--ttl", "1h"]).0, 0);
    let plain = json(&["get", d, "k", "--meta", "--json"], 0);
    assert_eq!(plain["value"], "v");
    assert!(plain["seqno"].as_u64().is_some_and(|n| n >= 1), "{plain}");
    assert!(plain["write_time_ms"].as_u64().is_some(), "{plain}");
    assert_eq!(plain["expires_at"], Value::Null);
    let timed = json(&["get", d, "t", "--meta", "--json"], 0);
    let written = timed["write_time_ms"].as_u64().expect("written");
    assert_eq!(timed["expires_at_ms"].as_u64(), Some(written + 3_600_000));
    assert!(timed["seqno"].as_u64() > plain["seqno"].as_u64());
    let (_, text, _) = code(&["get", d, "t", "--meta"]);
    assert!(
        text.contains("seqno:") && text.contains("expires: "),
        "{text}"
    );
    let (_, text, _) = code(&["get", d, "k", "--meta"]);
    assert!(text.contains("expires: never"), "{text}");
}

#[test]
fn compact_and_flush_report_each_family_in_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(
        dir.path(),
        Options::default().disable_auto_compactions(true),
    )
    .expect("open");
    for i in 0..3 {
        db.put(format!("k{i}"), "v").expect("put");
        db.flush().expect("flush");
    }
    db.put("in-log", "v").expect("put");
    db.close().expect("close");
    let d = s(dir.path());
    let flushed = json(&["flush", d, "--json"], 0);
    assert_eq!(flushed["log_entries_flushed"], 1);
    let fam = &flushed["column_families"][0];
    assert_eq!(fam["level0_tables_before"], 3);
    assert_eq!(fam["level0_tables_after"], 4);
    let compacted = json(&["compact", d, "--json", "--from", "k", "--to", "l"], 0);
    let fam = &compacted["column_families"][0];
    assert_eq!(fam["column_family"], "default");
    assert_eq!(fam["level0_tables_after"], 0, "{compacted}");
    assert!(compacted["elapsed_ms"].as_u64().is_some());
    assert_eq!(level0_files(dir.path()), 0);
    assert_eq!(
        json(&["scan", d, "--json"], 0)["rows"]
            .as_array()
            .map(Vec::len),
        Some(4)
    );
}

/// Two thousand keys in one table of many blocks.
fn table_db(dir: &Path) -> PathBuf {
    let db = Db::open(dir, Options::default()).expect("open");
    for i in 0..2000 {
        db.put(format!("key{i:05}"), vec![b'v'; 100]).expect("put");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "sst"))
        .expect("a table")
}

#[test]
fn verify_is_clean_on_a_sound_database_and_names_each_damage_with_file_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let table = table_db(dir.path());
    let d = s(dir.path());
    let clean = json(&["verify", d, "--json"], 0);
    assert_eq!(clean["clean"], true);
    assert_eq!(clean["tables"], 1);
    assert_eq!(clean["table_entries"], 2000);

    // A byte flipped in the middle of the data blocks: a scan prints the rows before it, then
    // the error; verify finds it.
    let mut bytes = std::fs::read(&table).expect("read");
    let middle = bytes.len() / 3;
    bytes[middle] ^= 0xff;
    std::fs::write(&table, &bytes).expect("write");
    let before = contents(dir.path());
    let damaged = json(&["verify", d, "--json"], 1);
    assert_eq!(damaged["clean"], false);
    let damage = &damaged["damage"][0];
    assert_eq!(damage["file"], s(&table));
    assert!(damage["offset"].as_u64().is_some(), "{damaged}");
    let (got, stdout, stderr) = code(&["verify", d]);
    assert_eq!(got, 1);
    assert!(
        stdout.contains("DAMAGE") && stdout.contains("offset"),
        "{stdout}"
    );
    assert!(stderr.is_empty(), "{stderr}");

    let (got, stdout, stderr) = code(&["scan", d, "--limit", "0", "--keys-only"]);
    assert_eq!(got, 2, "{stderr}");
    assert!(
        stdout.lines().count() > 10,
        "the rows before the damage: {stdout}"
    );
    assert!(stdout.starts_with("key00000\n"), "{stdout}");
    assert!(stderr.contains("corruption"), "{stderr}");
    let scan = json(&["scan", d, "--limit", "0", "--json"], 2);
    assert!(
        scan["error"]
            .as_str()
            .is_some_and(|e| e.contains("corruption"))
    );
    assert_eq!(
        changed(&before, &contents(dir.path())),
        Vec::<String>::new()
    );

    // A table the MANIFEST lists that is gone.
    std::fs::remove_file(&table).expect("remove");
    let missing = json(&["verify", d, "--json"], 1);
    assert!(
        missing["damage"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("does not exist"))
    );
    let nothing = tempfile::tempdir().expect("tempdir");
    assert_eq!(code(&["verify", s(nothing.path())]).0, 4);
}

#[test]
fn stats_explain_and_inspect_levels_say_they_have_not_verified() {
    let dir = tempfile::tempdir().expect("tempdir");
    small_db(dir.path());
    let d = s(dir.path());
    for args in [
        &["stats", d, "--json"][..],
        &["explain", d, "--json"],
        &["inspect", "levels", d, "--json"],
    ] {
        let (got, stdout, stderr) = code(args);
        assert_eq!(got, 0, "{args:?}: {stderr}");
        assert!(stderr.contains("not verified"), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        let value: Value = serde_json::from_str(&stdout).expect("json");
        if args[0] != "inspect" {
            assert_eq!(value["verified"], false, "{args:?}");
        }
    }
}

#[test]
fn dump_and_load_round_trip_binary_keys_and_values_exactly() {
    let src = tempfile::tempdir().expect("tempdir");
    let db = Db::open(src.path(), Options::default()).expect("open");
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"plain".to_vec(), b"text value".to_vec()),
        (vec![0, 255, 10], vec![1, 2, 3]),
        (b"0xlooks-like-hex".to_vec(), b"0x00".to_vec()),
        (
            "caf\u{e9}".as_bytes().to_vec(),
            "\u{1f600}\n\"q\"".as_bytes().to_vec(),
        ),
        (b"empty".to_vec(), Vec::new()),
    ];
    for (k, v) in &pairs {
        db.put(k, v).expect("put");
    }
    db.close().expect("close");
    let out = cairn(&["dump", s(src.path())]);
    assert_eq!(out.status.code(), Some(0));
    let lines = String::from_utf8(out.stdout.clone()).expect("utf-8");
    assert_eq!(lines.lines().count(), pairs.len());
    for line in lines.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        assert!(v["key"].is_string() && v["value"].is_string(), "{line}");
    }
    let dst = tempfile::tempdir().expect("tempdir");
    let loaded = cairn_with_input(&["load", "--create", s(dst.path())], &out.stdout);
    assert_eq!(
        loaded.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    let db = Db::open_read_only(dst.path(), Options::default()).expect("open");
    for (k, v) in &pairs {
        assert_eq!(db.get(k).expect("get").as_deref(), Some(&v[..]), "{k:?}");
    }
    drop(db);
    let again = cairn(&["dump", s(dst.path())]);
    assert_eq!(again.stdout, out.stdout);

    // A bad line refuses the load and writes nothing.
    let before = contents(dst.path());
    let bad = cairn_with_input(
        &["load", s(dst.path())],
        b"{\"key\":\"x\",\"value\":\"1\"}\nnot json\n",
    );
    assert_eq!(bad.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("line 2"));
    assert_eq!(
        changed(&before, &contents(dst.path())),
        Vec::<String>::new()
    );
}

#[test]
fn dump_log_lists_each_record_with_seqno_ops_and_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("a", "1").expect("put");
    db.delete("a").expect("delete");
    db.delete_range("b", "c").expect("range");
    db.close().expect("close");
    let log = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|e| e == "log"))
        .expect("a log");
    let before = contents(dir.path());
    let (got, stdout, stderr) = code(&["dump-log", s(&log), "--json"]);
    assert_eq!(got, 0, "{stderr}");
    let records: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["ops"][0]["kind"], "put");
    assert_eq!(records[0]["ops"][0]["key"], "a");
    assert_eq!(records[0]["ops"][0]["value"], "1");
    assert_eq!(records[1]["ops"][0]["kind"], "delete");
    assert_eq!(records[2]["ops"][0]["kind"], "range_delete");
    assert_eq!(records[2]["ops"][0]["end"], "c");
    let seqnos: Vec<u64> = records
        .iter()
        .map(|r| r["ops"][0]["seqno"].as_u64().expect("seqno"))
        .collect();
    assert!(seqnos.windows(2).all(|w| w[0] < w[1]), "{seqnos:?}");
    let (got, text, _) = code(&["dump-log", s(&log)]);
    assert_eq!(got, 0);
    assert!(
        text.contains("range_delete") && text.contains("seqno"),
        "{text}"
    );
    assert_eq!(
        changed(&before, &contents(dir.path())),
        Vec::<String>::new()
    );
    assert_eq!(code(&["dump-log", s(&dir.path().join("nope.log"))]).0, 4);
}

#[test]
fn put_reads_the_value_from_a_file_or_stdin_byte_for_byte() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = s(dir.path());
    let value: Vec<u8> = (0..=255).collect();
    let file = dir.path().join("value.bin");
    std::fs::write(&file, &value).expect("write");
    let db_dir = dir.path().join("db");
    let db = s(&db_dir);
    assert_eq!(
        code(&["put", "--create", db, "f", "--value-file", s(&file)]).0,
        0
    );
    let piped = cairn_with_input(&["put", db, "i", "--value-file", "-"], b"from stdin\n");
    assert_eq!(piped.status.code(), Some(0));
    assert_eq!(code(&["put", db, "x"]).0, 3, "a value or --value-file");
    assert_eq!(code(&["put", db, "x", "v", "--value-file", s(&file)]).0, 3);
    let _ = d;
    let read = Db::open_read_only(&db_dir, Options::default()).expect("open");
    assert_eq!(read.get("f").expect("get").as_deref(), Some(&value[..]));
    assert_eq!(
        read.get("i").expect("get").as_deref(),
        Some(&b"from stdin\n"[..])
    );
}

#[test]
fn cf_create_list_and_drop() {
    let dir = tempfile::tempdir().expect("tempdir");
    small_db(dir.path());
    let d = s(dir.path());
    assert_eq!(
        code(&[
            "cf",
            "create",
            d,
            "users",
            "--ttl",
            "1d",
            "--max-versions",
            "3"
        ])
        .0,
        0
    );
    let list = json(&["cf", "list", d, "--json"], 0);
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|f| f["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["default", "users"]);
    assert_eq!(list[1]["ttl_ms"], 86_400_000);
    assert_eq!(list[1]["ttl"], "1day");
    assert_eq!(list[1]["max_versions"], 3);
    assert_eq!(code(&["put", d, "--cf", "users", "u", "1"]).0, 0);
    assert_eq!(
        json(&["get", d, "--cf", "users", "u", "--json"], 0)["value"],
        "1"
    );
    assert_eq!(code(&["cf", "create", d, "users"]).0, 3, "exists already");
    assert_eq!(code(&["cf", "drop", d, "users"]).0, 0);
    let list = json(&["cf", "list", d, "--json"], 0);
    assert_eq!(list.as_array().map(Vec::len), Some(1));
}

#[test]
fn dump_and_load_keep_when_each_value_expires() {
    let from = tempfile::tempdir().expect("tempdir");
    let to = tempfile::tempdir().expect("tempdir");
    let (a, b) = (s(from.path()), s(to.path()));
    assert_eq!(
        code(&["put", "--create", a, "short", "v", "--ttl", "1h"]).0,
        0
    );
    assert_eq!(code(&["put", a, "forever", "v"]).0, 0);
    let out = cairn(&["dump", a]);
    assert_eq!(out.status.code(), Some(0));
    let loaded = cairn_with_input(&["load", "--create", b], &out.stdout);
    assert_eq!(
        loaded.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    let meta = |db: &str, key: &str| json(&["get", db, key, "--meta", "--json"], 0);
    let original = meta(a, "short")["expires_at_ms"].as_u64().expect("expires");
    let copy = meta(b, "short")["expires_at_ms"]
        .as_u64()
        .expect("the copy expires too");
    assert!(copy.abs_diff(original) < 60_000, "{original} vs {copy}");
    assert!(meta(b, "forever")["expires_at_ms"].is_null());
}
