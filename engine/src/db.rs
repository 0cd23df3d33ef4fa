//! `Db`: the open database and its shared state.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;

use cairn_fs::{FileLock, FileSystem};
use cairn_sstable::{BlockCache, SeqNo};
use cairn_wal::LogWriter;

use crate::column_family::ColumnFamily;
use crate::error::{Error, Result};
use crate::manifest::{ManifestState, ManifestWriter};
use crate::options::{CfOptions, Options};
use crate::snapshot::SnapshotList;
use crate::super_version::{MemSet, SuperVersion};
use crate::table_cache::TableCache;
use crate::version_edit::DEFAULT_CF;
use crate::write_queue::WriteQueue;

/// An open database. The data API (`put`, `get`, `delete`, `range`, …) acts on the default
/// column family; [`column_family`](Self::column_family) gives handles on the others.
///
/// Dropping it stops the background flush thread and releases the directory lock, as
/// [`close`](Self::close) does without reporting errors.
///
/// ```
/// # fn main() -> cairn::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
/// let db = cairn::Db::open(dir.path(), cairn::Options::default())?;
/// db.put("user:1", "ada")?;
/// assert_eq!(db.get("user:1")?.as_deref(), Some(&b"ada"[..]));
/// db.delete("user:1")?;
/// assert_eq!(db.get("user:1")?, None);
/// db.close()?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Db {
    pub(crate) inner: Arc<DbInner>,
    pub(crate) default_cf: ColumnFamily,
}

/// State shared by the database, its handles and its background thread.
#[derive(Debug)]
pub(crate) struct DbInner {
    pub(crate) dir: PathBuf,
    pub(crate) options: Options,
    /// Opened with [`Db::open_read_only`]: no writes, no background work, nothing on disk
    /// changes.
    pub(crate) read_only: bool,
    /// Closed: reads through a handle that outlived the database fail.
    pub(crate) closed: std::sync::atomic::AtomicBool,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) tables: TableCache,
    pub(crate) state: Mutex<DbState>,
    /// Signalled when a memtable is frozen, a flush finishes, or the database shuts down.
    pub(crate) state_changed: Condvar,
    /// The MANIFEST being appended to. Its lock serialises version edits and is held across
    /// their write and sync, which the state lock never is; it is taken before the state lock.
    pub(crate) manifest: Mutex<ManifestWriter>,
    pub(crate) super_version: RwLock<Arc<SuperVersion>>,
    pub(crate) writes: WriteQueue,
    pub(crate) wal: Mutex<LogWriter>,
    /// Tells this open database from every other in the process: a column family handle of
    /// another one must not write or read here.
    pub(crate) instance: u64,
    /// The last sequence number whose write is in the memtables: what new reads see.
    pub(crate) visible_seqno: AtomicU64,
    /// The last sequence number whose write, and every one before it, is on disk and synced.
    pub(crate) durable_seqno: AtomicU64,
    pub(crate) snapshots: SnapshotList,
    pub(crate) stats: crate::stats::Counters,
    lock: Mutex<Option<FileLock>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What changes under the state lock.
#[derive(Debug)]
pub(crate) struct DbState {
    pub(crate) meta: ManifestState,
    /// The MANIFEST in use; the sweep deletes those numbered below it.
    pub(crate) manifest_number: u64,
    /// When the oldest edit past the MANIFEST's snapshot was written (ms of the database's
    /// clock): the delete persistence deadline rolls the MANIFEST over a stage after it.
    pub(crate) manifest_oldest_edit: Option<u64>,
    pub(crate) mem: Arc<MemSet>,
    /// Frozen memtables waiting for their flush, oldest first.
    pub(crate) imm: VecDeque<Arc<MemSet>>,
    /// Set once a write or flush failed in a way that leaves the files uncertain.
    pub(crate) error: Option<String>,
    /// Sweeps past their checks and deleting: close waits for them.
    pub(crate) sweeps: usize,
    pub(crate) shutting_down: bool,
    /// Numbers of tables being written, not yet in the version: never deleted as obsolete.
    pub(crate) pending_outputs: std::collections::BTreeSet<u64>,
    /// Every version published to readers; tables of those still alive are not deleted.
    pub(crate) versions: Vec<std::sync::Weak<crate::version::Version>>,
    /// Compactions picked and not yet installed.
    pub(crate) compacting: Vec<crate::compact::Running>,
    /// A sweep left obsolete tables that an older reader still held.
    pub(crate) sweep_pending: bool,
    /// Background work (a scan over many tombstones in the active memtable, the delete
    /// persistence deadline) wants the memtables frozen; the next leader of the write queue
    /// does it.
    pub(crate) freeze_requested: bool,
    /// Per column family, key ranges where scans stepped over many tombstones.
    pub(crate) read_triggered: std::collections::BTreeMap<u32, Vec<(bytes::Bytes, bytes::Bytes)>>,
}

