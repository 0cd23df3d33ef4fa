//! Tables read back exactly what was written: by scan in both directions, by seek to every key
//! and between keys, and by point lookup, all checked against a sorted model.

mod common;

use bytes::Bytes;
use cairn_sstable::{
    Compression, EntryMeta, InternalIterator, Kind, RangeTombstone, SeqNo, TableOptions,
    internal_key, seek_key,
};
use common::{ModelEntry, current, floor, lower_bound, scan_backward, scan_forward, sort_model};
use proptest::prelude::*;

const BIG: usize = 64 * 1024;

fn user_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        20 => proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(0xff)], 0..5),
        1 => Just(vec![b'k'; BIG]),
        1 => Just(Vec::new()),
    ]
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        10 => proptest::collection::vec(any::<u8>(), 0..40),
        1 => Just(vec![7u8; BIG]),
        2 => Just(Vec::new()),
    ]
}

fn entry() -> impl Strategy<Value = ModelEntry> {
    (
        user_key(),
        0..50u64,
        prop_oneof![3 => Just(Kind::Put), 1 => Just(Kind::Delete), 1 => Just(Kind::SingleDelete)],
        0..1_000_000u64,
        proptest::option::of(0..10_000u64),
        value(),
    )
        .prop_map(|(key, seqno, kind, write_time, ttl, value)| {
            let (ttl, value) = if kind == Kind::Put {
                (ttl, value)
            } else {
                (None, Vec::new())
            };
            ModelEntry::new(&key, seqno, kind, EntryMeta { write_time, ttl }, &value)
        })
}

fn tombstone() -> impl Strategy<Value = RangeTombstone> {
    (user_key(), user_key(), 0..60u64, 0..1_000u64).prop_map(|(a, b, seqno, write_time)| {
        let (start, end) = if a <= b { (a, b) } else { (b, a) };
        RangeTombstone {
            start: Bytes::from(start),
            end: Bytes::from(end),
            seqno,
            write_time,
        }
    })
}

fn options() -> impl Strategy<Value = TableOptions> {
    (
        prop_oneof![Just(64usize), Just(256), Just(4096)],
        1..17usize,
        prop_oneof![
            Just(Compression::None),
            Just(Compression::Lz4),
            Just(Compression::Zstd(1)),
            Just(Compression::Zstd(3))
        ],
        prop_oneof![Just(0usize), Just(256), Just(1024)],
    )
        .prop_map(|(block, restart, level, dictionary)| {
            TableOptions::default()
                .block_size(block)
                .restart_interval(restart)
                .compression(level)
                .zstd_dictionary_bytes(dictionary)
        })
}

/// The newest entry of `key` at `snapshot` in the model.
fn model_get(model: &[ModelEntry], key: &[u8], snapshot: SeqNo) -> Option<ModelEntry> {
    model
        .get(lower_bound(model, &seek_key(key, snapshot)))
        .filter(|e| cairn_sstable::key::user_key(&e.key) == key)
        .cloned()
}

/// The covering tombstone seqno computed from the raw (unfragmented) tombstones.
fn model_covering(tombstones: &[RangeTombstone], key: &[u8], snapshot: SeqNo) -> Option<SeqNo> {
    tombstones
        .iter()
        .filter(|t| t.start.as_ref() <= key && key < t.end.as_ref() && t.seqno <= snapshot)
        .map(|t| t.seqno)
        .max()
}

fn check_table(
    entries: Vec<ModelEntry>,
    tombstones: &[RangeTombstone],
    options: TableOptions,
) -> Result<(), TestCaseError> {
    let mut model = entries;
    sort_model(&mut model);
    let dir = tempfile::tempdir().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let table = common::write_table(dir.path(), "t.sst", 1, &model, tombstones, options)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let err = |e: cairn_sstable::Error| TestCaseError::fail(e.to_string());

    let mut iter = table.iter();
    prop_assert_eq!(&scan_forward(&mut iter).map_err(err)?, &model);
    prop_assert_eq!(&scan_backward(&mut iter).map_err(err)?, &model);

    for (i, e) in model.iter().enumerate() {
        iter.seek(&e.key).map_err(err)?;
        prop_assert_eq!(current(&iter), Some(e.clone()), "seek to entry {}", i);
        iter.seek_for_prev(&e.key).map_err(err)?;
        prop_assert_eq!(
            current(&iter),
            Some(e.clone()),
            "seek_for_prev to entry {}",
            i
        );
        // Between keys: just after this user key, and inside its versions at other snapshots.
        let user = cairn_sstable::key::user_key(&e.key);
        let mut after = user.to_vec();
        after.push(0);
        for target in [
            seek_key(&after, cairn_sstable::MAX_SEQNO),
            seek_key(user, 25),
            internal_key(user, 0, Kind::Delete),
        ] {
            iter.seek(&target).map_err(err)?;
            prop_assert_eq!(
                current(&iter),
                model.get(lower_bound(&model, &target)).cloned()
            );
            iter.seek_for_prev(&target).map_err(err)?;
            prop_assert_eq!(
                current(&iter),
                floor(&model, &target).and_then(|i| model.get(i)).cloned()
            );
        }
        for snapshot in [0, 10, 30, cairn_sstable::MAX_SEQNO] {
            let got = table.get(user, snapshot).map_err(err)?;
            let want = model_get(&model, user, snapshot);
            prop_assert_eq!(
                got.map(|g| (g.seqno, g.kind, g.meta, g.value.to_vec())),
                want.map(|w| {
                    let k = cairn_sstable::parse_internal_key(&w.key)
                        .map_or((0, Kind::Put), |k| (k.seqno, k.kind));
                    (k.0, k.1, w.meta, w.value)
                })
            );
        }
        for snapshot in [5, 40, cairn_sstable::MAX_SEQNO] {
            prop_assert_eq!(
                table.range_tombstones().covering_seqno(user, snapshot),
                model_covering(tombstones, user, snapshot),
                "covering seqno of {:?} at {}",
                user,
                snapshot
            );
        }
    }
    let props = table.properties();
    prop_assert_eq!(props.num_entries, model.len() as u64);
    let tombs = model
        .iter()
        .filter(|e| {
            cairn_sstable::parse_internal_key(&e.key).is_some_and(|k| k.kind.is_point_tombstone())
        })
        .count();
    prop_assert_eq!(props.num_point_tombstones(), tombs as u64);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn tables_read_back_what_was_written(
        entries in proptest::collection::vec(entry(), 0..120),
        tombstones in proptest::collection::vec(tombstone(), 0..6),
        options in options(),
    ) {
        check_table(entries, &tombstones, options)?;
    }
}

