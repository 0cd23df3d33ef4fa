//! Read-only open: beside a writer, live or dead, it reads a prefix of what the writer
//! acknowledged, takes no lock and changes nothing on disk; it keeps reading its view while the
//! writer compacts away and deletes the files under it, and `catch_up` moves it to the
//! writer's newer state.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use cairn::{Db, Error, Options, WriteBatch};
use common::tempdir;

/// Set in the child writer's environment: the directory it writes to.
const CHILD_DIR_VAR: &str = "CAIRN_READ_ONLY_WRITER_DIR";
/// Set in the busy child writer's environment: the directory it writes to.
const BUSY_DIR_VAR: &str = "CAIRN_READ_ONLY_BUSY_DIR";

/// Puts written by the child: the first half flushed to a table, the rest only in the log.
const KEYS: u32 = 1000;

/// Keys the busy writer overwrites in every batch: `hot{i % HOT}` holds the newest `i`.
const HOT: u64 = 16;

/// Deadlock guard for anything waited on here; never a timed assertion.
const PATIENCE: Duration = Duration::from_secs(120);

/// The child: writes, flushes half, says so, and waits to be killed.
#[test]
fn read_only_child_writer() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR) else {
        return;
    };
    let db = Db::open(&dir, Options::default()).expect("child: open");
    for i in 0..KEYS {
        db.put(format!("k{i:04}"), format!("v{i}"))
            .expect("child: put");
        if i == KEYS / 2 {
            db.flush().expect("child: flush");
        }
    }
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nready").expect("child: stdout");
    out.flush().expect("child: stdout");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Options that make a writer flush and compact all the time: small memtables, level 0
/// compacted at two tables, small levels.
fn busy_options() -> Options {
    Options::default()
        .memtable_size(16 * 1024)
        .level0_triggers(2, 8, 32)
        .level_base_bytes(64 * 1024)
}

/// The busy child: batch `i` puts `k{i:08}` and overwrites `hot{i % HOT}` with `i`, forever,
/// flushing every 200 batches and compacting everything every 1000; after each batch it
/// prints `acked N` (N batches acknowledged). Any failure is printed and ends it.
#[test]
fn read_only_busy_child_writer() {
    let Some(dir) = std::env::var_os(BUSY_DIR_VAR) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    let failed = |out: &mut std::io::StdoutLock<'_>, what: &str, e: &Error| -> ! {
        writeln!(out, "\nfailed {what}: {e:?}").expect("child: stdout");
        out.flush().expect("child: stdout");
        std::process::exit(1);
    };
    let db = match Db::open(&dir, busy_options()) {
        Ok(db) => db,
        Err(e) => failed(&mut out, "open", &e),
    };
    for i in 0u64.. {
        let mut batch = WriteBatch::new();
        batch.put(format!("k{i:08}"), format!("v{i}"));
        batch.put(format!("hot{}", i % HOT), i.to_string());
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
        writeln!(out, "\nacked {}", i + 1).expect("child: stdout");
        out.flush().expect("child: stdout");
    }
}

/// A busy child writer and what it has acknowledged so far.
struct BusyWriter {
    child: Child,
    acked: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
}

