//! What `LogWriter` promises beyond the bytes: one append per record, continuing an existing
//! log, its limits, and refusing to write after a failed append.

mod common;

use cairn_fs::{FileSystem, RealFs};
use cairn_wal::{BLOCK_SIZE, Error, LogReader, LogWriter, MAX_RECORD_LEN, RecoveryMode};
use common::{MemLog, payload};

#[test]
fn each_record_is_one_append_even_when_it_spans_blocks() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer
        .add_record(&payload(1, BLOCK_SIZE - 10))
        .expect("append");
    writer
        .add_record(&payload(2, 3 * BLOCK_SIZE))
        .expect("append");
    writer.add_record(b"").expect("append");
    assert_eq!(file.appends(), 3);
}

#[test]
fn reopened_log_continues_at_its_block_position() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let fs = RealFs::new();
    let path = dir.path().join("000003.log");
    // Ends 3 bytes before the first block end, so the next record must pad the trailer first.
    let first = payload(1, BLOCK_SIZE - 7 - 3);
    let mut writer = LogWriter::new(fs.create(&path)?);
    writer.add_record(&first)?;
    writer.sync()?;
    drop(writer);

    let len = fs.file_size(&path)?;
    let mut writer = LogWriter::with_offset(fs.open_append(&path)?, len);
    assert_eq!(writer.add_record(b"second")?, BLOCK_SIZE as u64);
    let mut writer = LogWriter::new(writer.into_file());
    assert_eq!(writer.add_record(b"third")?, BLOCK_SIZE as u64 + 7 + 6);
    assert_eq!(writer.path(), path);
    drop(writer);

    let reader = LogReader::open(&fs, &path, RecoveryMode::AbsoluteConsistency)?;
    let records = reader.collect::<Result<Vec<_>, _>>()?;
    let expected = vec![
        (0, first),
        (BLOCK_SIZE as u64, b"second".to_vec()),
        (BLOCK_SIZE as u64 + 13, b"third".to_vec()),
    ];
    assert_eq!(records, expected);
    Ok(())
}

#[test]
fn record_over_the_limit_is_an_invalid_argument_and_writes_nothing() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    // Zeroed allocations are lazy, so this costs no real memory: the length is checked first.
    let huge = vec![0u8; MAX_RECORD_LEN + 1];
    let result = writer.add_record(&huge);
    assert!(
        matches!(result, Err(Error::InvalidArgument { .. })),
        "{result:?}"
    );
    assert_eq!((file.appends(), writer.len()), (0, 0));
    assert_eq!(writer.add_record(b"still usable").ok(), Some(0));
}

#[test]
fn failed_append_makes_the_writer_refuse_further_records() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.add_record(b"durable").expect("append");
    file.fail_appends();
    let failed = writer.add_record(&payload(1, 1000));
    assert!(matches!(failed, Err(Error::Io(_))), "{failed:?}");
    let refused = writer.add_record(b"after");
    assert!(
        matches!(refused, Err(Error::WriterFailed { .. })),
        "{refused:?}"
    );
    assert_eq!(file.appends(), 2, "a refused record never reaches the file");
    assert_eq!(writer.len(), 14, "the failed record is not counted");
}

#[test]
fn failed_sync_makes_the_writer_refuse_further_records() {
    // The kernel may have dropped the unsynced bytes: records after them would sit behind a hole.
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.add_record(b"maybe lost").expect("append");
    file.fail_syncs();
    assert!(matches!(writer.sync(), Err(Error::Io(_))));
    let refused = writer.add_record(b"after");
    assert!(
        matches!(refused, Err(Error::WriterFailed { .. })),
        "{refused:?}"
    );
    assert!(matches!(writer.sync(), Err(Error::WriterFailed { .. })));
    assert_eq!(file.appends(), 1);
}

