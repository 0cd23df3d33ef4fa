//! The borrowing cursor against a `BTreeMap` model: random seeks and steps both ways (turning
//! around mid-walk), over bounded ranges and snapshots, on data spread over memtables and
//! levels of small tables with range deletes and overwrites.
//!
//! Runs `CAIRN_SEEDS` seeds (default 12); `CAIRN_SEED=n` replays one. A failure names its seed.

mod common;

use std::collections::BTreeMap;
use std::ops::Bound;

use cairn::{Db, DbCursor, Options};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

fn options() -> Options {
    Options::default()
        .memtable_size(8 * 1024)
        .level_base_bytes(8 * 1024)
        .target_file_size(2 * 1024)
}

/// Writes a random history into `db` and `model`, keeping snapshots (with the model as each
/// saw it) along the way.
fn fill(
    db: &Db,
    model: &mut Model,
    rng: &mut StdRng,
    snapshots: &mut Vec<(cairn::Snapshot, Model)>,
) {
    for step in 0..1_500u32 {
        let i = rng.random_range(0..400);
        match rng.random_range(0..20) {
            0..=12 => {
                let value = format!("v{step}-{}", "x".repeat(rng.random_range(0..60)));
                db.put(key(i), &value).expect("put");
                model.insert(key(i), value.into_bytes());
            }
            13..=17 => {
                db.delete(key(i)).expect("delete");
                model.remove(&key(i));
            }
            18 => {
                let end = i + rng.random_range(1..30);
                db.delete_range(key(i), key(end)).expect("delete range");
                let doomed: Vec<Vec<u8>> = model
                    .range(key(i)..key(end))
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in doomed {
                    model.remove(&k);
                }
            }
            _ => snapshots.push((db.snapshot(), model.clone())),
        }
        if step == 1_000 {
            db.compact_range::<&[u8]>(..).expect("compact");
        }
    }
}

fn bounds(rng: &mut StdRng) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let pick = |rng: &mut StdRng| match rng.random_range(0..3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng.random_range(0..420))),
        _ => Bound::Excluded(key(rng.random_range(0..420))),
    };
    (pick(rng), pick(rng))
}

/// The model's entries in `range`, in order.
fn in_range(model: &Model, range: &(Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<(Vec<u8>, Vec<u8>)> {
    let valid = match (&range.0, &range.1) {
        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
            a < b || (a == b && matches!(range, (Bound::Included(_), Bound::Included(_))))
        }
        _ => true,
    };
    if !valid {
        return Vec::new();
    }
    model
        .range::<Vec<u8>, _>((range.0.as_ref(), range.1.as_ref()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn current(cursor: &DbCursor) -> Option<(Vec<u8>, Vec<u8>)> {
    assert_eq!(cursor.key().is_some(), cursor.valid());
    cursor
        .key()
        .zip(cursor.value())
        .map(|(k, v)| (k.to_vec(), v.to_vec()))
}

/// Random moves on `cursor`, each checked against `expected` (the model's entries in range).
fn walk(cursor: &mut DbCursor, expected: &[(Vec<u8>, Vec<u8>)], rng: &mut StdRng, what: &str) {
    // Where the model says the cursor is: an index into `expected`, or `None`.
    let mut at: Option<usize> = None;
    for move_no in 0..60 {
        let probe = key(rng.random_range(0..420));
        let (name, want) = match rng.random_range(0..6) {
            0 => {
                cursor.seek(&probe).expect("seek");
                ("seek", expected.iter().position(|(k, _)| *k >= probe))
            }
            1 => {
                cursor.seek_for_prev(&probe).expect("seek_for_prev");
                (
                    "seek_for_prev",
                    expected.iter().rposition(|(k, _)| *k <= probe),
                )
            }
            2 => {
                cursor.seek_to_first().expect("seek_to_first");
                ("seek_to_first", (!expected.is_empty()).then_some(0))
            }
            3 => {
                cursor.seek_to_last().expect("seek_to_last");
                ("seek_to_last", expected.len().checked_sub(1))
            }
            4 => {
                cursor.next().expect("next");
                (
                    "next",
                    at.and_then(|i| (i + 1 < expected.len()).then_some(i + 1)),
                )
            }
            _ => {
                cursor.prev().expect("prev");
                ("prev", at.and_then(|i| i.checked_sub(1)))
            }
        };
        at = want;
        let want = want.and_then(|i| expected.get(i)).cloned();
        assert_eq!(
            current(cursor),
            want,
            "{what}: move {move_no}, {name} (probe {probe:?})"
        );
    }
}

fn run_seed(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    let mut model = Model::new();
    let mut snapshots = Vec::new();
    fill(&db, &mut model, &mut rng, &mut snapshots);
    for round in 0..20 {
        let range = bounds(&mut rng);
        let cursor_range = (range.0.clone(), range.1.clone());
        let mut cursor = db.cursor_range(cursor_range).expect("cursor");
        walk(
            &mut cursor,
            &in_range(&model, &range),
            &mut rng,
            &format!("round {round}, {range:?}"),
        );
    }
    for (n, (snapshot, seen)) in snapshots.iter().enumerate().take(10) {
        let mut cursor = snapshot.cursor().expect("cursor");
        let all = (Bound::Unbounded, Bound::Unbounded);
        walk(
            &mut cursor,
            &in_range(seen, &all),
            &mut rng,
            &format!("snapshot {n}"),
        );
    }
    // The owned iterator, built on the same walk, agrees both ways.
    let all: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let forward: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .expect("iter")
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("scan"))
        .collect();
    assert_eq!(forward, all, "iter forward");
    let mut backward: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter()
        .expect("iter")
        .rev()
        .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())).expect("scan"))
        .collect();
    backward.reverse();
    assert_eq!(backward, all, "iter backward");
}

