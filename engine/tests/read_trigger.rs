//! Scans that step over many tombstones report their range, and background compaction then
//! clears it, so the next scan is cheap.

use std::sync::Arc;
use std::time::Duration;

use cairn::{Db, ManualClock, Options, WriteBatch};

#[test]
fn a_scan_over_many_tombstones_triggers_compaction_of_its_range() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    // Only the read trigger may start a compaction here.
    let options = Options::default()
        .tombstone_density_trigger(128)
        .level0_triggers(100, 200, 300);
    let db = Db::open(dir.path(), options)?;
    let n = 20_000u32;
    let mut batch = WriteBatch::new();
    for i in 0..n {
        batch.put(format!("key{i:08}"), "value");
    }
    db.write(batch)?;
    db.flush()?;
    for i in 0..n {
        if i % 10 != 0 {
            db.delete(format!("key{i:08}"))?;
        }
    }
    db.flush()?;
    assert_eq!(db.stats().compactions, 0);

    let before = db.stats().data_blocks_read;
    assert_eq!(db.iter()?.count(), 2_000);
    let first_scan = db.stats().data_blocks_read - before;
    assert_eq!(
        db.stats().read_triggers,
        1,
        "the first scan should report its range once"
    );

    db.wait_for_background_work()?;
    let stats = db.stats();
    assert!(
        stats.compactions >= 1,
        "the reported range was not compacted"
    );
    assert_eq!(
        stats.tombstones_pending, 0,
        "the deletes should be gone: {stats:?}"
    );
    let before = stats.data_blocks_read;
    assert_eq!(db.iter()?.count(), 2_000);
    let second_scan = db.stats().data_blocks_read - before;
    assert!(
        second_scan * 3 < first_scan,
        "scan after compaction read {second_scan} blocks, before {first_scan}"
    );
    assert_eq!(
        db.stats().read_triggers,
        1,
        "a clean range does not report again"
    );
    Ok(())
}

#[test]
fn a_scan_below_the_threshold_reports_nothing() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default().read_trigger_tombstones(1000))?;
    for i in 0..2000u32 {
        db.put(format!("key{i:08}"), "v")?;
    }
    for i in 0..999u32 {
        db.delete(format!("key{i:08}"))?;
    }
    assert_eq!(db.iter()?.count(), 1001);
    assert_eq!(db.stats().read_triggers, 0);
    db.delete("key00000999")?;
    assert_eq!(db.iter()?.count(), 1000);
    assert_eq!(db.stats().read_triggers, 1);
    Ok(())
}

#[test]
fn a_fifo_queue_does_not_pile_up_tombstones_at_its_head() -> cairn::Result<()> {
    // fjall issue #115's workload: push at the tail, pop the first key at the head. Every pop's
    // scan starts at the head; without cleanup each one steps over every earlier pop's tombstone.
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default())?;
    let (mut head_pops, mut tail) = (0u32, 0u32);
    for _ in 0..1000 {
        db.put(format!("item{tail:010}"), "payload")?;
        tail += 1;
    }
    for _ in 0..10_000 {
        db.put(format!("item{tail:010}"), "payload")?;
        tail += 1;
        let Some(first) = db.iter()?.next().transpose()? else {
            panic!("the queue ran dry");
        };
        assert_eq!(
            first.0,
            format!("item{head_pops:010}"),
            "pops come out in order"
        );
        db.delete(&first.0)?;
        head_pops += 1;
    }
    db.wait_for_background_work()?;
    let stats = db.stats();
    assert!(
        stats.read_triggers > 0,
        "the head's tombstones were never reported"
    );
    assert!(stats.compactions > 0);
    assert!(
        stats.tombstones_pending < 2_000,
        "{} tombstones piled up for 10k pops",
        stats.tombstones_pending
    );
    assert_eq!(db.iter()?.count(), 1000);
    Ok(())
}

/// Seeks past deletes a snapshot holds report their range once: a pick that finds nothing to
/// do quiets reports within the same ranges until the read view changes or a second passes.
/// Without it every seek took the state lock, woke every background thread and ran the picker
/// for nothing (12 µs a seek in `seek_deleted_runs`). Seeks that alternate between two such
/// ranges stay quiet too, and once the window ends — or the clock steps back — reports come
/// again.
#[test]
fn seeks_past_deletes_a_snapshot_holds_report_them_once_a_window() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let options = Options::default().clock(clock.clone());
    let db = Db::open(dir.path(), options)?;
    let mut batch = WriteBatch::new();
    for prefix in ["a", "b"] {
        for i in 0..3_001u32 {
            batch.put(format!("{prefix}{i:08}"), "value");
        }
    }
    db.write(batch)?;
    db.flush()?;
    let held = db.snapshot();
    let mut batch = WriteBatch::new();
    for prefix in ["a", "b"] {
        for i in 0..3_000u32 {
            batch.delete(format!("{prefix}{i:08}"));
        }
    }
    db.write(batch)?;
    db.flush()?;
    db.wait_for_background_work()?;
    let seek = |prefix: &str| -> cairn::Result<()> {
        let (start, end) = (prefix.to_string(), format!("{prefix}~"));
        let first = db.range(start..end)?.next().transpose()?.map(|(k, _)| k);
        assert_eq!(first, Some(format!("{prefix}00003000").into()));
        // The picker runs on the report (if any) before the next seek.
        db.wait_for_background_work()
    };
    // Compactions the reports set off end in a view no report can change.
    for _ in 0..20 {
        seek("a")?;
        seek("b")?;
    }
    let settled = db.stats().read_triggers;
    for _ in 0..50 {
        seek("a")?;
        seek("b")?;
    }
    assert_eq!(
        db.stats().read_triggers,
        settled,
        "100 seeks past held deletes, alternating between two ranges, reported again"
    );
    clock.advance(Duration::from_secs(2));
    seek("a")?;
    assert_eq!(
        db.stats().read_triggers,
        settled + 1,
        "after the window a seek reports again"
    );
    seek("a")?;
    assert_eq!(db.stats().read_triggers, settled + 1, "a new window");
    clock.set(1_000_000);
    seek("a")?;
    assert_eq!(
        db.stats().read_triggers,
        settled + 2,
        "a clock that stepped back ends the window"
    );
    assert_eq!(held.get("a00000000")?.as_deref(), Some(&b"value"[..]));
    Ok(())
}
