//! Range deletes cost one tombstone: a scan over a deleted range seeks past it instead of
//! stepping over every covered key.

use std::sync::Arc;

use cairn::{Db, Options, WriteBatch};
use cairn_fs::{FaultyFs, OpKind};

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

/// After a reopen whose replay had to keep memtables apart: at least two level-0 tables, together
/// well under what the product of narrow and wide tombstones would take, and nothing left.
fn assert_replayed_apart(db: &Db, what: &str) -> cairn::Result<()> {
    let l0 = db.stats().levels.first().cloned().unwrap_or_default();
    assert!(l0.files >= 2, "replay wrote {} table(s)", l0.files);
    assert!(
        l0.bytes < 2 << 20,
        "replay wrote {} bytes of tables: {what}",
        l0.bytes
    );
    assert_eq!(db.iter()?.count(), 0);
    Ok(())
}

/// Options whose level 0 never compacts here, so the tables replay wrote stay to be counted.
fn replay_options(memtable_size: usize) -> Options {
    Options::default()
        .memtable_size(memtable_size)
        .level0_triggers(100, 200, 300)
}

/// Narrow range deletes `[key(2i), key(2i + 1))` for `i < n`, one batch.
fn narrow_deletes(n: u32) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for i in 0..n {
        batch.delete_range(key(2 * i), key(2 * i + 1));
    }
    batch
}

/// `n` range deletes of the whole span `[key(0), key(end))`, one batch.
fn wide_deletes(n: u32, end: u32) -> WriteBatch {
    let mut batch = WriteBatch::new();
    for _ in 0..n {
        batch.delete_range(key(0), key(end));
    }
    batch
}

fn put_keys(db: &Db, n: u32) -> cairn::Result<()> {
    let mut batch = WriteBatch::new();
    for i in 0..n {
        batch.put(key(i), "v");
    }
    db.write(batch).map(drop)
}

/// Each wide delete adds a version to every narrow piece it covers. Applied to the memtable
/// holding the narrow ones, 100 of them would add about 6 MB to a 1 MiB memtable: the write
/// switches memtables first, so the wide ones land in an empty one.
#[test]
fn wide_range_deletes_over_narrow_ones_switch_the_memtable_first() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let size = 1 << 20;
    let options = Options::default()
        .memtable_size(size)
        .level0_triggers(100, 200, 300);
    let db = Db::open(dir.path(), options)?;
    put_keys(&db, 4000)?;
    db.write(narrow_deletes(2000))?;
    let between = db.snapshot();
    db.write(wide_deletes(100, 4000))?;
    let held = db.stats().memtable_bytes;
    assert!(
        held <= 2 * size as u64,
        "the memtables hold {held} bytes, more than twice their size {size}"
    );
    // Both sides of the switch read as before it.
    assert_eq!(db.get(key(0))?, None);
    assert_eq!(db.get(key(1))?, None);
    assert_eq!(between.get(key(0))?, None);
    assert_eq!(between.get(key(1))?.as_deref(), Some(&b"v"[..]));
    assert_eq!(db.iter()?.count(), 0);
    assert_eq!(between.iter()?.count(), 2000);
    Ok(())
}

/// One batch of 1,000 narrow and 1,000 wide range deletes would hold about 32 MB of fragments
/// even in an empty memtable: it is refused before anything is logged, and the database goes on.
#[test]
fn a_batch_whose_range_deletes_would_pass_the_memory_limit_is_refused() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let options = || Options::default().memtable_size(1 << 20);
    let db = Db::open(dir.path(), options())?;
    put_keys(&db, 2000)?;
    let log_before = newest_log(dir.path());
    let mut batch = narrow_deletes(1000);
    for _ in 0..1000 {
        batch.delete_range(key(0), key(2000));
    }
    match db.write(batch) {
        Err(cairn::Error::InvalidArgument(message)) => {
            assert!(message.contains("split it"), "{message}");
        }
        other => panic!("expected InvalidArgument, got {other:?}"),
    }
    assert!(db.stats().memtable_bytes < 1 << 20);
    assert_eq!(
        newest_log(dir.path()),
        log_before,
        "refused before any memtable switch (a switch starts a new log)"
    );
    assert_eq!(db.iter()?.count(), 2000);
    db.close()?;
    // Nothing of the refused batch was logged: the reopened database has every key.
    let db = Db::open(dir.path(), options())?;
    assert_eq!(db.iter()?.count(), 2000);
    // The same deletes in batches of their own are fine.
    db.write(narrow_deletes(1000))?;
    db.write(wide_deletes(1000, 2000))?;
    assert_eq!(db.iter()?.count(), 0);
    Ok(())
}

