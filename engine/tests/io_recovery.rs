//! Recovery from transient I/O errors (`Db::resume`, automatic by default): after a failed log,
//! table or MANIFEST sync the database stops, then switches to a new log, flushes its memtables
//! through a fresh MANIFEST and takes writes again, and no write acknowledged before the error
//! is lost, even when the failed sync dropped the log's unsynced pages. A failure that persists
//! keeps the database stopped with the first error.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{Db, Error, Options, WriteOptions};
use cairn_fs::{FaultyFs, OpKind, SyncFailure};

const KEYS: u64 = 400;

fn options(fs: &FaultyFs) -> Options {
    Options::default()
        .file_system(Arc::new(fs.clone()))
        .memtable_size(64 * 1024)
}

fn key(i: u64) -> String {
    format!("k{i:05}")
}

/// Waits until the database has recovered `n` times; fails the test after a minute (a
/// deadlock guard, not a timing claim).
fn wait_for_recoveries(db: &Db, n: u64) {
    let start = Instant::now();
    while db.stats().recoveries < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no recovery after a minute: {} of {n}",
            db.stats().recoveries
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Writes keys `0..KEYS` (every tenth synced), arming `fault` before key `fail_at`. A write
/// that fails is uncertain; the writer waits for the recovery and goes on. Returns the keys
/// acknowledged and the one that failed.
fn write_through_a_fault(db: &Db, fail_at: u64, fault: impl FnOnce()) -> (Vec<u64>, Option<u64>) {
    let mut fault = Some(fault);
    let mut acked = Vec::new();
    let mut failed = None;
    for i in 0..KEYS {
        if i == fail_at
            && let Some(fault) = fault.take()
        {
            fault();
        }
        let sync = i % 10 == 0;
        match db.write_opt(single_put(i), &WriteOptions { sync }) {
            Ok(_) => acked.push(i),
            Err(e) => {
                assert!(failed.is_none(), "a second write failed, key {i}: {e}");
                failed = Some(i);
                wait_for_recoveries(db, 1);
            }
        }
    }
    (acked, failed)
}

fn single_put(i: u64) -> cairn::WriteBatch {
    let mut batch = cairn::WriteBatch::new();
    batch.put(key(i), format!("v{i}"));
    batch
}

/// Every acknowledged key reads back; keys never written do not.
fn check(db: &Db, acked: &[u64], failed: Option<u64>, ctx: &str) {
    for &i in acked {
        let got = db.get(key(i)).expect("get");
        assert_eq!(
            got.as_deref(),
            Some(format!("v{i}").as_bytes()),
            "{ctx}: acknowledged key {i} is lost"
        );
    }
    let present = (0..KEYS)
        .filter(|&i| db.get(key(i)).expect("get").is_some())
        .count();
    let most = acked.len() + usize::from(failed.is_some());
    assert!(present <= most, "{ctx}: {present} keys, more than written");
}

fn reopen_and_check(dir: &Path, fs: &FaultyFs, acked: &[u64], failed: Option<u64>, ctx: &str) {
    let db = Db::open(dir, options(fs)).expect("reopen");
    check(&db, acked, failed, &format!("{ctx}, after reopening"));
    db.close().expect("close");
}

/// The case the issue reproduced: a failed log sync that drops the unsynced pages (Linux after
/// a writeback error) lost writes acknowledged before it at the next open, although the
/// memtable still held them. With either kind of sync failure, none is lost now.
#[test]
fn a_failed_log_sync_costs_no_acknowledged_write() {
    for mode in [SyncFailure::DropsUnsynced, SyncFailure::KeepsBytes] {
        let ctx = format!("{mode:?}");
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = FaultyFs::new(7);
        fs.set_sync_failure(mode);
        let db = Db::open(dir.path(), options(&fs)).expect("open");
        // Key 205 is not synced and 210 is: the fault hits 210's sync, with 201..=209
        // acknowledged but unsynced in the log.
        let (acked, failed) =
            write_through_a_fault(&db, 210, || fs.fail_next(OpKind::Sync, ".log"));
        assert_eq!(failed, Some(210), "{ctx}: the synced write failed");
        if mode == SyncFailure::DropsUnsynced {
            assert!(
                fs.dropped_bytes(".log") > 0,
                "{ctx}: the failed sync dropped pages"
            );
        }
        assert_eq!(db.stats().recoveries, 1, "{ctx}");
        check(&db, &acked, failed, &ctx);
        db.close().expect("close");
        reopen_and_check(dir.path(), &fs, &acked, failed, &ctx);
    }
}

/// A failed table sync in a flush, and a failed MANIFEST sync recording a flush: each stops
/// the database, which recovers, and nothing acknowledged is lost.
#[test]
fn a_failed_table_or_manifest_sync_in_a_flush_is_recovered() {
    for target in [".sst", "MANIFEST"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = FaultyFs::new(3);
        fs.set_sync_failure(SyncFailure::DropsUnsynced);
        let db = Db::open(dir.path(), options(&fs)).expect("open");
        let mut acked = Vec::new();
        for i in 0..KEYS / 2 {
            db.put(key(i), format!("v{i}")).expect("put");
            acked.push(i);
        }
        fs.fail_next(OpKind::Sync, target);
        assert!(db.flush().is_err(), "{target}: the flush fails");
        wait_for_recoveries(&db, 1);
        for i in KEYS / 2..KEYS {
            db.put(key(i), format!("v{i}")).expect("writes resume");
            acked.push(i);
        }
        check(&db, &acked, None, target);
        db.flush().expect("flush after the recovery");
        db.close().expect("close");
        reopen_and_check(dir.path(), &fs, &acked, None, target);
    }
}

/// With automatic recovery off the database stays stopped; `resume` fails while the log
/// cannot be created, the stop keeps the first error, and once the fault clears `resume`
/// brings every acknowledged write back into tables and writes go on.
#[test]
fn a_persistent_failure_keeps_the_first_error_until_resume_succeeds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(11);
    fs.set_sync_failure(SyncFailure::DropsUnsynced);
    let db = Db::open(dir.path(), options(&fs).auto_recovery(false)).expect("open");
    let mut acked = Vec::new();
    for i in 0..100 {
        db.put(key(i), format!("v{i}")).expect("put");
        acked.push(i);
    }
    fs.fail_next(OpKind::Sync, ".log");
    let first = db
        .write_opt(single_put(100), &WriteOptions { sync: true })
        .expect_err("the sync fails")
        .to_string();
    fs.inject_errors_matching(OpKind::Create, 1, ".log");
    for _ in 0..3 {
        assert!(db.resume().is_err(), "no new log can be made");
        match db.put(key(101), "v101") {
            Err(Error::Stopped { cause }) => assert!(
                first.contains(&cause.to_string()) || cause.to_string().contains(&first),
                "the stop keeps the first error: {cause} / {first}"
            ),
            other => panic!("writes stay refused: {other:?}"),
        }
    }
    assert_eq!(db.stats().recoveries, 0);
    fs.clear_errors();
    db.resume().expect("resume once the fault is gone");
    assert_eq!(db.stats().recoveries, 1);
    db.resume()
        .expect("resuming a running database does nothing");
    for i in 101..200 {
        db.put(key(i), format!("v{i}")).expect("put after resume");
        acked.push(i);
    }
    check(&db, &acked, Some(100), "after resume");
    db.close().expect("close");
    reopen_and_check(dir.path(), &fs, &acked, Some(100), "after resume");
}