impl BusyWriter {
    fn spawn(dir: &Path) -> Self {
        let exe = std::env::current_exe().expect("the test binary");
        let mut child = Command::new(exe)
            .args(["--exact", "read_only_busy_child_writer", "--nocapture"])
            .env(BUSY_DIR_VAR, dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the writer");
        let stdout = child.stdout.take().expect("piped stdout");
        let acked = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let (a, f) = (Arc::clone(&acked), Arc::clone(&failed));
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(n) = line.strip_prefix("acked ") {
                    a.store(n.parse().expect("a count"), Ordering::Release);
                } else if line.starts_with("failed") {
                    eprintln!("writer: {line}");
                    f.store(true, Ordering::Release);
                }
            }
        });
        Self {
            child,
            acked,
            failed,
        }
    }

    fn acked(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// Waits until the writer has acknowledged at least `n` batches.
    fn wait_for(&self, n: u64) {
        let start = Instant::now();
        while self.acked() < n {
            assert!(!self.failed.load(Ordering::Acquire), "the writer failed");
            assert!(
                start.elapsed() < PATIENCE,
                "the writer stopped at {}",
                self.acked()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Checks it never failed and is still writing, then stops it.
    fn finish(mut self) {
        assert!(!self.failed.load(Ordering::Acquire), "the writer failed");
        let status = self.child.try_wait().expect("poll the writer");
        assert!(status.is_none(), "the writer exited: {status:?}");
        self.child.kill().expect("kill the writer");
        self.child.wait().expect("reap the writer");
    }
}

impl Drop for BusyWriter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads the whole view of `db` and checks that it is the state after some number `n` of the
/// busy writer's batches: `k0..k(n-1)` with their values and no other `k`, and each hot key
/// holding the newest batch of its residue below `n`. Returns `n`.
fn check_prefix(db: &Db) -> u64 {
    let mut n = 0u64;
    let mut hot = BTreeMap::new();
    for entry in db.iter().expect("scan") {
        let (key, value) = entry.expect("scan");
        let key = String::from_utf8(key.to_vec()).expect("utf-8 key");
        let value = String::from_utf8(value.to_vec()).expect("utf-8 value");
        if let Some(i) = key.strip_prefix('k') {
            assert_eq!(i, format!("{n:08}"), "a gap before {key}: not a prefix");
            assert_eq!(value, format!("v{n}"), "{key}");
            n += 1;
        } else if let Some(j) = key.strip_prefix("hot") {
            hot.insert(
                j.parse::<u64>().expect("hot key"),
                value.parse::<u64>().expect("hot value"),
            );
        } else {
            panic!("a key the writer never wrote: {key}");
        }
    }
    for j in 0..HOT.min(n) {
        let newest = (n - 1) - ((n - 1 + HOT - j) % HOT);
        assert_eq!(hot.get(&j), Some(&newest), "hot{j} after {n} batches");
        assert_eq!(
            db.get(format!("hot{j}")).expect("get").as_deref(),
            Some(newest.to_string().as_bytes()),
            "get hot{j}"
        );
    }
    assert_eq!(hot.len() as u64, HOT.min(n), "hot keys after {n} batches");
    n
}

#[test]
fn read_only_opens_beside_a_busy_writer_read_what_it_acknowledged_and_catch_up() {
    let dir = tempdir();
    let writer = BusyWriter::spawn(dir.path());
    writer.wait_for(500);
    for round in 0..12 {
        let acked_before = writer.acked();
        let reader = Db::open_read_only(dir.path(), Options::default()).expect("open read-only");
        let n = check_prefix(&reader);
        assert!(
            n >= acked_before,
            "round {round}: the reader sees {n} batches, the writer had acknowledged {acked_before}"
        );
        // Every batch read is one the writer acknowledges (its line may trail the read).
        writer.wait_for(n);
        // The view holds still while the writer goes on.
        writer.wait_for(n + 300);
        assert_eq!(check_prefix(&reader), n, "round {round}: the view moved");
        let acked_before = writer.acked();
        reader.catch_up().expect("catch up");
        let caught_up = check_prefix(&reader);
        assert!(
            caught_up >= acked_before && caught_up > n,
            "round {round}: after catch_up the reader sees {caught_up} batches, the writer had \
             acknowledged {acked_before}"
        );
        reader.close().expect("close");
    }
    writer.finish();
}

#[test]
fn a_reader_open_beside_a_busy_writer_reads_its_view_while_every_table_is_compacted_away() {
    let dir = tempdir();
    let writer = BusyWriter::spawn(dir.path());
    writer.wait_for(1500);
    // A cache of one table: the view's tables are read again after the cache let go of them.
    let options = Options::default().max_open_tables(1);
    let reader = Db::open_read_only(dir.path(), options).expect("open read-only");
    let tables_seen = table_files(dir.path());
    let n = check_prefix(&reader);
    // The writer compacts everything every 1000 batches, and rewrites level 0 all the time.
    let start = Instant::now();
    while !table_files(dir.path()).is_disjoint(&tables_seen) {
        assert!(start.elapsed() < PATIENCE, "the writer kept a table");
        writer.wait_for(writer.acked() + 100);
    }
    assert_eq!(
        check_prefix(&reader),
        n,
        "the view after its tables were deleted"
    );
    reader.catch_up().expect("catch up");
    assert!(check_prefix(&reader) > n);
    writer.finish();
}

/// The table files in `dir`.
fn table_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| Path::new(name).extension().is_some_and(|x| x == "sst"))
        .collect()
}

#[test]
fn a_writer_opens_restarts_and_deletes_while_a_reader_is_open() {
    let dir = tempdir();
    let options = || Options::default().disable_auto_compactions(true);
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..100 {
        db.put(format!("k{i:03}"), "old").expect("put");
    }
    db.flush().expect("flush");
    db.put("in-the-log", "old").expect("put");
    db.close().expect("close");

    let reader = Db::open_read_only(dir.path(), Options::default()).expect("open read-only");
    let tables_seen = table_files(dir.path());
    let snapshot = reader.snapshot();
    for round in 0..3 {
        // Never `Locked`: the reader holds no lock.
        let db = Db::open(dir.path(), options()).expect("a writer beside a reader");
        for i in 0..100 {
            db.put(format!("k{i:03}"), format!("new{round}"))
                .expect("put");
        }
        db.compact_range::<&str>(..).expect("compact");
        db.close().expect("close");
    }
    assert!(
        table_files(dir.path()).is_disjoint(&tables_seen),
        "every table the reader saw is deleted"
    );
    for i in 0..100 {
        let key = format!("k{i:03}");
        assert_eq!(
            reader.get(&key).expect("get").as_deref(),
            Some(&b"old"[..]),
            "{key}"
        );
    }
    assert_eq!(reader.iter().expect("scan").count(), 101);
    assert_eq!(
        reader.get("in-the-log").expect("get").as_deref(),
        Some(&b"old"[..])
    );
    assert!(
        matches!(reader.catch_up(), Err(Error::InvalidArgument(ref why)) if why.contains("snapshot")),
        "catch_up while a snapshot is held"
    );
    assert_eq!(
        snapshot.get("k000").expect("get").as_deref(),
        Some(&b"old"[..])
    );
    drop(snapshot);
    reader.catch_up().expect("catch up");
    assert_eq!(
        reader.get("k042").expect("get").as_deref(),
        Some(&b"new2"[..])
    );
    assert_eq!(reader.iter().expect("scan").count(), 101);
    let writer = Db::open(dir.path(), Options::default()).expect("open");
    assert!(matches!(writer.catch_up(), Err(Error::InvalidArgument(_))));
}

#[test]
fn read_only_open_beside_a_live_writer_reads_it_and_changes_nothing_beside_a_dead_one() {
    let dir = tempdir();
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args(["--exact", "read_only_child_writer", "--nocapture"])
        .env(CHILD_DIR_VAR, dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the writer");
    let stdout = child.stdout.take().expect("piped stdout");
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line == "ready");
    assert!(ready, "the writer came up");

    let beside_live =
        Db::open_read_only(dir.path(), Options::default()).map(|db| db.iter().map(Iterator::count));
    child.kill().expect("kill the writer");
    child.wait().expect("reap the writer");
    assert!(
        matches!(beside_live, Ok(Ok(n)) if n == KEYS as usize),
        "beside a live writer: {beside_live:?}"
    );

    let before = files(dir.path());
    let reader = Db::open_read_only(dir.path(), Options::default()).expect("open read-only");
    let second = Db::open_read_only(dir.path(), Options::default()).expect("a second reader");
    for i in 0..KEYS {
        let value = reader.get(format!("k{i:04}")).expect("get");
        assert_eq!(
            value.as_deref(),
            Some(format!("v{i}").as_bytes()),
            "k{i:04}"
        );
    }
    assert_eq!(second.iter().expect("scan").count(), KEYS as usize);
    let snapshot = reader.snapshot();
    assert_eq!(snapshot.iter().expect("scan").count(), KEYS as usize);
    assert!(!reader.audit_key("k0999").expect("audit").is_empty());
    assert!(matches!(reader.put("k", "v"), Err(Error::ReadOnly)));
    assert!(matches!(reader.flush(), Err(Error::ReadOnly)));
    assert!(matches!(
        reader.compact_range::<&str>(..),
        Err(Error::ReadOnly)
    ));
    assert!(matches!(
        reader.create_column_family("cf", cairn::CfOptions::default()),
        Err(Error::ReadOnly)
    ));
    reader
        .wait_for_background_work()
        .expect("no background work");
    drop(snapshot);
    second.catch_up().expect("catch up with nothing new");
    assert_eq!(second.iter().expect("scan").count(), KEYS as usize);
    reader.close().expect("close");
    drop(second);
    let after = files(dir.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files created or deleted"
    );
    for (name, (bytes, modified)) in &before {
        let (now, when) = after.get(name).expect("still there");
        assert!(now == bytes && when == modified, "{name} changed");
    }
    let writer = Db::open(dir.path(), Options::default()).expect("a writer once readers left");
    assert_eq!(writer.iter().expect("scan").count(), KEYS as usize);
}

/// Every file in `dir` with its bytes and modification time.
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| {
            let path = e.path();
            let bytes = std::fs::read(&path).expect("read");
            let modified = e.metadata().and_then(|m| m.modified()).expect("mtime");
            (
                e.file_name().to_string_lossy().into_owned(),
                (bytes, modified),
            )
        })
        .collect()
}

