//! Runs of deleted keys a range read steps over are recorded, and later reads seek past them:
//! faster, and with the same answers at every snapshot, after later writes into the run, and
//! with writers racing the readers that record them.
//!
//! The randomized test runs `CAIRN_SEEDS` seeds (default 3); `CAIRN_SEED=n` replays one.

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn::{Db, Options};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

fn key(i: u32) -> String {
    format!("k{i:05}")
}

/// No background compaction of any kind (level 0, read-triggered, and the tombstone-density
/// trigger, which a table of 1,000 deletes sets off and which raced the block counts in CI):
/// the tombstones stay where the test put them.
fn options() -> Options {
    Options::default()
        .disable_auto_compactions(true)
        .level0_triggers(100, 200, 300)
        .read_trigger_tombstones(u64::MAX)
}

/// 2,000 keys in a table, the 1,000 from 100 deleted in a second one.
fn deleted_run(dir: &std::path::Path) -> Db {
    let db = Db::open(dir, options()).expect("open");
    for i in 0..2_000 {
        db.put(key(i), "value").expect("put");
    }
    db.flush().expect("flush");
    for i in 100..1_100 {
        db.delete(key(i)).expect("delete");
    }
    db.flush().expect("flush");
    db
}

fn first_at_or_after(db: &Db, from: &str) -> Option<String> {
    let mut cursor = db.cursor().expect("cursor");
    cursor.seek(from).expect("seek");
    cursor
        .key()
        .map(|k| String::from_utf8_lossy(k).into_owned())
}

/// Data blocks a seek from `from` reads, and where it lands.
fn blocks_for_seek(db: &Db, from: &str) -> (u64, Option<String>) {
    let before = db.stats().data_blocks_read;
    let landed = first_at_or_after(db, from);
    (db.stats().data_blocks_read - before, landed)
}

#[test]
fn a_seek_over_deleted_keys_records_a_run_and_the_next_seek_skips_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = deleted_run(dir.path());
    let (first, landed) = blocks_for_seek(&db, &key(100));
    assert_eq!(landed, Some(key(1_100)));
    assert_eq!(db.stats().deleted_runs_recorded, 1);
    let (second, landed) = blocks_for_seek(&db, &key(100));
    assert_eq!(landed, Some(key(1_100)));
    assert!(
        first >= 10 && second <= 4,
        "the first seek read {first} blocks, the second {second}"
    );
    // A seek into the middle of the run skips the rest of it.
    assert_eq!(first_at_or_after(&db, &key(700)), Some(key(1_100)));
    let backward: Vec<_> = db
        .range(key(0)..key(1_200))
        .expect("range")
        .rev()
        .map(|r| r.expect("step").0)
        .collect();
    assert_eq!(backward.len(), 200, "backward over the run");
}

#[test]
fn a_snapshot_older_than_a_run_still_reads_what_the_run_hides() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..2_000 {
        db.put(key(i), "value").expect("put");
    }
    let before = db.snapshot();
    for i in 100..1_100 {
        db.delete(key(i)).expect("delete");
    }
    assert_eq!(first_at_or_after(&db, &key(100)), Some(key(1_100)));
    assert_eq!(db.stats().deleted_runs_recorded, 1);
    let old: Vec<_> = before
        .range(key(100)..key(1_100))
        .expect("range")
        .map(|r| r.expect("step").0)
        .collect();
    assert_eq!(old.len(), 1_000, "the snapshot lost keys the run hides");
}

#[test]
fn a_key_written_into_a_run_is_read_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = deleted_run(dir.path());
    assert_eq!(first_at_or_after(&db, &key(100)), Some(key(1_100)));
    assert_eq!(db.stats().deleted_runs_recorded, 1);
    db.put(key(500), "back").expect("put");
    assert_eq!(first_at_or_after(&db, &key(100)), Some(key(500)));
    assert_eq!(first_at_or_after(&db, &key(501)), Some(key(1_100)));
    // The same in a memtable that holds the run's own tombstones.
    for i in 1_200..1_900 {
        db.delete(key(i)).expect("delete");
    }
    assert_eq!(first_at_or_after(&db, &key(1_200)), Some(key(1_900)));
    db.put(key(1_850), "back").expect("put");
    assert_eq!(first_at_or_after(&db, &key(1_200)), Some(key(1_850)));
}

