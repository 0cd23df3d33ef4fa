//! A log cut at every byte offset, as a crash in the middle of an append leaves it.
//!
//! A record is *complete* when all its bytes (first header to last payload byte) lie before the
//! cut. A cut in block-trailer padding, or exactly between records, cuts no record: the padding
//! belongs to the append of the record after it, which had not started. One case cannot be told
//! from preallocated space: a cut after only zero bytes of a record's first header (its CRC
//! starts with zero bytes) leaves zeros at the end of the file, which are no damage.

mod common;

use cairn_wal::{BLOCK_SIZE, HEADER_SIZE, RecoveryMode};
use common::{Outcome, TestLog, corruption_offset, len_leaving, payload, read_prefix};

/// A dozen records over three blocks: an empty one, small and mid-sized ones, one that leaves a
/// 3-byte trailer at the first block end, and one split between the second and third blocks.
/// (Sizes stay moderate so reading at every cut stays fast; `roundtrip` covers huge records.)
fn log() -> TestLog {
    let mut records = vec![
        payload(0, 5000),
        Vec::new(),
        payload(2, 7000),
        payload(3, 6500),
    ];
    records.push(payload(4, 8000));
    let pos = (records.iter().map(Vec::len).sum::<usize>() + records.len() * HEADER_SIZE) as u64;
    records.push(payload(5, len_leaving(pos, 3)));
    for (seed, len) in (6..).zip([7800, 100, 8000, 8000, 7900, 2000]) {
        records.push(payload(seed, len));
    }
    let log = TestLog::write(records);
    assert_eq!(
        log.bytes.get(BLOCK_SIZE - 3..BLOCK_SIZE),
        Some(&[0u8; 3][..])
    );
    let last = log.spans.last().cloned().unwrap_or_default();
    assert!(last.start < 2 * BLOCK_SIZE as u64 && last.end > 2 * BLOCK_SIZE as u64);
    log
}

/// What a cut at `cut` does: the number of complete records, and the record it cuts through
/// (if it cuts one in a way that is visible as damage).
fn classify(log: &TestLog, cut: usize) -> (usize, Option<usize>) {
    let cut64 = cut as u64;
    let complete = log.spans.iter().take_while(|s| s.end <= cut64).count();
    let torn = log.spans.get(complete).filter(|s| {
        let written = log
            .bytes
            .get(common::index(s.start)..cut)
            .unwrap_or_default();
        s.start < cut64 && !(written.len() < HEADER_SIZE && written.iter().all(|&b| b == 0))
    });
    (complete, torn.map(|_| complete))
}

/// Reads the log cut at each of `cuts` in `mode` and hands the outcome to `check`, with the
/// records the writer wrote.
fn check_cuts(
    mode: RecoveryMode,
    cuts: impl Fn(&TestLog) -> Vec<usize>,
    check: impl Fn(&TestLog, &[(u64, Vec<u8>)], usize, &Outcome) + Sync,
) {
    let log = log();
    let expected = log.expected();
    let cuts = cuts(&log);
    // Two threads: reading a 67 KB log at each of its 67,000 cuts is most of this suite's time.
    std::thread::scope(|scope| {
        for half in cuts.chunks(cuts.len().div_ceil(2)) {
            let (log, expected, check) = (&log, &expected, &check);
            scope.spawn(move || {
                for &cut in half {
                    check(log, expected, cut, &read_prefix(&log.bytes, cut, mode));
                }
            });
        }
    });
}

fn every_cut(log: &TestLog) -> Vec<usize> {
    (0..=log.len()).collect()
}

