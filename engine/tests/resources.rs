//! Bounded resources: open tables, table block sizes, and numbers read back from disk.

mod common;

use std::io::Write;

use cairn::{Db, Error, Options};
use common::{closed_database, tempdir};

#[test]
fn the_table_cache_keeps_no_more_tables_open_than_its_bound() {
    let dir = tempdir();
    let db = Db::open(
        dir.path(),
        Options::default()
            .max_open_tables(4)
            // No compaction: every flush stays a table of its own.
            .level0_triggers(100, 200, 300),
    )
    .expect("open");
    for t in 0..12 {
        for i in 0..50 {
            db.put(format!("t{t:02}-{i:03}"), "v").expect("put");
        }
        db.flush().expect("flush");
    }
    assert_eq!(db.stats().levels.first().map(|l| l.files), Some(12));
    for round in 0..2 {
        for t in 0..12 {
            let value = db.get(format!("t{t:02}-007")).expect("get");
            assert_eq!(value.as_deref(), Some(&b"v"[..]), "round {round} table {t}");
            let open = db.stats().open_tables;
            assert!(open <= 4, "{open} tables open, bound 4");
            let held = common::held_tables(dir.path());
            assert!(held.len() <= 4, "{} tables held: {held:?}", held.len());
        }
    }
    assert_eq!(
        db.iter().expect("iter").count(),
        600,
        "a scan over all of them"
    );
}

#[test]
fn compactions_read_tables_without_filling_the_block_cache() {
    let dir = tempdir();
    let options = || {
        Options::default()
            .block_cache_bytes(8 << 20)
            .level0_triggers(100, 200, 300)
    };
    let db = Db::open(dir.path(), options()).expect("open");
    for t in 0..6 {
        for i in 0..2_000 {
            db.put(format!("k{i:05}"), format!("value {t} of {i:05}"))
                .expect("put");
        }
        db.flush().expect("flush");
    }
    db.close().expect("close");
    let db = Db::open(dir.path(), options()).expect("reopen");
    assert_eq!(db.stats().block_cache_bytes, 0, "a fresh cache");
    db.compact_range::<&[u8]>(..).expect("compact");
    let stats = db.stats();
    assert!(stats.compactions > 0);
    assert_eq!(stats.block_cache_bytes, 0, "compaction filled the cache");
    assert_eq!(db.iter().expect("iter").count(), 2_000);
    assert!(db.stats().block_cache_bytes > 0, "a scan cached nothing");
}

#[test]
fn tables_are_read_without_a_mapping_unless_asked() {
    for mapped in [false, true] {
        let dir = tempdir();
        // The default, then mapped on request.
        let options = if mapped {
            Options::default().mmap_reads(true)
        } else {
            Options::default()
        };
        let db = Db::open(dir.path(), options).expect("open");
        for i in 0..500 {
            db.put(format!("k{i:04}"), "v").expect("put");
        }
        db.flush().expect("flush");
        assert_eq!(db.get("k0007").expect("get").as_deref(), Some(&b"v"[..]));
        assert_eq!(db.iter().expect("iter").count(), 500);
        let held = common::held_tables(dir.path());
        assert_eq!(held.len(), 1, "mapped {mapped}: {held:?}");
        // A mapping counts every page read in the resident set; a read file only what the
        // cache keeps.
        let maps = common::mapped_tables(dir.path());
        assert_eq!(maps.len(), usize::from(mapped), "mapped {mapped}: {maps:?}");
    }
}

#[test]
fn a_block_size_past_the_bound_is_an_invalid_argument() {
    let dir = tempdir();
    for size in [0, cairn_sstable::MAX_BLOCK_SIZE + 1] {
        let options = Options::default()
            .table_options(cairn_sstable::TableOptions::default().block_size(size));
        let opened = Db::open(dir.path(), options);
        assert!(
            matches!(opened, Err(Error::InvalidArgument(_))),
            "block size {size}: {opened:?}"
        );
    }
}

/// Appends a log record (the engine's batch encoding, `engine/MANIFEST.md`) putting `key` at
/// `first_seqno` to the newest log of `dir`.
fn append_record(dir: &std::path::Path, first_seqno: u64, key: &[u8]) {
    let log = std::fs::read_dir(dir)
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .max()
        .expect("a log");
    let mut record = Vec::new();
    record.extend_from_slice(&first_seqno.to_le_bytes());
    record.extend_from_slice(&1u64.to_le_bytes());
    record.push(1); // one op
    record.extend_from_slice(&[1, 0]); // Put, default family
    record.push(u8::try_from(key.len()).expect("short key"));
    record.extend_from_slice(key);
    record.extend_from_slice(&[1, b'v']);
    let fs = cairn_fs::RealFs::new();
    let file = cairn_fs::FileSystem::open_append(&fs, &log).expect("open log");
    let mut writer = cairn_wal::LogWriter::new(file);
    writer.add_record(&record).expect("append");
    writer.sync().expect("sync");
}

#[test]
fn a_log_record_with_a_sequence_number_past_56_bits_is_corruption() {
    let dir = tempdir();
    let db = Db::open(dir.path(), Options::default()).expect("open");
    db.put("a", "1").expect("put");
    drop(db);
    append_record(dir.path(), 1 << 56, b"b");
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, reason, .. }) => {
            assert!(
                file.extension().is_some_and(|e| e == "log"),
                "{}",
                file.display()
            );
            assert!(reason.contains("sequence"), "{reason}");
        }
        other => panic!("expected Corruption, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_file_number_at_the_top_of_the_range_is_refused_not_overflowed() {
    let dir = closed_database();
    let name = format!("{}.log", u64::MAX);
    std::fs::File::create(dir.path().join(&name))
        .and_then(|mut f| f.write_all(b""))
        .expect("create");
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, .. }) => {
            assert!(file.ends_with(&name), "{}", file.display());
        }
        other => panic!(
            "expected Corruption naming {name}, got {:?}",
            other.map(|_| ())
        ),
    }
}

#[test]
fn a_manifest_edit_with_a_column_family_id_at_the_top_of_the_range_is_corruption() {
    let dir = closed_database();
    let current = std::fs::read_to_string(dir.path().join("CURRENT")).expect("CURRENT");
    let manifest = dir.path().join(current.trim());
    // An edit adding column family u32::MAX (`engine/MANIFEST.md`: tag 5, id, name, ttl + 1,
    // max_versions, grace).
    let mut edit = vec![5, 0xff, 0xff, 0xff, 0xff, 0x0f, 1, b'x', 0, 1, 0];
    edit.shrink_to_fit();
    let fs = cairn_fs::RealFs::new();
    let file = cairn_fs::FileSystem::open_append(&fs, &manifest).expect("open MANIFEST");
    let mut writer = cairn_wal::LogWriter::new(file);
    writer.add_record(&edit).expect("append");
    writer.sync().expect("sync");
    match Db::open(dir.path(), Options::default()) {
        Err(Error::Corruption { file, reason, .. }) => {
            assert_eq!(file, manifest, "{reason}");
        }
        other => panic!(
            "expected Corruption naming the MANIFEST, got {:?}",
            other.map(|_| ())
        ),
    }
}
