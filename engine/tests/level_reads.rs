//! Range reads over levels of many tables: a level below 0 is walked as one sorted run, and a
//! seek reads one table of it, not every table after the key.

use std::collections::BTreeMap;

use cairn::{Db, Options};

/// Small tables, so that a few thousand keys make levels of dozens of them.
fn small_tables() -> Options {
    Options::default()
        .memtable_size(32 * 1024)
        .level_base_bytes(16 * 1024)
        .target_file_size(4 * 1024)
}

fn key(i: u32) -> String {
    format!("key{i:06}")
}

fn value(i: u32, round: u32) -> String {
    format!("value-{i}-{round}-{}", "x".repeat(40))
}

/// Tables per level, from the database's stats.
fn files_per_level(db: &Db) -> Vec<usize> {
    db.stats().levels.iter().map(|l| l.files).collect()
}

#[test]
fn a_seek_reads_one_table_per_level_not_every_table_after_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), small_tables()).expect("open");
    for i in 0..4_000 {
        db.put(key(i), value(i, 0)).expect("put");
    }
    db.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let levels = files_per_level(&db);
    let deepest = levels.iter().copied().max().unwrap_or(0);
    assert!(deepest >= 20, "too few tables in a level: {levels:?}");

    let before = db.stats().data_blocks_read;
    let first = db
        .range(key(1_000)..)
        .expect("range")
        .next()
        .transpose()
        .expect("read");
    let read = db.stats().data_blocks_read - before;
    assert_eq!(
        first.map(|(k, _)| k).as_deref(),
        Some(key(1_000).as_bytes())
    );
    let levels_with_files = levels.iter().filter(|&&n| n > 0).count();
    assert!(
        read <= 2 * levels_with_files as u64,
        "a seek read {read} data blocks over levels {levels:?}"
    );
}

/// Many versions of one key, kept by snapshots, and range deletes cut across table
/// boundaries of a level: every snapshot reads what it saw, forward and back.
#[test]
fn versions_and_range_deletes_across_table_boundaries_read_as_at_each_snapshot() {
    snapshots_read_what_they_saw(small_tables());
}

/// The same with one open table at a time: the walk reopens tables as it crosses them.
#[test]
fn a_level_walk_with_one_open_table_at_a_time_reads_the_same() {
    snapshots_read_what_they_saw(small_tables().max_open_tables(1));
}

fn snapshots_read_what_they_saw(options: Options) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options).expect("open");
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut snapshots = Vec::new();
    for i in 0..1_000 {
        db.put(key(i), value(i, 0)).expect("put");
        model.insert(key(i), value(i, 0));
    }
    for round in 1..=60u32 {
        // Many versions of one key, each kept by a snapshot.
        db.put(key(500), value(500, round)).expect("put");
        model.insert(key(500), value(500, round));
        if round.is_multiple_of(10) {
            let start = round * 13;
            db.delete_range(key(start), key(start + 37))
                .expect("delete range");
            let doomed: Vec<String> = model
                .range(key(start)..key(start + 37))
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                model.remove(&k);
            }
        }
        snapshots.push((db.snapshot(), model.clone()));
    }
    db.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let levels = files_per_level(&db);
    assert!(
        levels.iter().skip(1).any(|&n| n >= 10),
        "too few tables in a level: {levels:?}"
    );

    for (n, (snapshot, expected)) in snapshots.iter().enumerate() {
        let forward: Vec<(String, String)> = snapshot
            .iter()
            .expect("iter")
            .map(|r| {
                let (k, v) = r.expect("scan");
                (
                    String::from_utf8_lossy(&k).into_owned(),
                    String::from_utf8_lossy(&v).into_owned(),
                )
            })
            .collect();
        let want: Vec<(String, String)> = expected
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(forward, want, "snapshot {n}, forward");

        let backward: Vec<String> = snapshot
            .range(key(300)..key(700))
            .expect("range")
            .rev()
            .map(|r| String::from_utf8_lossy(&r.expect("scan").0).into_owned())
            .collect();
        let want: Vec<String> = expected
            .range(key(300)..key(700))
            .rev()
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(backward, want, "snapshot {n}, backward");

        for probe in [0, 130, 131, 499, 500, 501, 777, 999] {
            let got = snapshot
                .range(key(probe)..)
                .expect("range")
                .next()
                .transpose()
                .expect("seek")
                .map(|(k, v)| {
                    (
                        String::from_utf8_lossy(&k).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                });
            let want = expected
                .range(key(probe)..)
                .next()
                .map(|(k, v)| (k.clone(), v.clone()));
            assert_eq!(got, want, "snapshot {n}, seek to {probe}");
        }
    }
}

