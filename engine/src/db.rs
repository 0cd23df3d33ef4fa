//! `Db`: the public handle on an open database — opening and closing it, its column
//! families, and the data API (reads and writes on the default column family, which
//! `ColumnFamily` offers on any family) — all in one `impl Db`. The state it shares with its
//! handles and background threads is `inner::DbInner`.

use std::ops::RangeBounds;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use cairn_sstable::SeqNo;

use crate::audit::KeyTrace;
use crate::batch::WriteBatch;
use crate::column_family::ColumnFamily;
use crate::cursor::DbCursor;
use crate::error::{Error, Result};
use crate::explain::TombstoneExplanation;
use crate::inner::DbInner;
use crate::iterator::DbIterator;
use crate::options::{CfOptions, Options, WriteOptions};
use crate::read::Version;
use crate::snapshot::Snapshot;
use crate::stats::Stats;
use crate::transaction::Transaction;
use crate::version_edit::DEFAULT_CF;

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
        let default_cf = ColumnFamily::new(&inner, DEFAULT_CF, "default");
        Ok(Self { inner, default_cf })
    }

    /// Opens the database in `path` to read only, beside a live writer or none (RocksDB's
    /// secondary instance): a view of its MANIFEST, tables and logs as they were at the open.
    /// It takes no lock and changes nothing on disk — no MANIFEST or log is written, no file
    /// renamed or deleted — so the writer opens, restarts and deletes files as if it were not
    /// there. The view survives that: every table it names is opened now and kept open while
    /// the view lives (the writer may delete the file), the logs are replayed into memory, a
    /// record the writer is part way through ends its log, and an open that meets a file the
    /// writer just removed reads the directory again (a bounded number of times).
    /// [`catch_up`](Self::catch_up) moves it to the writer's newer state.
    ///
    /// Reads, snapshots, `stats`, `audit_key` and `explain_tombstones` work; writes, flushes,
    /// compactions and column-family changes fail with `ReadOnly`. Holding every table of the
    /// view open needs a file descriptor per table (none with [`Options::mmap_reads`]).
    ///
    /// ```
    /// # fn main() -> cairn::Result<()> {
    /// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
    /// let db = cairn::Db::open(dir.path(), cairn::Options::default())?;
    /// db.put("k", "v")?;
    /// let reader = cairn::Db::open_read_only(dir.path(), cairn::Options::default())?;
    /// assert_eq!(reader.get("k")?.as_deref(), Some(&b"v"[..]));
    /// assert!(matches!(reader.put("k", "w"), Err(cairn::Error::ReadOnly)));
    /// db.put("k", "w")?;
    /// assert_eq!(reader.get("k")?.as_deref(), Some(&b"v"[..])); // the view as of the open
    /// reader.catch_up()?;
    /// assert_eq!(reader.get("k")?.as_deref(), Some(&b"w"[..]));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// `InvalidArgument` if `path` holds no database; `Corruption` if its files are damaged
    /// beyond what the recovery mode tolerates (a torn tail of the newest log is not damage
    /// here: its writer may be writing it); `Io` if a file cannot be read, or, after the
    /// bounded retries, if the writer kept removing files the view needed.
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Self> {
        let inner = Arc::new(crate::read_only::open_read_only(path.as_ref(), options)?);
        let default_cf = ColumnFamily::new(&inner, DEFAULT_CF, "default");
        Ok(Self { inner, default_cf })
    }

    /// Moves a read-only open ([`open_read_only`](Self::open_read_only)) to the writer's
    /// state now: reads `CURRENT` and the MANIFEST again, opens the tables it names, and
    /// replays the logs it has not absorbed into fresh memtables. Reads started before keep the
    /// view they started with (an iterator reads its view to the end); reads after see the new
    /// one, with column families created or dropped since. The tables of the old view stay
    /// open while a read holds it, and are let go at a later `catch_up` once none does.
    ///
    /// Like RocksDB's `TryCatchUpWithPrimary`, it is the caller who decides when to move; the
    /// view never moves by itself.
    ///
    /// # Errors
    /// `InvalidArgument` on a database open for writing (always current), or while a
    /// [`Snapshot`] of this handle is held (its reads would move to a state the writer kept
    /// nothing for it in; drop it first); otherwise as [`open_read_only`](Self::open_read_only).
    /// On an error the view stays as it was.
    pub fn catch_up(&self) -> Result<()> {
        self.inner.catch_up()
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
    /// now keeps each of them. It moves with synced writes (which sync every log before them)
    /// and with flushes (whose tables hold the memtables' writes); it lags
    /// [`latest_seqno`](Self::latest_seqno) by the unsynced writes. It speaks for the writes this handle holds: those its open recovered (flushed
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
        Ok(ColumnFamily::new(&self.inner, id, name))
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
            .map(|(&id, _)| ColumnFamily::new(&self.inner, id, name))
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

    /// Recovers from a stop caused by an I/O error (a failed log or MANIFEST write or sync, a
    /// failed flush or compaction): switches to a new log, writes every memtable to level-0
    /// tables, records them through a fresh, synced MANIFEST, and lets writes resume. No write
    /// acknowledged before the error is lost, even when the failed sync dropped the log's
    /// unsynced pages: the memtables still held them. `Ok` at once if the database is running.
    /// With [`Options::auto_recovery`] (the default) the database does this on its own.
    ///
    /// # Errors
    /// `ReadOnly` for a read-only database; `Stopped` when the stop's cause is not an I/O
    /// error (corruption, a panic) or the database is closing; the I/O error of a failed
    /// attempt, after which the database stays stopped with its first error.
    pub fn resume(&self) -> Result<()> {
        self.inner.resume()
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
    ) -> Result<Vec<TombstoneExplanation>> {
        self.default_cf.explain_tombstones(range)
    }

    /// Every place that still holds a version or tombstone of `key` in the default family. See
    /// [`ColumnFamily::audit_key`].
    ///
    /// # Errors
    /// `Corruption` if a table on the way is damaged.
    pub fn audit_key(&self, key: impl AsRef<[u8]>) -> Result<Vec<KeyTrace>> {
        self.default_cf.audit_key(key)
    }

    // The data API on the default column family.

    /// Sets `key` to `value`. See [`ColumnFamily::put`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn put(&self, key: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.put(key, value)
    }

    /// Sets `key` to `value` with a time to live. See [`ColumnFamily::put_with_ttl`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn put_with_ttl(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        ttl: Duration,
    ) -> Result<()> {
        self.default_cf.put_with_ttl(key, value, ttl)
    }

    /// Deletes `key`. See [`ColumnFamily::delete`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.delete(key)
    }

    /// Single-deletes `key`. See [`ColumnFamily::single_delete`].
    ///
    /// # Errors
    /// As [`ColumnFamily::put`].
    pub fn single_delete(&self, key: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.single_delete(key)
    }

    /// Deletes `[start, end)`. See [`ColumnFamily::delete_range`].
    ///
    /// # Errors
    /// As [`ColumnFamily::delete_range`].
    pub fn delete_range(&self, start: impl AsRef<[u8]>, end: impl AsRef<[u8]>) -> Result<()> {
        self.default_cf.delete_range(start, end)
    }

    /// The value of `key`. See [`ColumnFamily::get`].
    ///
    /// # Errors
    /// As [`ColumnFamily::get`].
    pub fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Bytes>> {
        self.default_cf.get(key)
    }

    /// Live versions of `key`. See [`ColumnFamily::get_versions`].
    ///
    /// # Errors
    /// As [`ColumnFamily::get`].
    pub fn get_versions(&self, key: impl AsRef<[u8]>, limit: usize) -> Result<Vec<Version>> {
        self.default_cf.get_versions(key, limit)
    }

    /// The live entries in `range`. See [`ColumnFamily::range`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbIterator> {
        self.default_cf.range(range)
    }

    /// The live entries whose keys start with `prefix`. See [`ColumnFamily::prefix`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Result<DbIterator> {
        self.default_cf.prefix(prefix)
    }

    /// A cursor over the live entries in `range`. See [`ColumnFamily::cursor_range`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn cursor_range<K: AsRef<[u8]>>(&self, range: impl RangeBounds<K>) -> Result<DbCursor> {
        self.default_cf.cursor_range(range)
    }

    /// A cursor over every live entry. See [`ColumnFamily::cursor`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn cursor(&self) -> Result<DbCursor> {
        self.default_cf.cursor()
    }

    /// Every live entry. See [`ColumnFamily::iter`].
    ///
    /// # Errors
    /// As [`ColumnFamily::range`].
    pub fn iter(&self) -> Result<DbIterator> {
        self.default_cf.iter()
    }

    /// Applies `batch` atomically; returns the sequence number of its last write.
    ///
    /// # Errors
    /// `InvalidArgument` if any write in it is invalid, names a column family of another
    /// database, the whole batch is over the log's record limit, or its range deletes over each
    /// other would need more memory than [`Options::memtable_size`] allows them (nothing is
    /// written); otherwise as [`ColumnFamily::put`].
    pub fn write(&self, batch: WriteBatch) -> Result<SeqNo> {
        self.inner.write(batch, false)
    }

    /// Applies `batch` atomically with `options`.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn write_opt(&self, batch: WriteBatch, options: &WriteOptions) -> Result<SeqNo> {
        self.inner.write(batch, options.sync)
    }

    /// A snapshot of the database as it is now, released on drop.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot::new(Arc::clone(&self.inner))
    }

    /// The engine's statistics.
    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Starts an optimistic transaction at a snapshot of now.
    pub fn transaction(&self) -> Transaction<'_> {
        Transaction::new(&self.inner, self.snapshot())
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Err(e) = self.inner.shutdown() {
            tracing::warn!(error = %e, "closing the database on drop failed");
        }
    }
}
