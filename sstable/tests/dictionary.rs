//! zstd dictionaries: a table trains one from its first data blocks, stores it, and reads every
//! block back through it; tables too small to train on, or not on zstd, have none.

mod common;

use std::path::Path;

use bytes::Bytes;
use cairn_sstable::{Compression, EntryMeta, Kind, Table, TableOptions};
use common::{ModelEntry, scan_backward, scan_forward};

/// `n` records shaped alike, as a service's rows are: small blocks of them share most bytes
/// with each other, which a per-block codec cannot see and a dictionary can.
fn records(n: u64) -> Vec<ModelEntry> {
    (0..n)
        .map(|i| {
            let value = format!(
                r#"{{"id":{i},"user":"user-{:05}","status":"{}","plan":"{}","region":"eu-west-{}"}}"#,
                i * 7919 % 100_000,
                match i % 3 {
                    0 => "active",
                    1 => "suspended",
                    _ => "deleted",
                },
                match i % 4 {
                    0 => "free",
                    1 => "pro",
                    2 => "team",
                    _ => "enterprise",
                },
                i % 3
            );
            ModelEntry::new(
                format!("row:{i:08}").as_bytes(),
                i + 1,
                Kind::Put,
                EntryMeta::at(1_700_000_000_000 + i),
                value.as_bytes(),
            )
        })
        .collect()
}

fn write(
    dir: &Path,
    name: &str,
    model: &[ModelEntry],
    options: TableOptions,
) -> cairn_sstable::Result<Table> {
    common::write_table(dir, name, 1, model, &[], options)
}

fn file_size(table: &Table) -> u64 {
    std::fs::metadata(table.path()).map_or(0, |m| m.len())
}

fn check_reads(table: &Table, model: &[ModelEntry]) -> cairn_sstable::Result<()> {
    let mut iter = table.iter();
    assert!(scan_forward(&mut iter)? == model, "forward scan differs");
    assert!(scan_backward(&mut iter)? == model, "backward scan differs");
    for entry in model.iter().step_by(97) {
        let key = cairn_sstable::parse_internal_key(&entry.key).map(|k| k.user_key);
        let got = table.get(key.unwrap_or_default(), cairn_sstable::MAX_SEQNO)?;
        assert_eq!(got.map(|e| e.value), Some(Bytes::from(entry.value.clone())));
    }
    Ok(())
}

#[test]
fn a_dictionary_shrinks_small_blocks_of_similar_records_and_reads_back() -> cairn_sstable::Result<()>
{
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    // 20,000 records of ~100 bytes: about 2 MB, past the 1.6 MB a 16 KiB dictionary trains on,
    // so blocks are written both from the training buffer and after it.
    let model = records(20_000);
    let plain = TableOptions::default().compression(Compression::Zstd(3));
    let without = write(dir.path(), "plain.sst", &model, plain.clone())?;
    let with = write(
        dir.path(),
        "dict.sst",
        &model,
        plain.zstd_dictionary_bytes(16 << 10),
    )?;
    assert_eq!(without.properties().zstd_dictionary_bytes, 0);
    let dictionary = with.properties().zstd_dictionary_bytes;
    assert!(dictionary > 0 && dictionary <= 16 << 10, "{dictionary}");
    check_reads(&with, &model)?;
    check_reads(&without, &model)?;
    let (small, large) = (file_size(&with), file_size(&without));
    assert!(
        small * 10 < large * 9,
        "with a dictionary {small} bytes, without {large}: expected at least a tenth less"
    );
    Ok(())
}

#[test]
fn a_table_too_small_to_train_on_has_no_dictionary() -> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let model = records(3);
    let options = TableOptions::default().zstd_dictionary_bytes(16 << 10);
    let table = write(dir.path(), "tiny.sst", &model, options)?;
    assert_eq!(table.properties().zstd_dictionary_bytes, 0);
    check_reads(&table, &model)
}

#[test]
fn codecs_other_than_zstd_train_no_dictionary() -> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let model = records(20_000);
    for (name, codec) in [
        ("lz4.sst", Compression::Lz4),
        ("raw.sst", Compression::None),
    ] {
        let options = TableOptions::default()
            .compression(codec)
            .zstd_dictionary_bytes(16 << 10);
        let table = write(dir.path(), name, &model, options)?;
        assert_eq!(table.properties().zstd_dictionary_bytes, 0, "{name}");
        check_reads(&table, &model)?;
    }
    Ok(())
}