impl DbState {
    /// Fails with the stored error if an earlier failure stopped the database.
    pub(crate) fn check_running(&self) -> Result<()> {
        if let Some(why) = &self.error {
            return Err(Error::Stopped(why.clone()));
        }
        if self.shutting_down {
            return Err(Error::closed());
        }
        Ok(())
    }

    /// Records a failure after which writes must stop until the database is reopened; the
    /// first one stays the reason given.
    pub(crate) fn stop(&mut self, error: &Error) {
        if self.error.is_none() {
            tracing::error!(error = %error, "stopping writes after a failure");
            self.error = Some(error.to_string());
        }
    }
}

impl Db {
    /// Opens (or, with `create_if_missing`, creates) the database in `path`, replaying its logs.
    ///
    /// # Errors
    /// `InvalidArgument` if the directory is missing (without `create_if_missing`), holds no
    /// database (without `create_if_missing`), holds one (with `error_if_exists`), or holds
    /// files that are not a Cairn database; `Io` if it is locked by another process or handle;
    /// `Corruption` if its files are damaged beyond what the recovery mode tolerates.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Self> {
        let inner = Arc::new(crate::recovery::open(path.as_ref(), options)?);
        let flusher = Arc::clone(&inner);
        let handle = std::thread::Builder::new()
            .name("cairn-flush".into())
            .spawn(move || flusher.run_flush_thread())
            .map_err(|e| Error::Io(cairn_fs::Error::from(e)))?;
        inner.lock_threads().push(handle);
        for i in 0..inner.options.background_threads {
            let compactor = Arc::clone(&inner);
            let handle = std::thread::Builder::new()
                .name(format!("cairn-compact-{i}"))
                .spawn(move || compactor.run_compaction_thread())
                .map_err(|e| Error::Io(cairn_fs::Error::from(e)))?;
            inner.lock_threads().push(handle);
        }
        let default_cf = ColumnFamily {
            db: Arc::clone(&inner),
            id: DEFAULT_CF,
            name: Arc::from("default"),
        };
        Ok(Self { inner, default_cf })
    }

    /// Opens the database in `path` to read only, beside no writer: nothing on disk changes —
    /// no MANIFEST or log is written, no file renamed or deleted. The logs a writer left are
    /// replayed into memory. Reads, snapshots, `audit_key` and `explain_tombstones` work;
    /// writes, flushes, compactions and column-family changes fail with `ReadOnly`. Several
    /// read-only opens may share a directory; a writer cannot open it meanwhile.
    ///
    /// ```
    /// # fn main() -> cairn::Result<()> {
    /// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    /// let db = cairn::Db::open(dir.path(), cairn::Options::default())?;
    /// db.put("k", "v")?;
    /// db.close()?;
    /// let reader = cairn::Db::open_read_only(dir.path(), cairn::Options::default())?;
    /// assert_eq!(reader.get("k")?.as_deref(), Some(&b"v"[..]));
    /// assert!(matches!(reader.put("k", "w"), Err(cairn::Error::ReadOnly)));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// `Io` (`Locked`) while another process or handle holds the database open for writing;
    /// `InvalidArgument` if `path` holds no database, or no `LOCK` file to share (a writer
    /// creates it); `Corruption` if its files are damaged beyond what the recovery mode
    /// tolerates.
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Self> {
        let inner = Arc::new(crate::recovery::open_read_only(path.as_ref(), options)?);
        let default_cf = ColumnFamily {
            db: Arc::clone(&inner),
            id: DEFAULT_CF,
            name: Arc::from("default"),
        };
        Ok(Self { inner, default_cf })
    }

    /// Stops background work, syncs the log and releases the directory.
    ///
    /// # Errors
    /// `Io` if the final log sync fails; the last error of a background flush, if one failed.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }

    /// The directory the database lives in.
    pub fn path(&self) -> &Path {
        &self.inner.dir
    }

    /// The engine clock's reading in milliseconds ([`Options::clock`]): the time writes are
    /// stamped with and TTLs and grace periods are measured against. Layers above the engine
    /// (soft-delete timestamps, leases) read time here so one clock drives them all.
    pub fn now_ms(&self) -> u64 {
        self.inner.options.clock.now_ms()
    }

    /// The sequence number of the last write visible to reads.
    pub fn latest_seqno(&self) -> SeqNo {
        self.inner.visible_seqno.load(Ordering::Acquire)
    }

    /// The sequence number up to which every write is synced to disk: a crash or a power loss
    /// now keeps each of them. It moves with synced writes and with memtable switches (which
    /// seal the old log); it lags [`latest_seqno`](Self::latest_seqno) by the unsynced
    /// writes. It speaks for the writes this handle holds: those its open recovered (flushed
    /// into synced tables, so all durable) and those made since; a write an earlier crash lost
    /// is not among them, even if its number is lower. A read-only handle syncs nothing: 0.
    pub fn durable_seqno(&self) -> SeqNo {
        self.inner.durable_seqno.load(Ordering::Acquire)
    }

    /// Creates a column family.
    ///
    /// # Errors
    /// `InvalidArgument` if one of that name exists or the name is empty; `Io` if the
    /// MANIFEST cannot be written.
    pub fn create_column_family(&self, name: &str, options: CfOptions) -> Result<ColumnFamily> {
        let id = self.inner.create_column_family(name, options)?;
        Ok(ColumnFamily {
            db: Arc::clone(&self.inner),
            id,
            name: Arc::from(name),
        })
    }

    /// A handle on the column family `name`.
    ///
    /// # Errors
    /// `ColumnFamilyNotFound` if there is none.
    pub fn column_family(&self, name: &str) -> Result<ColumnFamily> {
        let sv = self.inner.super_version();
        sv.cfs
            .iter()
            .find(|(_, (n, _))| n == name)
            .map(|(&id, _)| ColumnFamily {
                db: Arc::clone(&self.inner),
                id,
                name: Arc::from(name),
            })
            .ok_or_else(|| Error::ColumnFamilyNotFound(name.to_string()))
    }

    /// Drops the column family `name` and, once no reader needs them, its tables.
    ///
    /// # Errors
    /// `InvalidArgument` for `"default"`; `ColumnFamilyNotFound` if there is none.
    pub fn drop_column_family(&self, name: &str) -> Result<()> {
        let cf = self.column_family(name)?;
        if cf.id == DEFAULT_CF {
            return Err(Error::invalid(
                "the default column family cannot be dropped",
            ));
        }
        self.inner.drop_column_family(cf.id, name)
    }

    /// The names of every column family, `"default"` first.
    pub fn list_column_families(&self) -> Vec<String> {
        self.inner
            .super_version()
            .cfs
            .values()
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Freezes the memtables and waits until every frozen memtable is in a table.
    ///
    /// # Errors
    /// The error of a failed flush.
    pub fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    /// Waits until no background work is pending: every frozen memtable is flushed and no
    /// compaction is running or due.
    ///
    /// # Errors
    /// The error of a failed flush or compaction.
    pub fn wait_for_background_work(&self) -> Result<()> {
        self.inner.wait_for_background_work()
    }

    /// Compacts the default family's tables overlapping `range` down to the last level, dropping
    /// everything the garbage-collection rules allow. See [`ColumnFamily::compact_range`].
    ///
    /// # Errors
    /// The error of a failed flush or compaction.
    pub fn compact_range<K: AsRef<[u8]>>(
        &self,
        range: impl std::ops::RangeBounds<K>,
    ) -> Result<()> {
        self.default_cf.compact_range(range)
    }

    /// Every tombstone of the default family in `range` still on disk or in a memtable, and why
    /// it is kept. See [`ColumnFamily::explain_tombstones`].
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged.
    pub fn explain_tombstones<K: AsRef<[u8]>>(
        &self,
        range: impl std::ops::RangeBounds<K>,
    ) -> Result<Vec<crate::explain::TombstoneExplanation>> {
        self.default_cf.explain_tombstones(range)
    }

    /// Every place that still holds a version or tombstone of `key` in the default family. See
    /// [`ColumnFamily::audit_key`].
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged.
    pub fn audit_key(&self, key: impl AsRef<[u8]>) -> Result<Vec<crate::audit::KeyTrace>> {
        self.default_cf.audit_key(key)
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.inner.shutdown() {
            tracing::warn!(error = %e, "closing the database on drop failed");
        }
    }
}