/// Recovery leaves the old log and MANIFEST to the sweep: once it is done, the acknowledged
/// writes are in tables, the directory holds one log, and a read-only open sees them all.
#[test]
fn after_recovery_the_memtables_are_in_tables_and_the_old_log_is_gone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(5);
    let db = Db::open(dir.path(), options(&fs)).expect("open");
    let (acked, failed) = write_through_a_fault(&db, 150, || fs.fail_next(OpKind::Sync, ".log"));
    let logs = |dir: &Path| {
        std::fs::read_dir(dir)
            .expect("list")
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
            .count()
    };
    assert_eq!(logs(dir.path()), 1, "the old log was swept");
    assert!(
        db.stats().levels.first().is_some_and(|l| l.files > 0),
        "the memtables went to level 0"
    );
    db.close().expect("close");
    let ro = Db::open_read_only(dir.path(), options(&fs)).expect("read-only");
    check(&ro, &acked, failed, "read-only");
}

/// Closing (or dropping) a database stopped by an I/O error, before any recovery ran: the
/// close recovers first, so the writes only the memtables held are not lost. With automatic
/// recovery off too: losing acknowledged writes at a close is never what is asked for.
#[test]
fn closing_a_stopped_database_flushes_what_only_its_memtables_held() {
    for auto in [false, true] {
        let ctx = format!("auto_recovery {auto}");
        let dir = tempfile::tempdir().expect("tempdir");
        let fs = FaultyFs::new(13);
        fs.set_sync_failure(SyncFailure::DropsUnsynced);
        let db = Db::open(dir.path(), options(&fs).auto_recovery(auto)).expect("open");
        let acked: Vec<u64> = (0..100).collect();
        for &i in &acked {
            db.put(key(i), format!("v{i}")).expect("put");
        }
        fs.fail_next(OpKind::Sync, ".log");
        assert!(
            db.write_opt(single_put(100), &WriteOptions { sync: true })
                .is_err(),
            "{ctx}: the sync fails"
        );
        assert!(
            fs.dropped_bytes(".log") > 0,
            "{ctx}: the failed sync dropped pages"
        );
        drop(db.close());
        reopen_and_check(dir.path(), &fs, &acked, Some(100), &ctx);
    }
}

