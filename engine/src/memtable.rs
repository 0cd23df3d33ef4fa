//! The memtable: recent writes in an arena skip list (`skiplist`), newest first per key, plus the
//! range tombstones written since it was created.
//!
//! The writer inserts without blocking readers; a reader filters out entries newer than its
//! snapshot.
//! Range tombstones are kept apart, as written (for the flush) and fragmented as they arrive
//! (`RangeTombstoneMap`, for reads), behind a read-write lock.

mod skiplist;

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use bytes::Bytes;
use cairn_sstable::key::{KIND_FOR_SEEK, pack_trailer, user_key};
use cairn_sstable::{
    EntryMeta, FragmentedRangeTombstones, InternalIterator, Kind, RangeTombstone,
    RangeTombstoneMap, SeqNo,
};

use crate::converted_runs::{ConvertedRuns, Learned, ReadPoint, RunMap};
use skiplist::{Cursor, SkipList};

/// Per-entry bookkeeping a range tombstone adds, for the size estimate.
const ENTRY_OVERHEAD: usize = 64;

/// One memtable. Shared by `Arc` between the writer, readers and the flush.
#[derive(Debug)]
pub(crate) struct Memtable {
    /// The point entries. Its arena's size is what they count toward the flush trigger.
    list: Arc<SkipList>,
    range_tombstones: RwLock<RangeTombstones>,
    /// What the range tombstones count toward the flush trigger (an estimate of their heap).
    range_tombstone_bytes: AtomicUsize,
    entries: AtomicU64,
    point_tombstones: AtomicU64,
    /// Set once a range tombstone arrives: point reads skip the lock while it is clear.
    has_range_tombstones: AtomicBool,
    /// The oldest deletion time of a tombstone in it; `u64::MAX` when it holds none.
    oldest_tombstone_time: AtomicU64,
    /// The newest seqno of a point entry in it, raised before the entry's runs are cut.
    newest_seqno: AtomicU64,
    /// Runs of deleted keys reads stepped over, for later reads to seek past.
    runs: ConvertedRuns,
}

/// The bytes adding the range tombstones `ranges`, in order, to a memtable holding `fragments`
/// would count toward its flush trigger, found without adding them; once past `cap`, some sum
/// above it (see [`RangeTombstoneMap::growth_of`]).
pub(crate) fn range_tombstone_growth<'a>(
    fragments: &RangeTombstoneMap,
    ranges: impl Iterator<Item = (&'a Bytes, &'a Bytes)> + Clone,
    cap: usize,
) -> usize {
    let raw: usize = ranges
        .clone()
        .map(|(start, end)| start.len() + end.len() + ENTRY_OVERHEAD)
        .sum();
    raw.saturating_add(fragments.growth_of(ranges, cap.saturating_sub(raw)))
}

/// The range tombstones as written (for the flush) and fragmented as they arrive (for reads).
#[derive(Debug, Default)]
struct RangeTombstones {
    raw: Vec<RangeTombstone>,
    fragments: RangeTombstoneMap,
}

impl Memtable {
    pub(crate) fn new() -> Self {
        Self {
            list: Arc::new(SkipList::new()),
            range_tombstones: RwLock::new(RangeTombstones::default()),
            range_tombstone_bytes: AtomicUsize::new(0),
            entries: AtomicU64::new(0),
            point_tombstones: AtomicU64::new(0),
            has_range_tombstones: AtomicBool::new(false),
            oldest_tombstone_time: AtomicU64::new(u64::MAX),
            newest_seqno: AtomicU64::new(0),
            runs: ConvertedRuns::default(),
        }
    }

    /// Adds a point entry (copied into the memtable's arena). Only one thread at a time
    /// inserts (the commit leader, or recovery); others would wait on the skip list's lock.
    pub(crate) fn insert(
        &self,
        key: &[u8],
        seqno: SeqNo,
        kind: Kind,
        meta: EntryMeta,
        value: &[u8],
    ) {
        let trailer = pack_trailer(seqno, kind).to_le_bytes();
        if !self.list.insert(key, trailer, meta, value) {
            // The same version again (a replayed log record): it is there already.
            return;
        }
        self.entries.fetch_add(1, AtomicOrdering::Relaxed);
        if kind.is_point_tombstone() {
            self.point_tombstones.fetch_add(1, AtomicOrdering::Relaxed);
            self.oldest_tombstone_time
                .fetch_min(meta.write_time, AtomicOrdering::Relaxed);
        }
        // In this order, before the seqno is visible: see `converted_runs`.
        self.newest_seqno.fetch_max(seqno, AtomicOrdering::SeqCst);
        self.runs.note_write(key, seqno);
    }

