//! Damaged tables: every flipped byte and every truncation is reported as corruption naming the
//! file and an offset inside it. Never a panic, never wrong data.

mod common;

use std::path::Path;

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, Error, FragmentedRangeTombstones, InternalIterator, Kind, RangeTombstone, Table,
    TableOptions,
};
use common::{ModelEntry, scan_backward, scan_forward, sort_model};

const NAME: &str = "damaged.sst";

fn small_table(options: TableOptions) -> cairn_sstable::Result<(Vec<u8>, Vec<ModelEntry>)> {
    let mut model: Vec<ModelEntry> = (0..40u64)
        .map(|i| {
            let kind = match i % 5 {
                0 => Kind::Delete,
                1 => Kind::SingleDelete,
                _ => Kind::Put,
            };
            let value = if kind == Kind::Put {
                format!("value-{i}-{}", "x".repeat(20))
            } else {
                String::new()
            };
            let meta = EntryMeta {
                write_time: 1_700_000_000_000 + i,
                ttl: (i % 7 == 0).then_some(60_000),
            };
            ModelEntry::new(
                format!("key{:03}", i / 2).as_bytes(),
                100 - i,
                kind,
                meta,
                value.as_bytes(),
            )
        })
        .collect();
    sort_model(&mut model);
    let tombstones = [
        RangeTombstone {
            start: Bytes::from_static(b"key005"),
            end: Bytes::from_static(b"key009"),
            seqno: 200,
            write_time: 5,
        },
        RangeTombstone {
            start: Bytes::from_static(b"key007"),
            end: Bytes::from_static(b"key012"),
            seqno: 201,
            write_time: 6,
        },
    ];
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let table = common::write_table(dir.path(), NAME, 1, &model, &tombstones, options)?;
    let bytes = std::fs::read(table.path()).map_err(cairn_fs::Error::from)?;
    Ok((bytes, model))
}

/// Everything a reader can ask of the table.
#[derive(Debug, PartialEq)]
struct Readout {
    forward: Vec<ModelEntry>,
    backward: Vec<ModelEntry>,
    gets: Vec<Option<(u64, Vec<u8>)>>,
    tombstones: FragmentedRangeTombstones,
}

/// Reads the table in `bytes` both ways a table is read, from memory (as a mapping) and from a
/// file with positional reads, and requires both to see the same: the same entries, or the same
/// corruption at the same offset.
fn read_all(bytes: &[u8], keys: &[Vec<u8>]) -> cairn_sstable::Result<Readout> {
    let whole = Table::from_bytes(Bytes::copy_from_slice(bytes), Path::new(NAME), 1, None);
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let path = dir.path().join(NAME);
    std::fs::write(&path, bytes).map_err(cairn_fs::Error::from)?;
    let read = Table::open(&cairn_fs::RealFs::new(), &path, 1, None);
    let in_memory = whole.and_then(|table| read_table(&table, keys));
    let from_file = read.and_then(|table| read_table(&table, keys));
    match (&in_memory, &from_file) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "the two ways of reading disagree"),
        (
            Err(Error::Corruption { offset, reason, .. }),
            Err(Error::Corruption {
                offset: o,
                reason: r,
                ..
            }),
        ) => assert_eq!((offset, reason), (o, r), "the two ways report differently"),
        (a, b) => panic!("in memory: {a:?}; from the file: {b:?}"),
    }
    in_memory
}

fn read_table(table: &Table, keys: &[Vec<u8>]) -> cairn_sstable::Result<Readout> {
    let mut iter = table.iter();
    let forward = scan_forward(&mut iter)?;
    let backward = scan_backward(&mut iter)?;
    let mut gets = Vec::new();
    for key in keys {
        gets.push(
            table
                .get(key, cairn_sstable::MAX_SEQNO)?
                .map(|e| (e.seqno, e.value.to_vec())),
        );
        iter.seek(&cairn_sstable::seek_key(key, 50))?;
    }
    Ok(Readout {
        forward,
        backward,
        gets,
        tombstones: table.range_tombstones().clone(),
    })
}

fn assert_names_file_and_offset(err: &Error, len: usize, what: &str) {
    match err {
        Error::Corruption { file, offset, .. } => {
            assert_eq!(file.file_name(), Some(NAME.as_ref()), "{what}: {err}");
            assert!(
                *offset < len as u64,
                "{what}: offset {offset} outside a file of {len} bytes"
            );
        }
        other => panic!("{what}: expected corruption, got {other}"),
    }
}