/// Every cut within a header's length of a record or block boundary, where outcomes change, and
/// a stride through the rest. Enough for point-in-time and skip modes: they meet the same damage
/// as the two modes checked at every cut, and only act on it differently.
fn sampled_cuts(log: &TestLog) -> Vec<usize> {
    let boundaries = log.spans.iter().flat_map(|s| [s.start, s.end]);
    let blocks = (0..=log.len() / BLOCK_SIZE).map(|b| (b * BLOCK_SIZE) as u64);
    let mut cuts: Vec<usize> = boundaries
        .chain(blocks)
        .flat_map(|b| b.saturating_sub(HEADER_SIZE as u64 + 1)..=b + HEADER_SIZE as u64 + 1)
        .map(common::index)
        .chain((0..log.len()).step_by(61))
        .filter(|&c| c <= log.len())
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

#[test]
fn tolerate_mode_recovers_every_complete_record_at_every_cut() {
    check_cuts(
        RecoveryMode::TolerateCorruptedTail,
        every_cut,
        |log, expected, cut, outcome| {
            let (complete, torn) = classify(log, cut);
            assert!(outcome.error.is_none(), "cut {cut}: {:?}", outcome.error);
            assert_eq!(
                outcome.records.as_slice(),
                expected.get(..complete).unwrap_or_default()
            );
            match (&outcome.stopped_at, torn.and_then(|i| log.spans.get(i))) {
                (None, None) => {}
                (Some(damage), Some(span)) => assert!(
                    span.start <= damage.offset && damage.offset < cut as u64,
                    "cut {cut}: {damage}"
                ),
                (damage, span) => panic!("cut {cut} in record {span:?}: stopped at {damage:?}"),
            }
        },
    );
}

#[test]
fn absolute_mode_fails_exactly_when_the_cut_is_inside_a_record() {
    check_cuts(
        RecoveryMode::AbsoluteConsistency,
        every_cut,
        |log, _, cut, outcome| {
            let (complete, torn) = classify(log, cut);
            match (torn.and_then(|i| log.spans.get(i)), &outcome.error) {
                (None, None) => assert_eq!(outcome.records.len(), complete, "cut {cut}"),
                (Some(span), Some(error)) => {
                    let offset = corruption_offset(error).unwrap_or_else(|| panic!("{error:?}"));
                    assert!(
                        span.start <= offset && offset < cut as u64,
                        "cut {cut}: {error}"
                    );
                    assert_eq!(outcome.records.len(), complete, "records before the damage");
                }
                (span, error) => panic!("cut {cut} in record {span:?}: {error:?}"),
            }
        },
    );
}

#[test]
fn point_in_time_mode_stops_at_the_cut_record_without_error() {
    check_cuts(
        RecoveryMode::PointInTime,
        sampled_cuts,
        |log, _, cut, outcome| {
            let (complete, torn) = classify(log, cut);
            assert!(outcome.error.is_none(), "cut {cut}: {:?}", outcome.error);
            assert_eq!(outcome.records.len(), complete, "cut {cut}");
            assert_eq!(outcome.stopped_at.is_some(), torn.is_some(), "cut {cut}");
        },
    );
}

#[test]
fn skip_mode_skips_only_the_cut_record() {
    check_cuts(
        RecoveryMode::SkipCorrupted,
        sampled_cuts,
        |log, _, cut, outcome| {
            let (complete, torn) = classify(log, cut);
            assert!(outcome.error.is_none(), "cut {cut}: {:?}", outcome.error);
            assert_eq!(outcome.records.len(), complete, "cut {cut}");
            assert_eq!(
                outcome.skipped.len(),
                usize::from(torn.is_some()),
                "cut {cut}"
            );
        },
    );
}

#[test]
fn cut_inside_block_trailer_is_a_clean_end() {
    let log = log();
    let trailer_start = BLOCK_SIZE - 3;
    for cut in trailer_start..=BLOCK_SIZE {
        let outcome = read_prefix(&log.bytes, cut, RecoveryMode::AbsoluteConsistency);
        assert!(outcome.error.is_none(), "cut {cut}: {:?}", outcome.error);
        assert_eq!(outcome.records.len(), 6, "cut {cut}");
    }
}
