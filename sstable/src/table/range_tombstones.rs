//! Range tombstones, fragmented into non-overlapping pieces.
//!
//! Overlapping range tombstones are cut at every start and end so the pieces ("fragments") never
//! overlap; each fragment lists every tombstone seqno that covers it, newest first, as `RocksDB`'s
//! `FragmentedRangeTombstoneList` and Pebble's `keyspan` do. Asking "which tombstone covers key
//! k at snapshot S?" is then one binary search and one scan of a short list.
//!
//! ```text
//! input:     [a------------e)@5
//!                 [c-----------g)@9
//! fragments: [a---c)@5 [c--e)@9,5 [e---g)@9
//! ```

use std::cmp::Ordering;

use bytes::Bytes;

use crate::coding::{Cursor, put_length_prefixed, put_varint};
use crate::error::{Origin, Result};
use crate::key::SeqNo;

/// One range tombstone as written: deletes `[start, end)` for every entry older than `seqno`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeTombstone {
    /// The first user key deleted.
    pub start: Bytes,
    /// The first user key after the deleted range.
    pub end: Bytes,
    /// The tombstone's sequence number: it hides entries with smaller seqnos.
    pub seqno: SeqNo,
    /// When the range was deleted, in milliseconds of the engine's clock.
    pub write_time: u64,
}

/// A tombstone seqno covering a fragment, with its deletion time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TombstoneVersion {
    /// The tombstone's sequence number.
    pub seqno: SeqNo,
    /// When it was written.
    pub write_time: u64,
}

/// A piece `[start, end)` of the key space and every tombstone that covers all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fragment {
    /// The first user key of the piece.
    pub start: Bytes,
    /// The first user key after it.
    pub end: Bytes,
    /// The covering tombstones, newest (largest seqno) first; never empty.
    pub versions: Vec<TombstoneVersion>,
}

impl Fragment {
    /// True if `user_key` lies in `[start, end)`.
    pub fn contains(&self, user_key: &[u8]) -> bool {
        self.start.as_ref() <= user_key && user_key < self.end.as_ref()
    }

    /// The newest covering tombstone visible at `snapshot`.
    pub fn visible_at(&self, snapshot: SeqNo) -> Option<TombstoneVersion> {
        self.versions.iter().copied().find(|v| v.seqno <= snapshot)
    }
}

/// A sorted list of non-overlapping fragments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FragmentedRangeTombstones {
    fragments: Vec<Fragment>,
}

impl FragmentedRangeTombstones {
    /// Fragments any number of possibly overlapping tombstones. Empty ranges (`start >= end`)
    /// delete nothing and are dropped.
    pub fn fragment(tombstones: impl IntoIterator<Item = RangeTombstone>) -> Self {
        Self::fragment_thinned(tombstones, None::<fn(&[TombstoneVersion]) -> Vec<_>>)
    }

    /// [`fragment`](Self::fragment) for a compaction whose snapshots cut seqnos into stripes
    /// (`stripe_of`), holding in memory only what the compaction rules can tell apart. In each
    /// fragment, of the tombstones sharing a stripe only these are kept: the newest, and an older
    /// one only if it was deleted later than every newer one of its stripe (clocks may step
    /// back). The rules keep at most the first of a stripe, newest first, with a reason to stay,
    /// and within a stripe a reason only grows with seqno and deletion time (see
    /// `cairn_compaction::rules`), so the one they keep is always among these. The fragments'
    /// bounds are those `fragment` gives. Returns how many versions were left out (each one the
    /// rules would have dropped). Without this, `w` wide tombstones over `n` narrow ones held
    /// `n × w` versions at once.
    ///
    /// For a compaction's eyes only: at a seqno that is not one of its snapshots,
    /// [`covering_seqno`](Self::covering_seqno) may miss a tombstone that was left out.
    pub fn fragment_in_stripes(
        tombstones: impl IntoIterator<Item = RangeTombstone>,
        stripe_of: impl Fn(SeqNo) -> usize,
    ) -> (Self, u64) {
        let mut left_out = 0u64;
        let fragments = Self::fragment_thinned(
            tombstones,
            Some(|versions: &[TombstoneVersion]| {
                let mut kept: Vec<TombstoneVersion> = Vec::new();
                let mut last: Option<(usize, u64)> = None;
                for v in versions {
                    let stripe = stripe_of(v.seqno);
                    last = match last {
                        Some((s, latest)) if s == stripe && v.write_time <= latest => continue,
                        Some((s, latest)) if s == stripe => Some((s, latest.max(v.write_time))),
                        _ => Some((stripe, v.write_time)),
                    };
                    kept.push(*v);
                }
                left_out += (versions.len() - kept.len()) as u64;
                kept.shrink_to_fit();
                kept
            }),
        );
        (fragments, left_out)
    }

