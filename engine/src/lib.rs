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
//! Not in this crate yet: compaction and its garbage collection (`compact_range`,
//! `explain_tombstones`, `audit_key`, tombstone grace and the delete persistence deadline take
//! effect with issue 4). Until then level 0 only grows, and reads stay correct however many
//! tables it holds. Those calls return [`Error::Unsupported`].

mod api;
mod batch;
mod clock;
mod column_family;
mod compact;
mod db;
mod error;
mod filename;
mod flush;
mod iterator;
mod manifest;
mod memtable;
mod options;
mod read;
mod recovery;
mod snapshot;
mod stats;
mod super_version;
mod table_cache;
mod transaction;
mod version;
mod version_edit;
mod write;

pub use api::Snapshot;
pub use batch::WriteBatch;
pub use cairn_sstable::SeqNo;
pub use cairn_wal::RecoveryMode;
pub use clock::{Clock, ManualClock, SystemClock};
pub use column_family::ColumnFamily;
pub use db::Db;
pub use error::{Error, Result};
pub use iterator::DbIterator;
pub use options::{CfOptions, MAX_KEY_LEN, MAX_VALUE_LEN, Options, WriteOptions};
pub use read::Version;
pub use stats::{DropCounts, LevelStats, Stats};
pub use transaction::Transaction;
