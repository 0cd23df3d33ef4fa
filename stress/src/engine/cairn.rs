//! Cairn behind the harness's trait: its own sequence numbers, native range and single
//! deletes, and the database itself for the work that uses the rest of its API.
//!
//! No lock is held around a write or `Db::snapshot`: the snapshot registry's lock covers only
//! the map. A race inside Cairn between a write and a snapshot (the planted
//! `SnapshotBeforeRegister`) stays reachable.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use cairn::{CfOptions, ColumnFamily, Compression, Db, Snapshot, WriteBatch, WriteOptions};

use super::registry::Registry;
use super::{
    EngineError, EngineKind, EngineSettings, EngineStats, Entry, OpenMode, STRESS_CF,
    SnapshotHandle, StressEngine, WriteOp,
};
use crate::expected::SeqNo;
use crate::held_model::HELD_CF;
use crate::ttl_model::TTL_FAMILIES;

/// A Cairn database and its stressed family.
pub struct CairnEngine {
    db: Db,
    cf: ColumnFamily,
    snapshots: Registry<Arc<Snapshot>>,
}

impl std::fmt::Debug for CairnEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CairnEngine").finish_non_exhaustive()
    }
}

impl CairnEngine {
    /// Opens Cairn at `dir` with `settings.cairn`, and the stressed family with the grace
    /// period; `Fresh` drops every family the harness uses first.
    ///
    /// # Errors
    /// Cairn's; `ColumnFamilyNotFound` for a family missing in `Existing` mode.
    pub fn open(dir: &Path, settings: &EngineSettings, mode: OpenMode) -> cairn::Result<Self> {
        let mut options = settings.cairn.clone();
        if !settings.compression {
            options = options.compression(Compression::None);
        }
        let db = Db::open(dir, options)?;
        if mode == OpenMode::Fresh {
            let names = [STRESS_CF, HELD_CF]
                .into_iter()
                .chain(TTL_FAMILIES.iter().map(|f| f.name));
            for name in names {
                if db.column_family(name).is_ok() {
                    db.drop_column_family(name)?;
                }
            }
        }
        let cf = match db.column_family(STRESS_CF) {
            Ok(cf) => cf,
            Err(e) if mode == OpenMode::Existing => {
                db.close()?;
                return Err(e);
            }
            Err(_) => db.create_column_family(
                STRESS_CF,
                CfOptions::default().tombstone_grace(settings.grace),
            )?,
        };
        Ok(Self {
            db,
            cf,
            snapshots: Registry::new(),
        })
    }
}

fn collect(iter: cairn::Result<cairn::DbIterator>, backward: bool) -> cairn::Result<Vec<Entry>> {
    let iter = iter?;
    if backward {
        iter.rev().collect()
    } else {
        iter.collect()
    }
}

impl StressEngine for CairnEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Cairn
    }

    fn write(&self, ops: &[WriteOp], sync: bool) -> Result<SeqNo, EngineError> {
        let mut batch = WriteBatch::new();
        for op in ops {
            match op {
                WriteOp::Put { key, value } => batch.put_cf(&self.cf, key, value),
                WriteOp::Delete { key } => batch.delete_cf(&self.cf, key),
                WriteOp::SingleDelete { key } => batch.single_delete_cf(&self.cf, key),
                WriteOp::DeleteRange { start, end, .. } => {
                    batch.delete_range_cf(&self.cf, start, end);
                }
            }
        }
        Ok(self.db.write_opt(batch, &WriteOptions { sync })?)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        Ok(self.cf.get(key)?)
    }

    fn scan(&self, range: Range<&[u8]>, backward: bool) -> Result<Vec<Entry>, EngineError> {
        Ok(collect(self.cf.range(range), backward)?)
    }

    fn scan_all(&self) -> Result<Vec<Entry>, EngineError> {
        Ok(collect(self.cf.iter(), false)?)
    }

    fn latest_seqno(&self) -> SeqNo {
        self.db.latest_seqno()
    }

    fn snapshot(&self) -> Result<SnapshotHandle, EngineError> {
        let snapshot = self.db.snapshot();
        let seqno = snapshot.seqno();
        Ok(self.snapshots.hold(Arc::new(snapshot), seqno))
    }

    fn scan_at(
        &self,
        snapshot: &SnapshotHandle,
        range: Range<&[u8]>,
    ) -> Result<Vec<Entry>, EngineError> {
        let held = self
            .snapshots
            .get(snapshot)
            .map_err(|gone| EngineError::Cairn(cairn::Error::InvalidArgument(gone)))?;
        Ok(collect(held.range_cf(&self.cf, range), false)?)
    }

    fn release(&self, snapshot: &SnapshotHandle) {
        self.snapshots.release(snapshot);
    }

    fn flush(&self) -> Result<(), EngineError> {
        Ok(self.db.flush()?)
    }

    fn compact_range(&self, range: Range<&[u8]>) -> Result<(), EngineError> {
        Ok(self.cf.compact_range(range)?)
    }

    fn compact_all(&self) -> Result<(), EngineError> {
        self.db.flush()?;
        for name in self.db.list_column_families() {
            self.db.column_family(&name)?.compact_range::<&[u8]>(..)?;
        }
        Ok(self.db.wait_for_background_work()?)
    }

    fn wait_idle(&self) -> Result<(), EngineError> {
        Ok(self.db.wait_for_background_work()?)
    }

    fn families(&self) -> Vec<String> {
        self.db.list_column_families()
    }

    fn stats(&self) -> EngineStats {
        let s = self.db.stats();
        let d = s.dropped;
        let dropped = [
            ("shadowed", d.shadowed),
            ("obsolete_tombstone", d.obsolete_tombstone),
            ("single_delete", d.single_delete),
            ("range", d.range),
            ("expired", d.expired),
            ("filter", d.filter),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        EngineStats {
            flushes: Some(s.flushes),
            compactions: Some(s.compactions),
            recoveries: Some(s.recoveries),
            tombstones_pending: Some(s.tombstones_pending),
            dropped,
        }
    }

    fn close(self: Box<Self>) -> Result<(), EngineError> {
        // The snapshots still held go after the close, as a caller's late drops would: Cairn
        // must take a snapshot outliving its database.
        let held = self.snapshots.take_all();
        let Self { db, cf, .. } = *self;
        drop(cf);
        let closed = db.close();
        drop(held);
        Ok(closed?)
    }

    fn as_cairn(&self) -> Option<&Db> {
        Some(&self.db)
    }
}
