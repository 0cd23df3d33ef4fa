//! The held-reader work's state: its model, the readers it holds, the compaction filter that
//! dooms values on demand, and its counters. What the work does with them is in
//! [`crate::held_readers`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use cairn::{CfOptions, CompactionFilter, Db, DbCursor, DbIterator, Decision, Snapshot};

use crate::held_model::Expect;
use crate::held_model::{HELD_CF, HELD_KEYS, HeldCell, HeldModel, doomed};
use crate::report::HeldCounts;
use crate::value::{key, key_index, parse_value};

/// Deletes outlive every compaction of a run (measured on the harness's clock), so fresh reads
/// keep stepping over them beside the keys a compaction dropped.
const GRACE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Removes doomed values (odd versions) of the held family while armed.
#[derive(Debug)]
pub(crate) struct DoomFilter {
    pub(crate) armed: AtomicBool,
    max_value_size: usize,
}

impl CompactionFilter for DoomFilter {
    fn filter(&self, cf: &str, key: &[u8], value: &[u8]) -> Decision {
        let doomed_value = cf == HELD_CF
            && self.armed.load(Ordering::SeqCst)
            && key_index(key)
                .and_then(|k| parse_value(k, value, self.max_value_size))
                .is_some_and(doomed);
        if doomed_value {
            Decision::Remove
        } else {
            Decision::Keep
        }
    }
}

/// A reader made earlier and not used yet.
pub(crate) enum Reader {
    Cursor(Box<DbCursor>),
    /// An iterator over the keys from this one on.
    Iter(Box<DbIterator>, usize),
}

pub(crate) struct HeldReader {
    pub(crate) reader: Reader,
    /// What it must read: the model when it was made.
    pub(crate) expect: Vec<Expect>,
    /// A snapshot taken just before it, with the puts it sees.
    pub(crate) snapshot: Option<(Snapshot, Vec<Option<HeldCell>>)>,
    /// Where it was made, for messages.
    pub(crate) made: String,
}

pub(crate) struct HeldInner {
    pub(crate) model: HeldModel,
    pub(crate) held: Vec<HeldReader>,
}

/// The held-reader work: its model, its readers, its filter and its counters.
pub(crate) struct HeldWork {
    inner: Mutex<HeldInner>,
    pub(crate) filter: Arc<DoomFilter>,
    /// Held readers used and judged.
    pub(crate) readers: AtomicU64,
    /// Keys held readers were judged on.
    pub(crate) checks: AtomicU64,
    /// Fresh reads judged.
    pub(crate) fresh: AtomicU64,
    pub(crate) scenes: AtomicU64,
}

impl std::fmt::Debug for HeldWork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldWork").finish_non_exhaustive()
    }
}

/// The options the held family is created and reset with.
pub(crate) fn family_options() -> CfOptions {
    CfOptions::default().tombstone_grace(GRACE)
}

impl HeldWork {
    pub(crate) fn new(max_value_size: usize) -> Self {
        Self {
            inner: Mutex::new(HeldInner {
                model: HeldModel::new(),
                held: Vec::new(),
            }),
            filter: Arc::new(DoomFilter {
                armed: AtomicBool::new(false),
                max_value_size,
            }),
            readers: AtomicU64::new(0),
            checks: AtomicU64::new(0),
            fresh: AtomicU64::new(0),
            scenes: AtomicU64::new(0),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HeldInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// What the work did so far.
    pub(crate) fn counts(&self) -> HeldCounts {
        HeldCounts {
            readers: self.readers.load(Ordering::Relaxed),
            checks: self.checks.load(Ordering::Relaxed),
            fresh_reads: self.fresh.load(Ordering::Relaxed),
            scenes: self.scenes.load(Ordering::Relaxed),
        }
    }

    /// Drops every held reader unread (the database they read is closing).
    pub(crate) fn forget_readers(&self) {
        self.lock().held.clear();
    }

    /// Creates the family if `db` lacks it, else empties it and removes its TTL (a range
    /// delete over every key first, so no put an old TTL expired comes back); the model
    /// follows. Call with no held-work operation running.
    pub(crate) fn reset(&self, db: &Db) -> cairn::Result<()> {
        let mut inner = self.lock();
        inner.held.clear();
        match db.column_family(HELD_CF) {
            Ok(cf) => {
                cf.delete_range(key(0), key(HELD_KEYS))?;
                cf.set_options(family_options())?;
            }
            Err(_) => {
                db.create_column_family(HELD_CF, family_options())?;
            }
        }
        inner.model.reset();
        Ok(())
    }
}