#[test]
fn after_a_failed_sync_the_marks_and_the_seal_are_refused_too() {
    // An end, sealed or begin mark after a hole would vouch for bytes the kernel may have
    // dropped: each is refused with the same error as a record, and nothing reaches the file.
    let refused = |what: &str, mark: fn(&mut LogWriter) -> cairn_wal::Result<()>| {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        if what == "begin" {
            file.fail_syncs();
            assert!(matches!(writer.sync(), Err(Error::Io(_))), "{what}");
        } else {
            writer.add_record(b"maybe lost").expect("append");
            file.fail_syncs();
            assert!(matches!(writer.sync(), Err(Error::Io(_))), "{what}");
        }
        let appends = file.appends();
        let result = mark(&mut writer);
        assert!(
            matches!(result, Err(Error::WriterFailed { .. })),
            "{what}: {result:?}"
        );
        assert_eq!(file.appends(), appends, "{what} reached the file");
    };
    refused("end", LogWriter::end);
    refused("sealed", LogWriter::mark_predecessors_sealed);
    refused("seal", LogWriter::seal);
    refused("begin", LogWriter::begin);
}

#[test]
fn a_sync_mark_precedes_the_first_record_after_a_sync_and_is_no_record() {
    let file = MemLog::default();
    let mut writer = LogWriter::new(file.handle());
    writer.add_record(b"one").expect("append");
    writer.sync().expect("sync");
    let second = writer.add_record(b"two").expect("append");
    let third = writer.add_record(b"three").expect("append");
    assert_eq!(second, 10 + 15, "a 15-byte mark lies between the records");
    assert_eq!(third, second + 10, "one mark per sync");
    let bytes = file.bytes();
    let mark = bytes.get(10..25).unwrap_or_default();
    assert_eq!(mark.get(6), Some(&5), "the mark's type");
    assert_eq!(
        mark.get(7..),
        Some(&10u64.to_le_bytes()[..]),
        "synced to offset 10"
    );
    let records = common::read_all(&bytes, cairn_wal::RecoveryMode::AbsoluteConsistency);
    assert_eq!(
        records.records,
        vec![
            (0, b"one".to_vec()),
            (25, b"two".to_vec()),
            (35, b"three".to_vec())
        ]
    );
}

#[test]
fn damage_in_the_last_synced_records_of_a_sealed_log_is_corruption() {
    let write = |seal: bool| {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        writer.add_record(&payload(1, 100)).expect("append");
        writer.sync().expect("sync");
        let second = writer.add_record(&payload(2, 100)).expect("append");
        writer.add_record(&payload(3, 100)).expect("append");
        if seal {
            writer.seal().expect("seal");
        } else {
            writer.sync().expect("sync");
        }
        let mut bytes = file.bytes();
        if let Some(byte) = bytes.get_mut(common::index(second) + 20) {
            *byte ^= 0x40;
        }
        common::read_all(&bytes, cairn_wal::RecoveryMode::TolerateCorruptedTail)
    };
    let unsealed = write(false);
    assert!(
        unsealed.error.is_none() && unsealed.records.len() == 1,
        "without a mark after the last sync the damage reads as tail: {:?}",
        unsealed.error
    );
    let sealed = write(true);
    assert!(
        matches!(sealed.error, Some(Error::Corruption { .. })),
        "{:?}",
        sealed.error
    );
}

#[test]
fn a_seal_fits_its_mark_at_any_block_position() {
    for leave in 0..20 {
        let file = MemLog::default();
        let mut writer = LogWriter::new(file.handle());
        let len = common::len_leaving(0, leave);
        writer.add_record(&payload(1, len)).expect("append");
        writer.seal().expect("seal");
        let bytes = file.bytes();
        let read = common::read_all(&bytes, cairn_wal::RecoveryMode::AbsoluteConsistency);
        assert!(read.error.is_none(), "leave {leave}: {:?}", read.error);
        assert_eq!(read.records.len(), 1, "leave {leave}");
        let appended = writer.add_record(b"after").expect("append after a seal");
        assert!(appended >= bytes.len() as u64);
    }
}
