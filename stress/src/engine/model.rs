//! A model engine for the harness's own tests: multi-version `BTreeMap`s behind the trait,
//! stamped through the [`Sequencer`] and with range deletes emulated over the covered keys, as
//! the peers are, and with a wrong rule that can be switched on. The tests show the peer path
//! catches each wrong rule and passes the model without it, with no peer built in.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::registry::Registry;
use super::{
    EngineError, EngineKind, EngineStats, Entry, Sequencer, SnapshotHandle, StressEngine, WriteOp,
};
use crate::expected::SeqNo;

/// A wrong rule the model can follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bug {
    /// A snapshot reads the newest values, not those at its number.
    SnapshotsReadNewest,
    /// An emulated range delete leaves the last key of the range.
    RangeDeleteMissesLast,
}

/// What the model holds: every version of every key, by the model's own write number, which
/// survives reopens (it is the "disk").
#[derive(Debug, Default)]
pub(crate) struct Store {
    versions: BTreeMap<Vec<u8>, Vec<(u64, Option<Bytes>)>>,
    written: u64,
}

/// One open of the model.
pub(crate) struct ModelEngine {
    store: Arc<Mutex<Store>>,
    sequencer: Arc<Sequencer>,
    snapshots: Registry<u64>,
    bug: Option<Bug>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ModelEngine {
    pub(crate) fn open(
        store: &Arc<Mutex<Store>>,
        sequencer: &Arc<Sequencer>,
        bug: Option<Bug>,
        mode: super::OpenMode,
    ) -> Self {
        if mode == super::OpenMode::Fresh {
            *lock(store) = Store::default();
        }
        Self {
            store: store.clone(),
            sequencer: sequencer.clone(),
            snapshots: Registry::new(),
            bug,
        }
    }

    /// The entries of `range` as of the model's write number `at`.
    fn read(&self, range: Range<&[u8]>, at: u64) -> Vec<Entry> {
        let store = lock(&self.store);
        store
            .versions
            .range::<[u8], _>((Bound::Included(range.start), Bound::Excluded(range.end)))
            .filter_map(|(k, versions)| {
                let (_, value) = versions.iter().rev().find(|(n, _)| *n <= at)?;
                value.clone().map(|v| (Bytes::copy_from_slice(k), v))
            })
            .collect()
    }
}

impl StressEngine for ModelEngine {
    fn kind(&self) -> EngineKind {
        EngineKind::Cairn
    }

    fn write(&self, ops: &[WriteOp], _sync: bool) -> Result<SeqNo, EngineError> {
        self.sequencer.write(|| {
            let mut store = lock(&self.store);
            store.written += 1;
            let n = store.written;
            let mut set = |key: &[u8], value: Option<Bytes>| {
                store
                    .versions
                    .entry(key.to_vec())
                    .or_default()
                    .push((n, value));
            };
            for op in ops {
                match op {
                    WriteOp::Put { key, value } => set(key, Some(Bytes::copy_from_slice(value))),
                    WriteOp::Delete { key } | WriteOp::SingleDelete { key } => set(key, None),
                    WriteOp::DeleteRange { covered, .. } => {
                        let skip = usize::from(self.bug == Some(Bug::RangeDeleteMissesLast));
                        for key in covered.iter().take(covered.len().saturating_sub(skip)) {
                            set(key, None);
                        }
                    }
                }
            }
            Ok(())
        })
    }

    fn get(&self, key: &[u8]) -> Result<Option<Bytes>, EngineError> {
        let mut end = key.to_vec();
        end.push(0);
        Ok(self.read(key..&end, u64::MAX).pop().map(|(_, v)| v))
    }

    fn scan(&self, range: Range<&[u8]>, backward: bool) -> Result<Vec<Entry>, EngineError> {
        let mut found = self.read(range, u64::MAX);
        if backward {
            found.reverse();
        }
        Ok(found)
    }

