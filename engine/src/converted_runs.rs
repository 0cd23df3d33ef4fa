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
//! memtable of the reader's view (which may be frozen by then: the view is taken before the
//! seqno is read), only if the memtable and every older source of the view hold no entry newer
//! than `S` at the time the run is recorded (older sources never gain entries: a frozen
//! memtable is read-only, flushes go oldest first and compaction only rewrites), and a writer
//! that adds a key to the memtable removes any run holding it before its seqno becomes visible
//! (**every path that inserts into a memtable must keep this duty**: `Memtable::insert` does).
//! The last two race only as the store-buffer pattern: under the runs' lock, the recorder
//! announces a run is coming and then reads the memtable's newest seqno, the writer raises
//! that seqno and then reads whether any run may exist, all sequentially consistent, so one
//! of them sees the other; a writer that sees one waits for the lock, so the run it removes is
//! in place. A run that fails the check is never inserted, so no reader ever sees it.
//!
//! Runs live in a lock-free skip list that readers consult in place: recording or removing one
//! costs a search, whatever the number of runs. A reader uses only runs no newer than its
//! snapshot, so runs recorded after it started are either valid for it or ignored.
//!
//! Runs are never logged or flushed: they live and die with their memtable, are learned again
//! by the next read that steps over the deletes, and change nothing compaction decides. Runs
//! decided by expiry, version limits or `SingleDelete` are not recorded (a clock stepping back,
//! or a `SingleDelete` compacted with its put, can change what such a key shows).

use std::ops::Bound;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use cairn_sstable::SeqNo;
use crossbeam_skiplist::SkipMap;

/// The memory a memtable's runs may take, keys and bookkeeping; a run that would pass it is not
/// recorded.
const MAX_BYTES: usize = 1 << 20;

/// What a run costs beyond its two keys: the skip-list node, the `Run`, two buffers.
const RUN_OVERHEAD: usize = 160;

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

/// The runs of one memtable, disjoint and keyed by start.
#[derive(Debug, Default)]
pub(crate) struct ConvertedRuns {
    runs: SkipMap<Bytes, Run>,
    /// Held to record or remove a run; guards the bytes the runs take.
    lock: Mutex<usize>,
    /// Runs recorded or about to be: a writer takes the lock only when it is not zero.
    announced: AtomicUsize,
}

impl ConvertedRuns {
    /// True if a reader of `[lower, upper)` (unbounded if `None`) may meet a run.
    pub(crate) fn any_within(&self, lower: &[u8], upper: Option<&[u8]>) -> bool {
        if self.announced.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.overlapping(lower, upper).next().is_some()
    }

    /// The run holding `key` that a reader at `snapshot` may skip, as `(start, end)`.
    pub(crate) fn cover(&self, key: &[u8], snapshot: SeqNo) -> Option<(Bytes, Bytes)> {
        let entry = self.runs.upper_bound(Bound::Included(key))?;
        let run = entry.value();
        (key < run.end.as_ref() && run.seqno <= snapshot)
            .then(|| (entry.key().clone(), run.end.clone()))
    }

    /// The deleted entries of the runs a reader at `snapshot` may skip within `[start, end)`.
    pub(crate) fn deleted_within(&self, start: &[u8], end: &[u8], snapshot: SeqNo) -> u64 {
        self.overlapping(start, Some(end))
            .filter(|(_, run)| run.seqno <= snapshot)
            .map(|(_, run)| run.deleted)
            .sum()
    }