    /// The newest seqno of a point entry it holds (0 if none).
    pub(crate) fn newest_seqno(&self) -> SeqNo {
        self.newest_seqno.load(AtomicOrdering::SeqCst)
    }

    /// The runs of deleted keys recorded in it now, if any.
    pub(crate) fn converted_runs(&self) -> Option<Arc<RunMap>> {
        self.runs.snapshot()
    }

    /// Announces a run of deleted keys a read at `at` learned, if this memtable holds no entry
    /// newer than its snapshot (the caller has checked the older sources); see
    /// [`ConvertedRuns::learn`].
    pub(crate) fn learn_run(
        &self,
        start: &[u8],
        end: &[u8],
        at: ReadPoint,
        deleted: u64,
    ) -> Option<Learned> {
        self.runs.learn(start, end, at, deleted, &self.newest_seqno)
    }

    /// Withdraws runs a read learned and will not record (it ended by a panic).
    pub(crate) fn withdraw_runs(&self, learned: &[Learned]) {
        self.runs.withdraw(learned);
    }

    /// How many runs of deleted keys are announced in it, recorded or pending.
    #[cfg(test)]
    pub(crate) fn runs_announced(&self) -> usize {
        self.runs.announced()
    }

    /// Moves runs learned by a read into the map; how many it kept.
    pub(crate) fn record_runs(&self, learned: &[Learned]) -> u64 {
        self.runs.record(learned)
    }

    /// Adds the range tombstone `[start, end)`.
    pub(crate) fn insert_range_tombstone(
        &self,
        start: Bytes,
        end: Bytes,
        seqno: SeqNo,
        write_time: u64,
    ) {
        self.oldest_tombstone_time
            .fetch_min(write_time, AtomicOrdering::Relaxed);
        let tombstone = RangeTombstone {
            start,
            end,
            seqno,
            write_time,
        };
        let mut tombstones = self
            .range_tombstones
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // The raw copy and the fragments it cut: a wide delete over many narrow ones copies its
        // version into every piece, and all of it counts toward the flush trigger.
        let grown = tombstone.start.len()
            + tombstone.end.len()
            + ENTRY_OVERHEAD
            + tombstones.fragments.insert(&tombstone);
        tombstones.raw.push(tombstone);
        self.range_tombstone_bytes
            .fetch_add(grown, AtomicOrdering::Relaxed);
        self.has_range_tombstones
            .store(true, AtomicOrdering::Release);
    }

