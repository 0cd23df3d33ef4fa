//! Internal keys: a user key followed by an 8-byte trailer `(seqno << 8) | kind`.
//!
//! Internal keys sort by user key ascending, then by sequence number descending (newest first),
//! then by kind descending, so a forward scan meets the newest version of a key first and a seek
//! to `(key, S, KIND_FOR_SEEK)` lands on the newest version visible at snapshot `S`.

use std::cmp::Ordering;

use crate::coding::get_u64;

/// A sequence number: 56 bits, one counter per database, one number per write.
pub type SeqNo = u64;

/// The largest sequence number that fits in a trailer.
pub const MAX_SEQNO: SeqNo = (1 << 56) - 1;

/// The length of the trailer that follows the user key.
pub const TRAILER_LEN: usize = 8;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Kind {
    /// A point tombstone: the key is absent from here down (`LevelDB`'s `kTypeDeletion`).
    Delete = 0,
    /// A value.
    Put = 1,
    /// A tombstone that cancels exactly one earlier `Put` (`RocksDB`'s `SingleDelete`).
    SingleDelete = 2,
    /// A range tombstone `[start, end)`. Tables keep these in their own block, never among
    /// point entries; the kind exists so logs and batches can carry them.
    RangeDelete = 3,
}

/// The kind to seek with: the largest, so a seek key sorts before every entry with its seqno.
pub const KIND_FOR_SEEK: Kind = Kind::RangeDelete;

impl Kind {
    /// The kind with this byte, if any.
    pub fn from_u8(byte: u8) -> Option<Self> {
        match byte {
            0 => Some(Self::Delete),
            1 => Some(Self::Put),
            2 => Some(Self::SingleDelete),
            3 => Some(Self::RangeDelete),
            _ => None,
        }
    }

    /// True for the kinds that delete: `Delete`, `SingleDelete` and `RangeDelete`.
    pub fn is_tombstone(self) -> bool {
        self != Self::Put
    }

    /// True for point tombstones: `Delete` and `SingleDelete`.
    pub fn is_point_tombstone(self) -> bool {
        matches!(self, Self::Delete | Self::SingleDelete)
    }
}

/// Packs a sequence number and kind into a trailer.
pub fn pack_trailer(seqno: SeqNo, kind: Kind) -> u64 {
    debug_assert!(seqno <= MAX_SEQNO, "seqno {seqno} exceeds 56 bits");
    (seqno << 8) | kind as u64
}

/// Appends the internal key for `(user_key, seqno, kind)` to `out`.
pub fn encode_internal_key(out: &mut Vec<u8>, user_key: &[u8], seqno: SeqNo, kind: Kind) {
    out.extend_from_slice(user_key);
    out.extend_from_slice(&pack_trailer(seqno, kind).to_le_bytes());
}

/// The internal key for `(user_key, seqno, kind)`.
pub fn internal_key(user_key: &[u8], seqno: SeqNo, kind: Kind) -> Vec<u8> {
    let mut out = Vec::with_capacity(user_key.len() + TRAILER_LEN);
    encode_internal_key(&mut out, user_key, seqno, kind);
    out
}

/// The key to seek to for the newest version of `user_key` visible at `snapshot`.
pub fn seek_key(user_key: &[u8], snapshot: SeqNo) -> Vec<u8> {
    internal_key(user_key, snapshot, KIND_FOR_SEEK)
}

/// A decoded view of an internal key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParsedKey<'a> {
    /// The key the user wrote.
    pub user_key: &'a [u8],
    /// The write's sequence number.
    pub seqno: SeqNo,
    /// What the entry is.
    pub kind: Kind,
}

/// Decodes an internal key; `None` if it is shorter than a trailer or its kind is unknown.
pub fn parse_internal_key(key: &[u8]) -> Option<ParsedKey<'_>> {
    let split = key.len().checked_sub(TRAILER_LEN)?;
    let trailer = get_u64(key, split)?;
    let kind = Kind::from_u8(u8::try_from(trailer & 0xff).ok()?)?;
    Some(ParsedKey {
        user_key: key.get(..split)?,
        seqno: trailer >> 8,
        kind,
    })
}

/// The user key of an internal key (all of it if it is too short to hold a trailer).
pub fn user_key(key: &[u8]) -> &[u8] {
    key.get(..key.len().saturating_sub(TRAILER_LEN))
        .unwrap_or_default()
}