/// A cursor open while a run ends (a write into it) or is first recorded (by another read)
/// keeps skipping exactly what it skipped before, in every source: were the two tables of the
/// deleted range to disagree, the older one's puts would come back without the deletes.
#[test]
fn an_open_cursor_sees_the_same_runs_while_they_change() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = deleted_run(dir.path());
    // Opened before any run exists; another read records one meanwhile.
    let mut before = db.cursor().expect("cursor");
    before.seek(key(99)).expect("seek");
    assert_eq!(first_at_or_after(&db, &key(100)), Some(key(1_100)));
    assert_eq!(db.stats().deleted_runs_recorded, 1);
    // Opened while the run holds; a write into it ends it meanwhile.
    let mut during = db.cursor().expect("cursor");
    during.seek(key(99)).expect("seek");
    db.put(key(500), "back").expect("put");
    for cursor in [&mut before, &mut during] {
        cursor.next().expect("next");
        assert_eq!(cursor.key(), Some(key(1_100).as_bytes()));
    }
    assert_eq!(first_at_or_after(&db, &key(100)), Some(key(500)));
}

/// A read that writes before it ends (a queue pops the head its cursor found while the cursor
/// is open) keeps the runs it learned: only a write into a run ends it.
#[test]
fn a_read_that_writes_before_it_ends_keeps_its_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = deleted_run(dir.path());
    let mut cursor = db.cursor().expect("cursor");
    cursor.seek(key(100)).expect("seek");
    let head = cursor.key().expect("a live key").to_vec();
    assert_eq!(head, key(1_100).as_bytes());
    db.delete(&head).expect("pop");
    drop(cursor);
    assert_eq!(db.stats().deleted_runs_recorded, 1);
    let (blocks, landed) = blocks_for_seek(&db, &key(100));
    assert_eq!(landed, Some(key(1_101)));
    assert!(blocks <= 4, "the seek read {blocks} blocks");
    // A write into the run while the read that learned it is open keeps it out.
    for i in 1_200..1_900 {
        db.delete(key(i)).expect("delete");
    }
    let recorded = db.stats().deleted_runs_recorded;
    let mut cursor = db.cursor().expect("cursor");
    cursor.seek(key(1_200)).expect("seek");
    db.put(key(1_500), "back").expect("put");
    drop(cursor);
    assert_eq!(
        db.stats().deleted_runs_recorded,
        recorded,
        "the ended run was recorded"
    );
    assert_eq!(first_at_or_after(&db, &key(1_200)), Some(key(1_500)));
}

/// A reader at an older snapshot steps over a key written after it (invisible to it); were its
/// run recorded, a newer reader would skip that key. Whether the newer entry is in the
/// memtable or already in a table, no run is recorded.
#[test]
fn a_reader_that_cannot_see_a_newer_entry_records_no_run() {
    for flushed in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = deleted_run(dir.path());
        let old = db.snapshot();
        db.put(key(600), "new").expect("put");
        if flushed {
            db.flush().expect("flush");
        }
        let mut cursor = old.cursor().expect("cursor");
        cursor.seek(key(100)).expect("seek");
        assert_eq!(cursor.key(), Some(key(1_100).as_bytes()));
        drop(cursor);
        assert_eq!(
            first_at_or_after(&db, &key(100)),
            Some(key(600)),
            "flushed: {flushed}"
        );
    }
}

/// A key hidden by expiry, not by a delete, breaks a run: were it recorded, a clock stepping
/// back (which brings the key back to life) would find it skipped.
#[test]
fn an_expired_key_breaks_a_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(cairn::ManualClock::new(0));
    let db = Db::open(dir.path(), options().clock(clock.clone())).expect("open");
    for i in 0..100 {
        db.put(key(i), "value").expect("put");
    }
    for i in 10..90 {
        db.delete(key(i)).expect("delete");
    }
    db.put_with_ttl(key(50), "brief", std::time::Duration::from_secs(10))
        .expect("put");
    clock.set(20_000);
    assert_eq!(first_at_or_after(&db, &key(10)), Some(key(90)), "expired");
    clock.set(5_000);
    assert_eq!(
        first_at_or_after(&db, &key(10)),
        Some(key(50)),
        "live again once the clock stepped back"
    );
}

