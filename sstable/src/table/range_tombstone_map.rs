//! Range tombstones fragmented as they arrive, for a memtable.
//!
//! [`FragmentedRangeTombstones::fragment`] sorts and cuts a whole set at once; a memtable that
//! re-fragmented everything on each new tombstone paid for every earlier one again (quadratic in
//! the number of range deletes). [`RangeTombstoneMap`] keeps the fragments in a `BTreeMap` keyed
//! by their start and cuts only the pieces a new tombstone overlaps: an insert costs
//! `O(log n + k)` for `k` overlapped fragments, and a lookup `O(log n)`.
//!
//! Fragments are never merged back here (two touching pieces may list the same tombstones);
//! [`RangeTombstoneMap::to_fragmented`] merges them, so it yields exactly what `fragment` would
//! for the same tombstones.
//!
//! A reader holding a snapshot may query the map while later tombstones arrive: an insert only
//! cuts pieces (which keeps what covers each key) and adds seqnos newer than any snapshot taken
//! before it, so what covers a key at that snapshot never changes.

use std::collections::BTreeMap;
use std::ops::Bound;

use bytes::Bytes;

use super::range_tombstones::{
    Fragment, FragmentedRangeTombstones, RangeTombstone, TombstoneVersion, push_merging,
};
use crate::key::SeqNo;

/// One piece: its end and the tombstones covering it, oldest first (a memtable's tombstones
/// arrive in seqno order, so adding one is a push).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece<V = Vec<TombstoneVersion>> {
    end: Bytes,
    versions: V,
}

/// The heap a piece holds besides its versions: the `BTreeMap` slot with its start key, the
/// end key's and the version list's bookkeeping.
const PIECE_OVERHEAD: usize = 96;
const VERSION_BYTES: usize = std::mem::size_of::<TombstoneVersion>();

/// What a piece keeps of the tombstones covering it: the versions themselves, or only how many
/// there are (to tell what an insert would cost without copying any).
trait Versions: Clone {
    fn one(version: TombstoneVersion) -> Self;
    /// Adds `version`; returns whether the list grew.
    fn add(&mut self, version: TombstoneVersion) -> bool;
    fn len(&self) -> usize;
}

impl Versions for Vec<TombstoneVersion> {
    fn one(version: TombstoneVersion) -> Self {
        vec![version]
    }

    fn add(&mut self, version: TombstoneVersion) -> bool {
        add_version(self, version)
    }

    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// A version count: an upper bound of the list's length (a repeated seqno counts again).
#[derive(Debug, Clone, Copy)]
struct Count(usize);

impl Versions for Count {
    fn one(_: TombstoneVersion) -> Self {
        Self(1)
    }

    fn add(&mut self, _: TombstoneVersion) -> bool {
        self.0 += 1;
        true
    }

    fn len(&self) -> usize {
        self.0
    }
}

impl<V: Versions> Piece<V> {
    /// The bytes this piece holds, start key included, for memory accounting.
    fn bytes(&self, start: &Bytes) -> usize {
        PIECE_OVERHEAD + start.len() + self.end.len() + self.versions.len() * VERSION_BYTES
    }
}

/// Non-overlapping fragments keyed by start, cut as tombstones are added.
#[derive(Debug, Clone, Default)]
pub struct RangeTombstoneMap {
    pieces: BTreeMap<Bytes, Piece>,
}

impl RangeTombstoneMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// True if no tombstone covers anything.
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// Adds `[start, end)@seqno`; an empty range (`start >= end`) deletes nothing and is ignored.
    /// Returns the bytes the map grew by (new pieces, with the versions they copy, and the new
    /// version in every piece it covers), which can be far more than the tombstone's own size
    /// when it spans many pieces: a memtable counts this toward its flush trigger.
    pub fn insert(&mut self, t: &RangeTombstone) -> usize {
        insert_into(&mut self.pieces, t)
    }

