//! The file-system layer of Cairn.
//!
//! Every write, sync, rename and delete the engine makes goes through the [`FileSystem`] trait, so
//! tests and the stress harness can swap the disk for one that loses power or fails on purpose.
//!
//! - [`RealFs`] is the operating system's file system. Tables are read with positional reads,
//!   or mapped through `memmap2` when the engine asks for it.
//! - [`FaultyFs`] wraps a real directory tree, records what has been made durable (file bytes by
//!   `sync`, names by `sync_dir`) and can simulate **power loss**: unsynced bytes vanish (all of
//!   them or a random tail), files created since their directory was last synced vanish, and
//!   renames and removals not yet made durable are undone; or unsynced pages persist out of order,
//!   leaving holes of zeros. It injects I/O errors one in N by operation kind (or the next one on a
//!   named file), failing as real disks and kernels do: torn appends, and syncs that drop the
//!   unsynced bytes. It can stop all writes as a dead process would.
//!
//! This crate does not know what the files hold: framing, checksums and formats belong to
//! `cairn-wal` and `cairn-sstable`.
//!
//! ```
//! use cairn_fs::{FileSystem, RealFs};
//! # fn main() -> cairn_fs::Result<()> {
//! # let dir = tempfile::tempdir()?;
//! let fs = RealFs::new();
//! let path = dir.path().join("000001.log");
//! let mut file = fs.create(&path)?;
//! file.append(b"hello")?;
//! file.sync()?;
//! fs.sync_dir(dir.path())?;
//! assert_eq!(&fs.map(&path)?[..], b"hello");
//! # Ok(())
//! # }
//! ```

mod error;
mod faulty;
mod file_system;
mod real;

pub use error::{Error, Result};
pub use faulty::{FaultyFs, OpKind, PowerLoss, SyncFailure};
pub use file_system::{FileLock, FileSystem, ReadableFile, WritableFile};
pub use real::{RealFs, open_file_limit};