    /// The runs overlapping `[start, end)` (unbounded above if `None`), as (start, run).
    fn overlapping<'a>(
        &'a self,
        start: &'a [u8],
        end: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (Bytes, Run)> + 'a {
        let before = self
            .runs
            .upper_bound(Bound::Excluded(start))
            .filter(|e| e.value().end.as_ref() > start);
        let upper = end.map_or(Bound::Unbounded, Bound::Excluded);
        let within = self.runs.range::<[u8], _>((Bound::Included(start), upper));
        before
            .into_iter()
            .chain(within)
            .map(|e| (e.key().clone(), e.value().clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Removes the run starting at `start`; the caller holds the lock (`bytes`).
    fn remove(&self, bytes: &mut usize, start: &Bytes) -> Option<Run> {
        let entry = self.runs.remove(start)?;
        let run = entry.value().clone();
        *bytes = bytes.saturating_sub(cost(start, &run.end));
        self.announced.fetch_sub(1, Ordering::SeqCst);
        Some(run)
    }

    /// A writer just added `key` to the memtable, after raising its newest seqno: any run
    /// holding the key no longer says the truth and goes, before the write becomes visible.
    pub(crate) fn note_write(&self, key: &[u8]) {
        if self.announced.load(Ordering::SeqCst) == 0 {
            return;
        }
        let mut bytes = self.lock();
        let holding = self
            .runs
            .upper_bound(Bound::Included(key))
            .filter(|e| key < e.value().end.as_ref())
            .map(|e| e.key().clone());
        if let Some(start) = holding {
            self.remove(&mut bytes, &start);
        }
    }

    /// Records `[start, end)@seqno`, learned by stepping over `deleted` entries, unless the
    /// memtable now holds an entry newer than `seqno` (`newest` is its newest seqno). The runs
    /// it overlaps are merged into it if they are no newer (their union holds at `seqno` too:
    /// nothing in them changed since, or a write would have removed them); if one is newer, or
    /// the runs would pass their memory limit, nothing is recorded. True if recorded.
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
        let mut bytes = self.lock();
        let merged: Vec<(Bytes, Run)> = self.overlapping(start, Some(end)).collect();
        if merged.iter().any(|(_, run)| run.seqno > seqno) {
            return false;
        }
        let first = merged.first().map_or(start, |(s, _)| s.as_ref()).min(start);
        let last = merged.last().map_or(end, |(_, r)| r.end.as_ref()).max(end);
        let (first, last) = (Bytes::copy_from_slice(first), Bytes::copy_from_slice(last));
        let freed: usize = merged.iter().map(|(s, r)| cost(s, &r.end)).sum();
        if (*bytes - freed.min(*bytes)) + cost(&first, &last) > MAX_BYTES {
            return false;
        }
        // Announced before the check a racing writer may have passed without seeing any run.
        self.announced.fetch_add(1, Ordering::SeqCst);
        if newest.load(Ordering::SeqCst) > seqno {
            self.announced.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let mut total = deleted;
        for (key, _) in &merged {
            if let Some(run) = self.remove(&mut bytes, key) {
                total = total.saturating_add(run.deleted);
            }
        }
        *bytes += cost(&first, &last);
        self.runs.insert(
            first,
            Run {
                end: last,
                seqno,
                deleted: total,
            },
        );
        true
    }
}

/// The memory a run takes.
fn cost(start: &[u8], end: &[u8]) -> usize {
    start.len() + end.len() + RUN_OVERHEAD
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
        runs.cover(key.as_bytes(), snapshot).map(|(s, e)| {
            (
                String::from_utf8_lossy(&s).into_owned(),
                String::from_utf8_lossy(&e).into_owned(),
            )
        })
    }

    #[allow(
        clippy::unnecessary_wraps,
        reason = "compared with what `cover` returns"
    )]
    fn run(start: &str, end: &str) -> Option<(String, String)> {
        Some((start.to_owned(), end.to_owned()))
    }

    #[test]
    fn a_run_covers_its_keys_for_readers_at_or_after_its_seqno() {
        let runs = ConvertedRuns::default();
        assert!(recorded(&runs, "b", "f", 10));
        assert_eq!(cover(&runs, "b", 10), run("b", "f"));
        assert_eq!(cover(&runs, "e", 99), run("b", "f"));
        assert_eq!(cover(&runs, "e", 9), None, "a reader before the run");
        assert_eq!(cover(&runs, "a", 10), None);
        assert_eq!(cover(&runs, "f", 10), None, "the end is exclusive");
        assert!(runs.any_within(b"a", Some(b"c")));
        assert!(!runs.any_within(b"f", None));
        assert!(!runs.any_within(b"", Some(b"b")));
    }

    #[test]
    fn a_newer_run_takes_in_those_it_overlaps_and_an_older_one_is_refused() {
        let runs = ConvertedRuns::default();
        assert!(recorded(&runs, "b", "d", 10));
        assert!(recorded(&runs, "e", "g", 11));
        assert!(recorded(&runs, "x", "y", 11));
        assert!(recorded(&runs, "c", "f", 12));
        assert_eq!(cover(&runs, "b", 20), run("b", "g"), "the union");
        assert_eq!(cover(&runs, "f", 20), run("b", "g"));
        assert_eq!(
            runs.deleted_within(b"a", b"w", 20),
            120,
            "its own and the two it took in"
        );
        assert_eq!(
            runs.deleted_within(b"a", b"w", 11),
            0,
            "newer than the reader"
        );
        assert_eq!(runs.deleted_within(b"g", b"x", 20), 0);
        assert!(
            !recorded(&runs, "c", "z", 5),
            "older than a run it overlaps"
        );
        assert_eq!(cover(&runs, "x", 20), run("x", "y"));
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
        assert!(!runs.any_within(b"", None), "no run left");
        assert_eq!(runs.announced.load(Ordering::SeqCst), 0);
        assert_eq!(*runs.lock(), 0, "every byte given back");
    }

    #[test]
    fn a_memtable_holding_a_newer_entry_records_nothing() {
        let runs = ConvertedRuns::default();
        assert!(!runs.record(b"a", b"c", 10, 40, &AtomicU64::new(11)));
        assert!(!runs.any_within(b"", None));
        assert_eq!(runs.announced.load(Ordering::SeqCst), 0);
        assert!(
            !runs.record(b"c", b"c", 10, 40, &AtomicU64::new(10)),
            "empty"
        );
    }

    #[test]
    fn runs_stop_at_their_memory_limit() {
        let runs = ConvertedRuns::default();
        let wide = vec![b'k'; MAX_BYTES / 2];
        let mut end = wide.clone();
        end.push(b'z');
        assert!(!runs.record(&wide, &end, 1, 40, &AtomicU64::new(1)));
        let mut n = 0u32;
        while runs.record(
            format!("k{n:06}").as_bytes(),
            format!("k{n:06}a").as_bytes(),
            1,
            40,
            &AtomicU64::new(1),
        ) {
            n += 1;
        }
        let each = cost(b"k000000", b"k000000a");
        assert_eq!(n as usize, MAX_BYTES / each, "runs of {each} bytes");
    }
}