#[test]
fn empty_table_has_no_entries_and_no_tombstones() -> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let table = common::write_table(dir.path(), "e.sst", 1, &[], &[], TableOptions::default())?;
    let mut iter = table.iter();
    assert!(scan_forward(&mut iter)?.is_empty());
    assert!(scan_backward(&mut iter)?.is_empty());
    iter.seek(&seek_key(b"a", 5))?;
    assert!(!iter.valid());
    assert!(table.get(b"a", 5)?.is_none());
    assert!(table.range_tombstones().is_empty());
    assert_eq!(table.properties().num_entries, 0);
    Ok(())
}

#[test]
fn properties_record_what_the_collector_needs() -> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let mut model: Vec<ModelEntry> = (0..300u64)
        .map(|i| {
            let kind = if (100..200).contains(&i) {
                Kind::Delete
            } else {
                Kind::Put
            };
            let meta = EntryMeta {
                write_time: 1_000 + i,
                ttl: (i == 7).then_some(50),
            };
            let value = if kind == Kind::Put {
                b"vv".as_slice()
            } else {
                b""
            };
            ModelEntry::new(format!("key{i:04}").as_bytes(), i + 1, kind, meta, value)
        })
        .collect();
    sort_model(&mut model);
    let tombstone = RangeTombstone {
        start: Bytes::from_static(b"a"),
        end: Bytes::from_static(b"b"),
        seqno: 999,
        write_time: 10,
    };
    let table = common::write_table(
        dir.path(),
        "p.sst",
        1,
        &model,
        &[tombstone],
        TableOptions::default(),
    )?;
    let p = table.properties();
    assert_eq!(
        (
            p.num_entries,
            p.num_puts,
            p.num_deletes,
            p.num_single_deletes
        ),
        (300, 200, 100, 0)
    );
    assert_eq!(p.num_range_tombstones, 1);
    assert_eq!((p.smallest_seqno, p.largest_seqno), (1, 999));
    assert_eq!(
        (p.oldest_write_time, p.newest_write_time),
        (Some(10), Some(1_299))
    );
    assert_eq!(p.oldest_tombstone_time, Some(10));
    assert_eq!(p.earliest_expiry, Some(1_057));
    assert_eq!(p.raw_key_bytes, 300 * 7);
    assert_eq!(p.raw_value_bytes, 200 * 2);
    assert_eq!(p.max_tombstones_in_window, 100);
    assert_eq!(p.bloom_bits_per_key, 10);
    assert_eq!(
        p.smallest_key.as_deref(),
        model.first().map(|e| e.key.as_slice())
    );
    assert_eq!(
        p.largest_key.as_deref(),
        model.last().map(|e| e.key.as_slice())
    );
    Ok(())
}

#[test]
fn writer_rejects_out_of_order_keys_and_bad_ranges() -> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let fs = cairn_fs::RealFs::new();
    let file = cairn_fs::FileSystem::create(&fs, &dir.path().join("bad.sst"))?;
    let mut writer = cairn_sstable::TableWriter::new(file, TableOptions::default())?;
    writer.add(&internal_key(b"b", 5, Kind::Put), EntryMeta::at(1), b"x")?;
    let invalid =
        |r: cairn_sstable::Result<()>| matches!(r, Err(cairn_sstable::Error::InvalidArgument(_)));
    assert!(invalid(writer.add(
        &internal_key(b"a", 5, Kind::Put),
        EntryMeta::at(1),
        b"x"
    )));
    assert!(
        invalid(writer.add(&internal_key(b"b", 5, Kind::Put), EntryMeta::at(1), b"x")),
        "duplicate key"
    );
    assert!(
        invalid(writer.add(&internal_key(b"b", 9, Kind::Put), EntryMeta::at(1), b"x")),
        "newer version after older"
    );
    assert!(invalid(writer.add(b"short", EntryMeta::at(1), b"x")));
    assert!(invalid(writer.add(
        &internal_key(b"c", 1, Kind::RangeDelete),
        EntryMeta::at(1),
        b""
    )));
    assert!(invalid(writer.add_range_tombstone(b"z", b"a", 1, 1)));
    writer.add_range_tombstone(b"m", b"m", 1, 1)?;
    writer.add(&internal_key(b"b", 4, Kind::Delete), EntryMeta::at(1), b"")?;
    let summary = writer.finish()?;
    assert_eq!(summary.properties.num_entries, 2);
    assert!(
        summary.range_tombstones.is_empty(),
        "an empty range deletes nothing"
    );
    Ok(())
}
