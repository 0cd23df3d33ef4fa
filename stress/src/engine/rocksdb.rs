//! RocksDB (rust-rocksdb) behind the harness's trait, in a column family named `stress`.
//!
//! RocksDB returns no sequence number for a write through rust-rocksdb, so writes and
//! snapshots are stamped through the [`Sequencer`]. Range and single deletes, range
//! compactions and the wait for compactions are its own. Writes use its defaults (the WAL
//! handed to the OS at every write group, no manual WAL flush), so a write that returned
//! survives a SIGKILL; a synced write sets `sync`.
//!
//! A snapshot borrows its database: each one the harness holds owns a clone of the `Arc<DB>`
//! beside it (one `self_cell`), and [`StressEngine::close`] drops every one before the
//! database, so no stray snapshot keeps RocksDB's lock at a reopen.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rocksdb::statistics::{StatsLevel, Ticker};
use rocksdb::{
    BottommostLevelCompaction, CompactOptions, DB, DBCompressionType, Direction, IteratorMode,
    Options, ReadOptions, SnapshotWithThreadMode, WaitForCompactOptions, WriteBatch, WriteOptions,
};

use super::registry::Registry;
use super::{
    EngineError, EngineKind, EngineSettings, EngineStats, Entry, OpenMode, STRESS_CF, Sequencer,
    SnapshotHandle, StressEngine, WriteOp,
};
use crate::expected::SeqNo;

type Snapshot<'db> = SnapshotWithThreadMode<'db, DB>;

self_cell::self_cell!(
    /// A snapshot with the database it borrows.
    struct HeldSnapshot {
        owner: Arc<DB>,
        #[covariant]
        dependent: Snapshot,
    }
);

/// An open RocksDB database and its stressed column family.
pub struct RocksDbEngine {
    db: Arc<DB>,
    /// Holds the statistics the tickers are read from.
    options: Options,
    sequencer: Arc<Sequencer>,
    snapshots: Registry<Arc<HeldSnapshot>>,
}

fn peer(e: impl std::fmt::Display) -> EngineError {
    EngineError::peer(EngineKind::Rocksdb, e)
}

fn options(settings: &EngineSettings) -> Options {
    let mut options = Options::default();
    options.create_if_missing(true);
    options.create_missing_column_families(true);
    options.set_write_buffer_size(settings.memtable_size);
    // Levels scaled to the memtable, as the harness scales Cairn's: a short run reaches the
    // bottom levels, where range tombstones and snapshots meet compaction's last rules.
    options.set_target_file_size_base(settings.target_file_size);
    options.set_max_bytes_for_level_base(settings.level_base_bytes);
    let (above, bottom) = if settings.compression {
        (DBCompressionType::Lz4, DBCompressionType::Zstd)
    } else {
        (DBCompressionType::None, DBCompressionType::None)
    };
    options.set_compression_type(above);
    options.set_bottommost_compression_type(bottom);
    options.enable_statistics();
    options.set_statistics_level(StatsLevel::ExceptHistogramOrTimers);
    options
}

/// Reads `[start, end)` of `cf` with `read` (which sets the snapshot, if any), in key order or
/// reverse.
fn read_range<'a>(
    iter: impl FnOnce(ReadOptions, IteratorMode<'a>) -> rocksdb::DBIteratorWithThreadMode<'a, DB>,
    range: Range<&'a [u8]>,
    backward: bool,
) -> Result<Vec<Entry>, EngineError> {
    let mut read = ReadOptions::default();
    read.set_iterate_lower_bound(range.start);
    read.set_iterate_upper_bound(range.end);
    let mode = if backward {
        IteratorMode::From(range.end, Direction::Reverse)
    } else {
        IteratorMode::From(range.start, Direction::Forward)
    };
    iter(read, mode)
        .map(|item| {
            let (k, v) = item.map_err(peer)?;
            Ok((Bytes::from(k.into_vec()), Bytes::from(v.into_vec())))
        })
        .collect()
}

impl RocksDbEngine {
    /// Opens RocksDB at `dir` with its `stress` column family (dropped and made afresh in
    /// `Fresh` mode; required in `Existing` mode).
    ///
    /// # Errors
    /// RocksDB's, or one saying the family is missing in `Existing` mode.
    pub fn open(
        dir: &Path,
        settings: &EngineSettings,
        mode: OpenMode,
    ) -> Result<Self, EngineError> {
        let options = options(settings);
        let mut families = DB::list_cf(&options, dir).unwrap_or_default();
        if !families.iter().any(|f| f == STRESS_CF) {
            if mode == OpenMode::Existing {
                return Err(super::family_missing(EngineKind::Rocksdb));
            }
            families.push(STRESS_CF.to_string());
        }
        let mut db = DB::open_cf(&options, dir, &families).map_err(peer)?;
        if mode == OpenMode::Fresh {
            db.drop_cf(STRESS_CF).map_err(peer)?;
            db.create_cf(STRESS_CF, &options).map_err(peer)?;
        }
        Ok(Self {
            db: Arc::new(db),
            options,
            sequencer: settings.sequencer.clone(),
            snapshots: Registry::new(),
        })
    }

