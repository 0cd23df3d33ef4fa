//! The memtable: recent writes in a lock-free skip list (`crossbeam-skiplist`), newest first per
//! key, plus the range tombstones written since it was created.
//!
//! Writers insert without blocking readers; a reader filters out entries newer than its snapshot.
//! Range tombstones are kept apart, as written (for the flush) and fragmented as they arrive
//! (`RangeTombstoneMap`, for reads), behind a read-write lock.

use std::cmp::Ordering;
use std::ops::{Bound, ControlFlow};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock, RwLockReadGuard};

use bytes::Bytes;
use cairn_sstable::key::{KIND_FOR_SEEK, TRAILER_LEN, pack_trailer, user_key};
use cairn_sstable::{
    EntryMeta, FragmentedRangeTombstones, InternalIterator, Kind, RangeTombstone,
    RangeTombstoneMap, SeqNo, compare_internal_keys, internal_key,
};
use crossbeam_skiplist::SkipMap;

use crate::converted_runs::{ConvertedRuns, Learned, RunMap};

/// Internal keys up to this long are stored inside the skip-list node: most keys are short,
/// and a key behind a pointer costs a cache miss at every comparison of a search.
const INLINE: usize = 30;

/// An internal key ordered the way tables order them.
#[derive(Debug, Clone)]
enum MemKey {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Arc<[u8]>),
}

impl MemKey {
    /// The internal key of `(user_key, seqno, kind)`.
    fn new(user_key: &[u8], seqno: SeqNo, kind: Kind) -> Self {
        let trailer = pack_trailer(seqno, kind).to_le_bytes();
        let len = user_key.len() + TRAILER_LEN;
        if len <= INLINE
            && let Ok(short) = u8::try_from(len)
        {
            let mut bytes = [0u8; INLINE];
            let (head, tail) = bytes.split_at_mut(user_key.len());
            head.copy_from_slice(user_key);
            if let Some(slot) = tail.get_mut(..TRAILER_LEN) {
                slot.copy_from_slice(&trailer);
            }
            return Self::Inline { len: short, bytes };
        }
        Self::Heap(Arc::from(internal_key(user_key, seqno, kind)))
    }

    /// A key equal to the internal key `key`.
    fn from_slice(key: &[u8]) -> Self {
        if key.len() <= INLINE
            && let Ok(short) = u8::try_from(key.len())
        {
            let mut bytes = [0u8; INLINE];
            if let Some(slot) = bytes.get_mut(..key.len()) {
                slot.copy_from_slice(key);
            }
            return Self::Inline { len: short, bytes };
        }
        Self::Heap(Arc::from(key))
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Inline { len, bytes } => bytes.get(..usize::from(*len)).unwrap_or_default(),
            Self::Heap(bytes) => bytes,
        }
    }
}

impl PartialEq for MemKey {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for MemKey {}

impl Ord for MemKey {
    fn cmp(&self, other: &Self) -> Ordering {
        compare_internal_keys(self.as_slice(), other.as_slice())
    }
}

impl PartialOrd for MemKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug, Clone)]
struct MemValue {
    meta: EntryMeta,
    value: Bytes,
}

/// Per-entry bookkeeping a range tombstone adds, for the size estimate.
const ENTRY_OVERHEAD: usize = 64;

/// The heap a point entry takes, as the allocator hands it out: its skip-list node (the key
/// inline or its pointer, the value's metadata and handle, a reference count, and two tower
/// links, the average height), a long key's own allocation, and the value's with the shared
/// header its handle gains when the memtable clones it from the write's op. The flush trigger
/// counts this, so a memtable's size is the memory it holds, as RocksDB's arena counts it: the
/// earlier estimate (key and value lengths plus 64) counted about two thirds of it, for
/// puts of 100-byte values and for tombstones alike (`tests/memtable_memory.rs`).
fn point_entry_bytes(key: &MemKey, value_len: usize) -> usize {
    const LINK: usize = std::mem::size_of::<usize>();
    let node = std::mem::size_of::<MemKey>() + std::mem::size_of::<MemValue>() + 3 * LINK;
    let heap_key = match key {
        MemKey::Inline { .. } => 0,
        // An `Arc<[u8]>` holds its two counts before the bytes.
        MemKey::Heap(bytes) => allocated(bytes.len() + 2 * LINK),
    };
    let value = match value_len {
        0 => 0,
        len => allocated(len) + allocated(3 * LINK),
    };
    allocated(node) + heap_key + value
}

/// What a heap allocation of `len` bytes takes: glibc's 8-byte header, rounded to 16.
fn allocated(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (len + 8).next_multiple_of(16)
}

