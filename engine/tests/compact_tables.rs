//! `ColumnFamily::compact_tables` (a compaction of a key range that leaves the memtables alone
//! and says what it read and dropped) and `ColumnFamily::tables` (the family's tables): what the
//! TTL task manager builds its tablet tasks and counters on.

mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use cairn::{CfOptions, Db, Error, ManualClock, Options};

const START: u64 = 1_700_000_000_000;

/// Background compactions off, so the counts are those of the call alone; small tables, so a
/// range can leave some out.
fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>) -> Db {
    let options = Options::default()
        .clock(clock.clone())
        .disable_auto_compactions(true)
        .target_file_size(16 << 10);
    Db::open(dir.path(), options).expect("open")
}

fn key(i: u32) -> String {
    format!("key{i:05}")
}

/// `keys` keys with `versions` versions each, every version in a table of its own (so no flush
/// drops one), under a 10 s TTL and `max_versions = 2`.
fn versioned_family(db: &Db, keys: u32, versions: u32) -> cairn::ColumnFamily {
    let options = CfOptions::default()
        .ttl(Duration::from_secs(10))
        .max_versions(2);
    let cf = db.create_column_family("cells", options).expect("create");
    for v in 0..versions {
        for i in 0..keys {
            cf.put(key(i), format!("v{v}")).expect("put");
        }
        db.flush().expect("flush");
    }
    cf
}

#[test]
fn counts_say_what_was_read_and_why_each_version_went() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock);
    let cf = versioned_family(&db, 500, 4);
    let before = cf.tables().expect("tables");
    assert!(before.len() >= 4, "one table per version at least");
    assert_eq!(before.iter().map(|t| t.entries).sum::<u64>(), 2000);
    assert!(
        before.iter().all(|t| t.smallest.as_ref() == b"key00000"),
        "{before:?}"
    );

    // Not expired yet: only the versions over the limit go, counted as shadowed.
    let counts = cf.compact_tables::<&str>(..).expect("compact");
    assert_eq!(counts.entries_read, 2000);
    assert_eq!(counts.dropped.shadowed, 1000);
    assert_eq!(counts.dropped.expired, 0);
    assert_eq!(cf.get(key(7)).expect("get").as_deref(), Some(&b"v3"[..]));

    // Expired: the two left go, counted as expired; nothing is left in any table.
    clock.advance(Duration::from_secs(11));
    let counts = cf.compact_tables::<&str>(..).expect("compact");
    assert_eq!(counts.entries_read, 1000);
    assert_eq!(counts.dropped.expired, 1000);
    assert_eq!(counts.dropped.shadowed, 0);
    assert!(cf.tables().expect("tables").is_empty());
}

#[test]
fn a_version_over_the_limit_that_also_expired_counts_once_as_shadowed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock);
    let cf = versioned_family(&db, 100, 4);
    clock.advance(Duration::from_secs(11));
    let counts = cf.compact_tables::<&str>(..).expect("compact");
    assert_eq!(counts.entries_read, 400);
    assert_eq!(counts.dropped.expired, 200, "the two newest of each key");
    assert_eq!(counts.dropped.shadowed, 200, "the two over the limit");
    assert_eq!(counts.dropped.total(), 400);
}

#[test]
fn only_the_range_is_compacted_and_the_memtable_is_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock);
    let cf = db
        .create_column_family("cells", CfOptions::default().ttl(Duration::from_secs(10)))
        .expect("create");
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..1000 {
        // Incompressible values, so the tables are as many as their bytes say.
        let mut value = String::with_capacity(128);
        for _ in 0..8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            write!(value, "{x:016x}").expect("write to a String");
        }
        cf.put(key(i), value).expect("put");
    }
    // Into the last level, in tables of about 16 KiB.
    cf.compact_range::<&str>(..).expect("compact");
    let before = cf.tables().expect("tables");
    assert!(before.len() > 2, "{before:?}");
    cf.put("zz-in-memtable", "m").expect("put");
    clock.advance(Duration::from_secs(11));
    let counts = cf.compact_tables(key(500)..).expect("compact");
    let after = cf.tables().expect("tables");
    let left: u64 = after.iter().map(|t| t.entries).sum();
    assert!(
        counts.entries_read > 0 && counts.entries_read < 1000,
        "{counts:?}"
    );
    assert_eq!(counts.dropped.expired, counts.entries_read);
    assert_eq!(left, 1000 - counts.entries_read, "{after:?}");
    assert!(
        after
            .iter()
            .all(|t| t.largest.as_ref() < key(500).as_bytes()),
        "the tables left lie below the range: {after:?}"
    );
    assert_eq!(
        db.stats().memtable_entries,
        1,
        "compact_tables does not flush"
    );
}

