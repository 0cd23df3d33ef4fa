//! `RealFs`: the operating system's file system.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::file_system::{FileLock, FileSystem, ReadableFile, WritableFile};
use crate::{Error, Result};

/// The operating system's file system. Writes go straight to the kernel (no user-space buffer),
/// so a process crash loses nothing an `append` returned from.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl RealFs {
    /// The real file system.
    pub fn new() -> Self {
        Self
    }
}

impl FileSystem for RealFs {
    fn create(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = File::create(path).map_err(|e| Error::io("create", path, e))?;
        Ok(Box::new(RealWritableFile {
            path: path.to_path_buf(),
            file,
            len: 0,
        }))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn WritableFile>> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| Error::io("open_append", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("open_append", path, e))?
            .len();
        Ok(Box::new(RealWritableFile {
            path: path.to_path_buf(),
            file,
            len,
        }))
    }

    fn open_read(&self, path: &Path) -> Result<Box<dyn ReadableFile>> {
        let file = File::open(path).map_err(|e| Error::io("open_read", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("open_read", path, e))?
            .len();
        Ok(Box::new(RealReadableFile {
            path: path.to_path_buf(),
            file,
            len,
        }))
    }

    fn map(&self, path: &Path) -> Result<Bytes> {
        let file = File::open(path).map_err(|e| Error::io("map", path, e))?;
        let len = file
            .metadata()
            .map_err(|e| Error::io("map", path, e))?
            .len();
        if len == 0 {
            return Ok(Bytes::new());
        }
        // SAFETY: Cairn maps only files that are complete and never modified or truncated while
        // mapped (tables are written under a temporary name, synced, renamed, and then only read
        // until deleted; deleting a mapped file keeps its pages alive). The map is read-only.
        #[allow(unsafe_code)]
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io("map", path, e))?;
        Ok(Bytes::from_owner(mmap))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn remove(&self, path: &Path) -> Result<()> {
        std::fs::remove_file(path).map_err(|e| Error::io("remove", path, e))
    }

    fn create_dir_all(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io("create_dir_all", dir, e))
    }

    fn list(&self, dir: &Path) -> Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(|e| Error::io("list", dir, e))? {
            let entry = entry.map_err(|e| Error::io("list", dir, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn sync_dir(&self, dir: &Path) -> Result<()> {
        let handle = File::open(dir).map_err(|e| Error::io("sync_dir", dir, e))?;
        handle.sync_all().map_err(|e| Error::io("sync_dir", dir, e))
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn file_size(&self, path: &Path) -> Result<u64> {
        Ok(std::fs::metadata(path)
            .map_err(|e| Error::io("file_size", path, e))?
            .len())
    }

    fn lock(&self, path: &Path) -> Result<FileLock> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("lock", path, e))?;
        match file.try_lock() {
            Ok(()) => Ok(FileLock::new(path.to_path_buf(), file)),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
                path: path.to_path_buf(),
                holder: read_holder(path),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }

    fn lock_shared(&self, path: &Path) -> Result<Option<FileLock>> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io("lock_shared", path, e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(FileLock::new(path.to_path_buf(), file))),
            Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
                path: path.to_path_buf(),
                holder: read_holder(path),
            }),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock_shared", path, e)),
        }
    }
}

/// The pid of the process holding a `flock` on `path`, as the system's lock table says
/// (`/proc/locks` on Linux): the kernel's word, so it is never a stale note. None where there is
/// no such table, where `/proc` belongs to another pid namespace, or where the table shows no
/// entry (see [`holder_in_table`]).
fn read_holder(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    // A `/proc` of another pid namespace numbers processes as this one cannot see them.
    let proc_self = std::fs::read_link("/proc/self").ok()?;
    if proc_self.to_str()?.parse::<u32>().ok()? != std::process::id() {
        return None;
    }
    let (device, inode) = (device_name(meta.dev()), meta.ino().to_string());
    // The lock was just refused, so someone holds it: a table that shows no one was most likely
    // read while other locks came and went (see `read_lock_table`); a fresh read shows it.
    (0..4).find_map(|_| holder_in_table(&read_lock_table()?, &device, &inode))
}

/// A device as the lock table prints it, `major:minor` in hex (`fe:00`), from glibc's split of a
/// 64-bit `dev_t`.
fn device_name(dev: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    format!("{major:02x}:{minor:02x}")
}

/// `/proc/locks`, read in large calls. The kernel prints the table afresh for each `read`
/// (a page's worth at most), resuming at the entry number the last call reached, so an entry is
/// skipped whenever a lock listed before it goes away in between. `read_to_string`'s small first
/// probe made that common: a test process's threads taking and dropping locks hid the held lock
/// from one lookup in twenty-five. Large reads leave the window between pages only.
fn read_lock_table() -> Option<String> {
    use std::io::Read;
    // Room up front: `read_to_end` skips its small probe and reads in large calls.
    let mut table = Vec::with_capacity(64 << 10);
    File::open("/proc/locks")
        .ok()?
        .read_to_end(&mut table)
        .ok()?;
    String::from_utf8(table).ok()
}

