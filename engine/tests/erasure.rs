//! Erasure: what outlives a deleted table keeps none of its file on disk, the MANIFEST lets go
//! of old edits, and the audit sees every file a key still lies in.

mod common;

use cairn::{Db, Location, Options};
use common::{held_tables, tempdir};

fn uncompressed() -> Options {
    Options::default().compression(cairn::Compression::None)
}

#[test]
fn values_and_cached_blocks_keep_no_deleted_table_on_disk() {
    for mapped in [false, true] {
        let dir = tempdir();
        let db = Db::open(dir.path(), uncompressed().mmap_reads(mapped)).expect("open");
        for i in 0..2000 {
            db.put(format!("k{i:05}"), format!("value-{i:05}"))
                .expect("put");
        }
        db.flush().expect("flush");
        // A value handed out, and blocks cached by reads.
        let held = db.get("k00007").expect("get").expect("present");
        assert_eq!(db.iter().expect("iter").count(), 2000);
        db.delete_range("k", "l").expect("delete");
        db.compact_range::<&str>(..).expect("compact");
        db.wait_for_background_work().expect("settle");
        assert!(
            common::tables_in(dir.path()).is_empty(),
            "every table deleted"
        );
        let deleted: Vec<_> = held_tables(dir.path())
            .into_iter()
            .filter(|(_, deleted)| *deleted)
            .collect();
        assert!(
            deleted.is_empty(),
            "mapped {mapped}: deleted tables still held (their bytes stay on disk): {deleted:?}"
        );
        assert_eq!(&held[..], b"value-00007", "the value handed out is intact");
    }
}

#[test]
fn the_manifest_rolls_over_once_it_outgrows_its_bound() {
    let dir = tempdir();
    let db = Db::open(
        dir.path(),
        Options::default()
            .max_manifest_bytes(4096)
            .level0_triggers(100, 200, 300),
    )
    .expect("open");
    for t in 0..60 {
        db.put(
            format!("key-{t:03}-with-a-long-name-to-fill-the-manifest"),
            "v",
        )
        .expect("put");
        db.flush().expect("flush");
    }
    let manifests: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("MANIFEST-"))
        .collect();
    assert_eq!(
        manifests.len(),
        1,
        "old MANIFESTs are deleted: {manifests:?}"
    );
    let current = std::fs::read_to_string(dir.path().join("CURRENT")).expect("CURRENT");
    assert_eq!(current.trim(), manifests.first().map_or("", String::as_str));
    let size = std::fs::metadata(dir.path().join(current.trim()))
        .expect("stat")
        .len();
    assert!(size < 16 * 1024, "the MANIFEST holds {size} bytes");
    assert!(
        current.trim() != "MANIFEST-000003",
        "it rolled over at least once"
    );
    drop(db);
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.iter().expect("iter").count(), 60);
}

#[test]
fn the_audit_finds_a_key_in_logs_and_manifests_and_not_once_it_is_erased() {
    let dir = tempdir();
    let db = Db::open(dir.path(), Options::default().max_manifest_bytes(4096)).expect("open");
    db.put("secret", "v").expect("put");
    let in_log = db.audit_key("secret").expect("audit");
    assert!(
        in_log
            .iter()
            .any(|t| matches!(t.location, Location::Log { .. })),
        "{in_log:?}"
    );
    db.flush().expect("flush");
    let flushed = db.audit_key("secret").expect("audit");
    assert!(
        flushed
            .iter()
            .any(|t| matches!(t.location, Location::Manifest { .. }) && t.kind.is_none()),
        "the MANIFEST records the table's bound: {flushed:?}"
    );
    assert!(
        !flushed
            .iter()
            .any(|t| matches!(t.location, Location::Log { .. })),
        "the flushed log is gone: {flushed:?}"
    );
    db.delete("secret").expect("delete");
    db.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let erased = db.audit_key("secret").expect("audit");
    assert!(
        erased
            .iter()
            .all(|t| matches!(t.location, Location::Manifest { .. })),
        "no version left, only the MANIFEST's copy of the bound: {erased:?}"
    );
    // Enough edits to outgrow the bound: the rollover drops the old records.
    for t in 0..40 {
        db.put(format!("filler-{t:03}-with-a-long-name"), "v")
            .expect("put");
        db.flush().expect("flush");
    }
    let traces = db.audit_key("secret").expect("audit");
    assert!(traces.is_empty(), "{traces:?}");
}

#[test]
fn the_audit_of_one_family_ignores_another_familys_tables() {
    let dir = tempdir();
    let db = Db::open(dir.path(), Options::default()).expect("open");
    let other = db
        .create_column_family("other", cairn::CfOptions::default())
        .expect("cf");
    other.put("k", "theirs").expect("put");
    db.flush().expect("flush");
    // A reader pins the other family's table through a compaction: it stays on disk, unread.
    let reader = other.iter().expect("iter");
    other.delete("k").expect("delete");
    other.compact_range::<&str>(..).expect("compact");
    let theirs = other.audit_key("k").expect("audit");
    assert!(
        theirs
            .iter()
            .any(|t| matches!(t.location, Location::UnreadTable { .. })),
        "{theirs:?}"
    );
    let ours = db.audit_key("k").expect("audit");
    assert!(ours.is_empty(), "the default family never held k: {ours:?}");
    drop(reader);
}