/// A `SingleDelete` compacted with its put can let an older put show (when the put was
/// overwritten, against its contract), so keys it deletes never make a run.
#[test]
fn single_deletes_make_no_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..200 {
        db.put(key(i), "value").expect("put");
    }
    for i in 10..150 {
        db.single_delete(key(i)).expect("single delete");
    }
    assert_eq!(first_at_or_after(&db, &key(10)), Some(key(150)));
    assert_eq!(db.stats().deleted_runs_recorded, 0);
    for i in 10..150 {
        db.delete(key(i)).expect("delete");
    }
    assert_eq!(first_at_or_after(&db, &key(10)), Some(key(150)));
    assert_eq!(db.stats().deleted_runs_recorded, 1, "a Delete over it does");
}

/// Writers put keys into a run, each lower than the last, while readers keep recording runs
/// over it: once a put returns, a seek from the run's start must land on it.
#[test]
fn a_put_racing_readers_that_record_runs_is_never_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(dir.path(), options()).expect("open"));
    for i in 0..4_000 {
        db.put(key(i), "value").expect("put");
    }
    for i in 0..3_999 {
        db.delete(key(i)).expect("delete");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (db, stop) = (Arc::clone(&db), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    first_at_or_after(&db, &key(0));
                }
            })
        })
        .collect();
    for i in (0..3_999).rev().step_by(7) {
        db.put(key(i), "back").expect("put");
        assert_eq!(
            first_at_or_after(&db, &key(0)),
            Some(key(i)),
            "after put {i}"
        );
        db.delete(key(i)).expect("delete");
    }
    stop.store(true, Ordering::Relaxed);
    for reader in readers {
        reader.join().expect("reader");
    }
    assert!(db.stats().deleted_runs_recorded > 0, "no run was recorded");
}

/// Random puts, deletes, range deletes, snapshots and flushes over a small key space, with
/// forward and backward scans and seeks checked against a `BTreeMap` at the latest state and
/// at every held snapshot.
#[test]
fn reads_over_recorded_runs_match_a_model() {
    let seeds: Vec<u64> = if let Ok(seed) = std::env::var("CAIRN_SEED") {
        vec![seed.parse().expect("CAIRN_SEED is a number")]
    } else {
        let n = std::env::var("CAIRN_SEEDS").map_or(3, |n| n.parse().expect("a number"));
        (0..n).collect()
    };
    let mut recorded = 0;
    for seed in seeds {
        recorded += run_seed(seed);
    }
    assert!(
        recorded > 0,
        "no run was recorded: the test checked nothing"
    );
}

type Model = BTreeMap<String, String>;

fn run_seed(seed: u64) -> u64 {
    eprintln!("deleted_runs model: seed {seed} (CAIRN_SEED={seed} replays it)");
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options().memtable_size(64 * 1024)).expect("open");
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut model = Model::new();
    let mut snapshots: Vec<(cairn::Snapshot, Model)> = Vec::new();
    for step in 0..2_000 {
        let ctx = format!("seed {seed} step {step}");
        let k = rng.random_range(0..400);
        match rng.random_range(0..100) {
            0..30 => {
                let v = format!("v{step}");
                db.put(key(k), &v).expect("put");
                model.insert(key(k), v);
            }
            30..40 => {
                // A block of puts, so later deletes make long runs.
                for i in k..(k + 50).min(400) {
                    db.put(key(i), "block").expect("put");
                    model.insert(key(i), "block".to_owned());
                }
            }
            40..60 => {
                for i in k..(k + rng.random_range(1..80)).min(400) {
                    db.delete(key(i)).expect("delete");
                    model.remove(&key(i));
                }
            }
            60..62 => {
                let end = (k + rng.random_range(1..60)).min(400);
                db.delete_range(key(k), key(end)).expect("delete_range");
                model.retain(|key_, _| *key_ < key(k) || *key_ >= key(end));
            }
            62..65 => {
                if snapshots.len() < 4 {
                    snapshots.push((db.snapshot(), model.clone()));
                } else {
                    snapshots.remove(rng.random_range(0..snapshots.len()));
                }
            }
            65..67 => db.flush().expect("flush"),
            67..68 => db.compact_range::<&str>(..).expect("compact"),
            _ => {
                let from = key(rng.random_range(0..400));
                check_reads(&db, &model, &from, &ctx);
                for (i, (snapshot, at)) in snapshots.iter().enumerate() {
                    let got: Vec<_> = snapshot
                        .range(from.clone()..)
                        .expect("range")
                        .take(3)
                        .map(|r| String::from_utf8_lossy(&r.expect("step").0).into_owned())
                        .collect();
                    let want: Vec<_> = at
                        .range(from.clone()..)
                        .take(3)
                        .map(|(k, _)| k.clone())
                        .collect();
                    assert_eq!(got, want, "{ctx}: snapshot {i} from {from}");
                }
            }
        }
    }
    let recorded = db.stats().deleted_runs_recorded;
    eprintln!("deleted_runs model: seed {seed} recorded {recorded} runs");
    recorded
}

