//! Fuzzes the log reader: the input is a log file, read in every recovery mode.
//!
//! Whatever the bytes, reading must return records, stop, or return an error; never panic. The
//! modes must also agree with each other, since they differ only in what they do at damage:
//!
//! - absolute consistency, point-in-time and tolerate-corrupted-tail return the same records
//!   (everything before the first damage), and stop at (or fail at) the same offset;
//! - skip-corrupted returns those records first, and reports damage whenever the others stop;
//! - record offsets increase and lie inside the file.
//!
//! Seed the corpus with real logs (a few records, a record spanning blocks) to get past the
//! checksums quickly.

#![no_main]

use std::io::Write;

use cairn_fs::{FileSystem, RealFs};
use cairn_wal::{Error, LogReader, RecoveryMode};
use libfuzzer_sys::fuzz_target;

/// What one pass of a reader produced.
struct Pass {
    records: Vec<(u64, Vec<u8>)>,
    /// Where the first damage was, if the reader met one (as an error or a quiet stop).
    damage_at: Option<u64>,
    skipped: usize,
}

fn read(fs: &dyn FileSystem, path: &std::path::Path, mode: RecoveryMode) -> Pass {
    let mut reader = LogReader::open(fs, path, mode).expect("the input file opens");
    let mut records = Vec::new();
    let mut damage_at = None;
    loop {
        match reader.next_record() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => break,
            Err(Error::Corruption { offset, file, .. }) => {
                assert_eq!(file, path, "a corruption names the file it is in");
                damage_at = Some(offset);
                break;
            }
            Err(e) => panic!("unexpected error reading a local file: {e}"),
        }
    }
    assert!(
        matches!(reader.next_record(), Ok(None)),
        "nothing after the end"
    );
    let damage_at = damage_at.or_else(|| reader.stopped_at().map(|d| d.offset));
    Pass {
        records,
        damage_at,
        skipped: reader.skipped().len(),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut file = tempfile::NamedTempFile::new().expect("a temporary file");
    file.write_all(data).expect("the input is written");
    let fs = RealFs::new();
    let path = file.path();

    let absolute = read(&fs, path, RecoveryMode::AbsoluteConsistency);
    let point = read(&fs, path, RecoveryMode::PointInTime);
    let tolerate = read(&fs, path, RecoveryMode::TolerateCorruptedTail);
    let skip = read(&fs, path, RecoveryMode::SkipCorrupted);

    let len = data.len() as u64;
    for pass in [&absolute, &point, &tolerate, &skip] {
        let offsets: Vec<u64> = pass.records.iter().map(|(offset, _)| *offset).collect();
        assert!(
            offsets.windows(2).all(|w| w.first() < w.last()),
            "offsets increase"
        );
        assert!(
            offsets.iter().all(|&o| o < len),
            "offsets lie inside the file"
        );
        assert!(
            pass.damage_at.is_none_or(|o| o < len),
            "damage lies inside the file"
        );
    }
    assert_eq!(absolute.records, point.records);
    assert_eq!(absolute.records, tolerate.records);
    assert_eq!(absolute.damage_at, point.damage_at);
    assert_eq!(absolute.damage_at, tolerate.damage_at);
    assert!(skip.records.starts_with(&absolute.records));
    assert_eq!(absolute.damage_at.is_some(), skip.skipped > 0);
});