    /// The bytes inserting `ranges`, in order, would add, as [`insert`](Self::insert) counts
    /// them, without changing the map or copying a version list; once the sum passes `cap` the
    /// walk stops and a sum above `cap` is returned. A writer asks before it commits to a batch
    /// whose range deletes over each other could need far more memory than they take in the
    /// log. Costs what the inserts' piece walks cost, bounded by `cap`: `O(k log k)` to copy the
    /// `k` pieces the ranges touch, then about one step per `VERSION_BYTES` counted.
    pub fn growth_of<'a>(
        &self,
        ranges: impl IntoIterator<Item = (&'a Bytes, &'a Bytes)>,
        cap: usize,
    ) -> usize {
        let ranges: Vec<(&Bytes, &Bytes)> = ranges.into_iter().filter(|(s, e)| s < e).collect();
        if let [(start, end)] = ranges.as_slice() {
            return self.growth_of_one(start, end);
        }
        // Only the pieces a range touches can be cut or covered: the one holding its start and
        // those starting inside it. Far-apart ranges copy nothing in between.
        let mut counts: BTreeMap<Bytes, Piece<Count>> = BTreeMap::new();
        for (start, end) in &ranges {
            let first = self
                .pieces
                .range::<Bytes, _>(..=*start)
                .next_back()
                .map_or(*start, |(s, _)| s);
            let touched = self
                .pieces
                .range::<Bytes, _>((Bound::Included(first), Bound::Excluded(*end)));
            for (s, p) in touched {
                counts.entry(s.clone()).or_insert_with(|| Piece {
                    end: p.end.clone(),
                    versions: Count(p.versions.len()),
                });
            }
        }
        let mut sum = 0usize;
        for (start, end) in ranges {
            if sum > cap {
                break;
            }
            let t = RangeTombstone {
                start: start.clone(),
                end: end.clone(),
                seqno: 0,
                write_time: 0,
            };
            sum = sum.saturating_add(insert_into(&mut counts, &t));
        }
        sum
    }

    /// [`growth_of`](Self::growth_of) for one range `start < end`, walked on the map itself with
    /// nothing copied: the write path asks this of every lone range delete.
    fn growth_of_one(&self, start: &Bytes, end: &Bytes) -> usize {
        let split = |piece: &Piece, at: &Bytes| {
            PIECE_OVERHEAD + at.len() + piece.end.len() + piece.versions.len() * VERSION_BYTES
        };
        let gap = |from: &Bytes, to: &Bytes| PIECE_OVERHEAD + from.len() + to.len() + VERSION_BYTES;
        let mut added = 0;
        let mut covered_to = start.clone();
        // The piece holding `start`, if it starts before it: cut at `start` (and at `end` if it
        // holds that too); its right part is covered.
        if let Some((_, piece)) = self.pieces.range::<Bytes, _>(..start).next_back()
            && piece.end > *start
        {
            added += split(piece, start) + VERSION_BYTES;
            if piece.end > *end {
                added += split(piece, end);
            }
            covered_to = piece.end.clone().min(end.clone());
        }
        let inside = (Bound::Included(start), Bound::Excluded(end));
        for (piece_start, piece) in self.pieces.range::<Bytes, _>(inside) {
            if covered_to < *piece_start {
                added += gap(&covered_to, piece_start);
            }
            added += VERSION_BYTES;
            if piece.end > *end {
                added += split(piece, end);
            }
            covered_to = piece.end.clone().min(end.clone());
        }
        if covered_to < *end {
            added += gap(&covered_to, end);
        }
        added
    }

    /// The piece containing `user_key`: its start, end and covering tombstones.
    fn piece_at(&self, user_key: &[u8]) -> Option<(&Bytes, &Piece)> {
        let (start, piece) = self
            .pieces
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(user_key)))
            .next_back()?;
        (user_key < piece.end.as_ref()).then_some((start, piece))
    }

    /// The largest seqno of a tombstone covering `user_key` that is visible at `snapshot`.
    pub fn covering_seqno(&self, user_key: &[u8], snapshot: SeqNo) -> Option<SeqNo> {
        let (_, piece) = self.piece_at(user_key)?;
        piece
            .versions
            .iter()
            .rev()
            .find(|v| v.seqno <= snapshot)
            .map(|v| v.seqno)
    }

    /// The bounds `[start, end)` of a piece around `user_key` covered by a tombstone visible at
    /// `snapshot`.
    pub fn visible_cover(&self, user_key: &[u8], snapshot: SeqNo) -> Option<(Bytes, Bytes)> {
        let (start, piece) = self.piece_at(user_key)?;
        piece
            .versions
            .iter()
            .any(|v| v.seqno <= snapshot)
            .then(|| (start.clone(), piece.end.clone()))
    }

    /// The start of the first piece after `user_key`: where a tombstone may next cover a key,
    /// for a reader that found none covering `user_key` (pieces are disjoint, so every key from
    /// `user_key` to it lies in `user_key`'s piece or in a gap). `None` if no piece follows.
    pub fn next_start_after(&self, user_key: &[u8]) -> Option<&Bytes> {
        self.pieces
            .range::<[u8], _>((Bound::Excluded(user_key), Bound::Unbounded))
            .next()
            .map(|(start, _)| start)
    }

    /// The fragments, touching pieces with the same tombstones merged: what
    /// [`FragmentedRangeTombstones::fragment`] gives for the tombstones inserted.
    pub fn to_fragmented(&self) -> FragmentedRangeTombstones {
        let mut fragments: Vec<Fragment> = Vec::with_capacity(self.pieces.len());
        for (start, piece) in &self.pieces {
            push_merging(
                &mut fragments,
                start.clone(),
                piece.end.clone(),
                piece.versions.iter().rev().copied().collect(),
            );
        }
        FragmentedRangeTombstones::from_sorted_fragments(fragments)
    }
}