/// One memtable. Shared by `Arc` between the writer, readers and the flush.
#[derive(Debug)]
pub(crate) struct Memtable {
    map: SkipMap<MemKey, MemValue>,
    range_tombstones: RwLock<RangeTombstones>,
    bytes: AtomicUsize,
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
            map: SkipMap::new(),
            range_tombstones: RwLock::new(RangeTombstones::default()),
            bytes: AtomicUsize::new(0),
            entries: AtomicU64::new(0),
            point_tombstones: AtomicU64::new(0),
            has_range_tombstones: AtomicBool::new(false),
            oldest_tombstone_time: AtomicU64::new(u64::MAX),
            newest_seqno: AtomicU64::new(0),
            runs: ConvertedRuns::default(),
        }
    }

    /// Adds a point entry.
    pub(crate) fn insert(
        &self,
        key: &[u8],
        seqno: SeqNo,
        kind: Kind,
        meta: EntryMeta,
        value: Bytes,
    ) {
        let ikey = MemKey::new(key, seqno, kind);
        self.bytes.fetch_add(
            point_entry_bytes(&ikey, value.len()),
            AtomicOrdering::Relaxed,
        );
        self.entries.fetch_add(1, AtomicOrdering::Relaxed);
        if kind.is_point_tombstone() {
            self.point_tombstones.fetch_add(1, AtomicOrdering::Relaxed);
            self.oldest_tombstone_time
                .fetch_min(meta.write_time, AtomicOrdering::Relaxed);
        }
        self.map.insert(ikey, MemValue { meta, value });
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

    /// Announces a run of deleted keys a read at `seqno` learned, if this memtable holds no
    /// entry newer than `seqno` (the caller has checked the older sources); see
    /// [`ConvertedRuns::learn`].
    pub(crate) fn learn_run(
        &self,
        start: &[u8],
        end: &[u8],
        seqno: SeqNo,
        deleted: u64,
    ) -> Option<Learned> {
        self.runs
            .learn(start, end, seqno, deleted, &self.newest_seqno)
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
        self.bytes.fetch_add(grown, AtomicOrdering::Relaxed);
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

    /// Range tombstones as written, unfragmented.
    pub(crate) fn raw_range_tombstones(&self) -> Vec<RangeTombstone> {
        self.read_tombstones().raw.clone()
    }

    /// Approximate bytes held.
    pub(crate) fn approximate_bytes(&self) -> usize {
        self.bytes.load(AtomicOrdering::Relaxed)
    }

    /// True if nothing was ever written to it.
    pub(crate) fn is_empty(&self) -> bool {
        self.map.is_empty() && self.read_tombstones().raw.is_empty()
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
        mut visit: impl FnMut(SeqNo, Kind, EntryMeta, &Bytes) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if self.map.is_empty() {
            return ControlFlow::Continue(());
        }
        let start = MemKey::new(key, snapshot, KIND_FOR_SEEK);
        let versions = self
            .map
            .range(start..)
            .take_while(|e| user_key(e.key().as_slice()) == key)
            .take(limit);
        for e in versions {
            if let Some(parsed) = cairn_sstable::parse_internal_key(e.key().as_slice()) {
                let value = e.value();
                visit(parsed.seqno, parsed.kind, value.meta, &value.value)?;
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
                value: value.clone(),
            });
            ControlFlow::Continue(())
        });
        out
    }

    /// An iterator over the point entries.
    pub(crate) fn iter(self: &Arc<Self>) -> MemtableIter {
        MemtableIter {
            mem: Arc::clone(self),
            buf: Vec::new(),
            pos: 0,
            chunk: FIRST_CHUNK,
        }
    }
}

/// Entries fetched per skip-list search at most: the iterator copies small runs of `Bytes`
/// handles so it owns no borrow of the map.
const CHUNK: usize = 64;

/// Entries fetched by the first search after a seek; each further search in the same direction
/// fetches twice as many, up to [`CHUNK`]. A seek is often followed by another seek (a source
/// seeking past a range tombstone or a recorded run of deleted keys), and copying 64 entries
/// for each was most of the cost of a queue's pop; a scan reaches full chunks after a few.
const FIRST_CHUNK: usize = 16;

/// A bidirectional cursor over a memtable's point entries.
#[derive(Debug)]
pub(crate) struct MemtableIter {
    mem: Arc<Memtable>,
    /// A run of consecutive entries in ascending order; `pos` is the current one.
    buf: Vec<(MemKey, MemValue)>,
    pos: usize,
    /// Entries the next search fetches: [`FIRST_CHUNK`] after a seek, doubling up to [`CHUNK`].
    chunk: usize,
}

impl MemtableIter {
    fn current(&self) -> Option<&(MemKey, MemValue)> {
        self.buf.get(self.pos)
    }