fn trailer(key: &[u8]) -> u64 {
    get_u64(key, key.len().saturating_sub(TRAILER_LEN)).unwrap_or(0)
}

/// Orders internal keys: user key ascending, then trailer (seqno, kind) descending.
#[inline]
pub fn compare_internal_keys(a: &[u8], b: &[u8]) -> Ordering {
    compare_internal_key_to(a, user_key(b), trailer(b))
}

/// Orders internal key `a` against the internal key `user_key` followed by `trailer` (packed
/// as [`pack_trailer`] packs it), as [`compare_internal_keys`] would, without building it.
#[inline]
pub fn compare_internal_key_to(a: &[u8], user_key_b: &[u8], trailer_b: u64) -> Ordering {
    compare_bytes(user_key(a), user_key_b).then_with(|| trailer_b.cmp(&trailer(a)))
}

/// Orders byte strings as `[u8]::cmp` does, eight bytes at a time: keys are short, and for
/// them a call into `memcmp` costs more than the comparison.
#[inline]
pub fn compare_bytes(a: &[u8], b: &[u8]) -> Ordering {
    let (mut a_words, mut b_words) = (a.chunks_exact(8), b.chunks_exact(8));
    for (x, y) in a_words.by_ref().zip(b_words.by_ref()) {
        let (x, y) = (word(x), word(y));
        if x != y {
            return x.cmp(&y);
        }
    }
    // Whole words compared: one side has fewer than eight bytes left.
    let consumed = a.len().min(b.len()) / 8 * 8;
    let (a_rest, b_rest) = (
        a.get(consumed..).unwrap_or_default(),
        b.get(consumed..).unwrap_or_default(),
    );
    for (x, y) in a_rest.iter().zip(b_rest) {
        if x != y {
            return x.cmp(y);
        }
    }
    a_rest.len().cmp(&b_rest.len())
}

/// Eight bytes as a big-endian word, so that words order as their bytes do.
#[inline]
fn word(bytes: &[u8]) -> u64 {
    <[u8; 8]>::try_from(bytes).map_or(0, u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_bytes_orders_as_slices_do() {
        let samples: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![0xff],
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefgi".to_vec(),
            b"abcdefghijklmnopq".to_vec(),
            b"abcdefghijklmnopr".to_vec(),
            b"abcdefghijklmnop".to_vec(),
            b"abcdefghijklmno".to_vec(),
            vec![0xff; 9],
            vec![0x80, 0, 0, 0, 0, 0, 0, 0, 1],
            vec![0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ];
        for a in &samples {
            for b in &samples {
                assert_eq!(compare_bytes(a, b), a.cmp(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn newer_versions_sort_first_and_user_keys_ascend() {
        let mut keys = [
            internal_key(b"b", 1, Kind::Put),
            internal_key(b"a", 1, Kind::Put),
            internal_key(b"a", 9, Kind::Delete),
            internal_key(b"ab", 5, Kind::Put),
            internal_key(b"", 3, Kind::Put),
        ];
        keys.sort_by(|a, b| compare_internal_keys(a, b));
        let parsed: Vec<_> = keys
            .iter()
            .map(|k| {
                let p = parse_internal_key(k).expect("valid key");
                (p.user_key.to_vec(), p.seqno)
            })
            .collect();
        assert_eq!(
            parsed,
            vec![
                (b"".to_vec(), 3),
                (b"a".to_vec(), 9),
                (b"a".to_vec(), 1),
                (b"ab".to_vec(), 5),
                (b"b".to_vec(), 1)
            ]
        );
    }

    #[test]
    fn seek_key_sorts_before_every_version_at_its_snapshot() {
        let seek = seek_key(b"k", 5);
        for kind in [Kind::Delete, Kind::Put, Kind::SingleDelete] {
            assert_eq!(
                compare_internal_keys(&seek, &internal_key(b"k", 5, kind)),
                Ordering::Less
            );
            assert_eq!(
                compare_internal_keys(&seek, &internal_key(b"k", 6, kind)),
                Ordering::Greater
            );
        }
    }

    #[test]
    fn short_keys_and_unknown_kinds_do_not_parse() {
        assert!(parse_internal_key(b"short").is_none());
        let mut bad = internal_key(b"k", 1, Kind::Put);
        if let Some(kind_byte) = bad.get_mut(1) {
            *kind_byte = 0x77;
        }
        assert!(parse_internal_key(&bad).is_none());
    }
}
