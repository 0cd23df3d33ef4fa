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
//! That last condition is what this module keeps. A run is announced only in the newest
//! memtable of the reader's view (which may be frozen by then: the view is taken before the
//! seqno is read), only if the memtable and every older source of the view hold no entry newer
//! than `S` when the walk learns it (older sources never gain entries: a frozen memtable is
//! read-only, flushes go oldest first and compaction only rewrites). From then on a writer that
//! adds a key to the memtable ends any run holding it, pending or recorded, at its seqno `W`,
//! before `W` becomes visible (**every path that inserts into a memtable must keep this duty**:
//! `Memtable::insert` does): the run is then used only by readers below `W`, who cannot see the
//! write, and a pending one is never recorded. The announcement and the writer race only as the
//! store-buffer pattern: under the runs' lock, `learn` publishes the run and then reads the
//! memtable's newest seqno; the writer raises that seqno and then reads whether any run may
//! exist; all sequentially consistent, so one of them sees the other, and a writer that sees
//! one waits for the lock, so the run it ends is in place. A run that fails the check is never
//! announced.
//!
//! Every source of one read must skip the same runs, or one source would hand out an old `Put`
//! whose newer `Delete` another source skipped. So a read takes the runs as they are when it
//! starts (an immutable map shared by `Arc`; it must take them after it has read its
//! snapshot's seqno), and ending a run only marks it with the write's seqno, which every reader
//! compares with its own fixed snapshot. A run a read learns is announced at once (the check
//! against the memtable's newest seqno is made then, while the walk has just seen the run) and
//! kept pending, where writes end it as they would a recorded one; the read moves its pending
//! runs into the map when it ends (or every few hundred), so the map is copied once per read
//! that learned something, not once per run, and a read may write (delete the key it found,
//! say) before it ends without losing what it learned.
//!
//! A run holds only for readers whose view is the one it was learned under or a newer one. A
//! reader fixes its view (tables, memtables, family options) and its clock reading when it
//! starts, but takes the runs when it builds a walk, later; by then a newer view may have
//! dropped a key the reader still sees as live (a put whose TTL ran out, in a family whose TTL
//! `set_options` just set, or that a compaction filter removed), and a reader of that view may
//! have learned a run over it at the very seqno the older reader reads at. Every such change
//! installs a new view, and views are numbered in the order they are installed (under the
//! state lock), so each run keeps the number of the view it was learned under and a reader of
//! an older view ignores it. The other way is safe: a newer view only drops what compaction
//! may drop, so a key deleted (by a `Delete` or a range tombstone, never by expiry, see below)
//! in an older view stays deleted in every newer one at the run's seqno and after; and two
//! readers of one view see the same entries, whatever their clock readings. Taking the runs
//! with the view instead would not do: a reader that took its view just before a compaction
//! installed, and its runs just after a reader of the new view recorded one, would still mix
//! the two.
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

/// The memory a memtable's runs may take, keys and bookkeeping; a run that would pass it is not
/// recorded.
const MAX_BYTES: usize = 1 << 20;

/// What a run costs beyond its two keys: the map slot, the shared `Run`, two buffers.
const RUN_OVERHEAD: usize = 160;

/// A read records a run only after stepping over this many deleted entries one by one (or fewer
/// if it also skipped a run recorded before: the new run then takes it in).
pub(crate) const MIN_STEPPED: u64 = 32;

/// Where a reader reads: its snapshot's seqno and the number of its view
/// ([`SuperVersion::number`](crate::super_version::SuperVersion)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadPoint {
    pub(crate) snapshot: SeqNo,
    pub(crate) view: u64,
}

/// One run: everything in `[start, end)` with seqno `<= seqno` is deleted, for readers below
/// `ended_at` whose view is `view` or newer.
#[derive(Debug)]
pub(crate) struct Run {
    start: Bytes,
    end: Bytes,
    seqno: SeqNo,
    /// The number of the view it was learned under (the newest of those it took in).
    view: u64,
    /// The seqno of the first write into the run; `SeqNo::MAX` while none came.
    ended_at: AtomicU64,
    /// The deleted entries reads stepped over to learn it (those of the runs it took in
    /// included): what a read that seeks past it would have stepped over, for the read trigger.
    deleted: u64,
}