/// Adds `t` to `pieces`, cutting only the pieces it overlaps; returns the bytes added.
fn insert_into<V: Versions>(pieces: &mut BTreeMap<Bytes, Piece<V>>, t: &RangeTombstone) -> usize {
    if t.start >= t.end {
        return 0;
    }
    let mut added = split_at(pieces, &t.start) + split_at(pieces, &t.end);
    let version = TombstoneVersion {
        seqno: t.seqno,
        write_time: t.write_time,
    };
    let mut gaps = Vec::new();
    let mut covered_to = t.start.clone();
    let inside = (Bound::Included(&t.start), Bound::Excluded(&t.end));
    for (start, piece) in pieces.range_mut::<Bytes, _>(inside) {
        if covered_to < *start {
            gaps.push((covered_to, start.clone()));
        }
        if piece.versions.add(version) {
            added += VERSION_BYTES;
        }
        covered_to = piece.end.clone();
    }
    if covered_to < t.end {
        gaps.push((covered_to, t.end.clone()));
    }
    for (start, end) in gaps {
        let piece = Piece {
            end,
            versions: V::one(version),
        };
        added += piece.bytes(&start);
        pieces.insert(start, piece);
    }
    added
}

/// Cuts the piece that strictly contains `at` in two at `at`; returns the bytes added.
fn split_at<V: Versions>(pieces: &mut BTreeMap<Bytes, Piece<V>>, at: &Bytes) -> usize {
    let Some((start, piece)) = pieces.range_mut::<Bytes, _>(..at).next_back() else {
        return 0;
    };
    if piece.end <= *at || *start == *at {
        return 0;
    }
    let right = Piece {
        end: std::mem::replace(&mut piece.end, at.clone()),
        versions: piece.versions.clone(),
    };
    // The left piece's end is now `at`, a shared handle to the same bytes as the right's
    // start: count the right piece whole.
    let added = right.bytes(at);
    pieces.insert(at.clone(), right);
    added
}