fn user_keys(model: &[ModelEntry]) -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = model
        .iter()
        .map(|e| cairn_sstable::key::user_key(&e.key).to_vec())
        .collect();
    keys.dedup();
    keys
}

#[test]
fn every_flipped_byte_is_detected_and_named() -> cairn_sstable::Result<()> {
    for (options, dictionary) in [
        (TableOptions::default(), false),
        (
            TableOptions::default()
                .compression(cairn_sstable::Compression::None)
                .block_size(128),
            false,
        ),
        // A zstd dictionary: its block, and the blocks compressed with it.
        (
            TableOptions::default()
                .block_size(64)
                .zstd_dictionary_bytes(256),
            true,
        ),
    ] {
        let (good, model) = small_table(options)?;
        let table = Table::from_bytes(Bytes::copy_from_slice(&good), Path::new(NAME), 1, None)?;
        assert_eq!(table.properties().zstd_dictionary_bytes > 0, dictionary);
        let keys = user_keys(&model);
        let expected = read_all(&good, &keys)?;
        assert_eq!(expected.forward, model);
        for offset in 0..good.len() {
            for mask in [0xff_u8, 0x01, 0x80] {
                let mut bad = good.clone();
                if let Some(byte) = bad.get_mut(offset) {
                    *byte ^= mask;
                }
                // Every byte of a table is under some checksum, so every flip must be caught.
                match read_all(&bad, &keys) {
                    Ok(readout) => panic!(
                        "flip {mask:#x} at {offset} went unnoticed; data {}",
                        if readout == expected {
                            "unchanged"
                        } else {
                            "WRONG"
                        }
                    ),
                    Err(e) => {
                        assert_names_file_and_offset(&e, good.len(), &format!("flip at {offset}"));
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn every_truncation_is_detected_at_open() -> cairn_sstable::Result<()> {
    let (good, _) = small_table(TableOptions::default())?;
    for cut in 0..good.len() {
        let prefix = good.get(..cut).unwrap_or_default();
        match Table::from_bytes(Bytes::copy_from_slice(prefix), Path::new(NAME), 1, None) {
            Ok(_) => panic!("a table cut at {cut} of {} opened", good.len()),
            Err(e) => assert_names_file_and_offset(&e, good.len(), &format!("cut at {cut}")),
        }
        // From a file too, with the same error.
        let err = read_all(prefix, &[]).err();
        assert!(err.is_some(), "a table cut at {cut} read from its file");
    }
    Ok(())
}

#[test]
fn a_file_that_is_not_a_table_says_so() {
    let junk = vec![0u8; 4096];
    let err = Table::from_bytes(Bytes::from(junk), Path::new(NAME), 1, None)
        .expect_err("zeros are not a table");
    assert!(err.to_string().contains("not a Cairn table"), "{err}");
}

#[test]
fn damage_in_a_data_block_is_reported_by_the_read_that_meets_it() -> cairn_sstable::Result<()> {
    let (good, model) = small_table(
        TableOptions::default()
            .compression(cairn_sstable::Compression::None)
            .block_size(128),
    )?;
    let mut bad = good.clone();
    // The first data block starts at offset 0; its first entry's key bytes follow 3 varints.
    if let Some(byte) = bad.get_mut(5) {
        *byte ^= 0x20;
    }
    let table = Table::from_bytes(Bytes::from(bad), Path::new(NAME), 1, None)?;
    let err = table
        .iter()
        .seek_to_first()
        .expect_err("the first block is damaged");
    assert_names_file_and_offset(&err, good.len(), "first block");
    // Keys in later blocks still read.
    let last = user_keys(&model).pop().unwrap_or_default();
    assert!(table.get(&last, cairn_sstable::MAX_SEQNO)?.is_some());
    Ok(())
}

/// The bytes of an uncompressed table holding a `Put` of "v" at each of `keys`.
fn plain_table(keys: &[&[u8]], options: TableOptions) -> cairn_sstable::Result<Vec<u8>> {
    let entries: Vec<ModelEntry> = keys
        .iter()
        .map(|k| ModelEntry::new(k, 1, Kind::Put, EntryMeta::at(1), b"v"))
        .collect();
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let options = options.compression(cairn_sstable::Compression::None);
    let table = common::write_table(dir.path(), NAME, 1, &entries, &[], options)?;
    Ok(std::fs::read(table.path()).map_err(cairn_fs::Error::from)?)
}

/// Writes the checksum of the block `bytes[start..checksum]` (contents and type byte) at
/// `checksum`, so damage inside it passes the checksum.
fn reseal(bytes: &mut [u8], start: usize, checksum: usize) {
    let crc = crc32fast::hash(bytes.get(start..checksum).unwrap_or_default());
    if let Some(slot) = bytes.get_mut(checksum..checksum + 4) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
}

#[test]
fn keys_out_of_order_under_a_valid_checksum_are_corruption() -> cairn_sstable::Result<()> {
    let mut bytes = plain_table(
        &[b"a", b"b", b"c"],
        TableOptions::default().restart_interval(16),
    )?;
    // The data block starts at 0 and ends where the filter block (the footer's second handle)
    // begins, less its 5-byte trailer. Swap the user keys "a" and "c", then fix the checksum.
    let footer = bytes.len() - 80;
    let filter_at = bytes
        .get(footer + 16..footer + 24)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .and_then(|o| usize::try_from(o).ok())
        .unwrap_or_default();
    let size = filter_at - 5;
    let positions: Vec<usize> = (0..size)
        .filter(|&i| matches!(bytes.get(i), Some(b'a' | b'c')))
        .collect();
    for i in &positions {
        if let Some(b) = bytes.get_mut(*i) {
            *b = if *b == b'a' { b'c' } else { b'a' };
        }
    }
    reseal(&mut bytes, 0, size + 1);
    let table = Table::from_bytes(Bytes::from(bytes), Path::new(NAME), 1, None)?;
    let mut iter = table.iter();
    let forward = scan_forward(&mut iter);
    let backward = scan_backward(&mut iter);
    assert!(
        matches!(forward, Err(Error::Corruption { .. }))
            || matches!(backward, Err(Error::Corruption { .. })),
        "out-of-order keys were served: {forward:?} / {backward:?}"
    );
    Ok(())
}

/// A block whose own keys are in order but start below the block before (checksum fixed) is
/// corruption going either way: the order check must hold across blocks, not only inside one.
#[test]
fn a_block_starting_below_the_one_before_is_corruption_both_ways() -> cairn_sstable::Result<()> {
    // One entry per block: the data blocks are the file's first three, back to back.
    let mut bytes = plain_table(
        &[b"k1", b"k3", b"k5"],
        TableOptions::default().block_size(1),
    )?;
    // Each entry is three one-byte lengths, then its key: a block starts 3 bytes before it.
    let find = |needle: &[u8], bytes: &[u8]| {
        bytes
            .windows(needle.len())
            .position(|w| w == needle)
            .and_then(|at| at.checked_sub(3))
            .expect("the key is in the file")
    };
    let (second, third) = (find(b"k3", &bytes), find(b"k5", &bytes));
    // "k3" becomes "k0": in order inside its block, below "k1" before it.
    if let Some(b) = bytes.get_mut(second + 4) {
        *b = b'0';
    }
    // The block's type byte and checksum are its last 5 bytes.
    reseal(&mut bytes, second, third - 4);
    let table = Table::from_bytes(Bytes::from(bytes), Path::new(NAME), 1, None)?;
    let forward = scan_forward(&mut table.iter());
    assert!(
        matches!(forward, Err(Error::Corruption { .. })),
        "forward: {forward:?}"
    );
    let backward = scan_backward(&mut table.iter());
    assert!(
        matches!(backward, Err(Error::Corruption { .. })),
        "backward: {backward:?}"
    );
    Ok(())
}

#[test]
fn a_reader_above_a_table_names_the_table_and_the_entry_it_doubts() -> cairn_sstable::Result<()> {
    let (bytes, _) = small_table(
        TableOptions::default()
            .compression(cairn_sstable::Compression::None)
            .block_size(128),
    )?;
    let table = Table::from_bytes(Bytes::from(bytes.clone()), Path::new(NAME), 1, None)?;
    let mut iter = table.iter();
    iter.seek_to_first()?;
    let first = iter.corruption_here("doubted");
    assert_names_file_and_offset(&first, bytes.len(), "first entry");
    iter.seek_to_last()?;
    let last = iter.corruption_here("doubted");
    assert_names_file_and_offset(&last, bytes.len(), "last entry");
    let offset = |e: &Error| match e {
        Error::Corruption { offset, .. } => *offset,
        _ => 0,
    };
    assert!(
        offset(&last) > offset(&first),
        "the last entry lies past the first: {first} / {last}"
    );
    // Through a merging iterator too: it names the child it stands on.
    let mut merged = cairn_sstable::MergingIter::new(vec![table.iter()]);
    merged.seek_to_first()?;
    assert_eq!(
        offset(&merged.corruption_here("doubted")),
        offset(&first),
        "the merging iterator names its child's entry"
    );
    Ok(())
}
