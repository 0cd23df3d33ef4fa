//! The garbage-collection rules at work in the engine, each from both sides with a
//! `ManualClock`: kept while the rule says keep, gone once it says drop.

use std::sync::Arc;
use std::time::Duration;

use cairn::{CfOptions, Db, Kind, Location, ManualClock, Options, TombstoneReason};

const START: u64 = 1_700_000_000_000;

fn open(dir: &tempfile::TempDir, clock: &Arc<ManualClock>, options: Options) -> Db {
    Db::open(dir.path(), options.clock(clock.clone())).expect("open")
}

/// The kinds of the versions of `key` in the tables the version reads.
fn kinds(db: &Db, key: &str) -> Vec<Kind> {
    db.audit_key(key)
        .expect("audit")
        .into_iter()
        .filter(|t| matches!(t.location, Location::Table { .. }))
        .filter_map(|t| t.kind)
        .collect()
}

/// Every version and tombstone of `key` left anywhere once background work settles (a
/// compaction's inputs are deleted after it installs): memtables, logs and tables of every kind.
/// (The key's bytes as a table bound in a MANIFEST are no version; they go when it rolls over.)
fn versions_left(db: &Db, key: &str) -> Vec<cairn::KeyTrace> {
    db.wait_for_background_work().expect("settle");
    db.audit_key(key)
        .expect("audit")
        .into_iter()
        .filter(|t| t.kind.is_some())
        .collect()
}

fn on_disk(db: &Db, key: &str) -> usize {
    kinds(db, key).len()
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

#[test]
fn tombstone_survives_while_an_older_snapshot_lives_and_goes_when_it_is_released() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    db.put("k", "v").expect("put");
    let snap = db.snapshot();
    db.delete("k").expect("delete");
    db.compact_range::<&str>(..).expect("compact");
    assert_eq!(
        on_disk(&db, "k"),
        2,
        "the snapshot still reads the put, and the tombstone hides it"
    );
    assert_eq!(snap.get("k").expect("get").as_deref(), Some(&b"v"[..]));
    let why = db.explain_tombstones::<&str>(..).expect("explain");
    assert_eq!(why.len(), 1);
    assert_eq!(
        why.first().map(|w| w.reason),
        Some(TombstoneReason::PinnedBySnapshot {
            seqno: snap.seqno()
        })
    );
    drop(snap);
    // Releasing the snapshot is enough: background compaction finds the droppable tombstone.
    db.wait_for_background_work().expect("settle");
    assert_eq!(
        on_disk(&db, "k"),
        0,
        "tombstone and put should be gone once nothing pins them"
    );
    assert!(versions_left(&db, "k").is_empty());
    assert!(db.stats().dropped.obsolete_tombstone >= 1);
}

#[test]
fn tombstone_is_kept_while_an_older_version_lies_below_and_dropped_at_the_bottom() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    // Uncompressed, so 300 KB at the bottom puts the base level above it.
    let options = Options::default()
        .level_base_bytes(4096)
        .level0_triggers(1, 20, 36)
        .target_file_size(64 * 1024)
        .compression(cairn::Compression::None);
    let db = open(&dir, &clock, options);
    let value = vec![b'x'; 1000];
    for i in 0..300 {
        db.put(format!("key{i:04}"), &value).expect("put");
    }
    db.compact_range::<&str>(..).expect("compact to the bottom");
    let last = db.stats().levels.len() - 1;
    assert!(db.stats().levels.get(last).is_some_and(|l| l.files > 0));
    db.delete("key0100").expect("delete");
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    let traces = db.audit_key("key0100").expect("audit");
    let tombstone_level = traces
        .iter()
        .find(|t| t.kind == Some(Kind::Delete))
        .and_then(|t| match t.location {
            Location::Table { level, .. } => Some(level),
            _ => None,
        });
    assert!(
        tombstone_level.is_some_and(|l| l < last),
        "the tombstone should sit above the bottom: {traces:?}"
    );
    let why = db
        .explain_tombstones("key0100"..="key0100")
        .expect("explain");
    assert_eq!(
        why.first().map(|w| w.reason),
        Some(TombstoneReason::OlderDataBelow { level: last }),
        "{why:?}"
    );
    assert_eq!(db.get("key0100").expect("get"), None);

    db.compact_range::<&str>(..).expect("compact to the bottom");
    assert!(
        versions_left(&db, "key0100").is_empty(),
        "at the bottom both go"
    );
    assert_eq!(db.get("key0099").expect("get").map(|v| v.len()), Some(1000));
}