/// Disjoint range deletes cost what their size says: many in one batch are never refused, even
/// with the smallest memtable.
#[test]
fn a_batch_of_disjoint_range_deletes_is_accepted_at_any_memtable_size() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default().memtable_size(4096))?;
    put_keys(&db, 400)?;
    db.write(narrow_deletes(200))?;
    assert_eq!(db.iter()?.count(), 200);
    // Short keys: the overheads weigh most.
    let short = |i: u64| i.to_be_bytes();
    let mut batch = WriteBatch::new();
    for i in 0..200 {
        batch.put(short(2 * i), "v");
        batch.delete_range(short(2 * i), short(2 * i + 1));
    }
    db.write(batch)?;
    assert_eq!(db.iter()?.count(), 200);
    Ok(())
}

/// The writer sent wide range deletes to a memtable (and log) of their own; replay keeps them
/// apart even where its memtable size would let one set hold both.
#[test]
fn replay_keeps_each_log_apart_as_the_writer_did() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let fs = FaultyFs::new(7);
    let options = |size| replay_options(size).file_system(Arc::new(fs.clone()));
    let db = Db::open(dir.path(), options(1 << 20))?;
    put_keys(&db, 4000)?;
    db.write(narrow_deletes(2000))?;
    // The frozen memtable's flush fails, so both logs are there to replay.
    fs.inject_errors_matching(OpKind::Create, 1, ".sst.tmp");
    db.write(wide_deletes(100, 4000))?;
    drop(db.close()); // the failed flush's error
    fs.clear_errors();

    let db = Db::open(dir.path(), options(64 << 20))?;
    assert_replayed_apart(&db, "the logs' tombstones multiplied")?;
    Ok(())
}

/// Logs written under a large memtable are replayed under a small one: replay flushes each time
/// the memtable fills, so 300 wide deletes over 2,000 narrow ones do not multiply into one table
/// of 2,000 × 300 versions.
#[test]
fn replay_flushes_whenever_the_memtable_fills() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), replay_options(64 << 20))?;
    put_keys(&db, 4000)?;
    db.write(narrow_deletes(2000))?;
    for _ in 0..300 {
        db.delete_range(key(0), key(4000))?;
    }
    assert_eq!(db.stats().flushes, 0, "everything stays in one log");
    db.close()?;

    let db = Db::open(dir.path(), replay_options(1 << 20))?;
    assert_replayed_apart(&db, "more than one memtable's worth at a time")?;
    assert_eq!(db.get(key(1))?, None);
    Ok(())
}

/// One record of wide range deletes that fitted the writer's large memtable is replayed under a
/// small one: it goes to a fresh memtable before it is applied, not onto the narrow pieces.
#[test]
fn replay_sends_a_record_that_would_overflow_to_a_fresh_memtable() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), replay_options(64 << 20))?;
    put_keys(&db, 4000)?;
    db.write(narrow_deletes(2000))?;
    db.write(wide_deletes(100, 4000))?;
    assert_eq!(db.stats().flushes, 0, "everything stays in one log");
    db.close()?;

    let db = Db::open(dir.path(), replay_options(1 << 20))?;
    assert_replayed_apart(&db, "the record landed on the narrow pieces")?;
    Ok(())
}

/// A read-only open keeps each filled memtable apart, as a writable one flushes it.
#[test]
fn read_only_replay_keeps_filled_memtables_apart() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default().memtable_size(64 << 20))?;
    put_keys(&db, 4000)?;
    db.write(narrow_deletes(2000))?;
    for _ in 0..300 {
        db.delete_range(key(0), key(4000))?;
    }
    db.close()?;
    let size = 1 << 20;
    let db = Db::open_read_only(dir.path(), Options::default().memtable_size(size))?;
    let held = db.stats().memtable_bytes;
    assert!(
        held <= 2 * size as u64,
        "the replayed memtables hold {held} bytes, more than twice their size {size}"
    );
    assert_eq!(db.iter()?.count(), 0);
    Ok(())
}

