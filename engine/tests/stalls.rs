//! Write stalls: a writer stalled on level 0 waits for compaction, and compaction never waits on
//! the writer, so the stall ends.

mod common;

use std::sync::Arc;
use std::time::Duration;

use cairn::{Db, Options};
use common::{Gate, tempdir, within};

/// One background thread; writes stop at two level-0 tables. While the thread compacts another
/// column family, the default family's level 0 fills and a writer stalls there, holding the
/// write queue; a scan over tombstones in the memtable meanwhile asks for a freeze. When the
/// compaction thread comes back, freezing through the write queue would wait for the stalled
/// writer, who waits for the compaction thread: the stall must end instead.
#[test]
fn a_writer_stalled_on_level0_never_blocks_the_compaction_that_drains_it() {
    let dir = tempdir();
    let gate = Gate::new();
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options::default()
                .background_threads(1)
                .level0_triggers(1, 2, 2)
                .read_trigger_tombstones(10)
                .compaction_filter(gate.clone()),
        )
        .expect("open"),
    );
    let other = db
        .create_column_family("other", cairn::CfOptions::default())
        .expect("cf");
    other.put("k", "v").expect("put");
    db.flush().expect("flush");
    assert!(
        gate.wait_entered(Duration::from_secs(10)),
        "the other family's compaction is held at the gate"
    );
    db.put("a", "1").expect("put");
    db.flush().expect("flush");
    for i in 0..20 {
        db.delete(format!("d{i:02}")).expect("delete");
    }
    assert_eq!(db.range("d".."e").expect("scan").count(), 0);
    db.flush().expect("flush");
    // The default family's level 0 holds two tables: writes are stopped.
    let writer = {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.put("c", "3"))
    };
    std::thread::sleep(Duration::from_millis(300));
    gate.open();
    let Some(finished) = within(Duration::from_secs(30), move || writer.join()) else {
        // Dropping a deadlocked database would wait for its threads forever.
        std::mem::forget(db);
        panic!("the stalled write never finished: deadlock");
    };
    finished.expect("writer thread").expect("put");
    let db2 = Arc::clone(&db);
    within(Duration::from_secs(30), move || {
        db2.wait_for_background_work()
    })
    .expect("background work never settled")
    .expect("settle");
    let l0 = db.stats().levels.first().map_or(0, |l| l.files);
    assert!(l0 < 2, "level 0 drained: {l0} tables left");
    assert_eq!(db.get("c").expect("get").as_deref(), Some(&b"3"[..]));
}

/// With automatic compactions off nothing will drain level 0, so a write that finds it at
/// `l0_stop` must not wait: it fails, saying what to do, and `compact_range` (the escape it
/// names) clears the way. It used to wait forever (an ad hoc `cairn put` after 36 others).
#[test]
fn with_compactions_off_a_write_at_l0_stop_fails_and_compact_range_clears_the_way() {
    let dir = tempdir();
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options::default()
                .disable_auto_compactions(true)
                .level0_triggers(1, 2, 3),
        )
        .expect("open"),
    );
    for i in 0..3 {
        db.put(format!("k{i}"), "v").expect("put");
        db.flush().expect("flush");
    }
    assert_eq!(db.stats().levels.first().map(|l| l.files), Some(3));
    let writer = Arc::clone(&db);
    let Some(stalled) = within(Duration::from_secs(30), move || writer.put("k9", "v")) else {
        std::mem::forget(db);
        panic!("the write waited for a compaction that will never come");
    };
    match stalled {
        Err(cairn::Error::WriteStall {
            level0_files: 3,
            limit: 3,
        }) => {}
        other => panic!("expected WriteStall, got {other:?}"),
    }
    let text = db.put("k9", "v").expect_err("still stopped").to_string();
    assert!(text.contains("compact"), "{text}");
    assert_eq!(
        db.get("k9").expect("get"),
        None,
        "a refused write was not applied"
    );
    let compactor = Arc::clone(&db);
    within(Duration::from_secs(30), move || {
        compactor.compact_range::<&str>(..)
    })
    .expect("compact_range never returned")
    .expect("compact");
    db.put("k9", "v")
        .expect("the write goes through once level 0 is compacted");
    assert_eq!(db.get("k9").expect("get").as_deref(), Some(&b"v"[..]));
}

/// Waits for `done` to hold of the stats; fails (never hangs) if it does not within a minute.
fn wait_for_stats(db: &Db, done: impl Fn(&cairn::Stats) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done(&db.stats()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the stats never reached the state waited for: {:?}",
            db.stats()
        );
        std::thread::yield_now();
    }
}

/// One background thread, held in a compaction (so nothing is flushed), and one memtable
/// frozen by a `flush` waiting for it. Eight threads then write and call `flush` at once:
/// each finds the active memtable holding data, and none may freeze it while the one frozen
/// memtable `max_immutable_memtables(1)` allows waits; once the compaction goes on, all finish.
#[test]
fn flushes_racing_each_other_never_freeze_past_max_immutable_memtables() {
    let dir = tempdir();
    let gate = Gate::new();
    let db = Arc::new(
        Db::open(
            dir.path(),
            Options::default()
                .background_threads(1)
                .max_immutable_memtables(1)
                .level0_triggers(1, 100, 200)
                .compaction_filter(gate.clone()),
        )
        .expect("open"),
    );
    let other = db
        .create_column_family("other", cairn::CfOptions::default())
        .expect("cf");
    other.put("k", "v").expect("put");
    db.flush().expect("flush");
    assert!(
        gate.wait_entered(Duration::from_secs(10)),
        "the other family's compaction is held at the gate"
    );
    let flusher = |name: String| {
        let db = Arc::clone(&db);
        std::thread::spawn(move || db.put(&name, "v").and_then(|()| db.flush()))
    };
    let mut threads = vec![flusher("first".to_owned())];
    wait_for_stats(&db, |s| s.immutable_memtables == 1);
    let stalls = db.stats().write_stalls;
    threads.extend((0..8).map(|i| flusher(format!("racer{i}"))));
    // A racer either waits for room (a stall) or froze past the bound: either way it is time.
    wait_for_stats(&db, |s| {
        s.write_stalls > stalls || s.immutable_memtables > 1
    });
    gate.open();
    let Some(finished) = within(Duration::from_secs(60), move || {
        threads
            .into_iter()
            .map(|t| t.join().expect("flusher thread"))
            .collect::<Vec<_>>()
    }) else {
        std::mem::forget(db);
        panic!("the flushes never finished: deadlock");
    };
    for result in finished {
        result.expect("put and flush");
    }
    let stats = db.stats();
    assert_eq!(
        stats.immutable_memtables_peak, 1,
        "memtables frozen at once, with max_immutable_memtables(1)"
    );
    assert_eq!(stats.immutable_memtables, 0);
    for i in 0..8 {
        assert!(db.get(format!("racer{i}")).expect("get").is_some());
    }
}
