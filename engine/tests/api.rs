//! The public API's contract: bad input is a clear error that writes nothing; the directory
//! lock; column families; transactions; TTL and version limits on reads.

use std::sync::Arc;
use std::time::Duration;

use cairn::{CfOptions, Db, Error, ManualClock, Options, WriteBatch, WriteOptions};

fn open(dir: &tempfile::TempDir) -> cairn::Result<Db> {
    Db::open(dir.path(), Options::default())
}

fn tempdir() -> cairn::Result<tempfile::TempDir> {
    tempfile::tempdir().map_err(|e| Error::Io(e.into()))
}

#[test]
fn empty_keys_and_values_work() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    db.put("", "")?;
    assert_eq!(db.get("")?.as_deref(), Some(&b""[..]));
    db.flush()?;
    assert_eq!(db.iter()?.count(), 1);
    db.delete("")?;
    assert_eq!(db.get("")?, None);
    Ok(())
}

#[test]
fn oversized_keys_and_values_are_rejected_and_nothing_is_written() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    let big_key = vec![b'k'; cairn::MAX_KEY_LEN + 1];
    assert!(matches!(
        db.put(&big_key, "v"),
        Err(Error::InvalidArgument(_))
    ));
    let mut batch = WriteBatch::new();
    batch.put("fine", "v");
    batch.put(&big_key, "v");
    assert!(matches!(db.write(batch), Err(Error::InvalidArgument(_))));
    assert_eq!(
        db.get("fine")?,
        None,
        "a rejected batch wrote part of itself"
    );
    assert_eq!(db.latest_seqno(), 0);
    db.put(vec![b'k'; cairn::MAX_KEY_LEN], "at the limit")?;
    Ok(())
}

#[test]
fn backward_range_is_invalid_and_writes_nothing() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    let mut batch = WriteBatch::new();
    batch.put("a", "1");
    batch.delete_range("m", "c");
    assert!(matches!(db.write(batch), Err(Error::InvalidArgument(_))));
    assert_eq!(db.get("a")?, None);
    Ok(())
}

#[test]
fn unknown_and_dropped_column_families_are_errors() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    assert!(matches!(
        db.column_family("nope"),
        Err(Error::ColumnFamilyNotFound(_))
    ));
    let cf = db.create_column_family("users", CfOptions::default())?;
    cf.put("k", "v")?;
    db.drop_column_family("users")?;
    assert!(matches!(
        cf.put("k", "v"),
        Err(Error::ColumnFamilyNotFound(_))
    ));
    assert!(matches!(cf.get("k"), Err(Error::ColumnFamilyNotFound(_))));
    assert!(matches!(
        db.drop_column_family("default"),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        db.create_column_family("", CfOptions::default()),
        Err(Error::InvalidArgument(_))
    ));
    Ok(())
}

#[test]
fn column_families_are_separate_and_persist_across_reopen() -> cairn::Result<()> {
    let dir = tempdir()?;
    {
        let db = open(&dir)?;
        let users = db.create_column_family("users", CfOptions::default().max_versions(3))?;
        assert!(matches!(
            db.create_column_family("users", CfOptions::default()),
            Err(Error::InvalidArgument(_))
        ));
        users.put("k", "in users")?;
        db.put("k", "in default")?;
        let mut batch = WriteBatch::new();
        batch.put_cf(&users, "both", "u");
        batch.put("both", "d");
        db.write(batch)?;
        db.flush()?;
        users.put("unflushed", "log only")?;
        db.close()?;
    }
    let db = open(&dir)?;
    assert_eq!(
        db.list_column_families(),
        vec!["default".to_string(), "users".to_string()]
    );
    let users = db.column_family("users")?;
    assert_eq!(users.get("k")?.as_deref(), Some(&b"in users"[..]));
    assert_eq!(db.get("k")?.as_deref(), Some(&b"in default"[..]));
    assert_eq!(users.get("both")?.as_deref(), Some(&b"u"[..]));
    assert_eq!(users.get("unflushed")?.as_deref(), Some(&b"log only"[..]));
    assert_eq!(db.get("unflushed")?, None);
    Ok(())
}

#[test]
fn a_second_open_of_the_same_directory_fails_until_the_first_closes() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    let second = open(&dir);
    assert!(
        matches!(&second, Err(Error::Io(cairn_fs::Error::Locked { .. }))),
        "second open: {second:?}"
    );
    db.close()?;
    open(&dir)?;
    Ok(())
}

