//! Trivial moves: a table that a size-driven compaction would only copy down a level is moved
//! by a MANIFEST edit instead of rewritten, and one that a rewrite could drop something from
//! never is.

use std::sync::Arc;
use std::time::Duration;

use cairn::{Compression, Db, Options};

/// Small tables, one codec on every level (so tables may move into the last level too).
fn small_tables() -> Options {
    Options::default()
        .memtable_size(32 * 1024)
        .level_base_bytes(64 * 1024)
        .target_file_size(16 * 1024)
        .compression(Compression::None)
}

fn key(i: u32) -> String {
    format!("key{i:06}")
}

fn value(i: u32) -> String {
    format!("value-{i}-{}", "x".repeat(60))
}

/// Keeps everything; its presence alone must stop every move.
#[derive(Debug)]
struct KeepAll;

impl cairn::CompactionFilter for KeepAll {
    fn filter(&self, _cf: &str, _key: &[u8], _value: &[u8]) -> cairn::Decision {
        cairn::Decision::Keep
    }
}

/// Writes keys `0..n` in order, settles, checks every key reads back, and returns the stats.
fn fill_in_order(options: Options, n: u32) -> cairn::Stats {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options).expect("open");
    for i in 0..n {
        db.put(key(i), value(i)).expect("put");
    }
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    for i in 0..n {
        let got = db.get(key(i)).expect("get");
        assert_eq!(got.as_deref(), Some(value(i).as_bytes()), "key {i}");
    }
    let stats = db.stats();
    db.close().expect("close");
    // What the MANIFEST recorded opens again to the same keys.
    let db = Db::open(dir.path(), small_tables()).expect("reopen");
    let read = db.range::<String>(..).expect("range").count();
    assert_eq!(read, n as usize, "keys after reopen");
    stats
}

#[test]
fn tables_written_in_key_order_move_down_without_a_rewrite() {
    let moved = fill_in_order(small_tables(), 6_000);
    let filtered = fill_in_order(small_tables().compaction_filter(Arc::new(KeepAll)), 6_000);
    assert!(
        moved.trivial_moves > 0,
        "no table moved: {} compactions",
        moved.compactions
    );
    assert_eq!(filtered.trivial_moves, 0, "moved past a compaction filter");
    // The default codecs: LZ4 above the last level, zstd in it. At this size every table goes
    // from level 0 straight to the last level, so none may move.
    let recoded = fill_in_order(
        small_tables()
            .compression_per_level([Compression::Lz4])
            .bottommost_compression(Compression::Zstd(3)),
        6_000,
    );
    assert_eq!(
        recoded.trivial_moves, 0,
        "moved into a level of another codec"
    );
    assert!(
        moved.bytes_written < filtered.bytes_written,
        "moves saved no writes: {} bytes against {} rewriting",
        moved.bytes_written,
        filtered.bytes_written
    );
}

#[test]
fn a_table_holding_tombstones_is_rewritten_not_moved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), small_tables()).expect("open");
    // In key order, every tenth key a delete of a key never written: tables share no key and
    // hold one entry per key, so only their tombstones can keep them from moving; rewritten
    // at the bottom, with nothing below, the tombstones go.
    for i in 0..6_000 {
        if i % 10 == 4 {
            db.delete(key(i)).expect("delete");
        } else {
            db.put(key(i), value(i)).expect("put");
        }
    }
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    let stats = db.stats();
    assert!(stats.compactions > 0, "nothing compacted");
    assert_eq!(stats.trivial_moves, 0, "a table with tombstones moved");
    // (Level 0's last tables, below the compaction trigger, may still hold some.)
    let bottom = stats.levels.last().map(|l| l.point_tombstones);
    assert_eq!(bottom, Some(0), "tombstones kept at the bottom");
    for i in 0..6_000 {
        let want = (i % 10 != 4).then(|| value(i));
        let got = db.get(key(i)).expect("get");
        assert_eq!(
            got.as_deref(),
            want.as_deref().map(str::as_bytes),
            "key {i}"
        );
    }
}

/// Fills keys `0..n` in order, each written `writes` times in a row (so one memtable holds
/// every version of a key) and, with `ttl`, the last one with a TTL; settles; returns the
/// stats and the database.
fn fill_versions(
    n: u32,
    writes: u32,
    ttl: Option<Duration>,
) -> (cairn::Stats, Db, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), small_tables()).expect("open");
    for i in 0..n {
        // One batch: every version of the key lands in the same memtable, so tables never
        // share a key and only the versions can keep one from moving.
        let mut batch = cairn::WriteBatch::new();
        for w in 0..writes {
            match ttl.filter(|_| w + 1 == writes) {
                Some(ttl) => batch.put_with_ttl(key(i), value(i), ttl),
                None => batch.put(key(i), value(i)),
            }
        }
        db.write(batch).expect("write");
    }
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    (db.stats(), db, dir)
}

#[test]
fn a_table_holding_older_versions_is_rewritten_and_they_go() {
    let (stats, db, _dir) = fill_versions(3_000, 2, None);
    assert!(stats.compactions > 0, "nothing compacted");
    assert_eq!(stats.trivial_moves, 0, "a table with older versions moved");
    // Tables still in level 0 below its trigger keep theirs; how many depends on how flushes
    // and compactions interleaved (under load, more). A full compaction rewrites the rest.
    db.compact_range::<String>(..).expect("compact");
    let stats = db.stats();
    assert_eq!(stats.trivial_moves, 0, "a table with older versions moved");
    // The rewrites dropped every older version: one per key is left in the tables.
    assert_eq!(stats.dropped.shadowed, 3_000, "{:?}", stats.dropped);
    assert_eq!(db.range::<String>(..).expect("range").count(), 3_000);
}

#[test]
fn a_table_holding_values_with_a_ttl_is_rewritten_not_moved() {
    let (stats, db, _dir) = fill_versions(3_000, 1, Some(Duration::from_secs(3_600)));
    assert!(stats.compactions > 0, "nothing compacted");
    assert_eq!(stats.trivial_moves, 0, "a table with expiring values moved");
    assert_eq!(db.range::<String>(..).expect("range").count(), 3_000);
}
