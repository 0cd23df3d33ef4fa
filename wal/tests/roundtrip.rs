//! Records written by `LogWriter` come back from `LogReader` byte for byte, with the offsets
//! `add_record` returned, whatever their sizes and block positions.

mod common;

use cairn_wal::{BLOCK_SIZE, HEADER_SIZE, LogWriter, RecoveryMode};
use common::{ALL_MODES, MemLog, TestLog, cases, len_leaving, payload, read_all, seed};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};

/// How the next record's length is chosen.
#[derive(Debug, Clone)]
enum Size {
    /// A fixed length.
    Len(usize),
    /// Whatever length ends the record exactly this many bytes before a block end: 0 fills the
    /// block, 1..=6 leave a trailer the writer pads, 7 leaves room for a header alone.
    Leaving(usize),
}

fn size() -> impl Strategy<Value = Size> {
    prop_oneof![
        Just(Size::Len(0)),
        (1..200usize).prop_map(Size::Len),
        (200..40_000usize).prop_map(Size::Len),
        (3 * BLOCK_SIZE..3 * BLOCK_SIZE + 5_000).prop_map(Size::Len),
        (0..=HEADER_SIZE + 1).prop_map(Size::Leaving),
    ]
}

/// Resolves sizes against the block position each record will be written at.
fn records_for(sizes: &[Size]) -> Vec<Vec<u8>> {
    let mut pos = 0u64;
    let mut records = Vec::new();
    for (seed, size) in (0u64..).zip(sizes) {
        let len = match *size {
            Size::Len(len) => len,
            Size::Leaving(leave) => len_leaving(pos, leave),
        };
        let record = payload(seed, len);
        let file = MemLog::default();
        let mut writer = LogWriter::with_offset(file.handle(), pos);
        writer.add_record(&record).expect("in-memory append");
        pos = writer.len();
        if let Size::Leaving(leave) = *size {
            let block = BLOCK_SIZE as u64;
            assert_eq!(
                (pos + leave as u64) % block,
                0,
                "record ends {leave} bytes before a block end"
            );
        }
        records.push(record);
    }
    records
}

fn config() -> Config {
    Config {
        cases: cases(64),
        rng_seed: RngSeed::Fixed(seed()),
        failure_persistence: None,
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn records_read_back_with_their_offsets_in_every_mode(
        sizes in prop::collection::vec(size(), 0..12)
    ) {
        let log = TestLog::write(records_for(&sizes));
        for mode in ALL_MODES {
            let outcome = read_all(&log.bytes, mode);
            prop_assert!(outcome.error.is_none(), "{mode:?}: {:?}", outcome.error);
            prop_assert_eq!(&outcome.records, &log.expected(), "{:?}", mode);
            prop_assert!(outcome.skipped.is_empty() && outcome.stopped_at.is_none());
        }
    }

    #[test]
    fn continuing_with_with_offset_writes_the_same_bytes_as_one_writer(
        sizes in prop::collection::vec(size(), 1..10),
        split in any::<prop::sample::Index>(),
    ) {
        let records = records_for(&sizes);
        let whole = TestLog::write(records.clone());
        let split = split.index(records.len() + 1);
        let (before, after) = records.split_at(split);

        let file = MemLog::default();
        let mut first = LogWriter::new(file.handle());
        for record in before {
            first.add_record(record).expect("in-memory append");
        }
        let len = first.len();
        drop(first);
        let mut second = LogWriter::with_offset(file.handle(), len);
        let offsets: Vec<u64> = after
            .iter()
            .map(|r| second.add_record(r).expect("in-memory append"))
            .collect();

        prop_assert_eq!(file.bytes(), whole.bytes.to_vec());
        let expected: Vec<u64> = whole.spans.iter().skip(split).map(|s| s.start).collect();
        prop_assert_eq!(offsets, expected);
    }
}

#[test]
fn empty_log_has_no_records() {
    for mode in ALL_MODES {
        let outcome = read_all(&[], mode);
        assert!(outcome.error.is_none() && outcome.records.is_empty());
    }
}

#[test]
fn record_exactly_filling_a_block_leaves_no_trailer() {
    let log = TestLog::write(vec![payload(1, BLOCK_SIZE - HEADER_SIZE), payload(2, 10)]);
    assert_eq!(log.spans.get(1).map(|s| s.start), Some(BLOCK_SIZE as u64));
    assert_eq!(
        read_all(&log.bytes, RecoveryMode::default()).records,
        log.expected()
    );
}

#[test]
fn trailer_of_six_bytes_is_zero_padding_before_the_next_record() {
    let first = payload(1, BLOCK_SIZE - HEADER_SIZE - 6);
    let log = TestLog::write(vec![first, payload(2, 10)]);
    let trailer = log.bytes.get(BLOCK_SIZE - 6..BLOCK_SIZE);
    assert_eq!(trailer, Some(&[0u8; 6][..]));
    assert_eq!(log.spans.get(1).map(|s| s.start), Some(BLOCK_SIZE as u64));
    assert_eq!(
        read_all(&log.bytes, RecoveryMode::default()).records,
        log.expected()
    );
}

#[test]
fn seven_bytes_before_a_block_end_hold_an_empty_first_fragment() {
    let first = payload(1, BLOCK_SIZE - 2 * HEADER_SIZE);
    let log = TestLog::write(vec![first, payload(2, 100)]);
    // The second record starts with a header alone (type FIRST, length 0) at the block end.
    assert_eq!(
        log.spans.get(1).map(|s| s.start),
        Some((BLOCK_SIZE - HEADER_SIZE) as u64)
    );
    assert_eq!(
        log.bytes.get(BLOCK_SIZE - 3..BLOCK_SIZE),
        Some(&[0u8, 0, 2][..])
    );
    assert_eq!(
        read_all(&log.bytes, RecoveryMode::default()).records,
        log.expected()
    );
}
