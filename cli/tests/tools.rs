//! The operator commands against databases built here, read back in JSON mode: `inspect
//! sst|manifest|levels`, `explain` (grouped by reason, naming a snapshot), `audit` before and
//! after the delete persistence deadline, `get|put|delete|delete-range|scan|stats`, a locked
//! directory refusing a write, and read commands that change nothing on disk and run beside a
//! writer.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cairn::{CfOptions, Db, ManualClock, Options};
use common::{changed, contents};
use serde_json::Value;

mod common;

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

/// Runs `cairn args`, expects exit `code`, and parses stdout as JSON.
fn json(args: &[&str], code: i32) -> Value {
    let out = cairn(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(code),
        "cairn {args:?}\nstdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("cairn {args:?}: {e}: {stdout}"))
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(since.as_millis()).expect("ms")
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a count"))
}

/// Ten keys, three deleted, one range deleted, one binary key, flushed to one table.
fn one_table(dir: &Path) -> PathBuf {
    // No compaction, which would rewrite the table (its tombstones are dense).
    let db = Db::open(dir, Options::default().disable_auto_compactions(true)).expect("open");
    for i in 0..10 {
        db.put(format!("k{i}"), format!("v{i}")).expect("put");
    }
    db.put([0u8, 1, 255], "binary").expect("put");
    for i in 0..3 {
        db.delete(format!("k{i}")).expect("delete");
    }
    // Held across the range delete, so a flush keeps k7 and k8 under it even with
    // `drop_covered_at_flush` on, and the table shows every kind of entry.
    let snapshot = db.snapshot();
    db.delete_range("k7", "k9").expect("delete_range");
    db.flush().expect("flush");
    drop(snapshot);
    let tables = db
        .column_family("default")
        .expect("cf")
        .tables()
        .expect("tables");
    assert_eq!(tables.len(), 1);
    db.close().expect("close");
    dir.join(format!("{:06}.sst", tables[0].number))
}

#[test]
fn inspect_sst_counts_tombstones_and_lists_every_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = one_table(dir.path());
    let r = json(&["inspect", "sst", s(&file), "--entries", "--json"], 0);
    assert_eq!(u(&r["entries"]), 14, "{r}");
    assert_eq!(u(&r["puts"]), 11);
    assert_eq!(u(&r["deletes"]), 3);
    assert_eq!(u(&r["range_tombstones"]), 1);
    assert_eq!(
        (&r["smallest_key"], &r["largest_key"]),
        (&"0x0001ff".into(), &"k9".into())
    );
    let density = r["tombstone_density"].as_f64().expect("density");
    assert!((density - 4.0 / 15.0).abs() < 1e-9, "{density}");
    assert!(u(&r["data_blocks"]) >= 1);
    let entries = r["entry_list"].as_array().expect("entries");
    assert_eq!(entries.len(), 15);
    assert_eq!(entries[0]["key"], "0x0001ff", "binary keys print as hex");
    let kinds: BTreeMap<&str, usize> = entries.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e["kind"].as_str().expect("kind")).or_default() += 1;
        m
    });
    assert_eq!(
        kinds,
        BTreeMap::from([("delete", 3), ("put", 11), ("range_delete", 1)])
    );
    let range = entries.last().expect("the range tombstone");
    assert_eq!((&range["key"], &range["end"]), (&"k7".into(), &"k9".into()));
    // Without --entries, no list.
    let r = json(&["inspect", "sst", s(&file), "--json"], 0);
    assert!(r.get("entry_list").is_none());
}

#[test]
fn inspect_sst_of_a_damaged_table_names_the_file_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = one_table(dir.path());
    let mut bytes = std::fs::read(&file).expect("read");
    bytes[20] ^= 0xff; // inside the first data block
    std::fs::write(&file, bytes).expect("write");
    let out = cairn(&["inspect", "sst", s(&file), "--entries", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("corruption in") && stderr.contains(s(&file)) && stderr.contains("offset"),
        "{stderr}"
    );
}