#[test]
fn tombstone_is_kept_one_millisecond_before_its_grace_ends_and_dropped_after() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    let cf = db
        .create_column_family(
            "graced",
            CfOptions::default().tombstone_grace(Duration::from_secs(60)),
        )
        .expect("cf");
    cf.put("k", "v").expect("put");
    cf.delete("k").expect("delete");
    let deleted_at = clock.now_ms();
    clock.advance(Duration::from_millis(59_999));
    cf.compact_range::<&str>(..).expect("compact");
    let left: Vec<_> = cf
        .audit_key("k")
        .expect("audit")
        .into_iter()
        .filter_map(|t| t.kind)
        .collect();
    assert_eq!(
        left,
        vec![cairn::Kind::Delete],
        "the tombstone stays in its grace period; the put it shadows goes"
    );
    let why = cf.explain_tombstones::<&str>(..).expect("explain");
    assert_eq!(
        why.first().map(|w| w.reason),
        Some(TombstoneReason::GraceUntil {
            time: deleted_at + 60_000
        })
    );
    clock.advance(Duration::from_millis(1));
    cf.compact_range::<&str>(..).expect("compact");
    assert!(
        cf.audit_key("k")
            .expect("audit")
            .iter()
            .all(|t| t.kind.is_none()),
        "tombstone gone once its grace is over"
    );
}

#[test]
fn single_delete_and_its_put_vanish_together_without_a_snapshot_between() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    db.put("k", "v").expect("put");
    db.flush().expect("flush");
    db.single_delete("k").expect("single delete");
    db.compact_range::<&str>(..).expect("compact");
    assert!(versions_left(&db, "k").is_empty());
    assert_eq!(db.stats().dropped.single_delete, 2);
    assert_eq!(db.stats().single_delete_misuse, 0);
}

#[test]
fn single_delete_and_its_put_stay_while_a_snapshot_lies_between() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    db.put("k", "v").expect("put");
    let snap = db.snapshot();
    db.single_delete("k").expect("single delete");
    db.compact_range::<&str>(..).expect("compact");
    assert_eq!(on_disk(&db, "k"), 2);
    assert_eq!(snap.get("k").expect("get").as_deref(), Some(&b"v"[..]));
    assert_eq!(db.get("k").expect("get"), None);
    drop(snap);
    db.compact_range::<&str>(..).expect("compact");
    let left = versions_left(&db, "k");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn single_delete_misuse_is_counted_and_nothing_comes_back() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    db.put("k", "first").expect("put");
    db.flush().expect("flush");
    db.put("k", "second").expect("put");
    db.single_delete("k").expect("single delete");
    db.compact_range::<&str>(..).expect("compact");
    assert_eq!(
        db.get("k").expect("get"),
        None,
        "misuse resurrected a value"
    );
    assert_eq!(db.stats().single_delete_misuse, 1);
}