#[test]
fn missing_directory_without_create_if_missing_is_an_error_and_creates_nothing() -> cairn::Result<()>
{
    let dir = tempdir()?;
    let path = dir.path().join("absent");
    let result = Db::open(&path, Options::default().create_if_missing(false));
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{result:?}"
    );
    assert!(!path.exists(), "a failed open created the directory");
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).map_err(|e| Error::Io(e.into()))?;
    let result = Db::open(&empty, Options::default().create_if_missing(false));
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "{result:?}"
    );
    let leftovers = std::fs::read_dir(&empty)
        .map_err(|e| Error::Io(e.into()))?
        .count();
    assert_eq!(leftovers, 0, "a refused open left files behind");
    Ok(())
}

#[test]
fn a_directory_that_is_not_a_cairn_database_is_refused_untouched() -> cairn::Result<()> {
    let dir = tempdir()?;
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "mine").map_err(|e| Error::Io(e.into()))?;
    let result = Db::open(dir.path(), Options::default());
    let Err(Error::InvalidArgument(why)) = result else {
        panic!("opened a foreign directory: {result:?}");
    };
    assert!(why.contains("not a Cairn database"), "{why}");
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .map_err(|e| Error::Io(e.into()))?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect();
    assert_eq!(
        names,
        vec![std::ffi::OsString::from("notes.txt")],
        "the open wrote files"
    );
    Ok(())
}

#[test]
fn a_database_that_lost_its_current_file_is_corruption_and_never_replaced() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    db.put("kept", "value")?;
    db.flush()?;
    db.put("in the log", "value")?;
    db.close()?;
    std::fs::remove_file(dir.path().join("CURRENT")).map_err(|e| Error::Io(e.into()))?;
    let listing = |dir: &tempfile::TempDir| -> Vec<(std::ffi::OsString, u64)> {
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| (e.file_name(), e.metadata().map_or(0, |m| m.len())))
            .collect();
        names.sort();
        names
    };
    let before = listing(&dir);
    // create_if_missing is the default: it must not take the directory for an empty one.
    let result = Db::open(dir.path(), Options::default());
    let Err(Error::Corruption { file, reason, .. }) = result else {
        panic!("a database without CURRENT was opened: {result:?}");
    };
    assert!(file.ends_with("CURRENT"), "{file:?}");
    assert!(reason.contains("damaged"), "{reason}");
    assert_eq!(
        listing(&dir),
        before,
        "the refused open changed the directory"
    );
    Ok(())
}

#[test]
fn a_damaged_current_file_is_corruption() -> cairn::Result<()> {
    let dir = tempdir()?;
    open(&dir)?.close()?;
    std::fs::write(dir.path().join("CURRENT"), "garbage\n").map_err(|e| Error::Io(e.into()))?;
    assert!(matches!(open(&dir), Err(Error::Corruption { .. })));
    Ok(())
}

#[test]
fn error_if_exists_refuses_an_existing_database() -> cairn::Result<()> {
    let dir = tempdir()?;
    open(&dir)?.close()?;
    let result = Db::open(dir.path(), Options::default().error_if_exists(true));
    assert!(matches!(result, Err(Error::InvalidArgument(_))));
    Ok(())
}

#[test]
fn batches_get_consecutive_sequence_numbers() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    let mut batch = WriteBatch::new();
    batch.put("a", "1");
    batch.put("b", "2");
    batch.delete("c");
    let last = db.write_opt(batch, &WriteOptions { sync: true })?;
    assert_eq!(last, 3);
    db.put("d", "4")?;
    assert_eq!(db.latest_seqno(), 4);
    Ok(())
}

#[test]
fn transaction_commits_when_nothing_it_read_changed() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    db.put("x", "1")?;
    let mut tx = db.transaction();
    assert_eq!(tx.get("x")?.as_deref(), Some(&b"1"[..]));
    db.put("unrelated", "w")?;
    tx.put("x", "2");
    tx.delete("y");
    assert_eq!(
        tx.get("x")?.as_deref(),
        Some(&b"2"[..]),
        "a transaction reads its own writes"
    );
    tx.commit()?;
    assert_eq!(db.get("x")?.as_deref(), Some(&b"2"[..]));
    Ok(())
}

#[test]
fn transaction_conflicts_when_a_key_it_read_was_written_or_range_deleted() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    db.put("x", "1")?;
    let mut tx = db.transaction();
    tx.get("x")?;
    tx.put("y", "from tx");
    db.delete_range("a", "z")?;
    assert!(matches!(tx.commit(), Err(Error::Conflict { .. })));
    assert_eq!(db.get("y")?, None, "a conflicting transaction wrote");
    // A read of a key absent at the snapshot conflicts with a later put of it too.
    let mut tx = db.transaction();
    assert_eq!(tx.get("new")?, None);
    db.put("new", "v")?;
    tx.put("other", "v");
    assert!(matches!(tx.commit(), Err(Error::Conflict { .. })));
    Ok(())
}