    /// Fragments `tombstones`; with `thin`, each fragment stores only what `thin` keeps of its
    /// versions (newest first), in a list of its own size. Neighbours merge when their whole
    /// version lists are equal, so the bounds do not depend on `thin`.
    fn fragment_thinned(
        tombstones: impl IntoIterator<Item = RangeTombstone>,
        mut thin: Option<impl FnMut(&[TombstoneVersion]) -> Vec<TombstoneVersion>>,
    ) -> Self {
        let mut input: Vec<RangeTombstone> =
            tombstones.into_iter().filter(|t| t.start < t.end).collect();
        input.sort_by(|a, b| a.start.cmp(&b.start));
        let mut bounds: Vec<Bytes> = input
            .iter()
            .flat_map(|t| [t.start.clone(), t.end.clone()])
            .collect();
        bounds.sort();
        bounds.dedup();
        let mut fragments: Vec<Fragment> = Vec::new();
        // With `thin`: the last fragment's whole version list, to merge by.
        let mut last_whole: Vec<TombstoneVersion> = Vec::new();
        let mut active: Vec<&RangeTombstone> = Vec::new();
        let mut pending = input.iter().peekable();
        for pair in bounds.windows(2) {
            let [lo, hi] = pair else { continue };
            while let Some(t) = pending.next_if(|t| t.start <= *lo) {
                active.push(t);
            }
            active.retain(|t| t.end > *lo);
            if active.is_empty() {
                continue;
            }
            let mut versions: Vec<TombstoneVersion> = active
                .iter()
                .map(|t| TombstoneVersion {
                    seqno: t.seqno,
                    write_time: t.write_time,
                })
                .collect();
            versions.sort_by(|a, b| b.seqno.cmp(&a.seqno).then(b.write_time.cmp(&a.write_time)));
            versions.dedup_by_key(|v| v.seqno);
            let Some(thin) = thin.as_mut() else {
                push_merging(&mut fragments, lo.clone(), hi.clone(), versions);
                continue;
            };
            if let Some(last) = fragments.last_mut()
                && last.end == *lo
                && last_whole == versions
            {
                last.end = hi.clone();
                continue;
            }
            fragments.push(Fragment {
                start: lo.clone(),
                end: hi.clone(),
                versions: thin(&versions),
            });
            last_whole = versions;
        }
        Self { fragments }
    }

    /// Wraps fragments that are already sorted, non-overlapping and non-empty.
    ///
    /// # Errors
    /// `InvalidArgument` if they are not.
    pub fn from_fragments(fragments: Vec<Fragment>) -> Result<Self> {
        check_fragments(&fragments).map_err(crate::Error::InvalidArgument)?;
        Ok(Self { fragments })
    }

    /// Wraps fragments the caller built sorted, non-overlapping and non-empty.
    pub(crate) fn from_sorted_fragments(fragments: Vec<Fragment>) -> Self {
        debug_assert!(check_fragments(&fragments).is_ok());
        Self { fragments }
    }

    /// The fragments in key order.
    pub fn fragments(&self) -> &[Fragment] {
        &self.fragments
    }

    /// True if there are no fragments.
    pub fn is_empty(&self) -> bool {
        self.fragments.is_empty()
    }

    /// The number of (fragment, seqno) pairs: how many tombstone pieces are stored.
    pub fn num_versions(&self) -> u64 {
        self.fragments.iter().map(|f| f.versions.len() as u64).sum()
    }

    /// The index of the fragment containing `user_key`, or of the first fragment after it
    /// (`len` if none).
    pub fn position(&self, user_key: &[u8]) -> usize {
        self.fragments
            .partition_point(|f| f.end.as_ref() <= user_key)
    }

    /// The fragment containing `user_key`, if any.
    pub fn fragment_at(&self, user_key: &[u8]) -> Option<&Fragment> {
        self.fragments
            .get(self.position(user_key))
            .filter(|f| f.contains(user_key))
    }

    /// The largest seqno of a tombstone covering `user_key` that is visible at `snapshot`.
    pub fn covering_seqno(&self, user_key: &[u8], snapshot: SeqNo) -> Option<SeqNo> {
        self.fragment_at(user_key)?
            .visible_at(snapshot)
            .map(|v| v.seqno)
    }

    /// The bounds `[start, end)` of the fragment around `user_key` if a tombstone visible at
    /// `snapshot` covers it (as [`RangeTombstoneMap::visible_cover`](crate::RangeTombstoneMap)).
    pub fn visible_cover(&self, user_key: &[u8], snapshot: SeqNo) -> Option<(Bytes, Bytes)> {
        let f = self.fragment_at(user_key)?;
        f.visible_at(snapshot)
            .map(|_| (f.start.clone(), f.end.clone()))
    }