/// A table whose keys lie outside the bounds the MANIFEST records (here two tables of a level
/// swapped on disk) would make a level walk hand keys out of order: it is `Corruption`.
#[test]
fn a_table_outside_its_recorded_bounds_is_corruption_not_keys_out_of_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Raw blocks and fixed-width entries: tables of equal size, which the open's size check
    // lets through when two of them trade places.
    let options = || small_tables().compression(cairn::Compression::None);
    {
        let db = Db::open(dir.path(), options()).expect("open");
        for i in 0..4_000 {
            db.put(key(i), format!("{i:06}{}", "x".repeat(40)))
                .expect("put");
        }
        db.compact_range::<&str>(..).expect("compact");
        db.wait_for_background_work().expect("settle");
        db.close().expect("close");
    }
    let mut by_size: BTreeMap<u64, Vec<std::path::PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "sst") {
            let size = std::fs::metadata(&path).expect("metadata").len();
            by_size.entry(size).or_default().push(path);
        }
    }
    let mut same = by_size.into_values().max_by_key(Vec::len).expect("tables");
    same.sort();
    let (Some(first), Some(last)) = (same.first(), same.last().filter(|_| same.len() > 1)) else {
        panic!("no two tables of one size: {same:?}");
    };
    let a = std::fs::read(first).expect("read");
    let b = std::fs::read(last).expect("read");
    std::fs::write(first, b).expect("write");
    std::fs::write(last, a).expect("write");

    let db = Db::open(dir.path(), options()).expect("reopen");
    let scanned: Result<Vec<_>, _> = db.iter().expect("iter").collect();
    match scanned {
        Err(cairn::Error::Corruption { reason, .. }) => {
            assert!(reason.contains("outside the bounds"), "{reason}");
        }
        other => panic!(
            "expected Corruption, got {:?}",
            other.map(|entries| entries.len())
        ),
    }
    drop(db);

    // Point reads check the same, whether or not a scan opened the table first: a key of a
    // swapped table is never reported missing.
    let db = Db::open(dir.path(), options()).expect("reopen");
    let mut corrupt = 0;
    for i in (0..4_000).step_by(50) {
        match db.get(key(i)) {
            Ok(Some(value)) => assert!(value.starts_with(format!("{i:06}").as_bytes())),
            Ok(None) => panic!("key {i} read as missing from a swapped table"),
            Err(cairn::Error::Corruption { reason, .. }) => {
                assert!(reason.contains("outside the bounds"), "{reason}");
                corrupt += 1;
            }
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(corrupt > 0, "no read met the swapped tables");

    // The audit still reads every table's bytes: it is the tool that shows what a damaged
    // database holds, so a table refused to reads is searched uncached.
    let number = |path: &std::path::Path| -> u64 {
        path.file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse().ok())
            .expect("a table number")
    };
    let swapped = [number(first), number(last)];
    let mut in_swapped = 0;
    for i in (0..4_000).step_by(25) {
        let traces = db.audit_key(key(i)).expect("audit of a swapped database");
        assert!(
            traces
                .iter()
                .any(|t| matches!(t.location, cairn::Location::Table { .. })),
            "key {i}: {traces:?}"
        );
        in_swapped += traces
            .iter()
            .filter(|t| {
                matches!(t.location, cairn::Location::Table { number, .. } if swapped.contains(&number))
            })
            .count();
    }
    assert!(in_swapped > 0, "the audit never read the swapped tables");
    // Compaction opens its inputs by their records too: it refuses, and installs nothing.
    let before = files_per_level(&db);
    match db.compact_range::<&str>(..) {
        Err(cairn::Error::Corruption { reason, .. }) => {
            assert!(reason.contains("outside the bounds"), "{reason}");
        }
        other => panic!("expected Corruption from compaction, got {other:?}"),
    }
    assert_eq!(
        files_per_level(&db),
        before,
        "a refused compaction changed the levels"
    );
}

