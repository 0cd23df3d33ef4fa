//! Shutdown and panics: `close` waits for the writes in flight, a panicking writer does not hang
//! the writers queued behind it, and dropping a column family abandons its running compaction.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use cairn::{Clock, Db, Options};
use common::{HoldingFs, Op, tempdir, within};

const WAIT: Duration = Duration::from_secs(30);

/// A clock that, once armed, holds the first thread named `writer-*` that reads it until the
/// test lets it go: the leader of a commit group reads the clock after it found room in the
/// memtable and before it writes the log, so this holds a write in flight.
#[derive(Debug, Default)]
struct HoldingClock {
    armed: AtomicBool,
    held: std::sync::Mutex<bool>,
    released: std::sync::Condvar,
    entered: AtomicBool,
}

impl Clock for HoldingClock {
    fn now_ms(&self) -> u64 {
        let writer = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("writer-"));
        if writer && self.armed.swap(false, Ordering::SeqCst) {
            self.entered.store(true, Ordering::SeqCst);
            let mut held = self
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *held = true;
            while *held {
                held = self
                    .released
                    .wait(held)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
        cairn::SystemClock.now_ms()
    }
}

impl HoldingClock {
    fn release(&self) {
        *self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = false;
        self.released.notify_all();
    }
}

#[test]
fn close_waits_for_the_writes_in_flight_before_its_final_sync_and_unlock() {
    let dir = tempdir();
    let clock = Arc::new(HoldingClock::default());
    let db = Db::open(dir.path(), Options::default().clock(clock.clone())).expect("open");
    let cf = db.column_family("default").expect("default family");
    clock.armed.store(true, Ordering::SeqCst);
    let writer = std::thread::Builder::new()
        .name("writer-0".into())
        .spawn(move || cf.put("k", "v"))
        .expect("spawn");
    while !clock.entered.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let closer = std::thread::spawn(move || db.close());
    std::thread::sleep(Duration::from_millis(500));
    let closed_early = closer.is_finished();
    let locked_out = Db::open(dir.path(), Options::default()).is_err();
    clock.release();
    let written = writer.join().expect("writer");
    closer.join().expect("closer").expect("close");
    assert!(!closed_early, "close returned while a write was in flight");
    assert!(
        locked_out,
        "the directory was unlocked while a write was in flight"
    );
    written.expect("the write in flight completes");
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get("k").expect("get").as_deref(), Some(&b"v"[..]));
}

/// A clock that panics once, on the first call from a thread named `writer-*` after it is armed:
/// the leader of a commit group reads the clock to stamp the group.
#[derive(Debug, Default)]
struct PanickyClock {
    armed: AtomicBool,
}

impl Clock for PanickyClock {
    fn now_ms(&self) -> u64 {
        let writer = std::thread::current()
            .name()
            .is_some_and(|n| n.starts_with("writer-"));
        let breaks = writer && self.armed.swap(false, Ordering::SeqCst);
        assert!(!breaks, "the clock broke");
        cairn::SystemClock.now_ms()
    }
}

#[test]
fn a_panicking_leader_does_not_hang_the_writers_queued_behind_it() {
    let dir = tempdir();
    let clock = Arc::new(PanickyClock::default());
    let db = Arc::new(Db::open(dir.path(), Options::default().clock(clock.clone())).expect("open"));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let db = Arc::clone(&db);
            std::thread::Builder::new()
                .name(format!("writer-{w}"))
                .spawn(move || {
                    // Writes until the database has refused a few: a fixed count could all
                    // land before the clock is armed (a release build writes 8,000 in 20 ms),
                    // leaving no leader to panic.
                    let mut errors = 0;
                    for i in 0..5_000_000 {
                        if db.put(format!("w{w}-{i}"), "v").is_err() {
                            errors += 1;
                            if errors == 10 {
                                break;
                            }
                        }
                    }
                    errors
                })
                .expect("spawn")
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    clock.armed.store(true, Ordering::SeqCst);
    let Some(outcomes) = within(WAIT, move || {
        writers
            .into_iter()
            .map(std::thread::JoinHandle::join)
            .collect::<Vec<_>>()
    }) else {
        std::mem::forget(db);
        panic!("writers hung behind a panicked leader");
    };
    let panicked = outcomes.iter().filter(|o| o.is_err()).count();
    assert_eq!(panicked, 1, "the leader's own thread panics, no other");
    let failed: usize = outcomes.iter().filter_map(|o| o.as_ref().ok()).sum();
    assert!(
        failed > 0,
        "writes after the panic fail: the database stopped"
    );
    assert!(
        matches!(
            db.put("after", "v"),
            Err(cairn::Error::Stopped { cause: cairn::StopCause::Failed(ref cause) })
                if matches!(**cause, cairn::Error::Panicked(_))
        ),
        "a panic mid-write leaves the log uncertain: the database stops"
    );
}