#[test]
fn cell_ttl_hides_a_value_once_it_expires_and_newer_expired_puts_hide_older_ones()
-> cairn::Result<()> {
    let dir = tempdir()?;
    let clock = Arc::new(ManualClock::new(1_000_000));
    let db = Db::open(dir.path(), Options::default().clock(clock.clone()))?;
    db.put("k", "old")?;
    db.put_with_ttl("k", "new", Duration::from_secs(10))?;
    clock.advance(Duration::from_millis(9_999));
    assert_eq!(
        db.get("k")?.as_deref(),
        Some(&b"new"[..]),
        "alive 1 ms before expiry"
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        db.get("k")?,
        None,
        "with max_versions 1 an expired put does not reveal the older one"
    );
    assert_eq!(db.iter()?.count(), 0);
    db.flush()?;
    assert_eq!(db.get("k")?, None);
    db.put_with_ttl("z", "zero", Duration::ZERO)?;
    assert_eq!(db.get("z")?, None, "a zero TTL is expired at once");
    Ok(())
}

#[test]
fn column_family_ttl_and_max_versions_follow_the_hbase_rules() -> cairn::Result<()> {
    let dir = tempdir()?;
    let clock = Arc::new(ManualClock::new(0));
    let db = Db::open(dir.path(), Options::default().clock(clock.clone()))?;
    let cf = db.create_column_family(
        "h",
        CfOptions::default()
            .max_versions(3)
            .ttl(Duration::from_secs(100)),
    )?;
    cf.put("k", "v1")?;
    clock.advance(Duration::from_secs(1));
    cf.put("k", "v2")?;
    clock.advance(Duration::from_secs(1));
    cf.put_with_ttl("k", "v3", Duration::from_secs(5))?;
    let versions: Vec<_> = cf
        .get_versions("k", 10)?
        .into_iter()
        .map(|v| v.value)
        .collect();
    assert_eq!(versions, vec!["v3", "v2", "v1"]);
    clock.advance(Duration::from_secs(5));
    assert_eq!(
        cf.get("k")?.as_deref(),
        Some(&b"v2"[..]),
        "an expired newest version reveals the next"
    );
    assert_eq!(cf.get_versions("k", 1)?.len(), 1);
    cf.put("k", "v4")?;
    cf.put("k", "v5")?;
    cf.put("k", "v6")?;
    let versions: Vec<_> = cf
        .get_versions("k", 10)?
        .into_iter()
        .map(|v| v.value)
        .collect();
    assert_eq!(
        versions,
        vec!["v6", "v5", "v4"],
        "only the three newest are candidates"
    );
    clock.advance(Duration::from_secs(200));
    assert_eq!(cf.get("k")?, None, "the family TTL expires every version");
    cf.delete("k")?;
    clock.set(0);
    assert_eq!(cf.get("k")?, None, "a tombstone ends the walk");
    Ok(())
}

#[test]
fn stats_count_levels_tombstones_and_snapshots() -> cairn::Result<()> {
    let dir = tempdir()?;
    let db = open(&dir)?;
    for i in 0..10 {
        db.put(format!("k{i}"), "v")?;
    }
    db.delete("k1")?;
    db.delete_range("k5", "k7")?;
    let snap = db.snapshot();
    let stats = db.stats();
    assert_eq!(stats.tombstones_pending, 2);
    assert_eq!(
        (stats.snapshots, stats.oldest_snapshot_seqno),
        (1, Some(snap.seqno()))
    );
    db.flush()?;
    let stats = db.stats();
    let l0 = stats.levels.first().cloned().unwrap_or_default();
    assert_eq!(
        (
            l0.files,
            l0.entries,
            l0.point_tombstones,
            l0.range_tombstones
        ),
        (1, 11, 1, 1)
    );
    assert_eq!(stats.tombstones_pending, 2);
    drop(snap);
    assert_eq!(db.stats().snapshots, 0);
    Ok(())
}