/// A file system that holds the creation of a table's temporary file until opened: a flush
/// waits there with its frozen memtable.
#[derive(Debug)]
struct HeldTables {
    inner: FaultyFs,
    gate: Arc<(std::sync::Mutex<(bool, bool)>, std::sync::Condvar)>,
}

impl HeldTables {
    fn wait_entered(&self) {
        let (lock, changed) = &*self.gate;
        let state = lock.lock().expect("gate");
        let (state, _) = changed
            .wait_timeout_while(state, Duration::from_secs(60), |s| !s.0)
            .expect("gate");
        assert!(state.0, "a flush reached the gate");
    }

    fn open(&self) {
        let (lock, changed) = &*self.gate;
        lock.lock().expect("gate").1 = true;
        changed.notify_all();
    }
}

impl cairn_fs::FileSystem for HeldTables {
    fn create(&self, path: &Path) -> cairn_fs::Result<Box<dyn cairn_fs::WritableFile>> {
        if path.to_string_lossy().contains(".sst.tmp") {
            let (lock, changed) = &*self.gate;
            let mut state = lock.lock().expect("gate");
            state.0 = true;
            changed.notify_all();
            while !state.1 {
                state = changed.wait(state).expect("gate");
            }
        }
        self.inner.create(path)
    }
    fn open_append(&self, path: &Path) -> cairn_fs::Result<Box<dyn cairn_fs::WritableFile>> {
        self.inner.open_append(path)
    }
    fn open_read(&self, path: &Path) -> cairn_fs::Result<Box<dyn cairn_fs::ReadableFile>> {
        self.inner.open_read(path)
    }
    fn map(&self, path: &Path) -> cairn_fs::Result<bytes::Bytes> {
        self.inner.map(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> cairn_fs::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> cairn_fs::Result<()> {
        self.inner.remove(path)
    }
    fn create_dir_all(&self, dir: &Path) -> cairn_fs::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> cairn_fs::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn sync_dir(&self, dir: &Path) -> cairn_fs::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn file_size(&self, path: &Path) -> cairn_fs::Result<u64> {
        self.inner.file_size(path)
    }
    fn lock(&self, path: &Path) -> cairn_fs::Result<cairn_fs::FileLock> {
        self.inner.lock(path)
    }
    fn lock_shared(&self, path: &Path) -> cairn_fs::Result<Option<cairn_fs::FileLock>> {
        self.inner.lock_shared(path)
    }
}

/// A family dropped while its memtable waits, frozen, for a flush: recovery writes no table
/// for it (the version has no level to add one to), and the other families' writes survive.
/// Recovery used to fail with `Corruption` every time here, leaving the database stopped.
#[test]
fn a_family_dropped_while_its_memtable_waits_for_a_flush_does_not_block_recovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(17);
    fs.set_sync_failure(SyncFailure::DropsUnsynced);
    let held = Arc::new(HeldTables {
        inner: fs.clone(),
        gate: Arc::new((
            std::sync::Mutex::new((false, false)),
            std::sync::Condvar::new(),
        )),
    });
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options::default()
                .file_system(Arc::clone(&held) as Arc<dyn cairn_fs::FileSystem>)
                .auto_recovery(false),
        )
        .expect("open"),
    );
    let tmp = db
        .create_column_family("tmp", cairn::CfOptions::default())
        .expect("cf");
    tmp.put("t", "1").expect("put");
    db.put(key(0), "v0").expect("put");
    let flusher = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.flush())
    };
    held.wait_entered();
    drop(tmp);
    db.drop_column_family("tmp").expect("drop");
    db.put(key(1), "v1").expect("put");
    fs.fail_next(OpKind::Sync, ".log");
    assert!(
        db.write_opt(single_put(2), &WriteOptions { sync: true })
            .is_err()
    );
    held.open();
    assert!(
        flusher.join().expect("flusher").is_err(),
        "its flush is refused"
    );
    db.resume().expect("recovery leaves the dropped family out");
    check(&db, &[0, 1], Some(2), "after resume");
    let Ok(db) = Arc::try_unwrap(db) else {
        panic!("a handle is left");
    };
    db.close().expect("close");
    reopen_and_check(dir.path(), &fs, &[0, 1], Some(2), "dropped family");
}

