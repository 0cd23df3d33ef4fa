//! Pieces several engine test files share.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cairn::{CompactionFilter, Decision};

/// A compaction filter that holds the first compaction consulting it until the test opens the
/// gate: a way to have a compaction in flight while something else happens.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    entered: bool,
    open: bool,
}

impl Gate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Waits until a compaction is held at the gate; false if none came within `timeout`.
    pub fn wait_entered(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| !s.entered)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.entered
    }

    /// Lets every compaction through, now and later.
    pub fn open(&self) {
        self.lock().open = true;
        self.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl CompactionFilter for Gate {
    fn filter(&self, _cf: &str, _key: &[u8], _value: &[u8]) -> Decision {
        let mut state = self.lock();
        state.entered = true;
        self.changed.notify_all();
        while !state.open {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        Decision::Keep
    }
}

/// The names of the table files in `dir`, sorted.
pub fn tables_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| Path::new(n).extension().is_some_and(|e| e == "sst"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The table files under `dir` this process has mapped now, from `/proc/self/maps`, each with
/// whether it was deleted (a mapping keeps a deleted file's bytes on disk).
pub fn mapped_tables(dir: &Path) -> std::collections::BTreeSet<(String, bool)> {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        // address perms offset dev inode path [(deleted)]
        .filter_map(|line| line.splitn(6, char::is_whitespace).nth(5))
        .filter_map(|path| table_under(dir, path.trim_start()))
        .collect()
}

/// The table files under `dir` this process holds now, mapped or open (`/proc/self/fd`), each
/// with whether it was deleted: either keeps a deleted file's bytes on disk.
pub fn held_tables(dir: &Path) -> std::collections::BTreeSet<(String, bool)> {
    let fds = std::fs::read_dir("/proc/self/fd").expect("/proc/self/fd");
    let mut held = mapped_tables(dir);
    held.extend(
        fds.filter_map(Result::ok)
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .filter_map(|path| table_under(dir, &path.to_string_lossy())),
    );
    held
}

/// `path` (as `/proc` prints it, maybe ending in ` (deleted)`) if it names a table under `dir`,
/// with whether it was deleted.
fn table_under(dir: &Path, path: &str) -> Option<(String, bool)> {
    let (path, deleted) = match path.strip_suffix(" (deleted)") {
        Some(path) => (path, true),
        None => (path, false),
    };
    let is_table = Path::new(path).extension().is_some_and(|e| e == "sst");
    (path.starts_with(&*dir.to_string_lossy()) && is_table).then(|| (path.to_string(), deleted))
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// A directory holding a database created and closed, for a test to tamper with.
pub fn closed_database() -> tempfile::TempDir {
    let dir = tempdir();
    cairn::Db::open(dir.path(), cairn::Options::default())
        .expect("open")
        .close()
        .expect("close");
    dir
}

/// The operations a [`HoldingFs`] can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Append,
    Create,
    Rename,
    Sync,
    /// Opening a file to read it, or mapping it.
    OpenRead,
}

/// A file system over the real one that can hold one operation on a matching path until the
/// test lets it go: a way to freeze a thread in the middle of its I/O and see what else can
/// still run.
#[derive(Debug, Clone, Default)]
pub struct HoldingFs {
    shared: Arc<HoldState>,
}

#[derive(Debug, Default)]
struct HoldState {
    holds: Mutex<Holds>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Holds {
    /// Armed holds: the operation and a path fragment. Each catches one operation.
    armed: Vec<(Op, String)>,
    /// Operations caught and not yet released, by path.
    held: Vec<(Op, String)>,
    released: Vec<(Op, String)>,
}

impl HoldingFs {
    /// Holds the next `op` on a path containing `pattern` until [`release`](Self::release).
    pub fn hold(&self, op: Op, pattern: &str) {
        self.lock().armed.push((op, pattern.to_string()));
    }

    /// Waits until an `op` on a path containing `pattern` is being held; false on timeout.
    pub fn wait_held(&self, op: Op, pattern: &str, timeout: Duration) -> bool {
        let holds = self.lock();
        let (holds, _) = self
            .shared
            .changed
            .wait_timeout_while(holds, timeout, |h| {
                !h.held.iter().any(|(o, p)| *o == op && p.contains(pattern))
            })
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        holds
            .held
            .iter()
            .any(|(o, p)| *o == op && p.contains(pattern))
    }

    /// Lets the held `op` on a path containing `pattern` go on.
    pub fn release(&self, op: Op, pattern: &str) {
        let mut holds = self.lock();
        holds.armed.retain(|(o, p)| !(*o == op && p == pattern));
        holds.released.push((op, pattern.to_string()));
        drop(holds);
        self.shared.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Holds> {
        self.shared
            .holds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Holds the calling thread here if an armed hold matches.
    fn check(&self, op: Op, path: &Path) {
        let text = path.to_string_lossy().into_owned();
        let mut holds = self.lock();
        let Some(i) = holds
            .armed
            .iter()
            .position(|(o, p)| *o == op && text.contains(p.as_str()))
        else {
            return;
        };
        let (_, pattern) = holds.armed.remove(i);
        holds.held.push((op, text.clone()));
        self.shared.changed.notify_all();
        while !holds
            .released
            .iter()
            .any(|(o, p)| *o == op && text.contains(p.as_str()) && *p == pattern)
        {
            holds = self
                .shared
                .changed
                .wait(holds)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        holds.held.retain(|(o, p)| !(*o == op && *p == text));
    }
}

#[derive(Debug)]
struct HoldingFile {
    inner: Box<dyn cairn_fs::WritableFile>,
    fs: HoldingFs,
}

impl cairn_fs::WritableFile for HoldingFile {
    fn append(&mut self, data: &[u8]) -> cairn_fs::Result<()> {
        self.fs.check(Op::Append, self.inner.path());
        self.inner.append(data)
    }

    fn sync(&mut self) -> cairn_fs::Result<()> {
        self.fs.check(Op::Sync, self.inner.path());
        self.inner.sync()
    }

    fn len(&self) -> u64 {
        self.inner.len()
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl cairn_fs::FileSystem for HoldingFs {
    fn create(&self, path: &Path) -> cairn_fs::Result<Box<dyn cairn_fs::WritableFile>> {
        self.check(Op::Create, path);
        let inner = cairn_fs::RealFs::new().create(path)?;
        Ok(Box::new(HoldingFile {
            inner,
            fs: self.clone(),
        }))
    }

    fn open_append(&self, path: &Path) -> cairn_fs::Result<Box<dyn cairn_fs::WritableFile>> {
        let inner = cairn_fs::RealFs::new().open_append(path)?;
        Ok(Box::new(HoldingFile {
            inner,
            fs: self.clone(),
        }))
    }

    fn open_read(&self, path: &Path) -> cairn_fs::Result<Box<dyn cairn_fs::ReadableFile>> {
        self.check(Op::OpenRead, path);
        cairn_fs::RealFs::new().open_read(path)
    }

    fn map(&self, path: &Path) -> cairn_fs::Result<bytes::Bytes> {
        self.check(Op::OpenRead, path);
        cairn_fs::RealFs::new().map(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> cairn_fs::Result<()> {
        self.check(Op::Rename, from);
        cairn_fs::RealFs::new().rename(from, to)
    }

    fn remove(&self, path: &Path) -> cairn_fs::Result<()> {
        cairn_fs::RealFs::new().remove(path)
    }

    fn create_dir_all(&self, dir: &Path) -> cairn_fs::Result<()> {
        cairn_fs::RealFs::new().create_dir_all(dir)
    }

    fn list(&self, dir: &Path) -> cairn_fs::Result<Vec<String>> {
        cairn_fs::RealFs::new().list(dir)
    }

    fn sync_dir(&self, dir: &Path) -> cairn_fs::Result<()> {
        cairn_fs::RealFs::new().sync_dir(dir)
    }

    fn exists(&self, path: &Path) -> bool {
        cairn_fs::RealFs::new().exists(path)
    }

    fn file_size(&self, path: &Path) -> cairn_fs::Result<u64> {
        cairn_fs::RealFs::new().file_size(path)
    }

    fn lock(&self, path: &Path) -> cairn_fs::Result<cairn_fs::FileLock> {
        cairn_fs::RealFs::new().lock(path)
    }

    fn lock_shared(&self, path: &Path) -> cairn_fs::Result<Option<cairn_fs::FileLock>> {
        cairn_fs::RealFs::new().lock_shared(path)
    }
}

/// Runs `work` on its own thread and waits for it at most `timeout`: `None` if it is still
/// running (a thread stuck in a deadlock is left behind; the test fails on the `None`).
pub fn within<T: Send + 'static>(
    timeout: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(work());
    });
    rx.recv_timeout(timeout).ok()
}

/// The seeds a randomized test runs: `CAIRN_SEED=n` replays one, else `CAIRN_SEEDS` of them
/// (`default` if unset), from 0.
pub fn seeds(default: u64) -> Vec<u64> {
    if let Ok(seed) = std::env::var("CAIRN_SEED") {
        return vec![seed.parse().expect("CAIRN_SEED is a number")];
    }
    let n: u64 = std::env::var("CAIRN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    (0..n).collect()
}
