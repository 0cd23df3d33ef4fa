//! The end mark: a log closed whole says so, and a log cut anywhere before its end does not,
//! so recovery can tell a closed log from one a power loss shortened.

mod common;

use std::sync::Arc;

use cairn_wal::{BLOCK_SIZE, HEADER_SIZE, LogReader, LogWriter, RecoveryMode};
use common::{ALL_MODES, MemFile, MemLog, len_leaving, payload};

/// Reads the first `len` bytes of `bytes` to the end in `mode`: the records, and whether the
/// reader saw the log end with a mark.
fn read(bytes: &Arc<[u8]>, len: usize, mode: RecoveryMode) -> (Vec<Vec<u8>>, bool) {
    let mut reader = LogReader::new(Box::new(MemFile::prefix(Arc::clone(bytes), len)), mode);
    let mut records = Vec::new();
    while let Ok(Some((_, record))) = reader.next_record() {
        records.push(record);
    }
    (records, reader.ended_with_mark())
}

fn records() -> Vec<Vec<u8>> {
    vec![
        payload(1, 100),
        payload(2, BLOCK_SIZE + 500),
        payload(3, 40),
    ]
}

#[test]
fn a_log_ended_whole_says_so_and_every_shorter_cut_does_not() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    for r in records() {
        writer.add_record(&r).expect("append");
    }
    writer.end().expect("end");
    let bytes: Arc<[u8]> = file.bytes().into();
    for mode in ALL_MODES {
        assert_eq!(
            read(&bytes, bytes.len(), mode),
            (records(), true),
            "{mode:?}"
        );
    }
    // Every cut short of the whole log loses the mark; the records before the cut still read.
    for cut in 0..bytes.len() {
        let (got, ended) = read(&bytes, cut, RecoveryMode::TolerateCorruptedTail);
        assert!(!ended, "cut at {cut} of {}", bytes.len());
        assert!(records().starts_with(&got), "cut at {cut}: not a prefix");
    }
}

#[test]
fn a_log_that_stops_after_a_record_has_no_mark() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    for r in records() {
        writer.add_record(&r).expect("append");
    }
    writer.sync().expect("sync");
    let bytes: Arc<[u8]> = file.bytes().into();
    assert_eq!(
        read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency),
        (records(), false)
    );
}

#[test]
fn a_sealed_log_ends_with_a_mark_with_or_without_an_end_mark_before_the_seal() {
    for ended in [false, true] {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        for r in records() {
            writer.add_record(&r).expect("append");
        }
        if ended {
            writer.end().expect("end");
        }
        writer.seal().expect("seal");
        let bytes: Arc<[u8]> = file.bytes().into();
        assert_eq!(
            read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency),
            (records(), true),
            "ended first: {ended}"
        );
    }
}

#[test]
fn an_end_mark_at_a_block_end_pads_the_trailer_and_starts_the_next_block() {
    for leave in 0..HEADER_SIZE + 2 {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        let first = payload(9, len_leaving(0, leave));
        writer.add_record(&first).expect("append");
        writer.end().expect("end");
        let bytes: Arc<[u8]> = file.bytes().into();
        assert_eq!(
            read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency),
            (vec![first], true),
            "{leave} bytes left in the block"
        );
    }
}

#[test]
fn damage_before_an_end_mark_is_no_clean_end() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    for r in records() {
        writer.add_record(&r).expect("append");
    }
    writer.end().expect("end");
    let mut bytes = file.bytes();
    // A hole of zeros in the last record's payload (a page written back out of order lost).
    let at = bytes.len() - 7 - 20;
    bytes.get_mut(at..at + 10).expect("inside the log").fill(0);
    let bytes: Arc<[u8]> = bytes.into();
    let (got, ended) = read(&bytes, bytes.len(), RecoveryMode::TolerateCorruptedTail);
    assert!(!ended);
    assert_eq!(got, records().into_iter().take(2).collect::<Vec<_>>());
}