    /// The bytes adding the range tombstones `ranges`, in order, would count toward the flush
    /// trigger (see [`range_tombstone_growth`]).
    pub(crate) fn range_tombstone_growth<'a>(
        &self,
        ranges: impl Iterator<Item = (&'a Bytes, &'a Bytes)> + Clone,
        cap: usize,
    ) -> usize {
        range_tombstone_growth(&self.read_tombstones().fragments, ranges, cap)
    }

    /// False if no range tombstone was ever added (without taking the lock).
    pub(crate) fn has_range_tombstones(&self) -> bool {
        self.has_range_tombstones.load(AtomicOrdering::Acquire)
    }

    fn read_tombstones(&self) -> RwLockReadGuard<'_, RangeTombstones> {
        self.range_tombstones
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The range tombstones, fragmented (a copy: for reports, not for the read path).
    pub(crate) fn range_tombstones(&self) -> FragmentedRangeTombstones {
        self.read_tombstones().fragments.to_fragmented()
    }

    /// The largest seqno of a range tombstone covering `user_key` visible at `snapshot`.
    pub(crate) fn range_tombstone_seqno(&self, user_key: &[u8], snapshot: SeqNo) -> Option<SeqNo> {
        if !self.has_range_tombstones() {
            return None;
        }
        self.read_tombstones()
            .fragments
            .covering_seqno(user_key, snapshot)
    }

    /// The bounds of a range covering `user_key` by a range tombstone visible at `snapshot`.
    pub(crate) fn range_tombstone_cover(
        &self,
        user_key: &[u8],
        snapshot: SeqNo,
    ) -> Option<(Bytes, Bytes)> {
        if !self.has_range_tombstones() {
            return None;
        }
        self.read_tombstones()
            .fragments
            .visible_cover(user_key, snapshot)
    }

    /// The start of the first range-tombstone piece after `user_key`, if any: a reader that
    /// found no tombstone visible to it covering `user_key` finds none before it either (later
    /// range deletes cut pieces further, but add nothing its snapshot sees).
    pub(crate) fn range_tombstone_next_start(&self, user_key: &[u8]) -> Option<Bytes> {
        if !self.has_range_tombstones() {
            return None;
        }
        self.read_tombstones()
            .fragments
            .next_start_after(user_key)
            .cloned()
    }

    /// Range tombstones as written, unfragmented.
    pub(crate) fn raw_range_tombstones(&self) -> Vec<RangeTombstone> {
        self.read_tombstones().raw.clone()
    }

    /// Bytes held: the arena's, and an estimate of the range tombstones' heap.
    pub(crate) fn approximate_bytes(&self) -> usize {
        self.list.memory_used() + self.range_tombstone_bytes.load(AtomicOrdering::Relaxed)
    }

    /// True if nothing was ever written to it.
    pub(crate) fn is_empty(&self) -> bool {
        self.list.is_empty() && self.read_tombstones().raw.is_empty()
    }

    /// The oldest deletion time of a tombstone in it.
    pub(crate) fn oldest_tombstone_time(&self) -> Option<u64> {
        Some(self.oldest_tombstone_time.load(AtomicOrdering::Relaxed)).filter(|&t| t != u64::MAX)
    }

    pub(crate) fn num_entries(&self) -> u64 {
        self.entries.load(AtomicOrdering::Relaxed)
    }

    pub(crate) fn num_point_tombstones(&self) -> u64 {
        self.point_tombstones.load(AtomicOrdering::Relaxed)
    }

    pub(crate) fn num_range_tombstones(&self) -> u64 {
        self.read_tombstones().raw.len() as u64
    }

    /// Calls `visit` with each version of `key` visible at `snapshot` (seqno, kind, metadata and
    /// value), newest first, at most `limit` of them, until it breaks. Copies nothing.
    pub(crate) fn for_each_version(
        &self,
        key: &[u8],
        snapshot: SeqNo,
        limit: usize,
        mut visit: impl FnMut(SeqNo, Kind, EntryMeta, &[u8]) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.list.is_empty() {
            return ControlFlow::Continue(());
        }
        let versions = self
            .list
            .iter_from(key, pack_trailer(snapshot, KIND_FOR_SEEK))
            .take_while(|e| user_key(e.key) == key)
            .take(limit);
        for e in versions {
            if let Some(parsed) = cairn_sstable::parse_internal_key(e.key) {
                visit(parsed.seqno, parsed.kind, e.meta, e.value)?;
            }
        }
        ControlFlow::Continue(())
    }

    /// Versions of `key` visible at `snapshot`, newest first, at most `limit` of them.
    pub(crate) fn versions(
        &self,
        key: &[u8],
        snapshot: SeqNo,
        limit: usize,
    ) -> Vec<cairn_sstable::Entry> {
        let mut out = Vec::new();
        let _ = self.for_each_version(key, snapshot, limit, |seqno, kind, meta, value| {
            out.push(cairn_sstable::Entry {
                user_key: Bytes::copy_from_slice(key),
                seqno,
                kind,
                meta,
                value: Bytes::copy_from_slice(value),
            });
            ControlFlow::Continue(())
        });
        out
    }

    /// An iterator over the point entries.
    pub(crate) fn iter(&self) -> MemtableIter {
        MemtableIter {
            cursor: Cursor::new(Arc::clone(&self.list)),
        }
    }
}

/// A bidirectional cursor over a memtable's point entries, borrowing them from its arena.
#[derive(Debug)]
pub(crate) struct MemtableIter {
    cursor: Cursor,
}

impl InternalIterator for MemtableIter {
    fn valid(&self) -> bool {
        self.cursor.entry().is_some()
    }

