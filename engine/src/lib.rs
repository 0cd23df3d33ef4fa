//! Cairn: an embedded LSM-tree key-value engine in which deletion is a first-class lifecycle.
//!
//! Writes go to a write-ahead log and a memtable; full memtables are flushed to level-0 tables
//! in the background; reads merge memtables and tables at a snapshot. Deletes come in three
//! kinds — [`delete`](Db::delete), [`single_delete`](Db::single_delete) and
//! [`delete_range`](Db::delete_range) — and a range delete costs one tombstone, not one per
//! key: scans seek past it.
//!
//! ```
//! use cairn::{Db, Options, WriteBatch};
//! # fn main() -> cairn::Result<()> {
//! # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
//! let db = Db::open(dir.path(), Options::default())?;
//! for i in 0..100 {
//!     db.put(format!("key{i:03}"), format!("value{i}"))?;
//! }
//! let snapshot = db.snapshot();
//! db.delete_range("key010", "key090")?;
//! assert_eq!(db.iter()?.count(), 20);
//! assert_eq!(snapshot.iter()?.count(), 100); // a snapshot's reads never change
//! let last = db.iter()?.next_back().transpose()?.map(|(k, _)| k);
//! assert_eq!(last.as_deref(), Some(&b"key099"[..]));
//! # Ok(())
//! # }
//! ```
//!
//! Compaction runs in the background (`Options::background_threads`) and applies the
//! garbage-collection rules of `cairn-compaction`: a tombstone leaves only when no snapshot is
//! older than it, nothing older lies below, and its grace period is over. Tombstones that pile up
//! are found by density, by scans that trip over them, and by the delete persistence deadline;
//! [`Db::explain_tombstones`] says why one is still there and [`Db::audit_key`] finds every trace
//! of a key.

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

mod audit;
mod batch;
mod clock;
mod column_family;
mod compact;
mod converted_runs;
mod counters;
mod cursor;
mod db;
mod error;
mod explain;
mod filename;
mod flush;
mod futile;
mod inner;
mod iterator;
mod level_iter;
mod live_logs;
mod log_dump;
mod log_record;
mod manifest;
mod manifest_dump;
mod memtable;
mod memtable_switch;
mod options;
#[cfg(feature = "planted-bugs")]
pub mod planted;
#[cfg(not(feature = "planted-bugs"))]
mod planted;
mod read;
mod read_only;
mod read_quiet;
mod recovery;
mod resume;
mod snapshot;
mod snapshot_list;
mod stats;
mod super_version;
mod table_cache;
mod transaction;
mod verify;
mod version;
mod version_edit;
mod version_set;
mod write;
mod write_queue;

pub use audit::{KeyTrace, Location};
pub use batch::WriteBatch;
pub use cairn_compaction::{CompactionFilter, Decision};
pub use cairn_sstable::Compression;
pub use cairn_sstable::Kind;
pub use cairn_sstable::SeqNo;
pub use cairn_wal::RecoveryMode;
pub use clock::{Clock, ManualClock, SystemClock};
pub use column_family::ColumnFamily;
pub use cursor::DbCursor;
pub use db::Db;
pub use error::{Error, Result, StopCause};
pub use explain::{TombstoneExplanation, TombstoneReason};
pub use iterator::DbIterator;
pub use log_dump::{LogBatch, LogOp, read_log};
pub use manifest_dump::{ManifestDump, ManifestEdit, read_manifest};
pub use options::{CfOptions, MAX_KEY_LEN, MAX_VALUE_LEN, Options, WriteOptions};
pub use read::Version;
pub use snapshot::Snapshot;
pub use stats::{CompactionCounts, DropCounts, LevelStats, Stats, TableInfo};
pub use transaction::Transaction;
pub use verify::{VerifyReport, verify};