impl Run {
    fn usable_at(&self, at: ReadPoint) -> bool {
        (self.view <= at.view || crate::planted::active(crate::planted::Bug::RunsIgnoreView))
            && self.seqno <= at.snapshot
            && at.snapshot < self.ended_at.load(Ordering::SeqCst)
    }

    fn live(&self) -> bool {
        self.ended_at.load(Ordering::SeqCst) == SeqNo::MAX
    }

    fn holds(&self, key: &[u8]) -> bool {
        self.start.as_ref() <= key && key < self.end.as_ref()
    }

    /// A write at `seqno` into the run ends it there.
    fn end_at(&self, seqno: SeqNo) {
        self.ended_at.fetch_min(seqno, Ordering::SeqCst);
    }
}

/// A memtable's runs at one moment, disjoint and keyed by start; shared with readers.
#[derive(Debug, Default)]
pub(crate) struct RunMap {
    runs: BTreeMap<Bytes, Arc<Run>>,
    bytes: usize,
}

impl RunMap {
    /// The run holding `key` that a reader at `at` may skip, as `(start, end)`.
    pub(crate) fn cover(&self, key: &[u8], at: ReadPoint) -> Option<(Bytes, Bytes)> {
        let (start, run) = self
            .runs
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()?;
        (key < run.end.as_ref() && run.usable_at(at)).then(|| (start.clone(), run.end.clone()))
    }

    /// True if a reader of `[lower, upper)` (unbounded if `None`) may meet a run.
    pub(crate) fn any_within(&self, lower: &[u8], upper: Option<&[u8]>) -> bool {
        self.overlapping(lower, upper).next().is_some()
    }

    /// The deleted entries of the runs a reader at `at` may skip within `[start, end)`.
    pub(crate) fn deleted_within(&self, start: &[u8], end: &[u8], at: ReadPoint) -> u64 {
        self.overlapping(start, Some(end))
            .filter(|(_, run)| run.usable_at(at))
            .map(|(_, run)| run.deleted)
            .sum()
    }

    /// The runs overlapping `[start, end)` (unbounded above if `None`).
    fn overlapping<'a>(
        &'a self,
        start: &'a [u8],
        end: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a Bytes, &'a Arc<Run>)> + 'a {
        let before = self
            .runs
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(start)))
            .next_back()
            .filter(|(_, run)| run.end.as_ref() > start);
        // An empty or inverted span (a caller's range can be) meets nothing, and must not
        // reach `BTreeMap::range`, which panics on it.
        let empty = end.is_some_and(|end| end <= start);
        let upper = match end {
            Some(end) if !empty => Bound::Excluded(end),
            Some(_) => Bound::Included(start),
            None => Bound::Unbounded,
        };
        let within = self.runs.range::<[u8], _>((Bound::Included(start), upper));
        before
            .filter(|_| !empty)
            .into_iter()
            .chain(within.filter(move |_| !empty))
    }
}

/// A run a read learned and announced, waiting to move into the map.
#[derive(Debug)]
pub(crate) struct Learned(Arc<Run>);

/// What the runs' lock guards.
#[derive(Debug, Default)]
struct State {
    map: Arc<RunMap>,
    /// Runs learned by reads still open, each announced and ended by writes like a recorded one.
    pending: Vec<Arc<Run>>,
}

/// The runs of one memtable: a copy-on-write map readers take a snapshot of when they start,
/// and the runs reads learned and have not moved into it yet.
#[derive(Debug, Default)]
pub(crate) struct ConvertedRuns {
    state: Mutex<State>,
    /// Runs recorded or pending: a writer takes the lock only when it is not zero.
    announced: AtomicUsize,
}