    /// rust-rocksdb's manual compactions return no status (the C API drops it): a failed one
    /// shows as a background error, which must not pass for a compaction that ran.
    fn background_errors(&self) -> Result<(), EngineError> {
        match self.db.property_int_value("rocksdb.background-errors") {
            Ok(Some(0) | None) => Ok(()),
            Ok(Some(n)) => Err(peer(format!(
                "{n} background errors (a flush or compaction failed)"
            ))),
            Err(e) => Err(peer(e)),
        }
    }

    fn cf(&self) -> Result<&rocksdb::ColumnFamily, EngineError> {
        self.db
            .cf_handle(STRESS_CF)
            .ok_or_else(|| peer("the stress column family is gone"))
    }
}

impl StressEngine for RocksDbEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Rocksdb
    }

    fn write(&self, ops: &[WriteOp], sync: bool) -> Result<SeqNo, EngineError> {
        let cf = self.cf()?;
        let mut batch = WriteBatch::default();
        for op in ops {
            match op {
                WriteOp::Put { key, value } => batch.put_cf(cf, key, value),
                WriteOp::Delete { key } => batch.delete_cf(cf, key),
                WriteOp::SingleDelete { key } => batch.single_delete_cf(cf, key),
                WriteOp::DeleteRange { start, end, .. } => batch.delete_range_cf(cf, start, end),
            }
        }
        let mut options = WriteOptions::default();
        options.set_sync(sync);
        self.sequencer
            .write(|| self.db.write_opt(batch, &options).map_err(peer))
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        let value = self.db.get_cf(self.cf()?, key).map_err(peer)?;
        Ok(value.map(Bytes::from))
    }

    fn scan(&self, range: Range<&[u8]>, backward: bool) -> Result<Vec<Entry>, EngineError> {
        let cf = self.cf()?;
        read_range(
            |read, mode| self.db.iterator_cf_opt(cf, read, mode),
            range,
            backward,
        )
    }

    fn scan_all(&self) -> Result<Vec<Entry>, EngineError> {
        self.db
            .iterator_cf(self.cf()?, IteratorMode::Start)
            .map(|item| {
                let (k, v) = item.map_err(peer)?;
                Ok((Bytes::from(k.into_vec()), Bytes::from(v.into_vec())))
            })
            .collect()
    }

    fn latest_seqno(&self) -> SeqNo {
        self.sequencer.last()
    }

    fn snapshot(&self) -> Result<SnapshotHandle, EngineError> {
        let (held, seqno) = self
            .sequencer
            .snapshot(|| Ok(HeldSnapshot::new(self.db.clone(), |db| db.snapshot())))?;
        Ok(self.snapshots.hold(Arc::new(held), seqno))
    }

    fn scan_at(
        &self,
        snapshot: &SnapshotHandle,
        range: Range<&[u8]>,
    ) -> Result<Vec<Entry>, EngineError> {
        let held = self.snapshots.get(snapshot).map_err(peer)?;
        let cf = self.cf()?;
        held.with_dependent(|_, snap| {
            read_range(
                |read, mode| snap.iterator_cf_opt(cf, read, mode),
                range,
                false,
            )
        })
    }

    fn release(&self, snapshot: &SnapshotHandle) {
        self.snapshots.release(snapshot);
    }

    fn flush(&self) -> Result<(), EngineError> {
        self.db.flush_cf(self.cf()?).map_err(peer)
    }

    fn compact_range(&self, range: Range<&[u8]>) -> Result<(), EngineError> {
        self.db
            .compact_range_cf(self.cf()?, Some(range.start), Some(range.end));
        self.background_errors()
    }

    fn compact_all(&self) -> Result<(), EngineError> {
        self.flush()?;
        let mut options = CompactOptions::default();
        options.set_bottommost_level_compaction(BottommostLevelCompaction::Force);
        for name in self.families() {
            if let Some(cf) = self.db.cf_handle(&name) {
                self.db
                    .compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &options);
            }
        }
        self.wait_idle()
    }

    fn wait_idle(&self) -> Result<(), EngineError> {
        self.db
            .wait_for_compact(&WaitForCompactOptions::default())
            .map_err(peer)?;
        self.background_errors()
    }

    fn families(&self) -> Vec<String> {
        DB::list_cf(&self.options, self.db.path()).unwrap_or_default()
    }

    fn stats(&self) -> EngineStats {
        let ticker = |t| self.options.get_ticker_count(t);
        let dropped = [
            ("shadowed", Ticker::CompactionKeyDropNewerEntry),
            ("obsolete_tombstone", Ticker::CompactionKeyDropObsolete),
            ("range", Ticker::CompactionKeyDropRangeDel),
        ]
        .into_iter()
        .map(|(rule, t)| (rule.to_string(), ticker(t)))
        .collect();
        EngineStats {
            dropped,
            ..EngineStats::default()
        }
    }

    fn close(self: Box<Self>) -> Result<(), EngineError> {
        drop(self.snapshots.take_all());
        let Self { db, options, .. } = *self;
        let db = Arc::try_unwrap(db)
            .map_err(|_| peer("a snapshot outlived the registry and holds the database"))?;
        let synced = db.flush_wal(true).map_err(peer);
        drop(db);
        drop(options);
        synced
    }
}
