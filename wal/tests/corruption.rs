//! Damaged bytes, one at a time: every byte of a small log flipped in turn, read in every mode.
//! A damaged log gives back the records it held or an error naming the file and offset, never
//! other records and never a panic.

mod common;

use std::sync::Arc;

use cairn_wal::{BLOCK_SIZE, DamageKind, Error, HEADER_SIZE, RecoveryMode};
use common::{
    LOG_PATH, Outcome, TestLog, Where, corruption_offset, payload, read_all, read_prefix,
};

/// Masks applied in turn: all bits, the lowest, the highest, and a mixed pattern.
const MASKS: [u8; 4] = [0xFF, 0x01, 0x80, 0x5A];

/// About 34 KB over two blocks: small and mid-sized records, an empty one, one split between
/// the blocks, and a small single-fragment record last (so damage there is a clean torn tail).
fn records() -> Vec<Vec<u8>> {
    let mut records: Vec<Vec<u8>> = [0, 20, 3000, 150, 900, 1, 200, 2000, 5000, 7000, 6000, 4000]
        .into_iter()
        .zip(0..)
        .map(|(len, seed)| payload(seed, len))
        .collect();
    records.push(payload(20, 5000));
    records.extend([payload(21, 100), payload(22, 37)]);
    records
}

/// The records, never synced.
fn log() -> TestLog {
    let log = TestLog::write(records());
    let split = log.spans.get(12).cloned().unwrap_or_default();
    assert!(split.start < BLOCK_SIZE as u64 && split.end > BLOCK_SIZE as u64);
    log
}

/// Reads `log` with the byte at `offset` flipped, in `mode`, for each offset of the log, and
/// hands `check` the log, the records written, the offset, what the byte belongs to, and what
/// the reader returned.
fn for_each_flip(
    log: &TestLog,
    mode: RecoveryMode,
    check: impl Fn(&TestLog, &[(u64, Vec<u8>)], usize, Where, &Outcome),
) {
    let expected = log.expected();
    for offset in 0..log.len() {
        let mut bytes: Arc<[u8]> = Arc::from(log.bytes.as_ref());
        if let Some(byte) = Arc::get_mut(&mut bytes).and_then(|b| b.get_mut(offset)) {
            *byte ^= MASKS.get(offset % MASKS.len()).copied().unwrap_or(0xFF);
        }
        let outcome = read_prefix(&bytes, bytes.len(), mode);
        check(log, &expected, offset, log.at(offset as u64), &outcome);
    }
}

/// The record a flip damaged, for logs without sync marks.
fn record(at: Where) -> Option<usize> {
    match at {
        Where::Record(k) => Some(k),
        Where::Mark(_) => panic!("this log has no sync marks"),
        Where::Padding => None,
    }
}

/// Asserts that `outcome` failed with a corruption inside record `damaged`, at or before the
/// flipped byte.
fn assert_corruption_in(log: &TestLog, damaged: usize, flipped: usize, outcome: &Outcome) {
    let span = log.spans.get(damaged).cloned().unwrap_or_default();
    let error = outcome.error.as_ref();
    let offset = error.and_then(corruption_offset);
    assert!(
        offset.is_some_and(|o| span.start <= o && o <= flipped as u64),
        "flip at {flipped} in record {damaged} ({span:?}): {error:?}"
    );
}

#[test]
fn absolute_mode_returns_the_originals_or_corruption_for_every_flipped_byte() {
    for_each_flip(
        &log(),
        RecoveryMode::AbsoluteConsistency,
        |log, expected, flipped, at, outcome| match record(at) {
            None => assert_eq!(outcome.records, expected, "flip in padding at {flipped}"),
            Some(k) => {
                assert_corruption_in(log, k, flipped, outcome);
                assert_eq!(
                    outcome.records.as_slice(),
                    expected.get(..k).unwrap_or_default()
                );
            }
        },
    );
}