/// The pid that `table` (the text of `/proc/locks`) shows holding a `flock` on the file with this
/// device (`08:01`) and inode. The entry is matched by device and inode; failing that (an overlay
/// file system reports its own device to `stat` and the lower one to the table), by the inode
/// alone when exactly one lock has it. A holder in a pid namespace the reader cannot see shows as
/// pid 0, which is no one.
fn holder_in_table(table: &str, device: &str, inode: &str) -> Option<u32> {
    // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; waiters have `->` after the number.
    let flocks: Vec<(u32, &str, &str)> = table
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(1) != Some(&"FLOCK") {
                return None;
            }
            let pid = fields.get(4)?.parse().ok()?;
            let (file_dev, file_ino) = fields.get(5)?.rsplit_once(':')?;
            Some((pid, file_dev, file_ino))
        })
        .collect();
    let on_inode = || flocks.iter().filter(|(_, _, ino)| *ino == inode);
    let pid = match on_inode().find(|(_, dev, _)| *dev == device) {
        Some(&(pid, _, _)) => pid,
        None if on_inode().count() == 1 => on_inode().next()?.0,
        None => return None,
    };
    Some(pid).filter(|pid| *pid != 0)
}

#[derive(Debug)]
struct RealWritableFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl WritableFile for RealWritableFile {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file
            .write_all(data)
            .map_err(|e| Error::io("append", &self.path, e))?;
        self.len += data.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        self.file
            .sync_data()
            .map_err(|e| Error::io("sync", &self.path, e))
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

#[derive(Debug)]
struct RealReadableFile {
    path: PathBuf,
    file: File,
    len: u64,
}

impl ReadableFile for RealReadableFile {
    /// Reads within the length the file had when opened: a file another process is still
    /// appending to (a live writer's log or MANIFEST, read beside it) reads as the prefix it
    /// was then, so a reader never meets a record being written after it judged the file's end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let room = self.len.saturating_sub(offset);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let Some(buf) = buf.get_mut(..want) else {
            return Ok(0);
        };
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.file.read_at(buf, offset) {
                // A signal arrived before anything was read: nothing happened, so try again.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                read => return read.map_err(|e| Error::io("read", &self.path, e)),
            }
        }
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

/// The number of file descriptors this process may hold open (the soft `RLIMIT_NOFILE`), or
/// `None` if it is unlimited or cannot be read. A table read with positional reads holds one
/// while it is open, so the engine sizes its table cache under it.
pub fn open_file_limit() -> Option<u64> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current
}

#[cfg(test)]
mod limit_tests {
    #[test]
    fn the_open_file_limit_is_read_and_above_what_the_process_holds() {
        let held = std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count) as u64;
        // `None` is an unlimited process.
        if let Some(limit) = super::open_file_limit() {
            assert!(limit >= held, "limit {limit}, holding {held}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{device_name, holder_in_table};

    const TABLE: &str = "\
1: POSIX  ADVISORY  WRITE 3839 fe:00:770190 0 EOF
2: FLOCK  ADVISORY  WRITE 4100 fe:00:770188 0 EOF
2: -> FLOCK  ADVISORY  WRITE 4200 fe:00:770188 0 EOF
3: FLOCK  ADVISORY  WRITE 4300 00:2f:770188 0 EOF
4: FLOCK  ADVISORY  READ 4400 00:31:900 0 EOF
5: FLOCK  ADVISORY  WRITE 0 fe:00:12 0 EOF
";

    #[test]
    fn devices_print_as_the_lock_table_prints_them() {
        assert_eq!(device_name(0xfe00), "fe:00");
        assert_eq!(device_name(0x2f), "00:2f");
        // major 259, minor 65536 + 3: both halves carry bits above the old 16-bit layout.
        let dev = (0x103 & 0xfff) << 8 | (0x10003 & 0xff) | (0x10003 & !0xff) << 12;
        assert_eq!(device_name(dev), "103:10003");
    }

    #[test]
    fn the_entry_on_the_same_device_and_inode_names_the_holder() {
        assert_eq!(holder_in_table(TABLE, "fe:00", "770188"), Some(4100));
        assert_eq!(holder_in_table(TABLE, "00:2f", "770188"), Some(4300));
    }

    #[test]
    fn an_inode_alone_names_the_holder_only_when_one_lock_has_it() {
        assert_eq!(holder_in_table(TABLE, "00:44", "900"), Some(4400));
        assert_eq!(holder_in_table(TABLE, "00:44", "770188"), None);
    }

    #[test]
    fn posix_locks_waiters_pid_zero_and_missing_entries_name_no_one() {
        assert_eq!(holder_in_table(TABLE, "fe:00", "770190"), None);
        assert_eq!(holder_in_table(TABLE, "fe:00", "12"), None);
        assert_eq!(holder_in_table(TABLE, "fe:00", "1"), None);
        assert_eq!(holder_in_table("", "fe:00", "770188"), None);
    }
}