fn check_reads(db: &Db, model: &Model, from: &str, ctx: &str) {
    check_turnaround(db, model, from, ctx);
    let after: Vec<_> = db
        .range::<&str>((std::ops::Bound::Excluded(from), std::ops::Bound::Unbounded))
        .expect("range")
        .take(2)
        .map(|r| String::from_utf8_lossy(&r.expect("step").0).into_owned())
        .collect();
    let after_want: Vec<_> = model
        .range::<str, _>((std::ops::Bound::Excluded(from), std::ops::Bound::Unbounded))
        .take(2)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(after, after_want, "{ctx}: after {from}, excluded");
    let want: Vec<_> = model.range(from.to_owned()..).take(3).collect();
    let got: Vec<_> = db
        .range(from..)
        .expect("range")
        .take(3)
        .map(|r| r.expect("step"))
        .collect();
    let got: Vec<_> = got
        .iter()
        .map(|(k, v)| {
            (
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        })
        .collect();
    let want_owned: Vec<_> = want
        .iter()
        .map(|(k, v)| ((*k).clone(), (*v).clone()))
        .collect();
    assert_eq!(got, want_owned, "{ctx}: forward from {from}");
    let back: Vec<_> = db
        .range(..from)
        .expect("range")
        .rev()
        .take(3)
        .map(|r| String::from_utf8_lossy(&r.expect("step").0).into_owned())
        .collect();
    let back_want: Vec<_> = model
        .range(..from.to_owned())
        .rev()
        .take(3)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(back, back_want, "{ctx}: backward from {from}");
}

/// A cursor seeks, steps forward twice and turns back: the same keys as the model each way.
fn check_turnaround(db: &Db, model: &Model, from: &str, ctx: &str) {
    let want: Vec<_> = model
        .range(from.to_owned()..)
        .take(2)
        .map(|(k, _)| k.clone())
        .collect();
    let mut cursor = db.cursor().expect("cursor");
    cursor.seek(from).expect("seek");
    let at = |c: &cairn::DbCursor| c.key().map(|k| String::from_utf8_lossy(k).into_owned());
    assert_eq!(
        at(&cursor),
        want.first().cloned(),
        "{ctx}: cursor seek {from}"
    );
    if want.len() < 2 {
        return;
    }
    cursor.next().expect("next");
    assert_eq!(
        at(&cursor),
        want.get(1).cloned(),
        "{ctx}: cursor next from {from}"
    );
    cursor.prev().expect("prev");
    assert_eq!(
        at(&cursor),
        want.first().cloned(),
        "{ctx}: cursor back from {from}"
    );
    cursor.next().expect("next");
    assert_eq!(
        at(&cursor),
        want.get(1).cloned(),
        "{ctx}: cursor forward again"
    );
}

/// How the key an older reader still sees is dropped before a newer reader learns a run over it.
#[derive(Debug, Clone, Copy)]
enum DroppedBy {
    /// Its own cell TTL ran out and a compaction dropped it.
    CellTtl,
    /// `set_options` gave the family a TTL that ran out, and a compaction dropped it.
    NewFamilyTtl,
    /// A compaction filter removed it.
    Filter,
}

/// Removes the key `k00050` once `armed`: a filter whose answer changes, as one reading
/// outside state does.
#[derive(Debug, Default)]
struct RemoveWhenArmed {
    armed: AtomicBool,
}

impl cairn::CompactionFilter for RemoveWhenArmed {
    fn filter(&self, _cf: &str, key_: &[u8], _value: &[u8]) -> cairn::Decision {
        if self.armed.load(Ordering::SeqCst) && key_ == key(50).as_bytes() {
            cairn::Decision::Remove
        } else {
            cairn::Decision::Keep
        }
    }
}

/// A cursor made while `k00050` is live among 99 deleted keys; the key is then dropped (`how`,
/// once the clock passed its TTL if it has one) and a newer reader records the run `[k00000, k00100)` at the same seqno. The older cursor
/// still sees `k00050`: a run learned under a newer view must not hide it.
fn an_older_reader_keeps_a_key_a_newer_view_dropped(how: DroppedBy) {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(cairn::ManualClock::new(1_000));
    let filter = Arc::new(RemoveWhenArmed::default());
    let db = Db::open(
        dir.path(),
        options()
            .clock(clock.clone())
            .compaction_filter(filter.clone()),
    )
    .expect("open");
    // The deletes outlive the compactions (grace), so the newer reader steps over them.
    let grace = cairn::CfOptions::default().tombstone_grace(std::time::Duration::from_secs(3_600));
    let cf = db
        .create_column_family("runs", grace.clone())
        .expect("create");
    for i in (0..100).filter(|&i| i != 50) {
        cf.delete(key(i)).expect("delete");
    }
    match how {
        DroppedBy::CellTtl => cf
            .put_with_ttl(key(50), "brief", std::time::Duration::from_secs(28))
            .expect("put"),
        DroppedBy::NewFamilyTtl | DroppedBy::Filter => cf.put(key(50), "value").expect("put"),
    }
    // The live key after the run, written late enough to outlive a family TTL of 10 s.
    clock.set(25_000);
    cf.put(key(100), "value").expect("put");
    db.flush().expect("flush");
    // At 25 s every key but the deleted ones is live.
    let mut older = cf.cursor().expect("cursor");
    let mut older_iter = cf.range(key(0)..).expect("range");
    match how {
        DroppedBy::CellTtl => {}
        DroppedBy::NewFamilyTtl => cf
            .set_options(grace.ttl(std::time::Duration::from_secs(10)))
            .expect("set ttl"),
        DroppedBy::Filter => filter.armed.store(true, Ordering::SeqCst),
    }
    clock.set(31_000);
    cf.compact_range::<&str>(..).expect("compact");
    let mut newer = cf.cursor().expect("cursor");
    newer.seek(key(0)).expect("seek");
    assert_eq!(
        newer.key(),
        Some(key(100).as_bytes()),
        "{how:?}: the newer reader"
    );
    drop(newer);
    assert_eq!(db.stats().deleted_runs_recorded, 1, "{how:?}: its run");
    older.seek(key(0)).expect("seek");
    assert_eq!(
        older.key(),
        Some(key(50).as_bytes()),
        "{how:?}: the older cursor skipped a key it sees"
    );
    let first = older_iter.next().expect("an entry").expect("step").0;
    assert_eq!(
        first,
        key(50).as_bytes(),
        "{how:?}: the older iterator skipped a key it sees"
    );
}

#[test]
fn a_run_learned_after_a_ttl_compaction_hides_nothing_from_an_older_cursor() {
    an_older_reader_keeps_a_key_a_newer_view_dropped(DroppedBy::CellTtl);
}

#[test]
fn a_run_learned_after_set_options_added_a_ttl_hides_nothing_from_an_older_cursor() {
    an_older_reader_keeps_a_key_a_newer_view_dropped(DroppedBy::NewFamilyTtl);
}

#[test]
fn a_run_learned_after_a_filter_removed_a_key_hides_nothing_from_an_older_cursor() {
    an_older_reader_keeps_a_key_a_newer_view_dropped(DroppedBy::Filter);
}
