//! Fragments out of sequence, and headers the writer never writes, built by hand: each is damage
//! with a named kind and offset, treated by each recovery mode as it says.

mod common;

use cairn_wal::{BLOCK_SIZE, DamageKind, Error, RecoveryMode};
use common::{fragment, read_all, sync_mark};

const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;

fn log(fragments: &[Vec<u8>]) -> Vec<u8> {
    fragments.concat()
}

/// `bytes` followed by a sync mark saying all of them were synced.
fn synced(bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out.extend(sync_mark(bytes.len() as u64));
    out
}

fn reason(error: Option<&Error>) -> String {
    match error {
        Some(Error::Corruption { reason, .. }) => reason.clone(),
        other => panic!("expected a corruption, got {other:?}"),
    }
}

#[test]
fn last_fragment_without_first_is_damage() {
    let bytes = log(&[fragment(LAST, b"x"), fragment(FULL, b"y")]);

    let absolute = read_all(&bytes, RecoveryMode::AbsoluteConsistency);
    assert!(reason(absolute.error.as_ref()).contains("without the start"));
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    assert!(
        tolerate.error.is_none() && tolerate.records.is_empty(),
        "never synced: an unsynced tail, dropped whole: {:?}",
        tolerate.error
    );
    let tolerate = read_all(&synced(&bytes), RecoveryMode::TolerateCorruptedTail);
    assert!(
        reason(tolerate.error.as_ref()).contains("synced to offset 16"),
        "a later sync covers the damage: corruption"
    );

    let point = read_all(&bytes, RecoveryMode::PointInTime);
    assert!(point.records.is_empty() && point.error.is_none());
    let stopped = point.stopped_at.expect("stopped at the orphan");
    assert_eq!(
        (stopped.offset, stopped.kind),
        (0, DamageKind::MissingFirstFragment)
    );

    let skip = read_all(&bytes, RecoveryMode::SkipCorrupted);
    assert_eq!(skip.records, vec![(8, b"y".to_vec())]);
    let skipped: Vec<_> = skip
        .skipped
        .iter()
        .map(|d| (d.offset, d.dropped.clone()))
        .collect();
    assert_eq!(skipped, vec![(0, 0..8)]);
}

#[test]
fn middle_fragment_without_first_is_damage() {
    let bytes = log(&[
        fragment(MIDDLE, b"m"),
        fragment(LAST, b"z"),
        fragment(FULL, b"y"),
    ]);
    let skip = read_all(&bytes, RecoveryMode::SkipCorrupted);
    assert_eq!(skip.records, vec![(16, b"y".to_vec())]);
    assert_eq!(skip.skipped.len(), 2, "{:?}", skip.skipped);
}

#[test]
fn new_record_inside_a_fragmented_record_is_damage() {
    let bytes = log(&[
        fragment(FIRST, b"a"),
        fragment(FIRST, b"b1"),
        fragment(LAST, b"b2"),
        fragment(FULL, b"c"),
    ]);
    let absolute = read_all(&bytes, RecoveryMode::AbsoluteConsistency);
    assert!(reason(absolute.error.as_ref()).contains("interrupted"));
    assert!(matches!(
        absolute.error,
        Some(Error::Corruption { offset: 0, .. })
    ));
    assert!(
        read_all(&synced(&bytes), RecoveryMode::TolerateCorruptedTail)
            .error
            .is_some()
    );

    let skip = read_all(&bytes, RecoveryMode::SkipCorrupted);
    assert_eq!(
        skip.records,
        vec![(8, b"b1b2".to_vec()), (26, b"c".to_vec())]
    );
    let damage = skip.skipped.first().expect("one skipped region");
    assert_eq!(
        (damage.kind, damage.dropped.clone()),
        (DamageKind::UnfinishedRecord, 0..8)
    );
}

#[test]
fn log_ending_inside_a_fragmented_record_is_a_torn_tail() {
    let bytes = log(&[fragment(FULL, b"a"), fragment(FIRST, b"b")]);
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    assert_eq!(
        (tolerate.records, tolerate.error.is_none()),
        (vec![(0, b"a".to_vec())], true)
    );
    let stopped = tolerate.stopped_at.expect("torn tail reported");
    assert_eq!(
        (stopped.offset, stopped.kind),
        (8, DamageKind::UnfinishedRecordAtEnd)
    );

    let absolute = read_all(&bytes, RecoveryMode::AbsoluteConsistency);
    assert!(matches!(
        absolute.error,
        Some(Error::Corruption { offset: 8, .. })
    ));
}

#[test]
fn unknown_record_type_is_damage() {
    let mut bad = fragment(FULL, b"b");
    if let Some(type_byte) = bad.get_mut(6) {
        *type_byte = 9;
    }
    let bytes = log(&[fragment(FULL, b"a"), bad, fragment(FULL, b"c")]);
    let absolute = read_all(&bytes, RecoveryMode::AbsoluteConsistency);
    assert!(reason(absolute.error.as_ref()).contains("unknown record type 9"));
    assert!(matches!(
        absolute.error,
        Some(Error::Corruption { offset: 8, .. })
    ));
    // "c" lies after the damage in the same block, and a sync covers both: corruption ...
    assert!(
        read_all(&synced(&bytes), RecoveryMode::TolerateCorruptedTail)
            .error
            .is_some()
    );
    // ... but skipped with the rest of the block, whose lengths cannot be trusted.
    let skip = read_all(&bytes, RecoveryMode::SkipCorrupted);
    assert_eq!(skip.records, vec![(0, b"a".to_vec())]);
}

#[test]
fn length_past_the_block_end_is_damage() {
    let mut bytes = fragment(FULL, b"a");
    let mut bad = fragment(FULL, b"b");
    if let Some(length) = bad.get_mut(4..6) {
        length.copy_from_slice(&u16::MAX.to_le_bytes());
    }
    bytes.extend(bad);
    bytes.resize(BLOCK_SIZE, 0xEE);
    let point = read_all(&bytes, RecoveryMode::PointInTime);
    assert_eq!(point.records, vec![(0, b"a".to_vec())]);
    let stopped = point.stopped_at.expect("stopped at the bad length");
    assert_eq!(
        (stopped.offset, stopped.kind),
        (8, DamageKind::BadLength { len: u16::MAX })
    );
    let tolerate = read_all(&bytes, RecoveryMode::TolerateCorruptedTail);
    assert!(
        tolerate.error.is_none(),
        "nothing valid after it: a torn tail"
    );
}