#[test]
fn inspect_manifest_lists_the_edits_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let users = db
        .create_column_family("users", CfOptions::default())
        .expect("cf");
    users.put("u1", "x").expect("put");
    db.flush().expect("flush");
    db.close().expect("close");
    let r = json(&["inspect", "manifest", s(dir.path()), "--json"], 0);
    let edits = r["edits"].as_array().expect("edits");
    let offsets: Vec<u64> = edits.iter().map(|e| u(&e["offset"])).collect();
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");
    let families: Vec<&Value> = edits
        .iter()
        .filter_map(|e| e.get("added_column_families"))
        .flat_map(|f| f.as_array().expect("list"))
        .collect();
    assert!(families.contains(&&serde_json::json!([1, "users"])), "{r}");
    let added: Vec<&Value> = edits
        .iter()
        .filter_map(|e| e.get("added_tables"))
        .flat_map(|t| t.as_array().expect("list"))
        .filter(|t| t["cf"] == 1)
        .collect();
    assert_eq!(added.len(), 1, "{r}");
    assert_eq!(
        (&added[0]["smallest"], u(&added[0]["entries"])),
        (&"u1".into(), 1)
    );
}

#[test]
fn inspect_levels_sums_each_family_by_level_and_draws_a_png() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let users = db
        .create_column_family("users", CfOptions::default())
        .expect("cf");
    for i in 0..100 {
        db.put(format!("a{i:03}"), "x").expect("put");
        users.put(format!("u{i:03}"), "y").expect("put");
    }
    db.flush().expect("flush");
    users.compact_range::<&str>(..).expect("compact");
    for i in 0..10 {
        db.delete(format!("a{i:03}")).expect("delete");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let png = dir.path().join("levels.png");
    let rows = json(
        &[
            "inspect",
            "levels",
            s(dir.path()),
            "--plot",
            s(&png),
            "--json",
        ],
        0,
    );
    let rows = rows.as_array().expect("rows");
    let default: Vec<&Value> = rows
        .iter()
        .filter(|r| r["column_family"] == "default")
        .collect();
    assert_eq!(default.len(), 1, "{rows:?}");
    assert_eq!(
        (u(&default[0]["level"]), u(&default[0]["files"])),
        (0, 2),
        "two flushes on L0"
    );
    assert_eq!(u(&default[0]["entries"]), 110);
    assert_eq!(u(&default[0]["point_tombstones"]), 10);
    assert!(default[0]["oldest_tombstone_age"].is_string());
    let users: Vec<&Value> = rows
        .iter()
        .filter(|r| r["column_family"] == "users")
        .collect();
    assert_eq!(users.len(), 1);
    assert!(u(&users[0]["level"]) > 0, "compacted down: {rows:?}");
    assert!(users[0]["oldest_tombstone"].is_null());
    let bytes = std::fs::read(&png).expect("the plot");
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
}