/// Adds `version` to an oldest-first list (a push when it is the newest, as a memtable's are);
/// for a seqno already there, the later write time wins (as in
/// [`FragmentedRangeTombstones::fragment`]). Returns whether the list grew.
fn add_version(versions: &mut Vec<TombstoneVersion>, version: TombstoneVersion) -> bool {
    let at = versions.partition_point(|v| v.seqno < version.seqno);
    match versions.get_mut(at) {
        Some(same) if same.seqno == version.seqno => {
            same.write_time = same.write_time.max(version.write_time);
            false
        }
        _ => {
            versions.insert(at, version);
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn tombstone(start: u8, len: u8, seqno: SeqNo, write_time: u64) -> RangeTombstone {
        RangeTombstone {
            start: Bytes::from(vec![start]),
            end: Bytes::from(vec![start.saturating_add(len)]),
            seqno,
            write_time,
        }
    }

    proptest! {
        /// Inserting one at a time, in any order, gives the fragments of fragmenting all at once,
        /// and every lookup agrees with them at every snapshot.
        #[test]
        fn incremental_fragments_equal_fragmenting_all_at_once(
            input in prop::collection::vec((0u8..40, 0u8..12, 1u64..30, 0u64..4), 0..40),
        ) {
            let tombstones: Vec<RangeTombstone> = input
                .iter()
                .map(|&(start, len, seqno, time)| tombstone(start, len, seqno, time))
                .collect();
            let mut map = RangeTombstoneMap::new();
            for t in &tombstones {
                map.insert(t);
            }
            let whole = FragmentedRangeTombstones::fragment(tombstones.iter().cloned());
            prop_assert_eq!(&map.to_fragmented(), &whole);
            prop_assert_eq!(map.is_empty(), whole.is_empty());
            for key in 0u8..60 {
                for snapshot in [0, 5, 10, 20, SeqNo::MAX] {
                    let k = [key];
                    prop_assert_eq!(
                        map.covering_seqno(&k, snapshot),
                        whole.covering_seqno(&k, snapshot)
                    );
                    let cover = map.visible_cover(&k, snapshot);
                    prop_assert_eq!(cover.is_some(), whole.covering_seqno(&k, snapshot).is_some());
                    if let Some((start, end)) = cover {
                        let f = whole.fragment_at(&k);
                        prop_assert!(f.is_some_and(|f| f.start <= start && end <= f.end));
                        prop_assert!(start.as_ref() <= &k[..] && &k[..] < end.as_ref());
                    }
                }
            }
        }
    }

    proptest! {
        /// A reader that finds a key covered by nothing its snapshot sees finds nothing covered
        /// before the next piece (or fragment) start either, in the map and in its fragments.
        #[test]
        fn nothing_visible_is_covered_before_the_next_start(
            input in prop::collection::vec((0u8..40, 0u8..12, 1u64..30), 0..40),
            snapshot in prop::sample::select(vec![0u64, 5, 10, 20, SeqNo::MAX]),
        ) {
            let mut map = RangeTombstoneMap::new();
            for &(start, len, seqno) in &input {
                map.insert(&tombstone(start, len, seqno, 0));
            }
            let whole = map.to_fragmented();
            let covered = |k: u8| whole.covering_seqno(&[k], snapshot).is_some();
            for key in (0u8..60).filter(|&k| !covered(k)) {
                let bounds = [
                    map.next_start_after(&[key]).cloned(),
                    whole.next_start_after(&[key]).cloned(),
                ];
                for bound in bounds {
                    let upto = bound.as_ref().and_then(|b| b.first().copied()).unwrap_or(u8::MAX);
                    prop_assert!(bound.as_ref().is_none_or(|b| b.as_ref() > &[key][..]));
                    for k in key..upto {
                        prop_assert!(!covered(k), "{} covered below the bound {:?} from {}", k, bound, key);
                    }
                }
            }
        }
    }

    proptest! {
        /// `growth_of` predicts what the inserts add, over a map already holding tombstones:
        /// exactly when seqnos are distinct, never less when some repeat.
        #[test]
        fn growth_of_predicts_what_inserts_add(
            before in prop::collection::vec((0u8..40, 0u8..12), 0..30),
            after in prop::collection::vec((0u8..40, 0u8..40), 0..30),
        ) {
            let mut map = RangeTombstoneMap::new();
            for (i, &(start, len)) in before.iter().enumerate() {
                map.insert(&tombstone(start, len, i as u64 + 1, 0));
            }
            let adds: Vec<RangeTombstone> = after
                .iter()
                .enumerate()
                .map(|(i, &(start, len))| tombstone(start, len, 100 + i as u64, 0))
                .collect();
            let predicted = map.growth_of(adds.iter().map(|t| (&t.start, &t.end)), usize::MAX);
            let cap = predicted / 2;
            let capped = map.growth_of(adds.iter().map(|t| (&t.start, &t.end)), cap);
            let mut each = Vec::new();
            for t in &adds {
                each.push(map.insert(t));
            }
            let actual: usize = each.iter().sum();
            prop_assert_eq!(predicted, actual);
            // With the cap, the sum stops at the first range that takes it past the cap.
            let mut stopped = 0;
            for grew in &each {
                if stopped > cap {
                    break;
                }
                stopped += grew;
            }
            prop_assert_eq!(capped, stopped);
            let again = map.growth_of(adds.iter().map(|t| (&t.start, &t.end)), usize::MAX);
            let repeated: usize = adds.iter().map(|t| map.insert(t)).sum();
            prop_assert!(again >= repeated);
        }
    }

    proptest! {
        /// One range, the write path's common case, walked without a copy: exactly what the
        /// insert adds.
        #[test]
        fn growth_of_one_range_is_exact(
            before in prop::collection::vec((0u8..40, 0u8..12), 0..30),
            (start, len) in (0u8..40, 1u8..40),
        ) {
            let mut map = RangeTombstoneMap::new();
            for (i, &(start, len)) in before.iter().enumerate() {
                map.insert(&tombstone(start, len, i as u64 + 1, 0));
            }
            let add = tombstone(start, len, 100, 0);
            let predicted = map.growth_of([(&add.start, &add.end)], usize::MAX);
            prop_assert_eq!(predicted, map.insert(&add));
        }
    }

    #[test]
    fn a_tombstone_inside_another_cuts_it_in_three() {
        let mut map = RangeTombstoneMap::new();
        map.insert(&tombstone(b'a', 25, 1, 0));
        map.insert(&tombstone(b'm', 1, 7, 0));
        let shape: Vec<(Bytes, Bytes, Vec<SeqNo>)> = map
            .to_fragmented()
            .fragments()
            .iter()
            .map(|f| {
                let seqnos = f.versions.iter().map(|v| v.seqno).collect();
                (f.start.clone(), f.end.clone(), seqnos)
            })
            .collect();
        assert_eq!(
            shape,
            vec![
                (Bytes::from_static(b"a"), Bytes::from_static(b"m"), vec![1]),
                (
                    Bytes::from_static(b"m"),
                    Bytes::from_static(b"n"),
                    vec![7, 1]
                ),
                (Bytes::from_static(b"n"), Bytes::from_static(b"z"), vec![1])
            ]
        );
        assert_eq!(
            map.covering_seqno(b"m", 6),
            Some(1),
            "older snapshots see the old cover"
        );
        assert_eq!(map.covering_seqno(b"m", 7), Some(7));
        assert_eq!(map.covering_seqno(b"z", 7), None, "end is exclusive");
    }
}