#[test]
fn cursor_matches_btreemap_model() {
    for seed in common::seeds(12) {
        let result = std::panic::catch_unwind(|| run_seed(seed));
        if let Err(panic) = result {
            eprintln!("cursor model test failed with seed {seed}; replay with CAIRN_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

#[test]
fn an_unpositioned_cursor_lends_nothing_and_steps_nowhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("a", "1").expect("put");
    let mut cursor = db.cursor().expect("cursor");
    assert!(!cursor.valid());
    cursor.next().expect("next");
    cursor.prev().expect("prev");
    assert_eq!(cursor.key(), None);
    assert_eq!(cursor.value(), None);
    cursor.seek("b").expect("seek");
    assert_eq!(cursor.key(), None, "nothing at or after b");
    cursor.next().expect("next past the end");
    assert_eq!(cursor.key(), None);
    cursor.seek_for_prev("b").expect("seek_for_prev");
    assert_eq!(cursor.key(), Some(&b"a"[..]));
}

/// The read trigger counts what one walk steps over: a cursor that seeks a hundred times, each
/// time stepping over one deleted key, reports nothing (it used to add them up across seeks
/// and report a span it had jumped over, not scanned).
#[test]
fn a_cursor_counts_tombstones_per_seek_not_across_seeks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default().read_trigger_tombstones(10)).expect("open");
    for i in 0..1_000 {
        db.put(key(i), "v").expect("put");
    }
    for i in 0..100 {
        db.delete(key(i * 10)).expect("delete");
    }
    let mut cursor = db.cursor().expect("cursor");
    for i in 0..100 {
        cursor.seek(key(i * 10)).expect("seek");
        assert_eq!(cursor.key(), Some(key(i * 10 + 1).as_slice()));
    }
    assert_eq!(db.stats().read_triggers, 0, "a cursor's seeks added up");
    // One walk over all of them still reports.
    cursor.seek_to_first().expect("seek");
    while cursor.valid() {
        cursor.next().expect("next");
    }
    assert_eq!(db.stats().read_triggers, 1, "one walk over 100 tombstones");
}

#[test]
fn a_seek_after_close_leaves_the_cursor_unpositioned() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("a", "1").expect("put");
    let mut cursor = db.cursor().expect("cursor");
    cursor.seek_to_first().expect("seek");
    assert_eq!(cursor.key(), Some(&b"a"[..]));
    db.close().expect("close");
    let sought = cursor.seek("a");
    assert!(
        matches!(sought, Err(cairn::Error::Stopped { .. })),
        "{sought:?}"
    );
    assert_eq!(cursor.key(), None);
}