    /// The start of the first fragment after `user_key` (as
    /// [`RangeTombstoneMap::next_start_after`](crate::RangeTombstoneMap::next_start_after)).
    pub fn next_start_after(&self, user_key: &[u8]) -> Option<&Bytes> {
        let after = self
            .fragments
            .partition_point(|f| f.start.as_ref() <= user_key);
        self.fragments.get(after).map(|f| &f.start)
    }

    /// Every stored piece as a tombstone of its own, in key order then newest first.
    pub fn iter_tombstones(&self) -> impl Iterator<Item = RangeTombstone> + '_ {
        self.fragments.iter().flat_map(|f| {
            f.versions.iter().map(|v| RangeTombstone {
                start: f.start.clone(),
                end: f.end.clone(),
                seqno: v.seqno,
                write_time: v.write_time,
            })
        })
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.fragments.len() as u64);
        for f in &self.fragments {
            put_length_prefixed(out, &f.start);
            put_length_prefixed(out, &f.end);
            put_varint(out, f.versions.len() as u64);
            for v in &f.versions {
                put_varint(out, v.seqno);
                put_varint(out, v.write_time);
            }
        }
    }

    pub(crate) fn decode(block: &Bytes, origin: &Origin) -> Result<Self> {
        let mut cursor = Cursor::new(block);
        let bad = |cursor: &Cursor<'_>, what: &str| origin.corruption(cursor.pos(), what);
        let count = cursor
            .varint_usize()
            .ok_or_else(|| bad(&cursor, "unreadable fragment count"))?;
        let mut fragments = Vec::with_capacity(count.min(block.len()));
        for _ in 0..count {
            let fragment = decode_fragment(&mut cursor, block)
                .ok_or_else(|| bad(&cursor, "truncated range tombstone fragment"))?;
            fragments.push(fragment);
        }
        if !cursor.is_empty() {
            return Err(bad(&cursor, "bytes after the last fragment"));
        }
        check_fragments(&fragments).map_err(|why| origin.corruption(0, why))?;
        Ok(Self { fragments })
    }
}

fn decode_fragment(cursor: &mut Cursor<'_>, block: &Bytes) -> Option<Fragment> {
    let start = slice_of(block, cursor.length_prefixed()?);
    let end = slice_of(block, cursor.length_prefixed()?);
    let n = cursor.varint_usize()?;
    let mut versions = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        versions.push(TombstoneVersion {
            seqno: cursor.varint()?,
            write_time: cursor.varint()?,
        });
    }
    Some(Fragment {
        start,
        end,
        versions,
    })
}

/// `part` as a zero-copy slice of `whole`, which it must lie in.
fn slice_of(whole: &Bytes, part: &[u8]) -> Bytes {
    whole.slice_ref(part)
}

/// Appends a fragment, merging it into the previous one when they touch and carry the same
/// tombstones.
pub(crate) fn push_merging(
    fragments: &mut Vec<Fragment>,
    start: Bytes,
    end: Bytes,
    versions: Vec<TombstoneVersion>,
) {
    if let Some(last) = fragments.last_mut()
        && last.end == start
        && last.versions == versions
    {
        last.end = end;
        return;
    }
    fragments.push(Fragment {
        start,
        end,
        versions,
    });
}