/// The newest log file in `dir`.
fn newest_log(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .max()
}

fn tables_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut names: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| Some(e.ok()?.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "sst"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// An open that fails part way through replay (here at a torn last log, under
/// `AbsoluteConsistency`) removes the tables it wrote for the logs before: retries must not pile
/// them up.
#[test]
fn a_failed_open_removes_the_tables_its_replay_wrote() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let fs = FaultyFs::new(11);
    let options = Options::default()
        .file_system(Arc::new(fs.clone()))
        .memtable_size(1 << 20);
    let db = Db::open(dir.path(), options.clone())?;
    put_keys(&db, 4000)?;
    db.write(narrow_deletes(2000))?;
    fs.inject_errors_matching(OpKind::Create, 1, ".sst.tmp");
    db.write(wide_deletes(100, 4000))?;
    drop(db.close());
    fs.clear_errors();
    let newest_log =
        newest_log(dir.path()).ok_or_else(|| cairn::Error::InvalidArgument("no log".into()))?;
    let len = std::fs::metadata(&newest_log)
        .map_err(cairn_fs::Error::from)?
        .len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest_log)
        .map_err(cairn_fs::Error::from)?;
    file.set_len(len.saturating_sub(3))
        .map_err(cairn_fs::Error::from)?;
    drop(file);

    let before = tables_in(dir.path());
    for _ in 0..3 {
        let strict = options
            .clone()
            .recovery_mode(cairn::RecoveryMode::AbsoluteConsistency);
        assert!(
            Db::open(dir.path(), strict).is_err(),
            "the torn log must fail this open"
        );
        assert_eq!(
            tables_in(dir.path()),
            before,
            "a failed open left tables behind"
        );
    }
    // The default mode reads up to the torn tail.
    let db = Db::open(dir.path(), options)?;
    assert_eq!(db.get(key(0))?, None);
    Ok(())
}

/// The number in a key made by [`key`].
fn number(key: &[u8]) -> u32 {
    std::str::from_utf8(key.get(3..).unwrap_or_default())
        .ok()
        .and_then(|n| n.parse().ok())
        .expect("a key made by `key`")
}

/// The numbers of the keys a cursor meets from where it is to the end.
fn walk_on(cursor: &mut cairn::DbCursor) -> cairn::Result<Vec<u32>> {
    let mut seen = Vec::new();
    while let Some(k) = cursor.key() {
        seen.push(number(k));
        cursor.next()?;
    }
    Ok(seen)
}