#[test]
fn read_only_open_takes_no_lock_and_makes_no_lock_file() {
    let dir = tempdir();
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("k", "v").expect("put");
    db.close().expect("close");
    std::fs::remove_file(dir.path().join("LOCK")).expect("remove LOCK");
    let reader = Db::open_read_only(dir.path(), Options::default()).expect("open read-only");
    assert!(reader.iter().expect("scan").count() > 0);
    drop(reader);
    assert!(
        !dir.path().join("LOCK").exists(),
        "and it does not create one"
    );
}

/// The writer may be part way through a record: a log cut inside its last record ends there,
/// even in a recovery mode that calls every damage corruption.
#[test]
fn a_log_cut_inside_its_last_record_ends_there_for_a_reader() {
    let dir = tempdir();
    let db = Db::open(dir.path(), Options::default()).expect("open");
    for i in 0..10 {
        db.put(format!("k{i}"), "v".repeat(100)).expect("put");
    }
    // No close: a closed log is sealed, and a live writer's is not.
    std::mem::forget(db);
    let log = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max_by_key(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .expect("a log");
    let len = std::fs::metadata(&log).expect("log").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .expect("open log");
    file.set_len(len - 40).expect("cut the log");
    drop(file);
    let options = Options::default().recovery_mode(cairn::RecoveryMode::AbsoluteConsistency);
    let reader = Db::open_read_only(dir.path(), options).expect("open read-only");
    assert_eq!(reader.iter().expect("scan").count(), 9);
}