#[test]
fn tolerate_mode_returns_a_prefix_for_any_damage_in_a_log_never_synced() {
    // Nothing was ever promised durable: all damage lies in the unsynced tail.
    for_each_flip(
        &log(),
        RecoveryMode::TolerateCorruptedTail,
        |log, expected, flipped, at, outcome| {
            assert!(
                outcome.error.is_none(),
                "flip at {flipped}: {:?}",
                outcome.error
            );
            let Some(k) = record(at) else {
                assert_eq!(outcome.records, expected, "flip in padding at {flipped}");
                return;
            };
            assert_eq!(
                outcome.records.as_slice(),
                expected.get(..k).unwrap_or_default(),
                "flip at {flipped}"
            );
            let stopped = outcome.stopped_at.as_ref().map(|d| d.offset);
            assert!(
                stopped.is_some_and(|o| log.spans.get(k).is_some_and(|s| s.start <= o)),
                "flip at {flipped}: stopped at {stopped:?}"
            );
        },
    );
}

#[test]
fn tolerate_mode_on_a_synced_log_returns_a_prefix_only_for_damage_after_the_last_sync() {
    let log = TestLog::write_synced(records());
    assert_eq!(
        log.marks.len(),
        log.records.len() - 1,
        "a mark before each record but the first"
    );
    let last = log.records.len() - 1;
    for_each_flip(
        &log,
        RecoveryMode::TolerateCorruptedTail,
        |log, expected, flipped, at, outcome| match at {
            Where::Padding => assert_eq!(outcome.records, expected, "flip in padding at {flipped}"),
            // The last record, and the mark before it, were never covered by a sync.
            Where::Record(k) | Where::Mark(k) if k == last => {
                assert!(
                    outcome.error.is_none(),
                    "flip at {flipped}: {:?}",
                    outcome.error
                );
                assert_eq!(
                    outcome.records.as_slice(),
                    expected.get(..k).unwrap_or_default()
                );
            }
            Where::Record(k) => {
                assert_corruption_in(log, k, flipped, outcome);
                assert_eq!(
                    outcome.records.as_slice(),
                    expected.get(..k).unwrap_or_default()
                );
            }
            Where::Mark(k) => {
                let mark = log
                    .marks
                    .iter()
                    .find(|(i, _)| *i == k)
                    .map(|(_, s)| s.start);
                assert_eq!(
                    outcome.error.as_ref().and_then(corruption_offset),
                    mark,
                    "flip at {flipped} in the mark before record {k}"
                );
                assert_eq!(
                    outcome.records.as_slice(),
                    expected.get(..k).unwrap_or_default()
                );
            }
        },
    );
}

#[test]
fn point_in_time_mode_returns_the_records_before_the_damage_and_where_it_stopped() {
    for_each_flip(
        &log(),
        RecoveryMode::PointInTime,
        |log, expected, flipped, at, outcome| {
            let damaged = record(at);
            assert!(
                outcome.error.is_none(),
                "flip at {flipped}: {:?}",
                outcome.error
            );
            let kept = damaged.unwrap_or(expected.len());
            assert_eq!(
                outcome.records.as_slice(),
                expected.get(..kept).unwrap_or_default()
            );
            let stopped = outcome.stopped_at.as_ref();
            assert_eq!(stopped.is_some(), damaged.is_some(), "flip at {flipped}");
            if let (Some(damage), Some(span)) = (stopped, damaged.and_then(|k| log.spans.get(k))) {
                assert!(span.start <= damage.offset && damage.offset <= flipped as u64);
                assert_eq!(
                    damage.dropped.end,
                    log.len() as u64,
                    "everything after is ignored"
                );
            }
        },
    );
}

#[test]
fn skip_mode_loses_only_the_damaged_block_and_reports_it() {
    for_each_flip(
        &log(),
        RecoveryMode::SkipCorrupted,
        |log, expected, flipped, at, outcome| {
            let damaged = record(at);
            assert!(
                outcome.error.is_none(),
                "flip at {flipped}: {:?}",
                outcome.error
            );
            let mut rest = expected.iter();
            for record in &outcome.records {
                assert!(
                    rest.any(|e| e == record),
                    "flip at {flipped}: not a subsequence"
                );
            }
            let Some(k) = damaged else {
                assert_eq!(outcome.records, expected, "flip in padding at {flipped}");
                return;
            };
            let next_block = (flipped / BLOCK_SIZE + 1) * BLOCK_SIZE;
            for (i, (span, record)) in log.spans.iter().zip(expected).enumerate() {
                let kept = outcome.records.contains(record);
                if i < k || span.start >= next_block as u64 {
                    assert!(kept, "flip at {flipped}: record {i} lost");
                }
            }
            assert!(
                !outcome
                    .records
                    .iter()
                    .any(|(o, _)| log.spans.get(k).is_some_and(|s| s.start == *o))
            );
            assert!(
                !outcome.skipped.is_empty(),
                "flip at {flipped}: nothing reported"
            );
            assert!(
                outcome
                    .skipped
                    .iter()
                    .all(|d| d.file.as_os_str() == LOG_PATH)
            );
        },
    );
}