#[test]
fn range_tombstones_over_several_levels_respect_the_snapshots_between() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let options = Options::default()
        .level_base_bytes(4096)
        .target_file_size(16 * 1024);
    let db = open(&dir, &clock, options);
    let keys: Vec<String> = (0..200).map(|i| format!("k{i:03}")).collect();
    for k in &keys {
        db.put(k, "v1").expect("put");
    }
    db.compact_range::<&str>(..).expect("compact");
    let before = db.snapshot();
    db.delete_range("k020", "k120").expect("delete range");
    db.put("k050", "v2").expect("put");
    db.flush().expect("flush");
    let middle = db.snapshot();
    db.delete_range("k100", "k180").expect("delete range");
    db.flush().expect("flush");
    db.compact_range::<&str>(..).expect("compact");

    let count = |it: cairn::DbIterator| it.count();
    assert_eq!(count(before.iter().expect("iter")), 200);
    assert_eq!(count(middle.iter().expect("iter")), 200 - 100 + 1);
    assert_eq!(count(db.iter().expect("iter")), 200 - 160 + 1);
    assert_eq!(middle.get("k110").expect("get"), None);
    assert_eq!(
        before.get("k110").expect("get").as_deref(),
        Some(&b"v1"[..])
    );
    assert_eq!(db.get("k050").expect("get").as_deref(), Some(&b"v2"[..]));
    assert!(
        on_disk(&db, "k030") >= 1,
        "a pinned version must stay on disk"
    );

    drop(before);
    drop(middle);
    db.compact_range::<&str>(..).expect("compact");
    for k in ["k030", "k110", "k170"] {
        assert!(versions_left(&db, k).is_empty(), "{k} still on disk");
    }
    assert_eq!(count(db.iter().expect("iter")), 41);
    assert_eq!(
        db.stats()
            .levels
            .iter()
            .map(|l| l.range_tombstones)
            .sum::<u64>(),
        0
    );
}

#[test]
fn expired_values_are_reclaimed_without_resurrecting_older_ones() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    db.put("k", "old").expect("put");
    db.flush().expect("flush");
    db.put_with_ttl("k", "new", Duration::from_secs(5))
        .expect("put");
    db.put_with_ttl("gone", "soon", Duration::from_secs(5))
        .expect("put");
    clock.advance(Duration::from_secs(5));
    db.compact_range::<&str>(..).expect("compact");
    assert_eq!(db.get("k").expect("get"), None);
    assert!(versions_left(&db, "gone").is_empty());
    assert!(versions_left(&db, "k").is_empty());
    assert!(db.stats().dropped.expired >= 2);
}

#[derive(Debug)]
struct DropTemporary;

impl cairn::CompactionFilter for DropTemporary {
    fn filter(&self, _cf: &str, key: &[u8], _value: &[u8]) -> cairn::Decision {
        if key.starts_with(b"tmp:") {
            cairn::Decision::Remove
        } else {
            cairn::Decision::Keep
        }
    }
}

#[test]
fn compaction_filter_removes_values_but_never_what_a_snapshot_reads() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(
        &dir,
        &clock,
        Options::default().compaction_filter(Arc::new(DropTemporary)),
    );
    db.put("tmp:a", "1").expect("put");
    db.put("keep", "2").expect("put");
    let snap = db.snapshot();
    db.compact_range::<&str>(..).expect("compact");
    assert_eq!(
        db.get("tmp:a").expect("get").as_deref(),
        Some(&b"1"[..]),
        "a snapshot reads it: not filtered"
    );
    drop(snap);
    db.compact_range::<&str>(..).expect("compact");
    assert_eq!(db.get("tmp:a").expect("get"), None);
    assert_eq!(db.get("keep").expect("get").as_deref(), Some(&b"2"[..]));
    assert_eq!(db.stats().dropped.filter, 1);
}

/// Lets `total` pass on `clock` in `steps` even steps, letting background work settle after
/// each, as time passing on a running database would.
fn let_time_pass(db: &Db, clock: &ManualClock, total: Duration, steps: u32) {
    for _ in 0..steps {
        clock.advance(total / steps);
        db.wait_for_background_work().expect("settle");
    }
}

/// The positions in `bytes` of `prefix` followed by eight digits whose number is even: a
/// deleted key's (or value's) bytes.
fn deleted_marks(bytes: &[u8], prefix: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for (at, window) in bytes.windows(prefix.len() + 8).enumerate() {
        let Some(digits) = window.strip_prefix(prefix) else {
            continue;
        };
        let number = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<u32>().ok());
        if number.is_some_and(|n| n % 2 == 0) {
            found.push(format!("{} at {at}", String::from_utf8_lossy(window)));
        }
    }
    found
}

