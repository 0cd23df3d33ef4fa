//! Begin, end and sealed marks: a log closed whole says so, a log cut anywhere before its end
//! does not (mid-log sync marks included), and a log can vouch for the logs before it.

mod common;

use std::sync::Arc;

use cairn_wal::{BLOCK_SIZE, Error, HEADER_SIZE, LogReader, LogWriter, RecoveryMode};
use common::{ALL_MODES, MemFile, MemLog, len_leaving, payload};

/// What reading a log to its end found.
#[derive(Debug, PartialEq, Eq)]
struct Read {
    records: Vec<Vec<u8>>,
    whole: bool,
    vouches: bool,
}

/// Reads the first `len` bytes of `bytes` to the end in `mode`.
fn read(bytes: &Arc<[u8]>, len: usize, mode: RecoveryMode) -> Read {
    let mut reader = LogReader::new(Box::new(MemFile::prefix(Arc::clone(bytes), len)), mode);
    let mut records = Vec::new();
    while let Ok(Some((_, record))) = reader.next_record() {
        records.push(record);
    }
    Read {
        records,
        whole: reader.closed_whole(),
        vouches: reader.vouches_for_earlier_logs(),
    }
}

fn records() -> Vec<Vec<u8>> {
    vec![
        payload(1, 100),
        payload(2, BLOCK_SIZE + 500),
        payload(3, 40),
    ]
}

/// A begun log holding `records()`, synced after each record if `sync` (so sync marks lie
/// between them), and ended.
fn ended_log(sync: bool) -> Arc<[u8]> {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.begin().expect("begin");
    for r in records() {
        writer.add_record(&r).expect("append");
        if sync {
            writer.sync().expect("sync");
        }
    }
    writer.end().expect("end");
    file.bytes().into()
}

#[test]
fn a_log_ended_whole_says_so_and_every_shorter_cut_does_not() {
    for sync in [false, true] {
        let bytes = ended_log(sync);
        for mode in ALL_MODES {
            let got = read(&bytes, bytes.len(), mode);
            assert_eq!(got.records, records(), "{mode:?}, synced: {sync}");
            assert!(got.whole, "{mode:?}, synced: {sync}");
        }
        // Every cut short of the whole log loses the end mark — one just after a sync mark
        // between records too; the records before the cut still read.
        for cut in 0..bytes.len() {
            let got = read(&bytes, cut, RecoveryMode::TolerateCorruptedTail);
            assert!(
                !got.whole,
                "cut at {cut} of {}, synced: {sync}",
                bytes.len()
            );
            assert!(
                records().starts_with(&got.records),
                "cut at {cut}: no prefix"
            );
        }
    }
}

#[test]
fn a_begun_log_that_stops_after_a_record_or_a_seal_is_not_whole() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.begin().expect("begin");
    for r in records() {
        writer.add_record(&r).expect("append");
    }
    writer.sync().expect("sync");
    let bytes: Arc<[u8]> = file.bytes().into();
    assert!(!read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency).whole);
    writer.seal().expect("seal");
    let bytes: Arc<[u8]> = file.bytes().into();
    let got = read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency);
    assert_eq!(got.records, records());
    assert!(!got.whole, "a begun log is whole only with its end mark");
}

#[test]
fn an_ended_log_sealed_later_is_whole_and_a_log_without_a_begin_mark_is_whole_when_sealed() {
    for begun in [false, true] {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        if begun {
            writer.begin().expect("begin");
        }
        for r in records() {
            writer.add_record(&r).expect("append");
        }
        if begun {
            writer.end().expect("end");
        }
        writer.seal().expect("seal");
        let bytes: Arc<[u8]> = file.bytes().into();
        let got = read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency);
        assert_eq!(got.records, records(), "begun: {begun}");
        assert!(got.whole, "begun: {begun}");
    }
}

#[test]
fn an_end_mark_at_a_block_end_pads_the_trailer_and_starts_the_next_block() {
    for leave in 0..HEADER_SIZE + 2 {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        writer.begin().expect("begin");
        let first = payload(9, len_leaving(HEADER_SIZE as u64, leave));
        writer.add_record(&first).expect("append");
        writer.end().expect("end");
        let bytes: Arc<[u8]> = file.bytes().into();
        let got = read(&bytes, bytes.len(), RecoveryMode::AbsoluteConsistency);
        assert_eq!(got.records, vec![first], "{leave} bytes left in the block");
        assert!(got.whole, "{leave} bytes left in the block");
    }
}

#[test]
fn an_end_mark_carries_the_pending_sync_mark_so_damage_before_it_is_corruption() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.begin().expect("begin");
    for r in records() {
        writer.add_record(&r).expect("append");
    }
    writer.sync().expect("sync");
    writer.end().expect("end");
    let mut bytes = file.bytes();
    // A byte of the last record, which the sync covered: the mark before the end says so.
    let at = bytes.len() - 7 - 15 - 20;
    *bytes.get_mut(at).expect("inside the log") ^= 0x55;
    let bytes: Arc<[u8]> = bytes.into();
    let mut reader = LogReader::new(
        Box::new(MemFile::prefix(Arc::clone(&bytes), bytes.len())),
        RecoveryMode::TolerateCorruptedTail,
    );
    let outcome: Result<Vec<_>, Error> =
        std::iter::from_fn(|| reader.next_record().transpose()).collect::<Result<_, _>>();
    assert!(
        matches!(outcome, Err(Error::Corruption { .. })),
        "damage in synced bytes read as a torn tail: {} records",
        outcome.map_or(0, |records| records.len())
    );
}

#[test]
fn damage_before_an_end_mark_is_no_clean_end() {
    let mut bytes = ended_log(false).to_vec();
    // A hole of zeros in the last record's payload (a page written back out of order lost).
    let at = bytes.len() - 7 - 20;
    bytes.get_mut(at..at + 10).expect("inside the log").fill(0);
    let bytes: Arc<[u8]> = bytes.into();
    let got = read(&bytes, bytes.len(), RecoveryMode::TolerateCorruptedTail);
    assert!(!got.whole);
    assert_eq!(
        got.records,
        records().into_iter().take(2).collect::<Vec<_>>()
    );
}

#[test]
fn a_sealed_mark_vouches_for_the_logs_before() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.begin().expect("begin");
    writer.add_record(b"before").expect("append");
    let bytes: Arc<[u8]> = file.bytes().into();
    assert!(!read(&bytes, bytes.len(), RecoveryMode::TolerateCorruptedTail).vouches);
    writer.mark_predecessors_sealed().expect("mark");
    writer.add_record(b"after").expect("append");
    let bytes: Arc<[u8]> = file.bytes().into();
    let got = read(&bytes, bytes.len(), RecoveryMode::TolerateCorruptedTail);
    assert!(got.vouches);
    assert_eq!(got.records, vec![b"before".to_vec(), b"after".to_vec()]);
}

#[test]
fn an_ended_log_takes_no_record_and_a_begin_mark_comes_first_or_not_at_all() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.add_record(b"one").expect("append");
    assert!(matches!(writer.begin(), Err(Error::InvalidArgument { .. })));
    writer.end().expect("end");
    let before = file.bytes();
    assert!(matches!(
        writer.add_record(b"two"),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        writer.mark_predecessors_sealed(),
        Err(Error::InvalidArgument { .. })
    ));
    assert_eq!(file.bytes(), before, "nothing written");
    writer.seal().expect("an ended log may still be sealed");
}
