//! Trivial moves: a table that a size-driven compaction would only copy down a level is moved
//! by a MANIFEST edit instead of rewritten, and one that a rewrite could drop something from
//! never is.

use std::sync::Arc;

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
    // Every table gets deletes of keys the same stretch wrote, so a rewrite can judge them.
    for i in 0..6_000 {
        db.put(key(i), value(i)).expect("put");
        if i % 10 == 9 {
            db.delete(key(i - 5)).expect("delete");
        }
    }
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    let stats = db.stats();
    assert!(stats.compactions > 0, "nothing compacted");
    assert_eq!(stats.trivial_moves, 0, "a table with tombstones moved");
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