    fn scan_all(&self) -> Result<Vec<Entry>, EngineError> {
        Ok(self.read(&[][..]..&[0xff; 16][..], u64::MAX))
    }

    fn latest_seqno(&self) -> SeqNo {
        self.sequencer.last()
    }

    fn snapshot(&self) -> Result<SnapshotHandle, EngineError> {
        let (at, seqno) = self.sequencer.snapshot(|| Ok(lock(&self.store).written))?;
        Ok(self.snapshots.hold(at, seqno))
    }

    fn scan_at(
        &self,
        snapshot: &SnapshotHandle,
        range: Range<&[u8]>,
    ) -> Result<Vec<Entry>, EngineError> {
        let at = self
            .snapshots
            .get(snapshot)
            .map_err(|gone| EngineError::peer(EngineKind::Cairn, gone))?;
        let at = if self.bug == Some(Bug::SnapshotsReadNewest) {
            u64::MAX
        } else {
            at
        };
        Ok(self.read(range, at))
    }

    fn release(&self, snapshot: &SnapshotHandle) {
        self.snapshots.release(snapshot);
    }

    fn flush(&self) -> Result<(), EngineError> {
        Ok(())
    }

    fn compact_range(&self, _range: Range<&[u8]>) -> Result<(), EngineError> {
        Ok(())
    }

    fn compact_all(&self) -> Result<(), EngineError> {
        Ok(())
    }

    fn wait_idle(&self) -> Result<(), EngineError> {
        Ok(())
    }

    fn families(&self) -> Vec<String> {
        vec![super::STRESS_CF.to_string()]
    }

    fn stats(&self) -> EngineStats {
        EngineStats::default()
    }

    fn close(self: Box<Self>) -> Result<(), EngineError> {
        drop(self.snapshots.take_all());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Limit, OpWeights, StressConfig};
    use crate::harness::{Harness, StressError};
    use crate::report::{Failure, StressReport};

    fn run(bug: Option<Bug>, seed: u64) -> Result<StressReport, StressError> {
        let store = Arc::new(Mutex::new(Store::default()));
        let sequencer = Arc::new(Sequencer::default());
        let opener: crate::harness::Opener = Box::new(move |_dir, mode| {
            Ok(Box::new(ModelEngine::open(&store, &sequencer, bug, mode)))
        });
        let config = StressConfig {
            threads: 4,
            keys: 500,
            seed,
            limit: Limit::Ops(6_000),
            weights: OpWeights {
                snapshot: 300,
                delete_range: 100,
                reopen: 10,
                ..OpWeights::default()
            },
            ..StressConfig::default()
        };
        let dir = tempfile::tempdir()?;
        let harness = Harness::on_engine(config, dir.path(), opener)?;
        let report = harness.run()?;
        harness.close()?;
        Ok(report)
    }

    #[test]
    fn the_model_without_a_wrong_rule_passes_through_the_sequencer() -> Result<(), StressError> {
        for seed in 0..3 {
            let report = run(None, seed)?;
            assert!(
                report.failures.is_clean(),
                "seed {seed}: {}",
                report.summary()
            );
            assert!(report.ops.get("snapshot_reread").copied().unwrap_or(0) > 0);
            assert!(report.ops.get("reopen").copied().unwrap_or(0) > 0);
        }
        Ok(())
    }

    #[test]
    fn a_snapshot_that_reads_the_newest_values_is_caught() -> Result<(), StressError> {
        let report = run(Some(Bug::SnapshotsReadNewest), 1)?;
        assert!(
            report.failures.count(Failure::SnapshotMismatch) > 0,
            "{}",
            report.summary()
        );
        Ok(())
    }

    #[test]
    fn a_range_delete_that_misses_a_key_is_caught() -> Result<(), StressError> {
        let report = run(Some(Bug::RangeDeleteMissesLast), 1)?;
        assert!(
            report.failures.count(Failure::ResurrectedDelete)
                + report.failures.count(Failure::WrongValue)
                > 0,
            "{}",
            report.summary()
        );
        Ok(())
    }
}