    /// The entries to fetch now: [`FIRST_CHUNK`] after a seek (`seek`), twice the last
    /// search's otherwise.
    fn take_chunk(&mut self, seek: bool) -> usize {
        let take = if seek { FIRST_CHUNK } else { self.chunk };
        self.chunk = take.saturating_mul(2).min(CHUNK);
        take
    }

    fn fill_forward(&mut self, from: Bound<MemKey>, seek: bool) {
        let take = self.take_chunk(seek);
        self.buf.clear();
        self.buf.extend(
            self.mem
                .map
                .range((from, Bound::Unbounded))
                .take(take)
                .map(|e| (e.key().clone(), e.value().clone())),
        );
        self.pos = 0;
    }

    fn fill_backward(&mut self, to: Bound<MemKey>, seek: bool) {
        let take = self.take_chunk(seek);
        self.buf.clear();
        self.buf.extend(
            self.mem
                .map
                .range((Bound::Unbounded, to))
                .rev()
                .take(take)
                .map(|e| (e.key().clone(), e.value().clone())),
        );
        self.buf.reverse();
        self.pos = self.buf.len().saturating_sub(1);
    }
}

impl InternalIterator for MemtableIter {
    fn valid(&self) -> bool {
        self.pos < self.buf.len()
    }

    fn key(&self) -> &[u8] {
        self.current()
            .map(|(k, _)| k.as_slice())
            .unwrap_or_default()
    }

    fn meta(&self) -> EntryMeta {
        self.current().map(|(_, v)| v.meta).unwrap_or_default()
    }

    fn value(&self) -> &[u8] {
        self.current()
            .map(|(_, v)| v.value.as_ref())
            .unwrap_or_default()
    }

    fn value_bytes(&self) -> Bytes {
        self.current()
            .map(|(_, v)| v.value.clone())
            .unwrap_or_default()
    }

    fn seek_to_first(&mut self) -> cairn_sstable::Result<()> {
        self.fill_forward(Bound::Unbounded, true);
        Ok(())
    }

    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        self.fill_backward(Bound::Unbounded, true);
        Ok(())
    }

    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.fill_forward(Bound::Included(MemKey::from_slice(target)), true);
        Ok(())
    }

    fn seek_for_prev(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.fill_backward(Bound::Included(MemKey::from_slice(target)), true);
        Ok(())
    }

    fn next(&mut self) -> cairn_sstable::Result<()> {
        let Some((key, _)) = self.current() else {
            return Ok(());
        };
        if self.pos + 1 < self.buf.len() {
            self.pos += 1;
        } else {
            let after = key.clone();
            self.fill_forward(Bound::Excluded(after), false);
        }
        Ok(())
    }

    fn prev(&mut self) -> cairn_sstable::Result<()> {
        let Some((key, _)) = self.current() else {
            return Ok(());
        };
        if self.pos > 0 {
            self.pos -= 1;
        } else {
            let before = key.clone();
            self.fill_backward(Bound::Excluded(before), false);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_sstable::MAX_SEQNO;

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

    #[test]
    fn a_key_fits_half_a_cache_line() {
        assert!(std::mem::size_of::<MemKey>() <= 32);
    }

    #[test]
    fn short_and_long_keys_order_alike() {
        let short = MemKey::new(b"k", 5, Kind::Put);
        let long = MemKey::new(&[b'k'; 40], 5, Kind::Put);
        assert!(matches!(short, MemKey::Inline { .. }));
        assert!(matches!(long, MemKey::Heap(_)));
        assert!(short < long);
        assert!(
            MemKey::new(b"k", 9, Kind::Put) < short,
            "newer versions first"
        );
        assert_eq!(
            MemKey::from_slice(&internal_key(&[b'k'; 40], 5, Kind::Put)),
            long
        );
        assert_eq!(
            short.as_slice(),
            internal_key(b"k", 5, Kind::Put).as_slice()
        );
    }

    /// The iterator fetches chunks that grow after each seek; walks across their edges in
    /// both directions, turning and seeking at random, meet every entry in order.
    #[test]
    fn walks_across_growing_chunks_meet_every_entry_in_order() {
        use rand::{Rng, SeedableRng};
        let mem = Arc::new(Memtable::new());
        let n = 500u64;
        for i in 0..n {
            let key = format!("k{:05}", 2 * i);
            mem.insert(
                key.as_bytes(),
                i + 1,
                Kind::Put,
                EntryMeta::default(),
                Bytes::new(),
            );
        }
        let model: Vec<Vec<u8>> = mem
            .map
            .iter()
            .map(|e| e.key().as_slice().to_vec())
            .collect();
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
