//! Bytes on disk: the sizes of the files under a database directory, as DESIGN.md §8 measures them, and the
//! bytes the file system allocated to them, which differ for sparse or preallocated files.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::Result;

/// Bytes of every file under `dir`.
///
/// # Errors
/// If the directory cannot be read.
pub fn dir_bytes(dir: &Path) -> Result<u64> {
    walk(dir, &|meta| meta.len())
}

/// Sums `size` over the files under `dir`. A file or directory that vanishes while it is read
/// (an engine deleting an obsolete file) counts as empty.
fn walk(dir: &Path, size: &dyn Fn(&std::fs::Metadata) -> u64) -> Result<u64> {
    let gone = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if gone(&e) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut total = 0;
    for entry in entries {
        let entry = entry?;
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        total += if meta.is_dir() {
            walk(&entry.path(), size)?
        } else {
            size(&meta)
        };
    }
    Ok(total)
}

/// Bytes the file system allocated to the files under `dir` (what `du` counts): unlike
/// [`dir_bytes`], a sparse preallocated file (fjall's journal) counts only what it holds, and
/// space reserved past a file's end (`RocksDB`'s preallocated log) counts in full.
///
/// # Errors
/// If the directory cannot be read.
pub fn allocated_bytes(dir: &Path) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    walk(dir, &|meta| meta.blocks() * 512)
}

/// Bytes under `dir` once they stop changing: the same in three readings 100 ms apart, or
/// the last reading after 5 s. Engines delete obsolete files just after the work that made
/// them obsolete, which may be just after a wait for that work returns.
///
/// # Errors
/// If the directory cannot be read.
pub fn settled_dir_bytes(dir: &Path) -> Result<u64> {
    let start = Instant::now();
    let mut last = dir_bytes(dir)?;
    let mut same = 0;
    while same < 2 && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
        let now = dir_bytes(dir)?;
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    Ok(last)
}