/// Two level-0 tables swapped on disk: each is searched by the bounds its record gives, so a
/// point read of a key of one would look in the other and report it missing. It is
/// `Corruption` instead, for a point read and a scan.
#[test]
fn a_swapped_level0_table_is_corruption_not_a_missing_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = || {
        Options::default()
            .compression(cairn::Compression::None)
            .level0_triggers(100, 200, 300)
    };
    {
        let db = Db::open(dir.path(), options()).expect("open");
        // Eight flushes of 100 fixed-width keys each, seqnos of two varint bytes after the
        // first: tables of one size, which the open's size check lets trade places.
        for flush in 0..8 {
            for i in flush * 100..(flush + 1) * 100 {
                db.put(key(i), format!("{i:06}{}", "x".repeat(40)))
                    .expect("put");
            }
            db.flush().expect("flush");
        }
        assert_eq!(files_per_level(&db).first(), Some(&8), "all in level 0");
        db.close().expect("close");
    }
    let mut by_size: BTreeMap<u64, Vec<std::path::PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(dir.path()).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "sst") {
            let size = std::fs::metadata(&path).expect("metadata").len();
            by_size.entry(size).or_default().push(path);
        }
    }
    let mut same = by_size.into_values().max_by_key(Vec::len).expect("tables");
    same.sort();
    let (Some(first), Some(last)) = (same.first(), same.last().filter(|_| same.len() > 1)) else {
        panic!("no two tables of one size: {same:?}");
    };
    let a = std::fs::read(first).expect("read");
    let b = std::fs::read(last).expect("read");
    std::fs::write(first, b).expect("write");
    std::fs::write(last, a).expect("write");

    let db = Db::open(dir.path(), options()).expect("reopen");
    let mut corrupt = 0;
    for i in 0..800 {
        match db.get(key(i)) {
            Ok(Some(value)) => assert!(value.starts_with(format!("{i:06}").as_bytes())),
            Ok(None) => panic!("key {i} read as missing from a swapped level-0 table"),
            Err(cairn::Error::Corruption { .. }) => corrupt += 1,
            Err(e) => panic!("key {i}: {e}"),
        }
    }
    assert!(corrupt > 0, "no read met the swapped tables");
    let scanned: Result<Vec<_>, _> = db.iter().expect("iter").collect();
    assert!(
        matches!(scanned, Err(cairn::Error::Corruption { .. })),
        "a scan over swapped level-0 tables: {:?}",
        scanned.map(|entries| entries.len())
    );
}

/// A table that holds only a range tombstone takes its bounds from the tombstone alone: every
/// path that checks a table against its record accepts it.
#[test]
fn a_table_of_only_a_range_tombstone_passes_every_check() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = || small_tables().level0_triggers(100, 200, 300);
    {
        let db = Db::open(dir.path(), options()).expect("open");
        for i in 0..200 {
            db.put(key(i), value(i, 0)).expect("put");
        }
        db.flush().expect("flush");
        db.delete_range(key(50), key(150)).expect("delete range");
        db.flush().expect("flush");
        db.close().expect("close");
    }
    let db = Db::open(dir.path(), options()).expect("reopen");
    assert_eq!(db.get(key(100)).expect("get"), None);
    assert!(db.get(key(10)).expect("get").is_some());
    let live: Result<Vec<_>, _> = db.iter().expect("iter").collect();
    assert_eq!(live.expect("scan").len(), 100);
    let explained = db.explain_tombstones::<&str>(..).expect("explain");
    assert!(
        explained.iter().any(|e| e.end.is_some()),
        "the range tombstone is explained: {explained:?}"
    );
    db.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let live: Result<Vec<_>, _> = db.iter().expect("iter").collect();
    assert_eq!(live.expect("scan after compaction").len(), 100);
}

/// Range tombstones cut into every table of a level (kept by their grace period) do not make
/// a read open every table: the ones holding tombstones are opened when a lookup reaches them.
#[test]
fn a_seek_opens_only_the_tombstone_tables_it_reaches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let graced =
        || cairn::CfOptions::default().tombstone_grace(std::time::Duration::from_secs(3_600));
    {
        let db = Db::open(dir.path(), small_tables()).expect("open");
        let cf = db.create_column_family("graced", graced()).expect("cf");
        for i in 0..4_000 {
            cf.put(key(i), value(i, 0)).expect("put");
        }
        for i in 0..40 {
            cf.delete_range(key(i * 100), key(i * 100 + 10))
                .expect("delete range");
        }
        cf.compact_range::<&str>(..).expect("compact");
        db.wait_for_background_work().expect("settle");
        let with_tombstones: u64 = db.stats().levels.iter().map(|l| l.range_tombstones).sum();
        assert!(
            with_tombstones >= 30,
            "tombstones dropped: {with_tombstones}"
        );
        db.close().expect("close");
    }
    let db = Db::open(dir.path(), small_tables()).expect("reopen");
    let cf = db.column_family("graced").expect("cf");
    let before = db.stats().open_tables;
    let first = cf
        .range(key(2_005)..)
        .expect("range")
        .next()
        .transpose()
        .expect("read")
        .map(|(k, _)| k);
    assert_eq!(first.as_deref(), Some(key(2_010).as_bytes()));
    let opened = db.stats().open_tables - before;
    assert!(opened <= 3, "a seek opened {opened} tables");
}

/// A record's optional times are stored one up (0 is "none"), so an expiry saturated at the
/// largest time reads back one less: the check of a table against its record must not call
/// that corruption, before or after a reopen.
#[test]
fn a_table_whose_expiry_saturates_reads_after_a_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let db = Db::open(dir.path(), Options::default()).expect("open");
        db.put_with_ttl("forever", "v", std::time::Duration::MAX)
            .expect("put");
        db.flush().expect("flush");
        assert!(db.get("forever").expect("get before reopen").is_some());
        db.close().expect("close");
    }
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert!(db.get("forever").expect("get after reopen").is_some());
}
