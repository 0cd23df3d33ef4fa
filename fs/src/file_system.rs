//! The `FileSystem` trait: every file operation the engine performs.

use std::fmt::Debug;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::Result;

/// The file operations Cairn performs, so a test can put a faulty disk under the engine.
///
/// Paths are absolute or relative to the process's working directory; implementations do not
/// interpret them beyond that. Durability follows POSIX: bytes are durable after
/// [`WritableFile::sync`], and a file's *name* (its creation, rename or removal) is durable only
/// after [`FileSystem::sync_dir`] on its parent directory.
pub trait FileSystem: Send + Sync + Debug {
    /// Creates `path` for writing, truncating it if it exists.
    ///
    /// # Errors
    /// `Error::Io` if the file cannot be created.
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>>;

    /// Opens an existing file for appending at its end.
    ///
    /// # Errors
    /// `Error::Io` if the file does not exist or cannot be opened.
    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>>;

    /// Opens `path` for positional reads.
    ///
    /// # Errors
    /// `Error::Io` if the file does not exist or cannot be opened.
    fn open_read(&self, path: &Path) -> Result<Box<dyn ReadableFile>>;

    /// Maps the whole of `path` into memory, read-only. The file must not change while mapped:
    /// Cairn only maps files that are complete and never written again (tables).
    ///
    /// # Errors
    /// `Error::Io` if the file does not exist or cannot be mapped.
    fn map(&self, path: &Path) -> Result<Bytes>;

    /// Renames `from` to `to`, replacing `to` if it exists. Durable after `sync_dir`.
    ///
    /// # Errors
    /// `Error::Io` if the rename fails.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;

    /// Removes the file at `path`. Durable after `sync_dir`.
    ///
    /// # Errors
    /// `Error::Io` if the file does not exist or cannot be removed.
    fn remove(&self, path: &Path) -> Result<()>;

    /// Creates `dir` and any missing parents.
    ///
    /// # Errors
    /// `Error::Io` if a directory cannot be created.
    fn create_dir_all(&self, dir: &Path) -> Result<()>;

    /// The names (not paths) of the entries in `dir`, sorted.
    ///
    /// # Errors
    /// `Error::Io` if the directory cannot be read.
    fn list(&self, dir: &Path) -> Result<Vec<String>>;

    /// Makes the creations, renames and removals of names in `dir` durable.
    ///
    /// # Errors
    /// `Error::Io` if the directory cannot be opened or synced.
    fn sync_dir(&self, dir: &Path) -> Result<()>;

    /// True if `path` exists.
    fn exists(&self, path: &Path) -> bool;

    /// The size of the file at `path` in bytes.
    ///
    /// # Errors
    /// `Error::Io` if the file does not exist.
    fn file_size(&self, path: &Path) -> Result<u64>;

    /// Takes an exclusive advisory lock on `path` (created if missing), held until the returned
    /// guard is dropped.
    ///
    /// # Errors
    /// `Error::Locked` if another process or handle holds it; `Error::Io` otherwise.
    fn lock(&self, path: &Path) -> Result<FileLock>;

    /// Takes a shared advisory lock on `path`, which must exist (it is never created): held by
    /// readers, it keeps a writer's [`lock`](Self::lock) out, and a writer's keeps it out.
    /// `None` if there is no such file.
    ///
    /// # Errors
    /// `Error::Locked` if another process or handle holds it exclusively; `Error::Io` otherwise.
    fn lock_shared(&self, path: &Path) -> Result<Option<FileLock>>;
}

/// A file open for appending.
pub trait WritableFile: Send + Sync + Debug {
    /// Appends `data`. The bytes are handed to the operating system before this returns, so a
    /// process crash after it does not lose them; only [`sync`](Self::sync) survives power loss.
    ///
    /// # Errors
    /// `Error::Io` if the write fails; the file may then hold a prefix of `data`.
    fn append(&mut self, data: &[u8]) -> Result<()>;

    /// Makes every appended byte durable (`fdatasync`).
    ///
    /// # Errors
    /// `Error::Io` if the sync fails; durability of the appended bytes is then unknown.
    fn sync(&mut self) -> Result<()>;

    /// The number of bytes in the file, counting every append.
    fn len(&self) -> u64;

    /// True if the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The path the file was opened under.
    fn path(&self) -> &Path;
}

/// A file open for positional reads.
pub trait ReadableFile: Send + Sync + Debug {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read (0 at end of file).
    ///
    /// # Errors
    /// `Error::Io` if the read fails.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize>;

    /// The size of the file in bytes when it was opened.
    fn len(&self) -> u64;

    /// True if the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The path the file was opened under.
    fn path(&self) -> &Path;

    /// Reads the whole file from `offset` to its end.
    ///
    /// # Errors
    /// `Error::Io` if a read fails.
    fn read_to_end_from(&self, offset: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut pos = offset;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.read_at(pos, &mut buf)?;
            if n == 0 {
                return Ok(out);
            }
            out.extend_from_slice(buf.get(..n).unwrap_or_default());
            pos += n as u64;
        }
    }
}

/// An exclusive lock on a file, released when dropped.
#[derive(Debug)]
pub struct FileLock {
    path: PathBuf,
    // Held for its lock; closing the handle releases it.
    _file: std::fs::File,
}

impl FileLock {
    pub(crate) fn new(path: PathBuf, file: std::fs::File) -> Self {
        Self { path, _file: file }
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}
