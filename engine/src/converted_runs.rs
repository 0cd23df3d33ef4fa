//! Runs of deleted keys a range read stepped over, kept in the memtable so later reads seek
//! past them: the read-path conversion of a tombstone run into one range (RocksDB's
//! PR #14448), done so that no reader at any snapshot sees a different result.
//!
//! A range read at sequence number `S` that steps from `start` over keys whose newest version
//! at `S` is a `Delete` (or that range tombstones hid) and lands on the live key `end` knows
//! that no entry with seqno `<= S` in `[start, end)` is visible at `S`. A run `[start, end)@S`
//! says exactly that and is used like a range tombstone of seqno `S + 1`:
//! - a reader at a snapshot below `S` ignores it (it may see versions the run hides);
//! - a reader at `S' >= S` skips the run in the memtable that holds it and in every older
//!   source, which is right only if all their entries in the run have seqno `<= S`: then each
//!   is hidden at `S` by a tombstone `<= S`, which hides it at `S'` too.
//!
//! That last condition is what this module keeps. A run is recorded only in the newest
//! memtable of the reader's view, only if the memtable and every older source of the view hold
//! no entry newer than `S` at the time the run is recorded (older sources never gain entries:
//! a frozen memtable is read-only, flushes go oldest first and compaction only rewrites), and a
//! writer that adds a key to the memtable removes any run holding it before its seqno becomes
//! visible. The last two race only as the store-buffer pattern: the recorder publishes the run
//! and then reads the memtable's newest seqno, the writer raises that seqno and then reads
//! whether any run exists, all sequentially consistent, so one of them sees the other.
//!
//! Runs are never logged or flushed: they live and die with their memtable, are learned again
//! by the next read that steps over the deletes, and change nothing compaction decides. Runs
//! decided by expiry, version limits or `SingleDelete` are not recorded (a clock stepping back,
//! or a `SingleDelete` compacted with its put, can change what such a key shows).

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use cairn_sstable::SeqNo;

/// The key bytes a memtable's runs may hold; a run that would pass it is not recorded.
const MAX_BYTES: usize = 1 << 20;

/// A read records a run only after stepping over this many deleted entries one by one (or fewer
/// if it also skipped a run recorded before: the new run then replaces the old one).
pub(crate) const MIN_STEPPED: u64 = 32;

/// One recorded run: everything in `[start, end)` with seqno `<= seqno` is deleted.
#[derive(Debug, Clone)]
struct Run {
    end: Bytes,
    seqno: SeqNo,
    /// The deleted entries reads stepped over to learn it (those of the runs it replaced
    /// included): what a read that seeks past it would have stepped over, for the read trigger.
    deleted: u64,
}

/// A memtable's runs at one moment, disjoint and keyed by start; shared with readers.
#[derive(Debug, Default)]
pub(crate) struct RunMap {
    runs: BTreeMap<Bytes, Run>,
    bytes: usize,
}

impl RunMap {
    /// The run holding `key` that a reader at `snapshot` may skip, as `(start, end)`.
    pub(crate) fn cover(&self, key: &[u8], snapshot: SeqNo) -> Option<(&Bytes, &Bytes)> {
        let (start, run) = self
            .runs
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        (key < run.end.as_ref() && run.seqno <= snapshot).then_some((start, &run.end))
    }

    /// The deleted entries of the runs overlapping `[start, end)`.
    pub(crate) fn deleted_within(&self, start: &[u8], end: &[u8]) -> u64 {
        self.overlapping(start, end)
            .map(|(_, run)| run.deleted)
            .sum()
    }

    /// The runs overlapping `[start, end)`.
    fn overlapping<'a>(
        &'a self,
        start: &'a [u8],
        end: &'a [u8],
    ) -> impl Iterator<Item = (&'a Bytes, &'a Run)> + 'a {
        let before = self
            .runs
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(start)))
            .next_back()
            .filter(|(_, run)| run.end.as_ref() > start);
        let within = self
            .runs
            .range::<[u8], _>((Bound::Included(start), Bound::Excluded(end)));
        before.into_iter().chain(within)
    }
}

/// The runs of one memtable: a copy-on-write map readers take a snapshot of when they start.
#[derive(Debug, Default)]
pub(crate) struct ConvertedRuns {
    map: Mutex<Arc<RunMap>>,
    /// How many runs `map` holds: a writer takes the lock only when it is not zero.
    len: AtomicUsize,
}

