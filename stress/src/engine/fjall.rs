//! fjall 3 behind the harness's trait, in one keyspace named `stress`.
//!
//! fjall returns no sequence number for a write, so writes and snapshots are stamped through
//! the [`Sequencer`]. It has no range delete: one is written as point deletes of every key the
//! harness's key space has in the range, in one atomic batch (exact: the harness writes no
//! other key). A single delete is a plain delete (`remove_weak` is experimental). It compacts
//! no range: `compact_range` is a major compaction of the keyspace. Batches come from
//! `Database::batch`, which hands the journal to the OS at every commit, so a write that
//! returned survives a SIGKILL; a synced write is persisted with `SyncAll`.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fjall::config::CompressionPolicy;
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use super::registry::Registry;
use super::{
    EngineError, EngineKind, EngineSettings, EngineStats, Entry, OpenMode, STRESS_CF, Sequencer,
    SnapshotHandle, StressEngine, WriteOp,
};
use crate::expected::SeqNo;

/// How long [`StressEngine::wait_idle`] polls before it gives up (a deadlock guard, not a
/// timing claim).
const IDLE_WAIT: Duration = Duration::from_secs(600);

/// An open fjall database and the stressed keyspace.
pub struct FjallEngine {
    db: Database,
    keyspace: Keyspace,
    sequencer: Arc<Sequencer>,
    snapshots: Registry<fjall::Snapshot>,
}

fn peer(e: impl std::fmt::Display) -> EngineError {
    EngineError::peer(EngineKind::Fjall, e)
}

fn entries(iter: impl Iterator<Item = fjall::Guard>) -> Result<Vec<Entry>, EngineError> {
    iter.map(|guard| {
        let (k, v) = guard.into_inner().map_err(peer)?;
        Ok((Bytes::copy_from_slice(&k), Bytes::copy_from_slice(&v)))
    })
    .collect()
}

impl FjallEngine {
    /// Opens fjall at `dir` and the `stress` keyspace (dropped and made afresh in `Fresh`
    /// mode; required in `Existing` mode).
    ///
    /// # Errors
    /// fjall's, or one saying the keyspace is missing in `Existing` mode.
    pub fn open(
        dir: &Path,
        settings: &EngineSettings,
        mode: OpenMode,
    ) -> Result<Self, EngineError> {
        let mut builder = Database::builder(dir);
        if !settings.compression {
            builder = builder.journal_compression(CompressionType::None);
        }
        let db = builder.open().map_err(peer)?;
        let options = || {
            // Levels scaled to the memtable, as the harness scales Cairn's (L1 is four tables).
            let leveled = fjall::compaction::Leveled::default()
                .with_table_target_size(settings.target_file_size);
            let options = KeyspaceCreateOptions::default()
                .max_memtable_size(settings.memtable_size as u64)
                .compaction_strategy(Arc::new(leveled));
            if settings.compression {
                options
            } else {
                options
                    .data_block_compression_policy(CompressionPolicy::all(CompressionType::None))
                    .index_block_compression_policy(CompressionPolicy::all(CompressionType::None))
            }
        };
        if mode == OpenMode::Existing && !db.keyspace_exists(STRESS_CF) {
            return Err(super::family_missing(EngineKind::Fjall));
        }
        if mode == OpenMode::Fresh && db.keyspace_exists(STRESS_CF) {
            let old = db.keyspace(STRESS_CF, options).map_err(peer)?;
            db.delete_keyspace(old).map_err(peer)?;
        }
        let keyspace = db.keyspace(STRESS_CF, options).map_err(peer)?;
        Ok(Self {
            db,
            keyspace,
            sequencer: settings.sequencer.clone(),
            snapshots: Registry::new(),
        })
    }
}

impl StressEngine for FjallEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Fjall
    }

    fn write(&self, ops: &[WriteOp], sync: bool) -> Result<SeqNo, EngineError> {
        let mut batch = self.db.batch();
        if sync {
            batch = batch.durability(Some(PersistMode::SyncAll));
        }
        let ks = &self.keyspace;
        for op in ops {
            match op {
                WriteOp::Put { key, value } => batch.insert(ks, key.as_slice(), value.as_slice()),
                WriteOp::Delete { key } | WriteOp::SingleDelete { key } => {
                    batch.remove(ks, key.as_slice());
                }
                WriteOp::DeleteRange { covered, .. } => {
                    for key in covered {
                        batch.remove(ks, key.as_slice());
                    }
                }
            }
        }
        self.sequencer.write(|| batch.commit().map_err(peer))
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        let value = self.keyspace.get(key).map_err(peer)?;
        Ok(value.map(|v| Bytes::copy_from_slice(&v)))
    }

    fn scan(&self, range: Range<&[u8]>, backward: bool) -> Result<Vec<Entry>, EngineError> {
        let iter = self.keyspace.range(range);
        if backward {
            entries(iter.rev())
        } else {
            entries(iter)
        }
    }

    fn scan_all(&self) -> Result<Vec<Entry>, EngineError> {
        entries(self.keyspace.iter())
    }

    fn latest_seqno(&self) -> SeqNo {
        self.sequencer.last()
    }

    fn snapshot(&self) -> Result<SnapshotHandle, EngineError> {
        let (snapshot, seqno) = self.sequencer.snapshot(|| Ok(self.db.snapshot()))?;
        Ok(self.snapshots.hold(snapshot, seqno))
    }

    fn scan_at(
        &self,
        snapshot: &SnapshotHandle,
        range: Range<&[u8]>,
    ) -> Result<Vec<Entry>, EngineError> {
        let held = self.snapshots.get(snapshot).map_err(peer)?;
        entries(held.range(&self.keyspace, range))
    }

    fn release(&self, snapshot: &SnapshotHandle) {
        self.snapshots.release(snapshot);
    }

    fn flush(&self) -> Result<(), EngineError> {
        self.keyspace.rotate_memtable_and_wait().map_err(peer)
    }

    fn compact_range(&self, _range: Range<&[u8]>) -> Result<(), EngineError> {
        self.keyspace.major_compact().map_err(peer)
    }

    fn compact_all(&self) -> Result<(), EngineError> {
        self.flush()?;
        self.keyspace.major_compact().map_err(peer)?;
        self.wait_idle()
    }

    fn wait_idle(&self) -> Result<(), EngineError> {
        // fjall has no call that waits: its counters of running work must stay at zero.
        let waiting = std::time::Instant::now();
        let mut quiet = 0;
        while quiet < 3 {
            if waiting.elapsed() > IDLE_WAIT {
                return Err(peer(format!(
                    "flushes or compactions still running after {IDLE_WAIT:?}"
                )));
            }
            if self.db.outstanding_flushes() == 0 && self.db.active_compactions() == 0 {
                quiet += 1;
            } else {
                quiet = 0;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn families(&self) -> Vec<String> {
        self.db
            .list_keyspace_names()
            .iter()
            .map(std::string::ToString::to_string)
            .collect()
    }

    fn stats(&self) -> EngineStats {
        EngineStats {
            compactions: Some(self.db.compactions_completed() as u64),
            ..EngineStats::default()
        }
    }

    fn close(self: Box<Self>) -> Result<(), EngineError> {
        drop(self.snapshots.take_all());
        let persisted = self.db.persist(PersistMode::SyncAll).map_err(peer);
        let Self { db, keyspace, .. } = *self;
        drop(keyspace);
        drop(db);
        persisted
    }
}