/// The next [`DbInner::instance`].
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

impl DbInner {
    pub(crate) fn new(dir: PathBuf, options: Options, parts: OpenedParts, read_only: bool) -> Self {
        let cache =
            (options.block_cache_bytes > 0).then(|| BlockCache::new(options.block_cache_bytes));
        let fs = Arc::clone(&options.fs);
        let sv = SuperVersion {
            memsets: vec![Arc::clone(&parts.mem)],
            version: Arc::clone(&parts.meta.version),
            cfs: parts.meta.cfs.clone(),
        };
        let last_seqno = parts.meta.last_seqno;
        let initial_version = Arc::clone(&parts.meta.version);
        Self {
            tables: TableCache::new(Arc::clone(&fs), dir.clone(), cache, options.max_open_tables),
            dir,
            options,
            fs,
            read_only,
            closed: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(DbState {
                manifest_number: parts.manifest.number(),
                manifest_oldest_edit: None,
                meta: parts.meta,
                mem: parts.mem,
                imm: VecDeque::new(),
                error: None,
                sweeps: 0,
                shutting_down: false,
                pending_outputs: std::collections::BTreeSet::new(),
                // The first read view's tables must outlive compactions like any other's.
                versions: vec![Arc::downgrade(&initial_version)],
                compacting: Vec::new(),
                freeze_requested: false,
                sweep_pending: false,
                read_triggered: std::collections::BTreeMap::new(),
            }),
            state_changed: Condvar::new(),
            manifest: Mutex::new(parts.manifest),
            super_version: RwLock::new(Arc::new(sv)),
            writes: WriteQueue::default(),
            wal: Mutex::new(parts.wal),
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            visible_seqno: AtomicU64::new(last_seqno),
            // Open flushed what it recovered into synced tables; a reader makes nothing durable.
            durable_seqno: AtomicU64::new(if read_only { 0 } else { last_seqno }),
            snapshots: SnapshotList::default(),
            stats: crate::stats::Counters::default(),
            lock: Mutex::new(parts.lock),
            threads: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, DbState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_wal(&self) -> MutexGuard<'_, LogWriter> {
        self.wal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lock_threads(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
        self.threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The current read view.
    pub(crate) fn super_version(&self) -> Arc<SuperVersion> {
        Arc::clone(
            &self
                .super_version
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Publishes a new read view built from `state`. Called with the state lock held, so views
    /// are published in the order the state changed.
    pub(crate) fn install_super_version(&self, state: &mut DbState) {
        state.versions.retain(|v| v.strong_count() > 0);
        state.versions.push(Arc::downgrade(&state.meta.version));
        let mut memsets = vec![Arc::clone(&state.mem)];
        memsets.extend(state.imm.iter().rev().cloned());
        let sv = Arc::new(SuperVersion {
            memsets,
            version: Arc::clone(&state.meta.version),
            cfs: state.meta.cfs.clone(),
        });
        *self
            .super_version
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = sv;
    }

    /// Runs one task of a background thread; a panic in it stops the database (whatever it was
    /// doing may be half done) instead of quietly ending the thread.
    pub(crate) fn run_task(&self, what: &str, task: impl FnOnce() -> Result<()>) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task))
            .unwrap_or_else(|_| Err(Error::Panicked(format!("{what} panicked"))));
        if let Err(e) = result {
            self.stop_with(&e);
        }
    }

    /// Records a failure after which writes must stop until the database is reopened.
    pub(crate) fn stop_with(&self, error: &Error) {
        self.lock_state().stop(error);
        self.state_changed.notify_all();
    }

    /// Stops the database: refuses new writes, waits for the writes in flight, stops the
    /// background threads, syncs the log, and only then releases the directory lock.
    fn shutdown(&self) -> Result<()> {
        {
            let mut state = self.lock_state();
            if state.shutting_down {
                return Ok(());
            }
            state.shutting_down = true;
        }
        self.state_changed.notify_all();
        // Writers stalled in the queue see `shutting_down` and give up; one writing finishes.
        self.writes.close_and_drain();
        let threads: Vec<_> = self.lock_threads().drain(..).collect();
        for thread in threads {
            if thread.join().is_err() {
                tracing::error!("a background thread panicked");
            }
        }
        // A compaction a caller runs on its own thread (`compact_range`) is not ours to join:
        // wait for it, as it writes files and edits; and for a sweep already past its check.
        let mut state = self.lock_state();
        while !state.compacting.is_empty() || state.sweeps > 0 {
            state = self
                .state_changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        let error = state.error.clone();
        drop(state);
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        // Sealed: the next open reads these logs, and damage in them is then corruption. A
        // stopped database still syncs its log if it can (a log whose write or sync failed
        // refuses; the stored error says why the database stopped).
        let synced = if self.read_only {
            Ok(())
        } else {
            let wal = self.lock_wal().seal();
            match error {
                Some(_) => Ok(()),
                None => wal.and_then(|()| self.lock_manifest().seal()),
            }
        };
        self.lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        synced?;
        match error {
            Some(why) => Err(Error::Stopped(why)),
            None => Ok(()),
        }
    }
}

/// What recovery hands to a new `DbInner`.
#[derive(Debug)]
pub(crate) struct OpenedParts {
    pub(crate) lock: Option<FileLock>,
    pub(crate) manifest: ManifestWriter,
    pub(crate) meta: ManifestState,
    pub(crate) mem: Arc<MemSet>,
    pub(crate) wal: LogWriter,
}
