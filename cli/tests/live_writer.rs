//! The read commands against a database a live process is writing, flushing, compacting and
//! reopening: each runs beside it and answers, and the writer never finds the directory
//! locked (a read-only open takes no lock).

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, WriteBatch};
use serde_json::Value;

/// Set in the child writer's environment: the directory it writes to.
const WRITER_DIR_VAR: &str = "CAIRN_CLI_LIVE_WRITER_DIR";

/// Deadlock guard for waiting on the writer; never a timed assertion.
const PATIENCE: Duration = Duration::from_secs(120);

/// Options that make the writer flush and compact all the time.
fn busy_options() -> Options {
    Options::default()
        .memtable_size(16 * 1024)
        .level0_triggers(2, 8, 32)
        .level_base_bytes(64 * 1024)
}

/// The child: batch `i` puts `k{i:08}` and deletes `k{i-50:08}`, forever; it flushes every 200
/// batches, compacts every 1000, and closes and reopens the database every 700 (where a
/// reader's lock would show as `Locked`). It prints `acked N` after each batch; any failure is
/// printed as `failed …` and ends it.
#[test]
fn live_writer_child() {
    let Some(dir) = std::env::var_os(WRITER_DIR_VAR) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    let failed = |out: &mut std::io::StdoutLock<'_>, what: &str, e: &Error| -> ! {
        writeln!(out, "\nfailed {what}: {e:?}").expect("child: stdout");
        out.flush().expect("child: stdout");
        std::process::exit(1);
    };
    let open = |out: &mut std::io::StdoutLock<'_>| match Db::open(&dir, busy_options()) {
        Ok(db) => db,
        Err(e) => failed(out, "open", &e),
    };
    let mut db = open(&mut out);
    for i in 0u64.. {
        let mut batch = WriteBatch::new();
        batch.put(format!("k{i:08}"), format!("v{i}"));
        if let Some(old) = i.checked_sub(50) {
            batch.delete(format!("k{old:08}"));
        }
        if let Err(e) = db.write(batch) {
            failed(&mut out, "write", &e);
        }
        if i % 200 == 199
            && let Err(e) = db.flush()
        {
            failed(&mut out, "flush", &e);
        }
        if i % 1000 == 999
            && let Err(e) = db.compact_range::<&str>(..)
        {
            failed(&mut out, "compact", &e);
        }
        if i % 700 == 699 {
            if let Err(e) = db.close() {
                failed(&mut out, "close", &e);
            }
            db = open(&mut out);
        }
        writeln!(out, "\nacked {}", i + 1).expect("child: stdout");
        out.flush().expect("child: stdout");
    }
}

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

fn s(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

#[test]
fn read_commands_run_beside_a_live_writer_that_never_sees_locked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "live_writer_child", "--nocapture"])
        .env(WRITER_DIR_VAR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let acked = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));
    let (a, f) = (Arc::clone(&acked), Arc::clone(&failed));
    let lines = std::thread::spawn(move || {
        let mut failures = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some(n) = line.strip_prefix("acked ") {
                a.store(n.parse().expect("a count"), Ordering::Release);
            } else if line.starts_with("failed") {
                f.store(true, Ordering::Release);
                failures.push(line);
            }
        }
        failures
    });
    let wait_for = |n: u64| {
        let start = Instant::now();
        while acked.load(Ordering::Acquire) < n && !failed.load(Ordering::Acquire) {
            assert!(start.elapsed() < PATIENCE, "the writer stopped");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(300);
    let d = s(dir.path());
    let reads: [&[&str]; 6] = [
        &["stats", d, "--json"],
        &["scan", d, "--json"],
        &["inspect", "levels", d, "--json"],
        &["explain", d, "--json"],
        &["audit", d, "k00000010", "--json"],
        &["get", d, "k00000000", "--json"],
    ];
    let mut scanned = Vec::new();
    for round in 0..4 {
        for args in reads {
            let before = acked.load(Ordering::Acquire);
            let out = cairn(args);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "round {round}: cairn {args:?}\nstdout: {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let value: Value = serde_json::from_str(&stdout)
                .unwrap_or_else(|e| panic!("cairn {args:?}: {e}: {stdout}"));
            if args.first() == Some(&"scan") {
                scanned.push((before, value));
            }
        }
        wait_for(acked.load(Ordering::Acquire) + 400);
    }
    let failed_now = failed.load(Ordering::Acquire);
    let running = child.try_wait().expect("poll the writer").is_none();
    child.kill().expect("kill the writer");
    child.wait().expect("reap the writer");
    let failures = lines.join().expect("the line reader");
    assert!(
        !failed_now && failures.is_empty(),
        "the writer failed: {failures:?}"
    );
    assert!(running, "the writer exited");
    // Each scan is the state after some batch at or past what was acknowledged before it: the
    // last 50 keys written, in order.
    for (before, value) in scanned {
        let rows = value
            .get("rows")
            .and_then(Value::as_array)
            .expect("scan rows");
        let keys: Vec<u64> = rows
            .iter()
            .map(|row| {
                let key = row.get("key").and_then(Value::as_str).expect("a text key");
                key.strip_prefix('k')
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("a key the writer never wrote: {key}"))
            })
            .collect();
        let last = *keys.last().expect("keys");
        assert!(
            last + 1 >= before,
            "scan ends at {last}, {before} acknowledged before it"
        );
        let first = last.saturating_sub(49);
        assert_eq!(
            keys,
            (first..=last).collect::<Vec<_>>(),
            "a window of live keys"
        );
    }
}