    fn key(&self) -> &[u8] {
        self.cursor.entry().map(|e| e.key).unwrap_or_default()
    }

    fn meta(&self) -> EntryMeta {
        self.cursor.entry().map(|e| e.meta).unwrap_or_default()
    }

    fn value(&self) -> &[u8] {
        self.cursor.entry().map(|e| e.value).unwrap_or_default()
    }

    fn value_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(self.value())
    }

    fn seek_to_first(&mut self) -> cairn_sstable::Result<()> {
        self.cursor.seek_to_first();
        Ok(())
    }

    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        self.cursor.seek_to_last();
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.cursor.seek(target);
        Ok(())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.cursor.seek_for_prev(target);
        Ok(())
    }

    fn next(&mut self) -> cairn_sstable::Result<()> {
        self.cursor.next();
        Ok(())
    }

    fn prev(&mut self) -> cairn_sstable::Result<()> {
        self.cursor.prev();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_sstable::{MAX_SEQNO, compare_internal_keys, internal_key};

    /// Wide range deletes over many narrow ones copy a version into every piece they cover;
    /// the memtable's size must grow with that, or it never reaches its flush trigger.
    #[test]
    fn wide_range_deletes_over_narrow_ones_count_every_piece_they_cover() {
        let mem = Memtable::new();
        let key = |i: u32| Bytes::from(format!("k{i:06}"));
        let narrow = 1_000;
        for i in 0..narrow {
            mem.insert_range_tombstone(key(2 * i), key(2 * i + 1), u64::from(i) + 1, 0);
        }
        let after_narrow = mem.approximate_bytes();
        let wide = 100;
        for j in 0..wide {
            let seqno = u64::from(narrow + j) + 1;
            mem.insert_range_tombstone(key(0), key(2 * narrow), seqno, 0);
        }
        // Each wide delete adds a version (16 bytes) to each of the 2 * `narrow` - 1 pieces:
        // the narrow ones and the gaps the first wide one filled.
        let floor = usize::try_from(wide * (2 * narrow - 1) * 16).expect("fits");
        let grown = mem.approximate_bytes() - after_narrow;
        assert!(grown >= floor, "grew by {grown}, under {floor}");
    }

    /// Walks in both directions, turning and seeking at random, meet every entry in order.
    #[test]
    fn random_walks_meet_every_entry_in_order() {
        use rand::{Rng, SeedableRng};
        let mem = Arc::new(Memtable::new());
        let n = 500u64;
        for i in 0..n {
            let key = format!("k{:05}", 2 * i);
            mem.insert(key.as_bytes(), i + 1, Kind::Put, EntryMeta::default(), b"");
        }
        let model: Vec<Vec<u8>> = mem.list.iter().map(|e| e.key.to_vec()).collect();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut iter = mem.iter();
        let mut at: Option<usize> = None;
        for _ in 0..20_000 {
            match rng.random_range(0..10) {
                0 => {
                    let target = internal_key(
                        format!("k{:05}", rng.random_range(0..2 * n)).as_bytes(),
                        MAX_SEQNO,
                        Kind::Put,
                    );
                    iter.seek(&target).expect("seek");
                    at = model
                        .iter()
                        .position(|k| compare_internal_keys(k, &target).is_ge());
                }
                1 => {
                    let target = internal_key(
                        format!("k{:05}", rng.random_range(0..2 * n)).as_bytes(),
                        0,
                        Kind::Delete,
                    );
                    iter.seek_for_prev(&target).expect("seek_for_prev");
                    at = model
                        .iter()
                        .rposition(|k| compare_internal_keys(k, &target).is_le());
                }
                2..=6 => {
                    iter.next().expect("next");
                    at = at.and_then(|i| (i + 1 < model.len()).then_some(i + 1));
                }
                _ => {
                    iter.prev().expect("prev");
                    at = at.and_then(|i| i.checked_sub(1));
                }
            }
            assert_eq!(iter.valid(), at.is_some());
            if let Some(i) = at {
                assert_eq!(
                    iter.key(),
                    model.get(i).map(Vec::as_slice).unwrap_or_default()
                );
            } else {
                iter.seek_to_first().expect("seek_to_first");
                at = Some(0);
            }
        }
    }
}