#[test]
fn a_dictionary_size_out_of_bounds_is_refused() {
    for bytes in [
        1,
        cairn_sstable::MIN_DICTIONARY_BYTES - 1,
        cairn_sstable::MAX_DICTIONARY_BYTES + 1,
    ] {
        let options = TableOptions::default().zstd_dictionary_bytes(bytes);
        assert!(
            matches!(
                options.validate(),
                Err(cairn_sstable::Error::InvalidArgument(_))
            ),
            "{bytes}"
        );
    }
    for bytes in [0, cairn_sstable::MIN_DICTIONARY_BYTES] {
        let options = TableOptions::default().zstd_dictionary_bytes(bytes);
        assert!(options.validate().is_ok(), "{bytes}");
    }
}

/// A dictionary block whose checksum holds but whose zstd header carries damaged entropy tables
/// (what crafted bytes, or a bit flipped before the checksum was taken, give) is `Corruption` at
/// open, never a panic.
#[test]
fn a_dictionary_zstd_refuses_is_corruption_at_open() -> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let model = records(20_000);
    let options = TableOptions::default().zstd_dictionary_bytes(16 << 10);
    let table = write(dir.path(), "dict.sst", &model, options)?;
    let props = table.properties().clone();
    let path = table.path().to_path_buf();
    drop(table);
    let mut bytes = std::fs::read(&path).map_err(cairn_fs::Error::from)?;
    let start = usize::try_from(props.zstd_dictionary_offset).unwrap_or(usize::MAX);
    let size = usize::try_from(props.zstd_dictionary_bytes).unwrap_or(0);
    let block = bytes
        .get_mut(start..start + size)
        .ok_or_else(|| cairn_sstable::Error::InvalidArgument("no dictionary block".into()))?;
    // zstd's dictionary magic, an id, then entropy tables of garbage.
    block.fill(0xa5);
    if let Some(head) = block.get_mut(..8) {
        head.copy_from_slice(&[0x37, 0xa4, 0x30, 0xec, 1, 0, 0, 0]);
    }
    let crc = crc32fast::hash(bytes.get(start..=start + size).unwrap_or_default());
    if let Some(trailer) = bytes.get_mut(start + size + 1..start + size + 5) {
        trailer.copy_from_slice(&crc.to_le_bytes());
    }
    match Table::from_bytes(Bytes::from(bytes), &path, 1, None) {
        Err(cairn_sstable::Error::Corruption { reason, .. }) => {
            assert!(reason.contains("dictionary"), "{reason}");
        }
        other => panic!("expected Corruption, got {:?}", other.map(|_| "a table")),
    }
    Ok(())
}

/// A dictionary block typed as zstd-compressed is refused by its type byte before anything is
/// decompressed: a crafted table cannot make open inflate a frame of up to 2 GiB only to be told
/// the dictionary had to be raw.
#[test]
fn a_dictionary_block_not_stored_raw_is_refused_before_decompressing() -> cairn_sstable::Result<()>
{
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let model = records(20_000);
    let options = TableOptions::default().zstd_dictionary_bytes(16 << 10);
    let table = write(dir.path(), "dict.sst", &model, options)?;
    let props = table.properties().clone();
    let path = table.path().to_path_buf();
    drop(table);
    let mut bytes = std::fs::read(&path).map_err(cairn_fs::Error::from)?;
    let start = usize::try_from(props.zstd_dictionary_offset).unwrap_or(usize::MAX);
    let size = usize::try_from(props.zstd_dictionary_bytes).unwrap_or(0);
    // The dictionary's bytes stay; only the type byte claims zstd (1), with a checksum to match,
    // so decompressing would be attempted (and fail on bytes that are no zstd frame).
    if let Some(kind) = bytes.get_mut(start + size) {
        *kind = 1;
    }
    let crc = crc32fast::hash(bytes.get(start..=start + size).unwrap_or_default());
    if let Some(trailer) = bytes.get_mut(start + size + 1..start + size + 5) {
        trailer.copy_from_slice(&crc.to_le_bytes());
    }
    match Table::from_bytes(Bytes::from(bytes), &path, 1, None) {
        Err(cairn_sstable::Error::Corruption { reason, .. }) => {
            assert!(reason.contains("not stored raw"), "{reason}");
        }
        other => panic!("expected Corruption, got {:?}", other.map(|_| "a table")),
    }
    Ok(())
}
