//! The flush applies the range tombstone rule to its own memtable: an entry a newer range
//! tombstone of the same memtable covers, with no snapshot between them, is not written (no
//! read can see it); one a snapshot still reads, one newer than the tombstone and one outside
//! its range are. Each case fails if the rule is wrong in either direction: entries kept that
//! should go (the flushed table's entry count), or dropped that a read still needs.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use cairn::{Db, Options};

/// No background compaction of any kind: the entries stay where the flush put them.
fn options() -> Options {
    Options::default()
        .drop_covered_at_flush(true)
        .disable_auto_compactions(true)
        .level0_triggers(100, 200, 300)
        .read_trigger_tombstones(u64::MAX)
}

fn key(n: u32) -> String {
    format!("k{n:03}")
}

/// Point entries in level 0.
fn flushed_entries(db: &Db) -> u64 {
    db.stats().levels[0].entries
}

#[test]
fn entries_a_newer_range_tombstone_covers_are_not_flushed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    for n in 0..100 {
        db.put(key(n), [7; 100]).expect("put");
    }
    db.delete_range(key(0), key(60)).expect("delete range");
    // Newer than the tombstone: kept.
    db.put(key(10), b"again").expect("put");
    db.flush().expect("flush");
    assert_eq!(
        flushed_entries(&db),
        40 + 1,
        "k060..k099 and the newer k010"
    );
    assert_eq!(
        db.stats().levels[0].range_tombstones,
        1,
        "the tombstone itself is kept"
    );
    assert_eq!(
        db.get(key(10)).expect("get").as_deref(),
        Some(&b"again"[..])
    );
    assert_eq!(db.get(key(20)).expect("get"), None);
    assert_eq!(
        db.get(key(70)).expect("get").as_deref(),
        Some(&[7; 100][..])
    );
    // After a reopen too.
    drop(db);
    let db = Db::open(dir.path(), options()).expect("reopen");
    assert_eq!(db.get(key(20)).expect("get"), None);
    assert_eq!(
        db.get(key(10)).expect("get").as_deref(),
        Some(&b"again"[..])
    );
}

#[test]
fn an_entry_a_snapshot_reads_is_flushed_though_a_newer_tombstone_covers_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    for n in 0..10 {
        db.put(key(n), b"before").expect("put");
    }
    let snapshot = db.snapshot();
    for n in 10..20 {
        db.put(key(n), b"after").expect("put");
    }
    db.delete_range(key(0), key(20)).expect("delete range");
    db.flush().expect("flush");
    // k000..k009 are read by the snapshot; k010..k019 lie in the tombstone's stripe.
    assert_eq!(flushed_entries(&db), 10);
    for n in 0..10 {
        assert_eq!(
            snapshot.get(key(n)).expect("get").as_deref(),
            Some(&b"before"[..]),
            "{}",
            key(n)
        );
        assert_eq!(db.get(key(n)).expect("get"), None);
    }
    drop(snapshot);
}

#[test]
fn a_covered_entry_whose_tombstone_is_in_an_older_table_is_flushed() {
    // The rule reaches only this memtable's tombstones: one already flushed covers nothing
    // newer, and an entry newer than every tombstone is data.
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    db.delete_range(key(0), key(50)).expect("delete range");
    db.flush().expect("flush");
    for n in 0..10 {
        db.put(key(n), b"live").expect("put");
    }
    db.flush().expect("flush");
    assert_eq!(flushed_entries(&db), 10);
    assert_eq!(db.get(key(5)).expect("get").as_deref(), Some(&b"live"[..]));
}
