//! Range deletes cost one tombstone: a scan over a deleted range seeks past it instead of
//! stepping over every covered key.

use cairn::{Db, Options, WriteBatch};

fn key(i: u32) -> String {
    format!("key{i:08}")
}

#[test]
fn scan_over_a_million_range_deleted_keys_reads_a_bounded_number_of_blocks() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    // Level 0 never compacts here, so the tombstone stays in a table for the last scan.
    let options = Options::default()
        .memtable_size(512 << 20)
        .level0_triggers(100, 200, 300);
    let db = Db::open(dir.path(), options)?;
    let n = 1_000_000u32;
    for chunk in 0..n / 10_000 {
        let mut batch = WriteBatch::new();
        for i in chunk * 10_000..(chunk + 1) * 10_000 {
            batch.put(key(i), "v");
        }
        db.write(batch)?;
    }
    db.flush()?;
    let stats = db.stats();
    assert_eq!(
        stats.levels.first().map(|l| (l.files, l.entries)),
        Some((1, u64::from(n))),
        "one table with every key"
    );

    db.delete_range(key(0), key(n))?;
    db.put(key(n), "after")?;
    let before = db.stats().data_blocks_read;
    let live: Vec<_> = db.iter()?.collect::<cairn::Result<_>>()?;
    let forward_blocks = db.stats().data_blocks_read - before;
    assert_eq!(live.len(), 1);
    let before = db.stats().data_blocks_read;
    assert_eq!(db.iter()?.rev().count(), 1);
    let backward_blocks = db.stats().data_blocks_read - before;
    let table_blocks = u64::from(n) / 100; // far more than any bounded scan touches
    assert!(
        forward_blocks <= 4,
        "forward scan read {forward_blocks} blocks of about {table_blocks}"
    );
    assert!(
        backward_blocks <= 4,
        "backward scan read {backward_blocks} blocks of about {table_blocks}"
    );

    // The same once the tombstone itself is in a table.
    db.flush()?;
    db.wait_for_background_work()?;
    let before = db.stats().data_blocks_read;
    assert_eq!(db.iter()?.count(), 1);
    let after_flush = db.stats().data_blocks_read - before;
    assert!(
        after_flush <= 6,
        "scan after flushing the tombstone read {after_flush} blocks"
    );
    Ok(())
}

#[test]
fn range_delete_bounds_are_start_inclusive_end_exclusive_and_equal_bounds_delete_nothing()
-> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default())?;
    for k in ["a", "b", "c", "d"] {
        db.put(k, k)?;
    }
    db.delete_range("b", "d")?;
    db.delete_range("a", "a")?;
    let keys: Vec<_> = db
        .iter()?
        .map(|r| r.map(|(k, _)| k))
        .collect::<cairn::Result<_>>()?;
    assert_eq!(keys, vec!["a", "d"]);
    assert!(matches!(
        db.delete_range("z", "a"),
        Err(cairn::Error::InvalidArgument(_))
    ));
    Ok(())
}

#[test]
fn writes_after_a_range_delete_are_visible_and_snapshots_before_it_see_the_old_keys()
-> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default())?;
    for i in 0..100 {
        db.put(key(i), "old")?;
    }
    let before = db.snapshot();
    db.delete_range(key(0), key(100))?;
    db.put(key(50), "new")?;
    db.flush()?;
    assert_eq!(db.get(key(50))?.as_deref(), Some(&b"new"[..]));
    assert_eq!(db.get(key(49))?, None);
    assert_eq!(db.iter()?.count(), 1);
    assert_eq!(before.iter()?.count(), 100);
    assert_eq!(before.get(key(49))?.as_deref(), Some(&b"old"[..]));
    Ok(())
}

/// A memtable's range tombstones are cut further as new ones arrive; an iterator or snapshot
/// open across those range deletes still sees exactly what it saw when it was taken.
#[test]
fn readers_open_across_later_range_deletes_in_the_same_memtable_see_their_snapshot()
-> cairn::Result<()> {
    // The keys in the tombstones' memtable (its own tombstones hide them), then in a table
    // under it (a newer source's tombstones make the table seek past them).
    for flushed in [false, true] {
        readers_across_later_range_deletes(flushed)?;
    }
    Ok(())
}

fn readers_across_later_range_deletes(flushed: bool) -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default())?;
    for i in 0..100 {
        db.put(key(i), "v")?;
    }
    if flushed {
        db.flush()?;
    }
    db.delete_range(key(10), key(80))?;
    let expected: Vec<String> = (0..10).chain(80..100).map(key).collect();
    let snapshot = db.snapshot();
    let mut forward = db.iter()?;
    let mut backward = db.iter()?.rev();
    let mut seen_forward = Vec::new();
    let mut seen_backward = Vec::new();
    for _ in 0..5 {
        seen_forward.extend(forward.next().transpose()?.map(|(k, _)| k));
        seen_backward.extend(backward.next().transpose()?.map(|(k, _)| k));
    }
    // Each cuts the [10, 80) piece or the live keys around it.
    db.delete_range(key(20), key(30))?;
    db.delete_range(key(5), key(95))?;
    db.delete_range(key(0), key(100))?;
    db.delete_range(key(79), key(81))?;
    for item in forward {
        seen_forward.push(item?.0);
    }
    for item in backward {
        seen_backward.push(item?.0);
    }
    seen_backward.reverse();
    let text = |keys: &[bytes::Bytes]| -> Vec<String> {
        keys.iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect()
    };
    assert_eq!(text(&seen_forward), expected, "flushed: {flushed}");
    assert_eq!(text(&seen_backward), expected, "flushed: {flushed}");
    let at_snapshot: Vec<_> = snapshot
        .iter()?
        .map(|item| item.map(|(k, _)| k))
        .collect::<cairn::Result<_>>()?;
    assert_eq!(text(&at_snapshot), expected);
    assert_eq!(snapshot.get(key(80))?.as_deref(), Some(&b"v"[..]));
    assert_eq!(snapshot.get(key(79))?, None);
    assert_eq!(db.iter()?.count(), 0);
    Ok(())
}