#[test]
fn flipped_trailer_padding_is_never_read() {
    let first = payload(1, BLOCK_SIZE - HEADER_SIZE - 5);
    let log = TestLog::write(vec![first, payload(2, 10)]);
    for offset in BLOCK_SIZE - 5..BLOCK_SIZE {
        let mut bytes = log.bytes.to_vec();
        if let Some(byte) = bytes.get_mut(offset) {
            *byte = 0xA5;
        }
        for mode in common::ALL_MODES {
            let outcome = read_all(&bytes, mode);
            assert!(
                outcome.error.is_none() && outcome.skipped.is_empty(),
                "{mode:?}"
            );
            assert_eq!(outcome.records, log.expected(), "{mode:?}");
        }
    }
}

/// Five small records in one block, synced after each.
fn five_records() -> TestLog {
    TestLog::write_synced(
        (0..5)
            .map(|i: usize| payload(i as u64, 100 + 10 * i))
            .collect(),
    )
}

fn flipped(log: &TestLog, offset: u64) -> Vec<u8> {
    let mut bytes = log.bytes.to_vec();
    if let Some(byte) = bytes.get_mut(common::index(offset)) {
        *byte ^= 0x10;
    }
    bytes
}

#[test]
fn damage_a_later_sync_covers_is_corruption_in_tolerate_mode() {
    let log = five_records();
    let damaged = log.spans.get(2).cloned().unwrap_or_default();
    let outcome = read_all(&flipped(&log, damaged.start + 20), RecoveryMode::default());
    assert_eq!(
        outcome.records.as_slice(),
        log.expected().get(..2).unwrap_or_default()
    );
    assert_eq!(
        outcome.error.as_ref().and_then(corruption_offset),
        Some(damaged.start)
    );
}

#[test]
fn damage_in_the_last_record_is_a_torn_tail_in_tolerate_mode() {
    let log = five_records();
    let last = log.spans.get(4).cloned().unwrap_or_default();
    let outcome = read_all(&flipped(&log, last.start + 20), RecoveryMode::default());
    assert!(outcome.error.is_none(), "{:?}", outcome.error);
    assert_eq!(
        outcome.records.as_slice(),
        log.expected().get(..4).unwrap_or_default()
    );
    let damage = outcome.stopped_at.expect("torn tail reported");
    assert!(
        matches!(damage.kind, DamageKind::ChecksumMismatch { .. }),
        "{damage}"
    );
    assert_eq!(
        (damage.offset, damage.dropped),
        (last.start, last.start..last.end)
    );
}

#[test]
fn damaged_length_hiding_the_records_after_it_is_still_mid_log_corruption() {
    // A length made large enough to run past the end of the file looks like a torn tail at that
    // header; the records after it, found by scanning, show it is not.
    let log = five_records();
    let damaged = log.spans.get(1).cloned().unwrap_or_default();
    let mut bytes = log.bytes.to_vec();
    if let Some(high_length_byte) = bytes.get_mut(common::index(damaged.start) + 5) {
        *high_length_byte = 0x10;
    }
    let outcome = read_all(&bytes, RecoveryMode::default());
    let Some(Error::Corruption { reason, .. }) = &outcome.error else {
        panic!("{:?}", outcome.error);
    };
    assert!(
        reason.contains("cut off by the end of the file"),
        "{reason}"
    );
    assert_eq!(
        outcome.error.as_ref().and_then(corruption_offset),
        Some(damaged.start)
    );
}

#[test]
fn corruption_error_message_names_the_file_and_offset() {
    let log = five_records();
    let damaged = log.spans.get(3).cloned().unwrap_or_default();
    let outcome = read_all(
        &flipped(&log, damaged.start + 9),
        RecoveryMode::AbsoluteConsistency,
    );
    let message = outcome.error.map(|e| e.to_string()).unwrap_or_default();
    assert!(message.contains(LOG_PATH), "{message}");
    assert!(
        message.contains(&format!("offset {}", damaged.start)),
        "{message}"
    );
}
