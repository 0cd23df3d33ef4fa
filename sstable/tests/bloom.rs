//! The table's bloom filter: no false negatives, about 1% false positives at 10 bits per key.

mod common;

use cairn_sstable::{EntryMeta, Kind, TableOptions};
use common::ModelEntry;

#[test]
fn false_positive_rate_at_10_bits_per_key_is_within_one_and_a_half_percent()
-> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let n = 100_000u32;
    let entries: Vec<ModelEntry> = (0..n)
        .map(|i| {
            ModelEntry::new(
                format!("user{i:08}").as_bytes(),
                1,
                Kind::Put,
                EntryMeta::at(1),
                b"v",
            )
        })
        .collect();
    let table = common::write_table(
        dir.path(),
        "bloom.sst",
        1,
        &entries,
        &[],
        TableOptions::default(),
    )?;
    for i in 0..n {
        assert!(
            table.may_contain(format!("user{i:08}").as_bytes()),
            "false negative for {i}"
        );
    }
    let false_positives = (0..n)
        .filter(|i| table.may_contain(format!("absent{i:08}").as_bytes()))
        .count();
    let rate = f64::from(u32::try_from(false_positives).unwrap_or(u32::MAX)) / f64::from(n);
    println!(
        "bloom false-positive rate at 10 bits/key: {:.3}% ({false_positives} of {n})",
        rate * 100.0
    );
    assert!(rate <= 0.015, "false-positive rate {rate:.4} above 1.5%");
    Ok(())
}

#[test]
fn versions_of_one_key_are_one_filter_entry_and_zero_bits_means_no_filter()
-> cairn_sstable::Result<()> {
    let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    let versions: Vec<ModelEntry> = (0..1000u64)
        .map(|s| ModelEntry::new(b"hot", 2000 - s, Kind::Put, EntryMeta::at(1), b"v"))
        .collect();
    let one_key = common::write_table(
        dir.path(),
        "a.sst",
        1,
        &versions,
        &[],
        TableOptions::default(),
    )?;
    assert!(
        one_key.filter_size() <= 64 + 5,
        "1000 versions of one key made a {} byte filter",
        one_key.filter_size()
    );
    let unfiltered = common::write_table(
        dir.path(),
        "b.sst",
        2,
        &versions,
        &[],
        TableOptions::default().bloom_bits_per_key(0),
    )?;
    assert_eq!(unfiltered.filter_size(), 0);
    assert_eq!(unfiltered.properties().bloom_bits_per_key, 0);
    assert!(unfiltered.may_contain(b"anything"));
    assert!(one_key.may_contain(b"hot"));
    Ok(())
}
