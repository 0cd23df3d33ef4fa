//! Cairn's log: the framing shared by the write-ahead log and the MANIFEST.
//!
//! A log is a sequence of opaque logical records in `LevelDB`'s format: 32 KiB blocks of physical
//! records (fragments), each with a CRC32, so a record of any size can be written with one append
//! and read back with one block in memory. [`LogWriter`] appends records; [`LogReader`] reads them
//! back and decides what damaged bytes mean through a [`RecoveryMode`]: a torn tail after a crash,
//! mid-log corruption, or a region to skip. Every corruption names the file and byte offset, as
//! an [`Error::Corruption`] or, where the mode reads on or stops quietly, as a [`Damage`] from
//! [`LogReader::skipped`] or [`LogReader::stopped_at`]. The bytes are described field by field in
//! `FORMAT.md`.
//!
//! This crate does not know what records mean: the engine encodes write batches into them and
//! the MANIFEST encodes version edits. It does not choose file names, decide when to sync, or
//! delete logs; and it reads and writes only through [`cairn_fs`], so tests can put a faulty disk
//! under it.
//!
//! ```
//! use cairn_fs::{FileSystem, RealFs};
//! use cairn_wal::{LogReader, LogWriter, RecoveryMode};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let fs = RealFs::new();
//! let path = dir.path().join("000001.log");
//!
//! let mut writer = LogWriter::new(fs.create(&path)?);
//! writer.add_record(b"a small record")?;
//! writer.add_record(&vec![7; 100_000])?; // spans four blocks
//! writer.sync()?;
//!
//! let reader = LogReader::open(&fs, &path, RecoveryMode::default())?;
//! let records: Vec<(u64, Vec<u8>)> = reader.collect::<Result<_, _>>()?;
//! assert_eq!(records, vec![(0, b"a small record".to_vec()), (21, vec![7; 100_000])]);
//! # Ok(())
//! # }
//! ```

mod error;
mod format;
mod physical;
mod reader;
mod recovery;
mod writer;

pub use error::{Error, Result};
pub use format::{BLOCK_SIZE, HEADER_SIZE, MAX_RECORD_LEN};
pub use reader::LogReader;
pub use recovery::{Damage, DamageKind, RecoveryMode};
pub use writer::LogWriter;
