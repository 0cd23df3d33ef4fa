//! I/O outside the state lock: every write takes that lock to find room in the memtable, so
//! nothing that waits on a disk — a MANIFEST sync, a new log's creation — may hold it.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cairn::{Db, Options};
use common::{HoldingFs, Op, tempdir, within};

const WAIT: Duration = Duration::from_secs(20);

/// A database on a file system whose operations a test can hold.
fn open_holding() -> (tempfile::TempDir, HoldingFs, Arc<Db>) {
    let dir = tempdir();
    let fs = HoldingFs::default();
    let options = Options::default().file_system(Arc::new(fs.clone()));
    let db = Arc::new(Db::open(dir.path(), options).expect("open"));
    (dir, fs, db)
}

#[test]
fn a_write_goes_on_while_a_flush_waits_on_its_manifest_sync() {
    let (_dir, fs, db) = open_holding();
    db.put("a", "1").expect("put");
    fs.hold(Op::Sync, "MANIFEST");
    let flusher = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.flush())
    };
    assert!(
        fs.wait_held(Op::Sync, "MANIFEST", WAIT),
        "the flush syncs its edit"
    );
    let writer = Arc::clone(&db);
    let wrote = within(WAIT, move || writer.put("b", "2"));
    fs.release(Op::Sync, "MANIFEST");
    let Some(wrote) = wrote else {
        flusher.join().expect("flusher").expect("flush");
        panic!("a write waited for a MANIFEST sync");
    };
    wrote.expect("put");
    flusher.join().expect("flusher").expect("flush");
    assert_eq!(db.get("b").expect("get").as_deref(), Some(&b"2"[..]));
}

#[test]
fn a_flush_installs_while_a_memtable_switch_waits_on_its_new_log() {
    let (_dir, fs, db) = open_holding();
    // The first flush's table waits at its rename ...
    db.put("a", "1").expect("put");
    fs.hold(Op::Rename, ".sst.tmp");
    let first = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.flush())
    };
    assert!(fs.wait_held(Op::Rename, ".sst.tmp", WAIT));
    // ... while a second freeze waits on the creation of its new log.
    db.put("b", "2").expect("put");
    fs.hold(Op::Create, ".log");
    let second = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.flush())
    };
    assert!(fs.wait_held(Op::Create, ".log", WAIT));
    fs.release(Op::Rename, ".sst.tmp");
    let stats = Arc::clone(&db);
    let installed = within(WAIT, move || {
        while stats.stats().flushes == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    fs.release(Op::Create, ".log");
    first.join().expect("first").expect("flush");
    second.join().expect("second").expect("flush");
    assert!(
        installed.is_some(),
        "a flush could not install while a memtable switch created its log"
    );
}