#[test]
fn a_read_only_database_refuses_and_a_dropped_family_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(START));
    {
        let db = open(&dir, &clock);
        let cf = versioned_family(&db, 10, 1);
        assert!(!cf.tables().expect("tables").is_empty());
        db.drop_column_family("cells").expect("drop");
        assert!(matches!(cf.tables(), Err(Error::ColumnFamilyNotFound(_))));
        assert!(matches!(
            cf.compact_tables::<&str>(..),
            Err(Error::ColumnFamilyNotFound(_))
        ));
        db.create_column_family("kept", CfOptions::default())
            .expect("create");
    }
    let db = Db::open_read_only(dir.path(), Options::default().clock(clock)).expect("open");
    let cf = db.column_family("kept").expect("family");
    assert!(matches!(
        cf.compact_tables::<&str>(..),
        Err(Error::ReadOnly)
    ));
}

#[test]
fn with_auto_compactions_off_a_deadline_is_refused_and_waiting_for_background_work_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let refused = Db::open(
        dir.path(),
        Options::default()
            .disable_auto_compactions(true)
            .delete_persistence_deadline(Duration::from_secs(3600)),
    );
    match refused {
        Err(Error::InvalidArgument(why)) => {
            assert!(why.contains("delete_persistence_deadline"), "{why}");
        }
        other => panic!("expected InvalidArgument, got {:?}", other.map(drop)),
    }

    let clock = Arc::new(ManualClock::new(START));
    let db = Arc::new(open(&dir, &clock));
    // More level-0 tables than the compaction trigger: a compaction would be picked, were
    // automatic compactions on.
    for round in 0..6 {
        db.put(format!("k{round}"), "v").expect("put");
        db.flush().expect("flush");
    }
    let waiter = Arc::clone(&db);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(waiter.wait_for_background_work().map(drop)));
    let outcome = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("wait_for_background_work returned");
    outcome.expect("no error");
    assert_eq!(db.stats().levels.first().map(|l| l.files), Some(6));
}

/// Holds a compaction that meets a key starting with `x` until opened; lets others through.
#[derive(Debug)]
struct HoldX {
    gate: Arc<(std::sync::Mutex<(bool, bool)>, std::sync::Condvar)>,
}

impl cairn::CompactionFilter for HoldX {
    fn filter(&self, _cf: &str, key: &[u8], _value: &[u8]) -> cairn::Decision {
        if key.first() == Some(&b'x') {
            let (lock, changed) = &*self.gate;
            let mut state = lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            state.0 = true;
            changed.notify_all();
            while !state.1 {
                state = changed
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
        cairn::Decision::Keep
    }
}

/// A background compaction of other tables of the family runs (held) while a manual
/// compaction of `[a, b)` is asked for: the manual one waits only for compactions holding its
/// own tables, so it returns. It used to wait for every compaction of the family, which under
/// steady writes may never end.
#[test]
fn compact_tables_does_not_wait_for_compactions_of_other_tables() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gate = Arc::new((
        std::sync::Mutex::new((false, false)),
        std::sync::Condvar::new(),
    ));
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options::default()
                .level0_triggers(2, 20, 36)
                .compaction_filter(Arc::new(HoldX {
                    gate: Arc::clone(&gate),
                })),
        )
        .expect("open"),
    );
    for i in 0..10 {
        db.put(format!("a{i}"), "v").expect("put");
    }
    db.compact_range::<&str>(..)
        .expect("a-keys to the last level");
    db.put("x1", "v").expect("put");
    db.flush().expect("flush");
    db.put("x2", "v").expect("put");
    db.flush().expect("flush");
    {
        let (lock, changed) = &*gate;
        let state = lock.lock().expect("gate");
        let (state, _) = changed
            .wait_timeout_while(state, Duration::from_secs(30), |s| !s.0)
            .expect("gate");
        assert!(state.0, "the x-tables' background compaction is held");
    }
    let manual = Arc::clone(&db);
    let done = common::within(Duration::from_secs(30), move || {
        manual
            .column_family("default")
            .expect("cf")
            .compact_tables("a".."b")
    });
    let (lock, changed) = &*gate;
    lock.lock().expect("gate").1 = true;
    changed.notify_all();
    done.expect("compact_tables waited for a compaction of other tables")
        .expect("compact");
    db.wait_for_background_work().expect("settle");
}