fn check_fragments(fragments: &[Fragment]) -> std::result::Result<(), String> {
    let mut prev_end: Option<&Bytes> = None;
    for (i, f) in fragments.iter().enumerate() {
        if f.start >= f.end {
            return Err(format!("fragment {i} is empty"));
        }
        if prev_end.is_some_and(|end| end.as_ref().cmp(f.start.as_ref()) == Ordering::Greater) {
            return Err(format!("fragment {i} overlaps the one before it"));
        }
        if f.versions.is_empty() {
            return Err(format!("fragment {i} has no tombstones"));
        }
        if f.versions
            .windows(2)
            .any(|w| matches!(w, [a, b] if a.seqno <= b.seqno))
        {
            return Err(format!("fragment {i} seqnos are not strictly descending"));
        }
        prev_end = Some(&f.end);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 100 wide tombstones over 2,000 narrow ones: every fragment lists all 100 (200,000
    /// versions in all); thinned by stripe with no snapshot, one each, on the same bounds.
    #[test]
    fn thinning_by_stripe_keeps_one_version_a_fragment_without_snapshots() {
        let key = |i: u32| Bytes::from(format!("k{i:05}"));
        let narrow = (0..2000u32).map(|i| RangeTombstone {
            start: key(2 * i),
            end: key(2 * i + 1),
            seqno: u64::from(i) + 1,
            write_time: u64::from(i),
        });
        let wide = (0..100u32).map(|i| RangeTombstone {
            start: key(0),
            end: key(4000),
            seqno: 10_000 + u64::from(i),
            write_time: 10_000 + u64::from(i),
        });
        let all: Vec<RangeTombstone> = narrow.chain(wide).collect();
        let whole = FragmentedRangeTombstones::fragment(all.clone());
        let (thinned, left_out) = FragmentedRangeTombstones::fragment_in_stripes(all, |_| 0);
        let versions = |f: &FragmentedRangeTombstones| -> usize {
            f.fragments().iter().map(|f| f.versions.len()).sum()
        };
        // What the lists hold in memory, not only what they show.
        let capacity: usize = thinned
            .fragments()
            .iter()
            .map(|f| f.versions.capacity())
            .sum();
        assert_eq!(capacity, thinned.fragments().len());
        assert_eq!(whole.fragments().len(), thinned.fragments().len());
        assert!(versions(&whole) >= 200_000);
        assert_eq!(versions(&thinned), thinned.fragments().len());
        assert_eq!(left_out, (versions(&whole) - versions(&thinned)) as u64);
        for (w, t) in whole.fragments().iter().zip(thinned.fragments()) {
            assert_eq!((&w.start, &w.end), (&t.start, &t.end));
            assert_eq!(w.versions.first(), t.versions.first());
        }
    }

    fn rt(start: &'static str, end: &'static str, seqno: SeqNo) -> RangeTombstone {
        RangeTombstone {
            start: Bytes::from_static(start.as_bytes()),
            end: Bytes::from_static(end.as_bytes()),
            seqno,
            write_time: seqno * 10,
        }
    }

    fn shape(list: &FragmentedRangeTombstones) -> Vec<(String, String, Vec<SeqNo>)> {
        list.fragments()
            .iter()
            .map(|f| {
                (
                    String::from_utf8_lossy(&f.start).into_owned(),
                    String::from_utf8_lossy(&f.end).into_owned(),
                    f.versions.iter().map(|v| v.seqno).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn overlapping_tombstones_are_cut_at_every_boundary() {
        let list = FragmentedRangeTombstones::fragment([rt("a", "e", 5), rt("c", "g", 9)]);
        assert_eq!(
            shape(&list),
            vec![
                ("a".into(), "c".into(), vec![5]),
                ("c".into(), "e".into(), vec![9, 5]),
                ("e".into(), "g".into(), vec![9]),
            ]
        );
    }

    #[test]
    fn nested_disjoint_and_empty_ranges() {
        let list = FragmentedRangeTombstones::fragment([
            rt("a", "z", 1),
            rt("m", "n", 7),
            rt("q", "q", 8),
            rt("x", "b", 9),
        ]);
        assert_eq!(
            shape(&list),
            vec![
                ("a".into(), "m".into(), vec![1]),
                ("m".into(), "n".into(), vec![7, 1]),
                ("n".into(), "z".into(), vec![1]),
            ]
        );
        let gap = FragmentedRangeTombstones::fragment([rt("a", "b", 1), rt("c", "d", 1)]);
        assert_eq!(gap.fragments().len(), 2);
        let touching = FragmentedRangeTombstones::fragment([rt("a", "b", 1), rt("b", "c", 1)]);
        assert_eq!(shape(&touching), vec![("a".into(), "c".into(), vec![1])]);
    }

    #[test]
    fn covering_seqno_respects_the_snapshot() {
        let list = FragmentedRangeTombstones::fragment([rt("a", "e", 5), rt("c", "g", 9)]);
        assert_eq!(list.covering_seqno(b"d", 100), Some(9));
        assert_eq!(list.covering_seqno(b"d", 8), Some(5));
        assert_eq!(list.covering_seqno(b"d", 4), None);
        assert_eq!(list.covering_seqno(b"f", 8), None);
        assert_eq!(list.covering_seqno(b"g", 100), None, "end is exclusive");
        assert_eq!(
            list.covering_seqno(b"a", 100),
            Some(5),
            "start is inclusive"
        );
    }

    #[test]
    fn encoding_round_trips() -> Result<()> {
        let list =
            FragmentedRangeTombstones::fragment([rt("a", "e", 5), rt("c", "g", 9), rt("", "a", 2)]);
        let mut buf = Vec::new();
        list.encode(&mut buf);
        let decoded = FragmentedRangeTombstones::decode(&Bytes::from(buf), &Origin::default())?;
        assert_eq!(decoded, list);
        Ok(())
    }
}