#[test]
fn delete_persistence_deadline_erases_every_trace_of_deleted_keys() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let grace = Duration::from_secs(60);
    let deadline = Duration::from_secs(3600);
    // Uncompressed, so the raw bytes of every file can be searched below.
    let options = Options::default()
        .delete_persistence_deadline(deadline)
        .memtable_size(4 << 20)
        .compression(cairn::Compression::None);
    let db = open(&dir, &clock, options);
    let cf = db
        .create_column_family("t", CfOptions::default().tombstone_grace(grace))
        .expect("cf");
    let n = 200_000u32;
    let mut batch = cairn::WriteBatch::new();
    for i in 0..n {
        batch.put_cf(&cf, format!("key{i:08}"), format!("value{i:08}"));
        if batch.len() == 10_000 {
            db.write(std::mem::take(&mut batch)).expect("write");
        }
    }
    db.flush().expect("flush");
    for i in (0..n).step_by(2) {
        batch.delete_cf(&cf, format!("key{i:08}"));
        if batch.len() == 10_000 {
            db.write(std::mem::take(&mut batch)).expect("write");
        }
    }
    let_time_pass(&db, &clock, grace + deadline + Duration::from_secs(8), 16);
    for i in (0..n).step_by(997) {
        let key = format!("key{i:08}");
        let traces = cf.audit_key(&key).expect("audit");
        if i % 2 == 0 {
            assert!(traces.is_empty(), "{key} still has traces: {traces:?}");
        } else {
            assert_eq!(
                cf.get(&key).expect("get").as_deref(),
                Some(format!("value{i:08}").as_bytes())
            );
        }
    }
    // A raw decode of every table file finds no deleted key either ...
    let fs = cairn_fs::RealFs::new();
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "sst") {
            let table = cairn_sstable::Table::open(&fs, &path, 0, None).expect("open table");
            let mut iter = table.iter();
            cairn_sstable::InternalIterator::seek_to_first(&mut iter).expect("seek");
            while cairn_sstable::InternalIterator::valid(&iter) {
                let key = cairn_sstable::InternalIterator::parsed_key(&iter).expect("key");
                let index: u32 = std::str::from_utf8(key.user_key.get(3..).unwrap_or_default())
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(1);
                assert!(
                    index % 2 == 1,
                    "{} in {} after the deadline",
                    String::from_utf8_lossy(key.user_key),
                    path.display()
                );
                cairn_sstable::InternalIterator::next(&mut iter).expect("next");
            }
            assert!(table.range_tombstones().is_empty());
        }
    }
    // ... and the raw bytes of every file — MANIFEST, logs and tables — hold no deleted key or
    // value. (Tables share key prefixes within a block, so a key shows whole only at restart
    // points; its value, stored whole, shows always.)
    for entry in std::fs::read_dir(dir.path()).expect("list") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            continue;
        }
        let bytes = std::fs::read(&path).expect("read");
        for prefix in [&b"key"[..], &b"value"[..]] {
            let marks = deleted_marks(&bytes, prefix);
            assert!(
                marks.is_empty(),
                "{} holds deleted bytes after the deadline: {:?}",
                path.display(),
                marks.iter().take(3).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn a_held_snapshot_keeps_tombstones_past_the_deadline_and_explain_names_it() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let deadline = Duration::from_secs(3600);
    let db = open(
        &dir,
        &clock,
        Options::default().delete_persistence_deadline(deadline),
    );
    for i in 0..1000 {
        db.put(format!("key{i:04}"), "v").expect("put");
    }
    db.flush().expect("flush");
    let snap = db.snapshot();
    for i in (0..1000).step_by(2) {
        db.delete(format!("key{i:04}")).expect("delete");
    }
    clock.advance(deadline * 2);
    db.wait_for_background_work().expect("settle");
    assert!(!db.audit_key("key0000").expect("audit").is_empty());
    let why = db.explain_tombstones::<&str>(..).expect("explain");
    assert_eq!(why.len(), 500);
    assert!(
        why.iter().all(|w| w.reason
            == TombstoneReason::PinnedBySnapshot {
                seqno: snap.seqno()
            }),
        "{:?}",
        why.first()
    );
    drop(snap);
    // From the release on, the deadline runs for the tombstones the snapshot pinned.
    let_time_pass(&db, &clock, deadline, 9);
    let traces = db.audit_key("key0000").expect("audit");
    assert!(traces.is_empty(), "{traces:?}");
    assert!(
        db.explain_tombstones::<&str>(..)
            .expect("explain")
            .is_empty()
    );
}

#[test]
fn expired_versions_above_an_older_live_one_below_do_not_reveal_it_with_several_versions() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let options = Options::default()
        .level_base_bytes(4096)
        .level0_triggers(1, 20, 36)
        .target_file_size(64 * 1024)
        .compression(cairn::Compression::None);
    let db = open(&dir, &clock, options);
    let cf = db
        .create_column_family("h", CfOptions::default().max_versions(3))
        .expect("create");
    let value = vec![b'x'; 1000];
    for i in 0..300 {
        cf.put(format!("key{i:04}"), &value).expect("put");
    }
    cf.compact_range::<&str>(..).expect("compact to the bottom");
    for v in ["a", "b", "c"] {
        cf.put_with_ttl("key0100", v, Duration::from_secs(1))
            .expect("put");
    }
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        cf.get("key0100").expect("get"),
        None,
        "the three newest candidates have expired"
    );
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    assert_eq!(
        cf.get("key0100").expect("get"),
        None,
        "a compaction above the older version must not reveal it (DESIGN §2 rule 5)"
    );
    assert_eq!(cf.get_versions("key0100", 10).expect("versions"), vec![]);
}