#[test]
fn explain_groups_by_reason_and_names_a_snapshot() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let graced = db
        .create_column_family(
            "graced",
            CfOptions::default().tombstone_grace(Duration::from_secs(3600)),
        )
        .expect("cf");
    for i in 0..20 {
        db.put(format!("k{i:02}"), "v").expect("put");
        graced.put(format!("g{i:02}"), "v").expect("put");
    }
    db.flush().expect("flush");
    let snapshot = db.snapshot().seqno();
    for i in 0..5 {
        db.delete(format!("k{i:02}")).expect("delete");
        graced.delete(format!("g{i:02}")).expect("delete");
    }
    db.flush().expect("flush");
    db.close().expect("close");
    let dir_s = s(dir.path());
    // Nothing holds a snapshot: nothing pins the default family's tombstones ...
    let r = json(&["explain", dir_s, "--json"], 0);
    assert_eq!(u(&r["tombstones"]), 5, "{r}");
    let reasons: Vec<&str> = r["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| g["reason"].as_str().expect("reason"))
        .collect();
    assert!(!reasons.contains(&"pinned_by_snapshot"), "{r}");
    // ... and judged with a snapshot taken before the deletes, all five are pinned by it.
    let seqno = snapshot.to_string();
    let r = json(&["explain", dir_s, "--snapshot", &seqno, "--json"], 0);
    let groups = r["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "{r}");
    assert_eq!(groups[0]["reason"], "pinned_by_snapshot");
    assert_eq!(u(&groups[0]["snapshot"]), snapshot);
    assert_eq!(u(&groups[0]["count"]), 5);
    assert_eq!(groups[0]["oldest"]["key"], "k00", "the oldest example");
    // Of two snapshots, the older is the one that pins them (one newer than every tombstone
    // pins nothing).
    let newest = (snapshot + 1_000).to_string();
    let r = json(
        &[
            "explain",
            dir_s,
            "--snapshot",
            &newest,
            "--snapshot",
            &seqno,
            "--json",
        ],
        0,
    );
    assert_eq!(u(&r["groups"][0]["snapshot"]), snapshot, "{r}");
    let r = json(&["explain", dir_s, "--snapshot", &newest, "--json"], 0);
    assert!(
        r["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .all(|g| g["reason"] != "pinned_by_snapshot"),
        "{r}"
    );
    // A range narrows it; the graced family's tombstones are in their grace period.
    let r = json(
        &[
            "explain",
            dir_s,
            "--snapshot",
            &seqno,
            "--from",
            "k03",
            "--to",
            "k99",
            "--json",
        ],
        0,
    );
    assert_eq!(u(&r["tombstones"]), 2, "{r}");
    let r = json(&["explain", dir_s, "--cf", "graced", "--json"], 0);
    let groups = r["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "{r}");
    assert_eq!(groups[0]["reason"], "grace_period");
    assert_eq!(u(&groups[0]["count"]), 5);
    assert!(groups[0]["grace_ends_by"].is_string());
}

/// Lets `total` pass on `clock` in steps, letting background work settle after each.
fn let_time_pass(db: &Db, clock: &ManualClock, total: Duration, steps: u32) {
    for _ in 0..steps {
        clock.advance(total / steps);
        db.wait_for_background_work().expect("settle");
    }
}

#[test]
fn audit_finds_a_deleted_key_until_the_deadline_and_nothing_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(now_ms()));
    let deadline = Duration::from_secs(3600);
    let options = || {
        Options::default()
            .clock(clock.clone())
            .delete_persistence_deadline(deadline)
    };
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..1000 {
        db.put(format!("key{i:04}"), format!("value{i:04}"))
            .expect("put");
    }
    db.flush().expect("flush");
    db.delete("key0500").expect("delete");
    db.flush().expect("flush");
    db.close().expect("close");
    let dir_s = s(dir.path());
    let r = json(
        &["audit", dir_s, "key0500", "--deadline", "1h", "--json"],
        1,
    );
    let traces = r["traces"].as_array().expect("traces");
    assert!(traces.len() >= 2, "the put and its tombstone: {r}");
    assert!(
        traces
            .iter()
            .any(|t| t["kind"] == "delete" && t["gone_by"].is_string()),
        "the tombstone is promised gone by the deadline: {r}"
    );
    // A live key has traces too (exit 1), with no promise.
    let live = json(
        &["audit", dir_s, "key0501", "--deadline", "1h", "--json"],
        1,
    );
    assert!(live["traces"][0]["gone_by"].is_null(), "{live}");
    // Past the deadline, on a running database, every trace goes.
    let db = Db::open(dir.path(), options()).expect("reopen");
    let_time_pass(&db, &clock, deadline + Duration::from_secs(60), 16);
    db.close().expect("close");
    let r = json(&["audit", dir_s, "key0500", "--json"], 0);
    assert_eq!(r["traces"], serde_json::json!([]), "{r}");
    json(&["audit", dir_s, "key0501", "--json"], 1);
}

#[test]
fn ad_hoc_reads_and_writes_round_trip_in_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("db");
    let d = s(&db);
    let ok = |args: &[&str]| {
        let out = cairn(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "cairn {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let missing = cairn(&["put", d, "a", "1"]);
    assert_eq!(missing.status.code(), Some(4), "no database, no --create");
    ok(&["put", "--create", d, "a", "1"]);
    for (k, v) in [("b", "2"), ("c", "3"), ("d", "4"), ("e", "5")] {
        ok(&["put", d, k, v]);
    }
    ok(&["put", d, "t", "short-lived", "--ttl", "1h"]);
    ok(&["put", "--hex", d, "00ff", "0x6869"]);
    ok(&["delete", d, "b"]);
    ok(&["delete-range", d, "c", "e"]);
    assert_eq!(
        json(&["get", d, "a", "--json"], 0),
        serde_json::json!({"key": "a", "value": "1"})
    );
    assert_eq!(
        json(&["get", d, "b", "--json"], 1),
        serde_json::json!({"key": "b", "value": null})
    );
    assert_eq!(
        json(&["get", "--hex", d, "0x00ff", "--json"], 0)["value"],
        "hi"
    );
    let all = json(&["scan", d, "--json"], 0);
    let keys: Vec<&str> = all["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| r["key"].as_str().expect("key"))
        .collect();
    assert_eq!(keys, ["0x00ff", "a", "e", "t"]);
    let some = json(
        &[
            "scan", d, "--from", "a", "--to", "t", "--limit", "1", "--json",
        ],
        0,
    );
    assert_eq!(
        some,
        serde_json::json!({"rows": [{"key": "a", "value": "1"}], "limited": true})
    );
    let stats = json(&["stats", d, "--json"], 0);
    assert_eq!(stats["column_families"], serde_json::json!(["default"]));
    // Each ad hoc write compacts what it flushed (issue 32 item 1), so the tombstones of the
    // delete and the range delete are gone with what they covered.
    assert_eq!(u(&stats["tombstones_pending"]), 0, "{stats}");
    assert!(u(&stats["latest_seqno"]) >= 9, "{stats}");
    // Bad arguments exit 3 and change nothing.
    let long_key = "k".repeat(70_000);
    let fresh = dir.path().join("fresh");
    for args in [
        &["put", "--hex", d, "xyz", "00"][..],
        &["put", d, "a", "1", "--ttl", "soon"],
        &["delete-range", d, "z", "a"],
        &["get", d, "a", "--cf", "nosuch"],
        &["put", d, "a", "1", "--cf", "nosuch"],
        &["put", d, &long_key, "v"],
        &["put", "--create", s(&fresh), "a", "1", "--cf", "nosuch"],
    ] {
        let out = cairn(args);
        assert_eq!(
            out.status.code(),
            Some(3),
            "cairn {:?}: {}",
            args.iter()
                .map(|a| &a[..a.len().min(20)])
                .collect::<Vec<_>>(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(!fresh.exists(), "a refused put --create makes no database");
    assert_eq!(json(&["get", d, "a", "--json"], 0)["value"], "1");
}

#[test]
fn a_reader_that_stops_reading_ends_the_command_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    for i in 0..50_000 {
        db.put(format!("key{i:06}"), "value").expect("put");
    }
    db.close().expect("close");
    // As `cairn scan DIR | head -c 100` does: read a little, then close the pipe.
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["scan", s(dir.path()), "--limit", "50000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run cairn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 100];
    std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
    drop(stdout);
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn read_commands_change_nothing_and_run_beside_a_writer_while_a_write_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = one_table(dir.path());
    // Unflushed writes too, so a read-only open has a log to replay.
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("late", "x").expect("put");
    db.delete("k5").expect("delete");
    drop(db);
    let d = s(dir.path());
    let before = contents(dir.path());
    let reads: [&[&str]; 8] = [
        &["get", d, "late"],
        &["scan", d, "--json"],
        &["stats", d, "--json"],
        &["explain", d, "--json"],
        &["audit", d, "k5", "--json"],
        &["inspect", "levels", d, "--json"],
        &["inspect", "manifest", d, "--json"],
        &["inspect", "sst", s(&file), "--entries", "--json"],
    ];
    for args in reads {
        let out = cairn(args);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "cairn {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        changed(&before, &contents(dir.path())),
        Vec::<String>::new(),
        "a read changed the directory"
    );
    let writer = Db::open(dir.path(), Options::default()).expect("open");
    // Beside a live writer the reads run (and take no lock); a write is refused.
    for args in [&["get", d, "late"][..], &["stats", d]] {
        let out = cairn(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "cairn {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    writer
        .put("beside", "the reads")
        .expect("the writer writes on");
    let out = cairn(&["put", d, "a", "b"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "cairn put: locked");
    let holder = format!("{} has the database open", common::this_process_as_holder());
    assert!(
        stderr.contains("locked") && stderr.contains(&holder) && stderr.contains("Stop it"),
        "cairn put: {stderr}"
    );
}

#[test]
fn help_lists_every_command_on_one_line() {
    let out = cairn(&["--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    for command in [
        "stress",
        "crashtest",
        "purge",
        "ttl",
        "inspect",
        "explain",
        "audit",
        "get",
        "put",
        "delete",
        "delete-range",
        "scan",
        "stats",
    ] {
        let line = help
            .lines()
            .find(|l| l.split_whitespace().next() == Some(command))
            .unwrap_or_else(|| panic!("{command} missing from --help:\n{help}"));
        assert!(
            line.len() > command.len() + 10,
            "{command} has a description: {line}"
        );
    }
}

#[test]
fn durations_read_in_human_form() {
    let out = cairn(&[
        "stress",
        "--duration",
        "1s",
        "--threads",
        "1",
        "--keys",
        "100",
        "--no-ttl",
        "--no-progress",
        "--grace",
        "200ms",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = cairn(&["stress", "--duration", "a while"]);
    assert_eq!(bad.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("20s, 10m, 1h"));
}
