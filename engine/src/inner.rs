//! `DbInner`: the state an open database shares with its handles and background threads, and
//! `DbState`, the part of it that changes under the state lock. What the state means is here;
//! what changes it is in the files named after each change (`write`, `memtable_switch`,
//! `flush`, `compact`, `version_set`, `column_family`). The public handle is `db::Db`.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock};
use std::thread::JoinHandle;

use bytes::Bytes;
use cairn_compaction::picker::Pick;
use cairn_fs::{FileLock, FileSystem};
use cairn_sstable::{BlockCache, Table};
use cairn_wal::LogWriter;

use crate::counters::Counters;
use crate::error::{Error, Result, StopCause};
use crate::live_logs::LiveLogs;
use crate::manifest::{ManifestState, ManifestWriter};
use crate::options::Options;
use crate::snapshot_list::SnapshotList;
use crate::super_version::{MemSet, SuperVersion};
use crate::table_cache::TableCache;
use crate::write_queue::WriteQueue;

/// State shared by the database, its handles and its background thread.
#[derive(Debug)]
pub(crate) struct DbInner {
    pub(crate) dir: PathBuf,
    pub(crate) options: Options,
    /// Opened with [`Db::open_read_only`]: no writes, no background work, no lock, nothing on
    /// disk changes; a view of the files as of the open (or the last `catch_up`).
    pub(crate) read_only: bool,
    /// Closed: reads through a handle that outlived the database fail.
    pub(crate) closed: std::sync::atomic::AtomicBool,
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) tables: Arc<TableCache>,
    /// A read-only open's tables, opened when it read the version that names them and held
    /// while that version lives: a live writer may delete their files, and the open
    /// descriptors (or mappings) keep the bytes readable. Empty for a writer, whose sweep
    /// never deletes a table a live version names.
    pub(crate) pinned: Mutex<Vec<(std::sync::Weak<crate::version::Version>, Vec<Table>)>>,
    pub(crate) state: Mutex<DbState>,
    /// Signalled when a memtable is frozen, a flush finishes, or the database shuts down.
    pub(crate) state_changed: Condvar,
    /// The MANIFEST being appended to. Its lock serialises version edits and is held across
    /// their write and sync, which the state lock never is; it is taken before the state lock.
    pub(crate) manifest: Mutex<ManifestWriter>,
    pub(crate) super_version: RwLock<Arc<SuperVersion>>,
    pub(crate) writes: WriteQueue<DbInner>,
    pub(crate) wal: Mutex<LiveLogs>,
    /// Tells this open database from every other in the process: a column family handle of
    /// another one must not write or read here.
    pub(crate) instance: u64,
    /// The last sequence number whose write is in the memtables: what new reads see.
    pub(crate) visible_seqno: AtomicU64,
    /// The last sequence number whose write, and every one before it, is on disk and synced.
    pub(crate) durable_seqno: AtomicU64,
    pub(crate) snapshots: SnapshotList,
    pub(crate) stats: Counters,
    lock: Mutex<Option<FileLock>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// What changes under the state lock.
#[derive(Debug)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "independent flags of the engine's state, each read on its own"
)]
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
    /// Set once a write or flush failed in a way that leaves the files uncertain (or the
    /// sequence numbers ran out): why the database stopped.
    pub(crate) error: Option<StopCause>,
    /// Sweeps past their checks and deleting: close waits for them.
    pub(crate) sweeps: usize,
    /// The flush thread is writing a frozen memtable: recovery waits for it to end.
    pub(crate) flushing: bool,
    /// Automatic recovery attempts since the database last stopped (`resume`).
    pub(crate) recovery_attempts: u32,
    /// The stop came from a failed compaction (not a write, a flush or the MANIFEST).
    pub(crate) stopped_by_compaction: bool,
    /// Recoveries in a row from stops a compaction caused, each within a minute of the one
    /// before: a compaction failing the same way each time is a persistent failure.
    pub(crate) quick_recoveries: u32,
    /// When the last recovery finished.
    pub(crate) last_recovery: Option<std::time::Instant>,
    pub(crate) shutting_down: bool,
    /// Numbers of tables being written, not yet in the version: never deleted as obsolete.
    pub(crate) pending_outputs: std::collections::BTreeSet<u64>,
    /// Every version published to readers; tables of those still alive are not deleted.
    pub(crate) versions: Vec<std::sync::Weak<crate::version::Version>>,
    /// Compactions picked and not yet installed.
    pub(crate) compacting: Vec<Running>,
    /// A sweep left obsolete tables that an older reader still held.
    pub(crate) sweep_pending: bool,
    /// Background work (a scan over many tombstones in the active memtable, the delete
    /// persistence deadline) wants the memtables frozen; the next leader of the write queue
    /// does it.
    pub(crate) freeze_requested: bool,
    /// Per column family, key ranges where scans stepped over many tombstones.
    pub(crate) read_triggered: std::collections::BTreeMap<u32, Vec<(bytes::Bytes, bytes::Bytes)>>,
    /// Per column family, the reported ranges a pick last found nothing to do for: further
    /// reports within them are dropped while that pick would still find nothing (see
    /// `read_quiet::ReadQuiet`).
    pub(crate) read_quiet: std::collections::BTreeMap<u32, crate::read_quiet::ReadQuiet>,
    /// Tables an automatic in-place rewrite at the last level produced, by number: the picker
    /// leaves them for their tombstones until the oldest snapshot or the clock lets more go.
    pub(crate) futile: std::collections::BTreeMap<u64, crate::futile::FutileRewrite>,
    /// The number of the read view installed last ([`SuperVersion::number`]).
    pub(crate) view_number: u64,
}

