//! Zero bytes: the tail of a preallocated or zero-extended file is no damage in any mode, while
//! zeros where a record's bytes belong are.

mod common;

use cairn_fs::{FileSystem, RealFs};
use cairn_wal::{BLOCK_SIZE, DamageKind, LogReader, LogWriter, RecoveryMode};
use common::{
    ALL_MODES, MemLog, SYNC_MARK_BYTES, TestLog, corruption_offset, len_leaving, payload, read_all,
};

fn with_zeros(log: &TestLog, zeros: usize) -> Vec<u8> {
    let mut bytes = log.bytes.to_vec();
    bytes.resize(bytes.len() + zeros, 0);
    bytes
}

#[test]
fn zeros_after_the_last_record_are_not_damage_in_any_mode() {
    let small = TestLog::write(vec![payload(1, 10), Vec::new(), payload(2, 3000)]);
    let near_block_end = {
        let first = payload(3, len_leaving(0, 3));
        TestLog::write(vec![first])
    };
    for log in [&small, &near_block_end] {
        for zeros in [1, 3, 6, 7, 8, 100, BLOCK_SIZE, 2 * BLOCK_SIZE + 5] {
            let bytes = with_zeros(log, zeros);
            for mode in ALL_MODES {
                let outcome = read_all(&bytes, mode);
                assert!(
                    outcome.error.is_none(),
                    "{zeros} zeros, {mode:?}: {:?}",
                    outcome.error
                );
                assert_eq!(outcome.records, log.expected(), "{zeros} zeros, {mode:?}");
                assert!(outcome.skipped.is_empty() && outcome.stopped_at.is_none());
            }
        }
    }
}

#[test]
fn preallocated_file_with_no_records_is_an_empty_log() {
    for mode in ALL_MODES {
        let outcome = read_all(&vec![0; 3 * BLOCK_SIZE], mode);
        assert!(
            outcome.error.is_none() && outcome.records.is_empty(),
            "{mode:?}"
        );
    }
}

#[test]
fn zero_extended_real_file_reads_back_its_records() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("000009.log");
    let mut writer = LogWriter::new(fs.create(&path)?);
    writer.add_record(b"before the crash")?;
    writer.sync()?;
    // What a file system can leave after a crash that extended the file but wrote no data.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)?
        .set_len(writer.len() + 4096)?;
    let reader = LogReader::open(&fs, &path, RecoveryMode::AbsoluteConsistency)?;
    let records = reader.collect::<Result<Vec<_>, _>>()?;
    assert_eq!(records, vec![(0, b"before the crash".to_vec())]);
    Ok(())
}

#[test]
fn zeros_where_a_fragment_belongs_are_a_torn_tail() {
    // The second record's first fragment is in block 0, its last fragment (zeroed) in block 1.
    let log = TestLog::write(vec![payload(1, 100), payload(2, BLOCK_SIZE)]);
    let mut bytes = log.bytes.to_vec();
    if let Some(second_block) = bytes.get_mut(BLOCK_SIZE..) {
        second_block.fill(0);
    }
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    assert!(tolerate.error.is_none(), "{:?}", tolerate.error);
    assert_eq!(
        tolerate.records,
        log.expected().get(..1).unwrap_or_default()
    );
    let stopped = tolerate.stopped_at.expect("torn tail reported");
    assert_eq!(stopped.kind, DamageKind::UnfinishedRecordAtEnd);
    let absolute = read_all(&bytes, RecoveryMode::AbsoluteConsistency);
    assert_eq!(
        absolute.error.as_ref().and_then(corruption_offset),
        log.spans.get(1).map(|s| s.start)
    );
}

/// Four records, synced after each: the third ends exactly at the end of block 0, so the fourth
/// (and the mark before it) starts block 1. Returns the bytes and each record's span.
fn four_synced_records() -> (Vec<u8>, Vec<std::ops::Range<u64>>) {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    let mut spans = Vec::new();
    for (i, len) in [100, 200, 0, 50].into_iter().enumerate() {
        let len = if i == 2 {
            // After the sync mark that will precede it.
            len_leaving(writer.len() + SYNC_MARK_BYTES, 0)
        } else {
            len
        };
        let start = writer.add_record(&payload(i as u64, len)).expect("append");
        spans.push(start..writer.len());
        writer.sync().expect("sync");
    }
    assert_eq!(spans.get(2).map(|s| s.end), Some(BLOCK_SIZE as u64));
    (file.bytes(), spans)
}

#[test]
fn zeroed_record_a_later_sync_covers_is_mid_log_corruption() {
    let (mut bytes, spans) = four_synced_records();
    let zeroed = spans.get(1).cloned().unwrap_or_default();
    if let Some(record) = bytes.get_mut(common::index(zeroed.start)..common::index(zeroed.end)) {
        record.fill(0);
    }
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    assert_eq!(
        tolerate.error.as_ref().and_then(corruption_offset),
        Some(zeroed.start)
    );

    let skip = read_all(&bytes, RecoveryMode::SkipCorrupted);
    let kept: Vec<u64> = skip.records.iter().map(|(offset, _)| *offset).collect();
    let expected: Vec<u64> = [0, 3]
        .iter()
        .filter_map(|&i| spans.get(i).map(|s| s.start))
        .collect();
    assert_eq!(
        kept, expected,
        "the rest of block 0 is dropped, block 1 is read"
    );
    let damage = skip.skipped.first().expect("zeroed region reported");
    assert_eq!(
        (damage.offset, damage.kind),
        (zeroed.start, DamageKind::ZeroedHeader)
    );
}

/// A log as power loss with pages written back out of order leaves it: record 1 synced, then
/// records 2 and 3 (and, with `later_sync`, a sync and record 4), and the page holding the start
/// of record 2 never reached the disk. Returns the bytes and the hole's offset.
fn log_with_a_hole(later_sync: bool) -> (Vec<u8>, u64) {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.add_record(&payload(1, 300)).expect("append");
    writer.sync().expect("sync");
    let hole = writer.add_record(&payload(2, 5000)).expect("append");
    writer.add_record(&payload(3, 300)).expect("append");
    if later_sync {
        writer.sync().expect("sync");
        writer.add_record(&payload(4, 10)).expect("append");
    }
    let mut bytes = file.bytes();
    let hole_end = common::index(hole) + 4096;
    if let Some(page) = bytes.get_mut(common::index(hole)..hole_end) {
        page.fill(0);
    }
    (bytes, hole)
}

#[test]
fn a_hole_in_the_unsynced_tail_before_later_records_is_dropped_in_tolerate_mode() {
    let (bytes, hole) = log_with_a_hole(false);
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    assert!(tolerate.error.is_none(), "{:?}", tolerate.error);
    assert_eq!(tolerate.records, vec![(0, payload(1, 300))]);
    let stopped = tolerate.stopped_at.expect("the hole is reported");
    assert_eq!(
        stopped.dropped.end,
        bytes.len() as u64,
        "everything after it goes"
    );
    assert!(stopped.offset <= hole, "{stopped}");
    let absolute = read_all(&bytes, RecoveryMode::AbsoluteConsistency);
    assert!(
        absolute.error.is_some(),
        "absolute consistency tolerates no damage"
    );
}

#[test]
fn the_same_hole_once_a_later_sync_covers_it_is_corruption() {
    let (bytes, _) = log_with_a_hole(true);
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    let message = tolerate.error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains("sync mark"), "{message}");
}