#[test]
fn dropping_a_column_family_abandons_its_running_compaction() {
    let dir = tempdir();
    let fs = HoldingFs::default();
    let db = Db::open(
        dir.path(),
        Options::default()
            .file_system(Arc::new(fs.clone()))
            .level0_triggers(2, 20, 36),
    )
    .expect("open");
    let cf = db
        .create_column_family("doomed", cairn::CfOptions::default())
        .expect("cf");
    // The compaction opens its inputs, the first time anything opens these tables.
    fs.hold(Op::OpenRead, ".sst");
    cf.put("a", "1").expect("put");
    db.flush().expect("flush");
    cf.put("b", "2").expect("put");
    db.flush().expect("flush");
    assert!(
        fs.wait_held(Op::OpenRead, ".sst", WAIT),
        "two level-0 tables start a compaction"
    );
    db.drop_column_family("doomed").expect("drop");
    fs.release(Op::OpenRead, ".sst");
    std::thread::sleep(Duration::from_millis(300));
    db.put("after", "ok")
        .expect("the database goes on after the abandoned compaction");
    db.wait_for_background_work().expect("settle");
    assert!(db.column_family("doomed").is_err());
    assert!(
        common::tables_in(dir.path()).is_empty(),
        "the dropped family's tables and the compaction's outputs are gone: {:?}",
        common::tables_in(dir.path())
    );
}

/// A compaction a caller runs on its own thread (`compact_range`) is no background thread
/// `close` joins: close must still wait for it before it unlocks the directory, or a new open
/// and the old compaction would write and delete files under each other.
#[test]
fn close_waits_for_a_compaction_running_on_a_callers_thread() {
    let dir = tempdir();
    let gate = common::Gate::new();
    let db = Db::open(
        dir.path(),
        Options::default()
            .compaction_filter(gate.clone())
            .level0_triggers(100, 200, 300),
    )
    .expect("open");
    for i in 0..100 {
        db.put(format!("k{i:03}"), "v").expect("put");
    }
    db.flush().expect("flush");
    let cf = db.column_family("default").expect("default family");
    let compactor = std::thread::spawn(move || cf.compact_range::<&str>(..));
    assert!(gate.wait_entered(WAIT), "the compaction started");
    let closer = std::thread::spawn(move || db.close());
    std::thread::sleep(Duration::from_millis(500));
    let closed_early = closer.is_finished();
    let locked_out = Db::open(dir.path(), Options::default()).is_err();
    gate.open();
    let _ = compactor.join().expect("compactor");
    let _ = closer.join().expect("closer");
    assert!(
        !closed_early,
        "close returned while a compaction was writing"
    );
    assert!(
        locked_out,
        "the directory was unlocked while a compaction was writing"
    );
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.iter().expect("scan").count(), 100);
    drop(db);
    Db::open(dir.path(), Options::default()).expect("and again");
}

/// A panic in background work (here a compaction filter's) stops the database instead of
/// killing the thread quietly and leaving writes to stall forever.
#[test]
fn a_panic_in_a_background_compaction_stops_the_database() {
    #[derive(Debug)]
    struct Panics;
    impl cairn::CompactionFilter for Panics {
        fn filter(&self, _: &str, _: &[u8], _: &[u8]) -> cairn::Decision {
            panic!("the filter broke");
        }
    }
    let dir = tempdir();
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options::default()
                .compaction_filter(Arc::new(Panics))
                .level0_triggers(1, 2, 3),
        )
        .expect("open"),
    );
    db.put("a", "1").expect("put");
    db.flush().expect("flush");
    let writer = Arc::clone(&db);
    let outcome = within(WAIT, move || {
        for i in 0..10_000 {
            if let Err(e) = writer.put(format!("k{i}"), "v") {
                return Some(e);
            }
            if i % 100 == 0 {
                let _ = writer.flush();
            }
        }
        None
    });
    let Some(outcome) = outcome else {
        std::mem::forget(db);
        panic!("writes stalled forever behind a dead compaction thread");
    };
    assert!(
        matches!(outcome, Some(cairn::Error::Stopped { .. })),
        "the database stopped: {outcome:?}"
    );
    drop(db);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get("a").expect("get").as_deref(), Some(&b"1"[..]));
}

/// A handle that outlives `close` reads nothing stale: the reads fail.
#[test]
fn reads_through_a_handle_that_outlived_close_fail() {
    let dir = tempdir();
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("k", "v").expect("put");
    db.put("l", "v").expect("put");
    let cf = db.column_family("default").expect("default family");
    let mut open_before = cf.iter().expect("iter");
    assert!(matches!(open_before.next(), Some(Ok(_))));
    db.close().expect("close");
    assert!(matches!(
        cf.get("k"),
        Err(cairn::Error::Stopped {
            cause: cairn::StopCause::Closed
        })
    ));
    assert!(matches!(cf.iter(), Err(cairn::Error::Stopped { .. })));
    assert!(
        matches!(open_before.next(), Some(Err(cairn::Error::Stopped { .. }))),
        "an iterator made before close reads no further"
    );
    assert!(open_before.next().is_none());
}

/// An empty batch written with sync makes the writes before it durable, as a barrier.
#[test]
fn an_empty_synced_write_syncs_the_log() {
    let dir = tempdir();
    let fs = cairn_fs::FaultyFs::new(1);
    let db = Db::open(
        dir.path(),
        Options::default().file_system(Arc::new(fs.clone())),
    )
    .expect("open");
    db.put("k", "v").expect("put");
    db.write_opt(
        cairn::WriteBatch::new(),
        &cairn::WriteOptions { sync: true },
    )
    .expect("barrier");
    fs.set_active(false);
    drop(db);
    fs.power_loss(cairn_fs::PowerLoss::DropAllUnsynced)
        .expect("power loss");
    fs.set_active(true);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get("k").expect("get").as_deref(), Some(&b"v"[..]));
}