/// A column family handle names a family of one open database: another database may hold a
/// family with the same id, and writing or reading it there through the handle is a mistake.
#[test]
fn a_family_of_another_database_is_refused_by_batches_transactions_and_snapshots()
-> cairn::Result<()> {
    let (dir_a, dir_b) = (tempdir()?, tempdir()?);
    let a = Db::open(dir_a.path(), Options::default())?;
    let b = Db::open(dir_b.path(), Options::default())?;
    let cf_a = a.create_column_family("events", cairn::CfOptions::default())?;
    let cf_b = b.create_column_family("events", cairn::CfOptions::default())?;
    let invalid = |r: cairn::Result<cairn::SeqNo>| matches!(r, Err(Error::InvalidArgument(_)));

    let mut batch = WriteBatch::new();
    batch.put_cf(&cf_b, "k", "v");
    assert!(invalid(a.write(batch)), "a batch naming b's family");
    let mut mixed = WriteBatch::new();
    mixed.put_cf(&cf_a, "k", "v");
    mixed.put_cf(&cf_b, "k", "v");
    assert!(
        invalid(b.write(mixed.clone())),
        "a batch naming families of both"
    );
    mixed.clear();
    mixed.put("k", "v");
    assert!(b.write(mixed).is_ok(), "a cleared batch names no family");
    b.delete("k")?;

    let mut tx = a.transaction();
    assert!(matches!(
        tx.get_cf(&cf_b, "k"),
        Err(Error::InvalidArgument(_))
    ));
    tx.put_cf(&cf_b, "k", "v");
    assert_eq!(
        tx.get_cf(&cf_a, "k")?,
        None,
        "a's family does not see a write aimed at b's"
    );
    assert!(invalid(tx.commit()), "a transaction writing b's family");
    cf_a.put("k", "a's")?;
    let mut tx = a.transaction();
    tx.delete_cf(&cf_b, "k");
    assert_eq!(
        tx.get_cf(&cf_a, "k")?.as_deref(),
        Some(&b"a's"[..]),
        "nor a delete aimed at b's"
    );
    assert!(invalid(tx.commit()), "a transaction deleting in b's family");
    cf_a.delete("k")?;
    assert!(matches!(
        a.snapshot().get_cf(&cf_b, "k"),
        Err(Error::InvalidArgument(_))
    ));

    assert_eq!(cf_a.get("k")?, None, "nothing was written to a");
    assert_eq!(cf_b.get("k")?, None, "nor to b");
    let mut own = WriteBatch::new();
    own.put_cf(&cf_a, "k", "v");
    a.write(own)?;
    assert_eq!(cf_a.get("k")?.as_deref(), Some(&b"v"[..]));
    Ok(())
}

#[test]
fn tables_are_compressed_per_level_and_read_back_whatever_the_codec() {
    use cairn::Compression;
    let fill = |per_level: Compression, bottommost: Compression| {
        let dir = tempdir().expect("tempdir");
        let db = Db::open(
            dir.path(),
            Options::default()
                .compression_per_level([per_level])
                .bottommost_compression(bottommost),
        )
        .expect("open");
        for i in 0..4000 {
            db.put(
                format!("key{i:05}"),
                format!("value {} {}", i % 17, "x".repeat(60)),
            )
            .expect("put");
        }
        db.flush().expect("flush");
        let level0 = db.stats().levels.first().map_or(0, |l| l.bytes);
        db.compact_range::<&str>(..).expect("compact");
        let stats = db.stats();
        let last = stats.levels.last().map_or(0, |l| l.bytes);
        assert_eq!(db.iter().expect("iter").count(), 4000);
        assert_eq!(
            db.get("key01234").expect("get").as_deref(),
            Some(format!("value {} {}", 1234 % 17, "x".repeat(60)).as_bytes())
        );
        (level0, last)
    };
    let (raw0, raw_last) = fill(Compression::None, Compression::None);
    let (lz4_0, zstd_last) = fill(Compression::Lz4, Compression::Zstd(3));
    let (zstd0, lz4_last) = fill(Compression::Zstd(3), Compression::Lz4);
    assert!(
        raw0 > lz4_0 && lz4_0 > zstd0,
        "level 0: raw {raw0}, lz4 {lz4_0}, zstd {zstd0}"
    );
    assert!(
        raw_last > lz4_last && lz4_last > zstd_last,
        "last level: raw {raw_last}, lz4 {lz4_last}, zstd {zstd_last}"
    );
}

#[test]
fn a_codec_in_the_table_options_is_refused_not_ignored() {
    let dir = tempdir().expect("tempdir");
    let refused = Db::open(
        dir.path(),
        Options::default().table_options(
            cairn_sstable::TableOptions::default().compression(cairn::Compression::None),
        ),
    );
    assert!(
        matches!(&refused, Err(Error::InvalidArgument(why)) if why.contains("compression_per_level")),
        "{refused:?}"
    );
    let default_codec_named = Db::open(
        dir.path(),
        Options::default().table_options(
            cairn_sstable::TableOptions::default().compression(cairn::Compression::Zstd(3)),
        ),
    );
    assert!(
        matches!(&default_codec_named, Err(Error::InvalidArgument(_))),
        "naming the default codec is a choice too, and would be ignored: {default_codec_named:?}"
    );
    let fine = Db::open(
        dir.path(),
        Options::default()
            .table_options(cairn_sstable::TableOptions::default().block_size(8192))
            .compression(cairn::Compression::None),
    );
    assert!(fine.is_ok(), "{fine:?}");
}