/// A compaction that has been picked and not yet installed.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    pub(crate) cf: u32,
    pub(crate) pick: Pick,
    /// The time the pick was judged at, which the job judges at too: a job that read the
    /// clock again could, after the wall clock stepped back, find nothing of what the pick saw
    /// expire, rewrite the table unchanged, and leave the same pick for the next round.
    pub(crate) now: u64,
    /// The user-key range `[start, end]` it writes at its output level.
    pub(crate) start: Bytes,
    pub(crate) end: Bytes,
}

impl Running {
    pub(crate) fn conflicts(&self, other: &Running) -> bool {
        let shares_file = self
            .pick
            .all_inputs()
            .any(|n| other.pick.all_inputs().any(|m| m == n));
        let same_output = self.cf == other.cf && self.pick.output_level == other.pick.output_level;
        shares_file || (same_output && self.start <= other.end && other.start <= self.end)
    }
}

impl DbState {
    /// Fails with the stored error if an earlier failure stopped the database.
    pub(crate) fn check_running(&self) -> Result<()> {
        if let Some(cause) = &self.error {
            return Err(Error::stopped(cause));
        }
        if self.shutting_down {
            return Err(Error::closed());
        }
        Ok(())
    }

    /// Records a failure after which writes must stop until the database recovers (`resume`)
    /// or is reopened; the first one stays the reason given.
    pub(crate) fn stop(&mut self, error: &Error) {
        if self.error.is_none() {
            tracing::error!(error = %error, "stopping writes after a failure");
            self.error = Some(StopCause::of(error));
            self.stopped_by_compaction = false;
        }
    }
}

/// The next [`DbInner::instance`].
static NEXT_INSTANCE: AtomicU64 = AtomicU64::new(1);

impl DbInner {
    /// The table cache of a database in `dir` opened with `options`; made before the
    /// `DbInner`, so a read-only open can open its view's tables through it.
    pub(crate) fn table_cache(dir: &std::path::Path, options: &Options) -> Arc<TableCache> {
        let cache =
            (options.block_cache_bytes > 0).then(|| BlockCache::new(options.block_cache_bytes));
        Arc::new(TableCache::new(
            Arc::clone(&options.fs),
            dir.to_path_buf(),
            cache,
            options.max_open_tables,
            options.mmap_reads,
        ))
    }