/// A compaction that fails the same way every time (its input cannot be read): each recovery
/// clears the stop, the next compaction stops the database again. After a few quick
/// recoveries in a row the stop counts as persistent and the database stays stopped, instead
/// of recovering forever and piling memtables up in level 0.
#[test]
fn a_compaction_that_keeps_failing_ends_automatic_recovery() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = FaultyFs::new(19);
    let db = Db::open(dir.path(), options(&fs).level0_triggers(2, 20, 36)).expect("open");
    fs.inject_errors_matching(OpKind::Read, 1, ".sst");
    let start = Instant::now();
    let mut i = 0;
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "recoveries: {}",
            db.stats().recoveries
        );
        // Each round adds a level-0 table, so a compaction is picked, and fails.
        let _ = db.put(key(i % KEYS), "v");
        let _ = db.flush();
        i += 1;
        if db.stats().recoveries >= u64::from(MAX_QUICK) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Give a runaway loop the time to show itself: every attempt waits 20 ms at first.
    std::thread::sleep(Duration::from_millis(500));
    let recoveries = db.stats().recoveries;
    assert_eq!(recoveries, u64::from(MAX_QUICK), "recovery went on");
    assert!(
        matches!(db.put("after", "v"), Err(Error::Stopped { .. })),
        "the database stays stopped"
    );
    fs.clear_errors();
    db.resume()
        .expect("the caller can still resume once the fault is gone");
}

/// `MAX_AUTO_ATTEMPTS` in the engine: quick recoveries in a row before a stop is persistent.
const MAX_QUICK: u32 = 6;