/// A forward walk remembers how far no range tombstone covers its keys and skips the checks
/// there. Range deletes written during the walk (invisible to it, but cutting the memtable's
/// pieces), tombstones in the table the keys are in, and walks that turn back or seek backward
/// must all still give exactly what the walk's snapshot holds.
#[test]
fn walks_skip_tombstone_checks_only_where_nothing_visible_covers() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let db = Db::open(dir.path(), Options::default())?;
    for i in 0..1000 {
        db.put(key(i), "v")?;
    }
    // In the table: a tombstone over 700..800 with 750..760 written again after it.
    db.delete_range(key(700), key(800))?;
    for i in 750..760 {
        db.put(key(i), "again")?;
    }
    db.flush()?;
    // In the memtable: two visible range deletes.
    db.delete_range(key(100), key(200))?;
    db.delete_range(key(500), key(600))?;
    let expected = |i: u32| {
        !(100..200).contains(&i)
            && !(500..600).contains(&i)
            && (!(700..800).contains(&i) || (750..760).contains(&i))
    };
    let mut cursor = db.cursor()?;
    cursor.seek_to_first()?;
    let mut seen = Vec::new();
    while let Some(k) = cursor.key() {
        let i: u32 = number(k);
        if i == 300 {
            // Newer than the walk: hidden from it, but they cut the memtable's pieces, in the
            // gap ahead and across a visible piece.
            db.delete_range(key(400), key(450))?;
            db.delete_range(key(550), key(650))?;
            db.delete_range(key(900), key(950))?;
        }
        seen.push(i);
        cursor.next()?;
    }
    let all: Vec<u32> = (0..1000).filter(|&i| expected(i)).collect();
    assert_eq!(seen, all, "a forward walk");
    // Back from the end, then forward again from a seek behind a bound found earlier.
    cursor.seek_to_last()?;
    let mut back = Vec::new();
    while let Some(k) = cursor.key() {
        back.push(number(k));
        cursor.prev()?;
    }
    back.reverse();
    assert_eq!(back, all, "a backward walk");
    cursor.seek(key(450))?;
    cursor.next()?;
    cursor.seek(key(150))?;
    assert_eq!(
        cursor.key(),
        Some(key(200).as_bytes()),
        "a seek back lands past 100..200"
    );
    cursor.seek(key(560))?;
    assert_eq!(cursor.key(), Some(key(600).as_bytes()));
    // Back to the first key from deep in a walk: the bound found there must not carry over.
    cursor.seek(key(250))?;
    cursor.next()?;
    cursor.seek_to_first()?;
    assert_eq!(
        walk_on(&mut cursor)?,
        all,
        "a walk from the first key again"
    );
    // A fresh walk sees the later deletes.
    let now: Vec<u32> = db
        .iter()?
        .map(|e| e.map(|(k, _)| number(&k)))
        .collect::<cairn::Result<_>>()?;
    let later =
        |i: u32| !(400..450).contains(&i) && !(550..650).contains(&i) && !(900..950).contains(&i);
    assert_eq!(
        now,
        all.iter()
            .copied()
            .filter(|&i| later(i))
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// The same over sorted levels of several tables (range tombstones crossing table bounds), a
/// memtable holding puts on both sides of its own range deletes, an old snapshot, and range
/// deletes written during the walk, all checked against a model.
#[test]
fn walks_over_levels_and_memtable_entries_match_a_model() -> cairn::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let options = Options::default()
        .memtable_size(64 << 10)
        .target_file_size(16 << 10);
    let db = Db::open(dir.path(), options)?;
    let mut model = std::collections::BTreeMap::new();
    // Values that compress poorly, so the tables split at their target size.
    let value = |i: u32| format!("{:0>200}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for i in 0..4000 {
        db.put(key(i), value(i))?;
        model.insert(i, value(i));
    }
    // Held across the compaction, so the tables keep the range tombstones and what they cover.
    let before_deletes = db.snapshot();
    for (a, b) in [(300, 900), (1500, 1520), (2000, 2600)] {
        db.delete_range(key(a), key(b))?;
        model.retain(|&i, _| !(a..b).contains(&i));
    }
    db.flush()?;
    db.compact_range::<&[u8]>(..)?;
    let (l1, ranges) = db
        .stats()
        .levels
        .iter()
        .skip(1)
        .fold((0, 0), |(files, ranges), l| {
            (files + l.files, ranges + l.range_tombstones)
        });
    assert!(ranges > 0, "range tombstones in the sorted levels");
    assert!(
        l1 > 2,
        "the keys spread over several tables below level 0 ({l1})"
    );
    // In the memtable: puts, a range delete over some of them, and puts again under it.
    for i in 4000..4100 {
        db.put(key(i), "old")?;
        model.insert(i, "old".to_string());
    }
    db.delete_range(key(4010), key(4050))?;
    model.retain(|&i, _| !(4010..4050).contains(&i));
    for i in [4020, 4030] {
        db.put(key(i), "new")?;
        model.insert(i, "new".to_string());
    }
    let snapshot = db.snapshot();
    let expected: Vec<u32> = model.keys().copied().collect();
    let mut cursor = snapshot.cursor()?;
    cursor.seek_to_first()?;
    let mut seen = Vec::new();
    while let Some(k) = cursor.key() {
        let i = number(k);
        if i == 1000 {
            db.delete_range(key(1000), key(3000))?;
            db.delete_range(key(4000), key(4100))?;
            db.put(key(1700), "newer")?;
        }
        seen.push(i);
        cursor.next()?;
    }
    assert_eq!(seen, expected, "a walk at the snapshot");
    assert_eq!(snapshot.iter()?.count(), expected.len());
    assert_eq!(
        before_deletes.iter()?.count(),
        4000,
        "the held snapshot sees every key"
    );
    Ok(())
}