#[test]
fn an_emptied_expired_version_never_reads_as_a_value_after_the_ttl_is_removed() {
    // Review E1: compaction keeps an expired put over a tombstone it cannot drop yet (grace)
    // as a placeholder with its value emptied; with the family's TTL removed afterwards it must
    // stay expired, not read as "".
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    let options = CfOptions::default()
        .max_versions(3)
        .ttl(Duration::from_secs(30))
        .tombstone_grace(Duration::from_secs(3600));
    let cf = db
        .create_column_family("h", options.clone())
        .expect("create");
    cf.put("k", "a").expect("put");
    cf.delete("k").expect("delete");
    cf.put("k", "b").expect("put");
    clock.advance(Duration::from_secs(31));
    cf.compact_range::<&str>(..).expect("compact");
    assert_eq!(cf.get("k").expect("get"), None);
    let without_ttl = CfOptions::default()
        .max_versions(3)
        .tombstone_grace(Duration::from_secs(3600));
    cf.set_options(without_ttl).expect("remove the ttl");
    assert_eq!(
        cf.get("k").expect("get"),
        None,
        "compacted under the TTL: gone, never an empty value"
    );
    assert_eq!(cf.get_versions("k", 10).expect("versions"), vec![]);
    assert_eq!(cf.iter().expect("iter").count(), 0);
}

#[test]
fn an_expired_version_kept_at_the_bottom_does_not_make_ttl_rewrite_it_forever() {
    let dir = tempdir();
    let clock = Arc::new(ManualClock::new(START));
    let db = open(&dir, &clock, Options::default());
    let cf = db
        .create_column_family("h", CfOptions::default().max_versions(3))
        .expect("create");
    cf.put("k", "old").expect("put");
    cf.put_with_ttl("k", "new", Duration::from_secs(1))
        .expect("put");
    cf.compact_range::<&str>(..).expect("compact to the bottom");
    clock.advance(Duration::from_secs(2));
    cf.put("other", "v").expect("put");
    db.flush().expect("flush");
    db.wait_for_background_work().expect("settle");
    let settled = db.stats().compactions;
    std::thread::sleep(Duration::from_millis(200));
    db.wait_for_background_work().expect("settle");
    assert!(
        db.stats().compactions <= settled + 1,
        "the TTL picker keeps rewriting a table whose expired value must stay: {} → {}",
        settled,
        db.stats().compactions
    );
    cf.compact_range::<&str>(..).expect("compact");
    let versions: Vec<_> = cf
        .get_versions("k", 3)
        .expect("versions")
        .into_iter()
        .map(|v| v.value)
        .collect();
    assert_eq!(versions, vec!["old"], "the expired one still hides nothing");
    cf.delete("k").expect("delete");
    cf.compact_range::<&str>(..).expect("compact");
    assert!(versions_left(&db, "k").is_empty());
}