impl ConvertedRuns {
    /// The runs now, for a reader to consult without locking; `None` if there are none.
    pub(crate) fn snapshot(&self) -> Option<Arc<RunMap>> {
        if self.announced.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let map = Arc::clone(&self.lock().map);
        (!map.runs.is_empty()).then_some(map)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes how many runs there are, recorded and pending; the caller holds the lock.
    fn publish(&self, state: &State) {
        self.announced
            .store(state.map.runs.len() + state.pending.len(), Ordering::SeqCst);
    }

    /// A writer just added `key` at `seqno` to the memtable, after raising its newest seqno:
    /// the runs holding the key, recorded or pending, end there, before the write is visible.
    pub(crate) fn note_write(&self, key: &[u8], seqno: SeqNo) {
        if self.announced.load(Ordering::SeqCst) == 0 {
            return;
        }
        let state = self.lock();
        let recorded = state
            .map
            .runs
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .map(|(_, run)| run);
        for run in recorded.into_iter().chain(&state.pending) {
            if run.holds(key) {
                run.end_at(seqno);
            }
        }
    }

    /// Announces `[start, end)@seqno`, learned by a reader at `at` (`at.snapshot` is `seqno`)
    /// stepping over `deleted` entries, unless the memtable holds an entry newer than `seqno`
    /// (`newest` is its newest seqno): the walk that learned it might not have seen such an
    /// entry in the run.
    pub(crate) fn learn(
        &self,
        start: &[u8],
        end: &[u8],
        at: ReadPoint,
        deleted: u64,
        newest: &AtomicU64,
    ) -> Option<Learned> {
        let seqno = at.snapshot;
        if start >= end || newest.load(Ordering::SeqCst) > seqno {
            return None;
        }
        let run = Arc::new(Run {
            start: Bytes::copy_from_slice(start),
            end: Bytes::copy_from_slice(end),
            seqno,
            view: at.view,
            ended_at: AtomicU64::new(SeqNo::MAX),
            deleted,
        });
        let mut state = self.lock();
        state.pending.push(Arc::clone(&run));
        self.publish(&state);
        // Announced; now the check a racing writer may have passed without seeing any run.
        if newest.load(Ordering::SeqCst) > seqno {
            state.pending.pop();
            self.publish(&state);
            return None;
        }
        Some(Learned(run))
    }

    /// Withdraws the announcement of the runs `learned` without recording them: a read that
    /// ends by a panic records nothing, but must not leave its runs pending, where every later
    /// write to the memtable would take the lock for them until the flush.
    pub(crate) fn withdraw(&self, learned: &[Learned]) {
        if learned.is_empty() {
            return;
        }
        let mut state = self.lock();
        state
            .pending
            .retain(|p| !learned.iter().any(|l| Arc::ptr_eq(p, &l.0)));
        self.publish(&state);
    }

    /// How many runs are announced, recorded or pending.
    #[cfg(test)]
    pub(crate) fn announced(&self) -> usize {
        self.announced.load(Ordering::SeqCst)
    }

    /// Moves the runs `learned` into the map, those no write ended. A run takes in the live
    /// runs it overlaps if they are no newer (their union holds at its seqno too: nothing in
    /// them changed since, or a write would have ended them) and drops the ended ones; one that
    /// overlaps a newer run, or would pass the memory limit, is left out. Ended runs elsewhere
    /// are dropped from the copy too. Returns how many were recorded.
    pub(crate) fn record(&self, learned: &[Learned]) -> u64 {
        if learned.is_empty() {
            return 0;
        }
        let mut state = self.lock();
        state
            .pending
            .retain(|p| !learned.iter().any(|l| Arc::ptr_eq(p, &l.0)));
        let live: Vec<&Arc<Run>> = learned.iter().map(|l| &l.0).filter(|r| r.live()).collect();
        let room = state.map.bytes + cost(&[], &[]) <= MAX_BYTES
            || state.map.runs.values().any(|r| !r.live());
        let mut recorded = 0;
        if !live.is_empty() && room {
            let mut map = RunMap::default();
            for (start, run) in state.map.runs.iter().filter(|(_, r)| r.live()) {
                map.bytes += cost(start, &run.end);
                map.runs.insert(start.clone(), Arc::clone(run));
            }
            for run in live {
                if add(&mut map, run) {
                    recorded += 1;
                }
            }
            state.map = Arc::new(map);
        }
        self.publish(&state);
        recorded
    }
}

/// Adds `run` to `map`, taking in what it overlaps; false if it cannot be added.
fn add(map: &mut RunMap, run: &Arc<Run>) -> bool {
    let (start, end) = (run.start.as_ref(), run.end.as_ref());
    let overlapped: Vec<(Bytes, Arc<Run>)> = map
        .overlapping(start, Some(end))
        .map(|(s, r)| (s.clone(), Arc::clone(r)))
        .collect();
    if overlapped
        .iter()
        .any(|(_, r)| r.live() && r.seqno > run.seqno)
    {
        return false;
    }
    let taken_in = || overlapped.iter().filter(|(_, r)| r.live());
    let first = taken_in()
        .map(|(s, _)| s.as_ref())
        .fold(start, std::cmp::min);
    let last = taken_in()
        .map(|(_, r)| r.end.as_ref())
        .fold(end, std::cmp::max);
    let freed: usize = overlapped.iter().map(|(s, r)| cost(s, &r.end)).sum();
    let bytes = map.bytes.saturating_sub(freed) + cost(first, last);
    if bytes > MAX_BYTES {
        return false;
    }
    let deleted = taken_in().fold(run.deleted, |sum, (_, r)| sum.saturating_add(r.deleted));
    // The union holds for the views under which every part of it holds.
    let view = taken_in().map(|(_, r)| r.view).fold(run.view, u64::max);
    let (first, last) = (Bytes::copy_from_slice(first), Bytes::copy_from_slice(last));
    for (key, _) in &overlapped {
        map.runs.remove(key);
    }
    map.bytes = bytes;
    map.runs.insert(
        first.clone(),
        Arc::new(Run {
            start: first,
            end: last,
            seqno: run.seqno,
            view,
            ended_at: AtomicU64::new(SeqNo::MAX),
            deleted,
        }),
    );
    true
}

/// The memory a run takes.
fn cost(start: &[u8], end: &[u8]) -> usize {
    start.len() + end.len() + RUN_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader at `snapshot` of view 1.
    fn at(snapshot: SeqNo) -> ReadPoint {
        ReadPoint { snapshot, view: 1 }
    }

    fn learned(runs: &ConvertedRuns, start: &str, end: &str, seqno: SeqNo) -> Option<Learned> {
        learned_in(runs, start, end, at(seqno))
    }

    fn learned_in(runs: &ConvertedRuns, start: &str, end: &str, at: ReadPoint) -> Option<Learned> {
        let newest = AtomicU64::new(at.snapshot);
        runs.learn(start.as_bytes(), end.as_bytes(), at, 40, &newest)
    }

    fn recorded(runs: &ConvertedRuns, start: &str, end: &str, seqno: SeqNo) -> bool {
        learned(runs, start, end, seqno).is_some_and(|run| runs.record(&[run]) == 1)
    }

    fn cover(runs: &ConvertedRuns, key: &str, snapshot: SeqNo) -> Option<(String, String)> {
        cover_in(runs, key, at(snapshot))
    }

    fn cover_in(runs: &ConvertedRuns, key: &str, at: ReadPoint) -> Option<(String, String)> {
        runs.snapshot()?.cover(key.as_bytes(), at).map(|(s, e)| {
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
        let map = runs.snapshot().expect("runs");
        assert!(map.any_within(b"a", Some(b"c")));
        assert!(!map.any_within(b"f", None));
        assert!(!map.any_within(b"", Some(b"b")));
        assert!(!map.any_within(b"d", Some(b"c")), "an inverted range");
        assert!(!map.any_within(b"c", Some(b"c")), "an empty one");
        assert_eq!(map.deleted_within(b"e", b"a", at(20)), 0);
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
        let map = runs.snapshot().expect("runs");
        assert_eq!(
            map.deleted_within(b"a", b"w", at(20)),
            120,
            "its own and the two taken in"
        );
        assert_eq!(
            map.deleted_within(b"a", b"w", at(11)),
            0,
            "newer than the reader"
        );
        assert_eq!(map.deleted_within(b"g", b"x", at(20)), 0);
        assert!(
            !recorded(&runs, "c", "z", 5),
            "older than a run it overlaps"
        );
        assert_eq!(cover(&runs, "x", 20), run("x", "y"));
    }

    #[test]
    fn a_run_holds_only_for_readers_of_its_view_or_a_newer_one() {
        let runs = ConvertedRuns::default();
        let view = |view| ReadPoint { snapshot: 10, view };
        let first = learned_in(&runs, "b", "d", view(5)).expect("learned");
        assert_eq!(runs.record(&[first]), 1);
        assert_eq!(cover_in(&runs, "c", view(5)), run("b", "d"));
        assert_eq!(cover_in(&runs, "c", view(9)), run("b", "d"), "a newer view");
        assert_eq!(cover_in(&runs, "c", view(4)), None, "an older view");
        // A union holds for the newest view of its parts.
        let newer = learned_in(&runs, "c", "f", view(7)).expect("learned");
        assert_eq!(runs.record(&[newer]), 1);
        assert_eq!(cover_in(&runs, "b", view(7)), run("b", "f"));
        assert_eq!(cover_in(&runs, "b", view(6)), None);
        let map = runs.snapshot().expect("runs");
        assert_eq!(map.deleted_within(b"a", b"z", view(6)), 0);
        assert_eq!(map.deleted_within(b"a", b"z", view(7)), 80);
    }

    #[test]
    fn a_write_into_a_run_ends_it_for_readers_that_can_see_the_write() {
        let runs = ConvertedRuns::default();
        assert!(recorded(&runs, "b", "f", 10));
        assert!(recorded(&runs, "m", "p", 10));
        let before = runs.snapshot().expect("runs");
        runs.note_write(b"f", 15);
        assert!(cover(&runs, "c", 20).is_some(), "f lies past the run");
        runs.note_write(b"c", 15);
        assert_eq!(cover(&runs, "c", 15), None, "a reader that sees the write");
        assert_eq!(cover(&runs, "c", 14), run("b", "f"), "one that does not");
        assert!(
            before.cover(b"c", at(15)).is_none(),
            "the same in a map taken before"
        );
        assert!(cover(&runs, "n", 20).is_some());
        // The next copy of the map drops the ended run; a record over it does not take it in.
        assert!(recorded(&runs, "a", "c", 16));
        assert_eq!(cover(&runs, "b", 20), run("a", "c"));
        assert_eq!(cover(&runs, "d", 14), None, "dropped");
    }

    #[test]
    fn a_write_into_a_pending_run_keeps_it_out_of_the_map() {
        let runs = ConvertedRuns::default();
        let hit = learned(&runs, "b", "f", 10).expect("learned");
        let missed = learned(&runs, "m", "p", 10).expect("learned");
        runs.note_write(b"c", 12);
        runs.note_write(b"f", 12);
        assert_eq!(runs.record(&[hit, missed]), 1);
        assert_eq!(cover(&runs, "c", 20), None);
        assert_eq!(cover(&runs, "n", 20), run("m", "p"));
        assert!(runs.lock().pending.is_empty());
        assert_eq!(runs.announced.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_withdrawn_run_is_neither_pending_nor_recorded() {
        let runs = ConvertedRuns::default();
        let kept = learned(&runs, "b", "f", 10).expect("learned");
        let withdrawn = learned(&runs, "m", "p", 10).expect("learned");
        assert_eq!(runs.announced(), 2);
        runs.withdraw(&[withdrawn]);
        assert_eq!(runs.announced(), 1, "the other stays announced");
        assert_eq!(runs.record(&[kept]), 1);
        assert_eq!(cover(&runs, "n", 20), None);
        assert_eq!(runs.announced(), 1);
    }

    #[test]
    fn a_memtable_holding_a_newer_entry_learns_nothing() {
        let runs = ConvertedRuns::default();
        assert!(
            runs.learn(b"a", b"c", at(10), 40, &AtomicU64::new(11))
                .is_none()
        );
        assert!(runs.snapshot().is_none());
        assert_eq!(runs.announced.load(Ordering::SeqCst), 0);
        assert!(!recorded(&runs, "c", "c", 10), "empty");
    }

    #[test]
    fn runs_stop_at_their_memory_limit() {
        let runs = ConvertedRuns::default();
        let wide = vec![b'k'; MAX_BYTES / 2];
        let mut end = wide.clone();
        end.push(b'z');
        let newest = AtomicU64::new(1);
        let too_wide = runs.learn(&wide, &end, at(1), 1, &newest).expect("learned");
        assert_eq!(runs.record(&[too_wide]), 0);
        let many: Vec<Learned> = (0..100_000u32)
            .filter_map(|n| learned(&runs, &format!("k{n:06}"), &format!("k{n:06}a"), 1))
            .collect();
        let n = runs.record(&many);
        let each = cost(b"k000000", b"k000000a");
        assert_eq!(
            usize::try_from(n).expect("small"),
            MAX_BYTES / each,
            "runs of {each} bytes"
        );
    }
}