    pub(crate) fn new(
        dir: PathBuf,
        options: Options,
        tables: Arc<TableCache>,
        parts: OpenedParts,
        read_only: bool,
    ) -> Self {
        let fs = Arc::clone(&options.fs);
        let mut memsets = vec![Arc::clone(&parts.mem)];
        memsets.extend(parts.imm.iter().rev().cloned());
        let sv = SuperVersion {
            number: 0,
            memsets,
            version: Arc::clone(&parts.meta.version),
            cfs: parts.meta.cfs.clone(),
        };
        let last_seqno = parts.meta.last_seqno;
        let initial_version = Arc::clone(&parts.meta.version);
        let pinned = if parts.pinned.is_empty() {
            Vec::new()
        } else {
            vec![(Arc::downgrade(&initial_version), parts.pinned)]
        };
        Self {
            tables,
            pinned: Mutex::new(pinned),
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
                imm: parts.imm,
                error: None,
                sweeps: 0,
                flushing: false,
                recovery_attempts: 0,
                stopped_by_compaction: false,
                quick_recoveries: 0,
                last_recovery: None,
                shutting_down: false,
                pending_outputs: std::collections::BTreeSet::new(),
                // The first read view's tables must outlive compactions like any other's.
                versions: vec![Arc::downgrade(&initial_version)],
                compacting: Vec::new(),
                freeze_requested: false,
                sweep_pending: false,
                read_triggered: std::collections::BTreeMap::new(),
                read_quiet: std::collections::BTreeMap::new(),
                futile: std::collections::BTreeMap::new(),
                view_number: 0,
            }),
            state_changed: Condvar::new(),
            manifest: Mutex::new(parts.manifest),
            super_version: RwLock::new(Arc::new(sv)),
            writes: WriteQueue::default(),
            wal: Mutex::new(LiveLogs::new(parts.wal)),
            instance: NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed),
            visible_seqno: AtomicU64::new(last_seqno),
            // Open flushed what it recovered into synced tables; a reader makes nothing durable.
            durable_seqno: AtomicU64::new(if read_only { 0 } else { last_seqno }),
            snapshots: SnapshotList::default(),
            stats: Counters::default(),
            lock: Mutex::new(parts.lock),
            threads: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn lock_state(&self) -> MutexGuard<'_, DbState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_manifest(&self) -> MutexGuard<'_, ManifestWriter> {
        self.manifest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_wal(&self) -> MutexGuard<'_, LiveLogs> {
        self.wal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn lock_threads(&self) -> MutexGuard<'_, Vec<JoinHandle<()>>> {
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
        state.view_number += 1;
        self.stats
            .immutable_memtables_peak
            .fetch_max(state.imm.len() as u64, Ordering::Relaxed);
        let sv = Arc::new(SuperVersion {
            number: state.view_number,
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
        match result {
            // Refused because the database had stopped: no new failure, and restating the
            // old one could stop it again after a recovery cleared it.
            Err(Error::Stopped { .. }) | Ok(()) => {}
            Err(e) => self.stop_with(&e),
        }
    }

    /// Runs a compaction as [`run_task`](Self::run_task) does, noting that a stop it causes
    /// came from a compaction (see `DbState::quick_recoveries`).
    pub(crate) fn run_compaction_task(&self, task: impl FnOnce() -> Result<()>) {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task))
            .unwrap_or_else(|_| Err(Error::Panicked("a compaction panicked".to_owned())));
        match result {
            Err(Error::Stopped { .. }) | Ok(()) => {}
            Err(e) => {
                let mut state = self.lock_state();
                if state.error.is_none() {
                    state.stop(&e);
                    state.stopped_by_compaction = true;
                }
                drop(state);
                self.state_changed.notify_all();
            }
        }
    }

    /// Records a failure after which writes must stop until the database is reopened.
    pub(crate) fn stop_with(&self, error: &Error) {
        self.lock_state().stop(error);
        self.state_changed.notify_all();
    }

    /// Stops the database: refuses new writes, waits for the writes in flight, stops the
    /// background threads, syncs the log, and only then releases the directory lock.
    pub(crate) fn shutdown(&self) -> Result<()> {
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
        let recoverable =
            !self.read_only && state.error.as_ref().is_some_and(StopCause::is_recoverable);
        drop(state);
        if recoverable {
            // Last chance: the memtables hold acknowledged writes a failed sync may have
            // dropped from the log, and nothing else will once this returns.
            match self.recover_alone(true) {
                Ok(()) => tracing::info!("recovered from the I/O error while closing"),
                Err(e) => tracing::error!(
                    error = %e,
                    "closing a database stopped by an I/O error, unrecovered: writes \
                     acknowledged since its log's last good sync may be lost"
                ),
            }
        }
        let error = self.lock_state().error.clone();
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
            Some(cause) => Err(Error::stopped(&cause)),
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
    /// Frozen memtables, oldest first: only a read-only open, which replays logs holding more
    /// than one memtable's worth, has any.
    pub(crate) imm: VecDeque<Arc<MemSet>>,
    pub(crate) wal: LogWriter,
    /// The tables a read-only open opened with its version (see [`DbInner::pinned`]).
    pub(crate) pinned: Vec<Table>,
}