impl ConvertedRuns {
    /// The runs now, for a reader to consult without locking.
    pub(crate) fn snapshot(&self) -> Option<Arc<RunMap>> {
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        Some(Arc::clone(&self.lock()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Arc<RunMap>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Installs `map` and publishes its size.
    fn install(&self, guard: &mut Arc<RunMap>, map: Arc<RunMap>) {
        self.len.store(map.runs.len(), Ordering::SeqCst);
        *guard = map;
    }

    /// A writer just added `key` to the memtable, after raising its newest seqno: any run
    /// holding the key no longer says the truth and goes, before the write becomes visible.
    pub(crate) fn note_write(&self, key: &[u8]) {
        if self.len.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut guard = self.lock();
        let Some(start) = guard.cover(key, SeqNo::MAX).map(|(start, _)| start.clone()) else {
            return;
        };
        let mut map = RunMap {
            runs: guard.runs.clone(),
            bytes: guard.bytes,
        };
        if let Some(run) = map.runs.remove(&start) {
            map.bytes -= start.len() + run.end.len();
        }
        self.install(&mut guard, Arc::new(map));
    }

    /// Records `[start, end)@seqno`, learned by stepping over `deleted` entries, unless the
    /// memtable now holds an entry newer than `seqno` (`newest` is its newest seqno). Runs it
    /// overlaps go if they are no newer; if one is newer, or the runs would pass their byte
    /// limit, nothing is recorded. True if recorded.
    pub(crate) fn record(
        &self,
        start: &[u8],
        end: &[u8],
        seqno: SeqNo,
        deleted: u64,
        newest: &AtomicU64,
    ) -> bool {
        if start >= end {
            return false;
        }
        let mut guard = self.lock();
        if guard
            .overlapping(start, end)
            .any(|(_, run)| run.seqno > seqno)
        {
            return false;
        }
        let mut map = RunMap {
            runs: guard.runs.clone(),
            bytes: guard.bytes,
        };
        let replaced: Vec<Bytes> = guard
            .overlapping(start, end)
            .map(|(s, _)| s.clone())
            .collect();
        let mut deleted = deleted;
        for key in replaced {
            if let Some(run) = map.runs.remove(&key) {
                map.bytes -= key.len() + run.end.len();
                deleted = deleted.saturating_add(run.deleted);
            }
        }
        map.bytes += start.len() + end.len();
        if map.bytes > MAX_BYTES {
            return false;
        }
        map.runs.insert(
            Bytes::copy_from_slice(start),
            Run {
                end: Bytes::copy_from_slice(end),
                seqno,
                deleted,
            },
        );
        let previous = Arc::clone(&guard);
        self.install(&mut guard, Arc::new(map));
        // Published; now the check a racing writer may have passed before it saw the run.
        if newest.load(Ordering::SeqCst) > seqno {
            self.install(&mut guard, previous);
            return false;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(runs: &ConvertedRuns, start: &str, end: &str, seqno: SeqNo) -> bool {
        runs.record(
            start.as_bytes(),
            end.as_bytes(),
            seqno,
            40,
            &AtomicU64::new(seqno),
        )
    }

    fn cover(runs: &ConvertedRuns, key: &str, snapshot: SeqNo) -> Option<(String, String)> {
        let map = runs.snapshot()?;
        map.cover(key.as_bytes(), snapshot).map(|(s, e)| {
            (
                String::from_utf8_lossy(s).into_owned(),
                String::from_utf8_lossy(e).into_owned(),
            )
        })
    }

    #[test]
    fn a_run_covers_its_keys_for_readers_at_or_after_its_seqno() {
        let runs = ConvertedRuns::default();
        assert!(recorded(&runs, "b", "f", 10));
        let run = Some(("b".to_owned(), "f".to_owned()));
        assert_eq!(cover(&runs, "b", 10), run);
        assert_eq!(cover(&runs, "e", 99), run);
        assert_eq!(cover(&runs, "e", 9), None, "a reader before the run");
        assert_eq!(cover(&runs, "a", 10), None);
        assert_eq!(cover(&runs, "f", 10), None, "the end is exclusive");
    }

    #[test]
    fn a_newer_run_replaces_those_it_overlaps_and_an_older_one_is_refused() {
        let runs = ConvertedRuns::default();
        assert!(recorded(&runs, "b", "d", 10));
        assert!(recorded(&runs, "e", "g", 11));
        assert!(recorded(&runs, "a", "f", 12));
        assert_eq!(
            cover(&runs, "b", 20),
            Some(("a".to_owned(), "f".to_owned()))
        );
        let map = runs.snapshot().expect("runs");
        assert_eq!(
            map.deleted_within(b"a", b"z"),
            120,
            "its own and the two it replaced"
        );
        assert_eq!(map.deleted_within(b"f", b"z"), 0);
        assert_eq!(cover(&runs, "f", 20), None, "the run from e went whole");
        assert!(
            !recorded(&runs, "c", "z", 5),
            "older than a run it overlaps"
        );
        assert_eq!(cover(&runs, "x", 20), None);
    }

    #[test]
    fn a_write_into_a_run_removes_it() {
        let runs = ConvertedRuns::default();
        assert!(recorded(&runs, "b", "f", 10));
        assert!(recorded(&runs, "m", "p", 10));
        runs.note_write(b"f");
        assert!(cover(&runs, "c", 10).is_some(), "f lies past the run");
        runs.note_write(b"c");
        assert_eq!(cover(&runs, "c", 10), None);
        assert!(cover(&runs, "n", 10).is_some());
        runs.note_write(b"m");
        assert!(runs.snapshot().is_none(), "no run left");
    }

    #[test]
    fn a_memtable_holding_a_newer_entry_records_nothing() {
        let runs = ConvertedRuns::default();
        assert!(!runs.record(b"a", b"c", 10, 40, &AtomicU64::new(11)));
        assert!(runs.snapshot().is_none());
        assert!(
            !runs.record(b"c", b"c", 10, 40, &AtomicU64::new(10)),
            "empty"
        );
    }

    #[test]
    fn runs_stop_at_their_byte_limit() {
        let runs = ConvertedRuns::default();
        let wide = vec![b'k'; MAX_BYTES / 2];
        let mut end = wide.clone();
        end.push(b'z');
        assert!(!runs.record(&wide, &end, 1, 40, &AtomicU64::new(1)));
        assert!(runs.record(b"a", b"b", 1, 40, &AtomicU64::new(1)));
    }
}
