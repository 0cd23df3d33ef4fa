//! Keys and values: a value names its key and version and carries filler derived from both, so
//! a read can tell a lost write, a resurrected delete and a wrong value apart.

use crate::report::Observed;

/// The key for index `i`.
pub(crate) fn key(i: usize) -> Vec<u8> {
    format!("k{i:09}").into_bytes()
}

/// The index a key names, if it is one of ours.
pub(crate) fn key_index(key: &[u8]) -> Option<usize> {
    std::str::from_utf8(key.strip_prefix(b"k")?)
        .ok()?
        .parse()
        .ok()
}

/// Keys whose index is a multiple of this are written only by put-once and single delete.
pub(crate) const SINGLE_DELETE_STRIDE: usize = 8;

/// True if key `i` is reserved for single deletes.
pub(crate) fn is_single_delete_key(i: usize) -> bool {
    i.is_multiple_of(SINGLE_DELETE_STRIDE)
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x
}

/// The value of version `version` of key `i`.
pub(crate) fn value(i: usize, version: u32, max_len: usize) -> Vec<u8> {
    let seed = mix((i as u64) << 32 | u64::from(version));
    let mut out = format!("{i}:{version}:").into_bytes();
    let len = 16 + usize::try_from(seed % (max_len.max(32) as u64 - 15)).unwrap_or(0);
    let mut x = seed;
    while out.len() < len {
        x = mix(x.wrapping_add(1));
        out.push(b'a' + u8::try_from(x % 26).unwrap_or(0));
    }
    out
}

/// The version a value for key `i` claims, if the value is exactly what that version writes.
pub(crate) fn parse_value(i: usize, bytes: &[u8], max_len: usize) -> Option<u32> {
    let text =
        std::str::from_utf8(bytes.get(..bytes.iter().take(24).position(|&b| b == b':')?)?).ok()?;
    if text.parse::<usize>().ok()? != i {
        return None;
    }
    let rest = bytes.get(text.len() + 1..)?;
    let version: u32 = std::str::from_utf8(rest.get(..rest.iter().position(|&b| b == b':')?)?)
        .ok()?
        .parse()
        .ok()?;
    (value(i, version, max_len) == bytes).then_some(version)
}

/// What a read of key `k` found.
pub(crate) fn observe(k: usize, found: Option<&[u8]>, max_value_size: usize) -> Observed {
    match found {
        None => Observed::Absent,
        Some(bytes) => {
            parse_value(k, bytes, max_value_size).map_or(Observed::Damaged, Observed::Version)
        }
    }
}

/// The byte a marker starts with; no key, filler or other marker byte is this.
const MARK_START: u8 = 0x1F;
/// The byte a marker ends with.
const MARK_END: u8 = 0x1E;
/// A marker's bytes: start, `DEL`, key index and version (8 hex digits each), end.
pub(crate) const MARK_LEN: usize = 21;

/// The erasure run's value for version `v` of key `i`, `len` bytes (at least [`MARK_LEN`]): a
/// marker a byte scan finds wherever the value lies, uncompressed, then letters.
pub(crate) fn marked(i: u32, v: u32, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len.max(MARK_LEN));
    out.push(MARK_START);
    out.extend_from_slice(format!("DEL{i:08x}{v:08x}").as_bytes());
    out.push(MARK_END);
    let mut x = u64::from(i) << 32 | u64::from(v);
    while out.len() < len {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        out.push(b'a' + u8::try_from((x >> 33) % 26).unwrap_or(0));
    }
    out
}

/// Every marker in `bytes`: the key index and version each names.
pub(crate) fn find_marks(bytes: &[u8]) -> impl Iterator<Item = (u32, u32)> + '_ {
    bytes
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == MARK_START)
        .filter_map(|(at, _)| parse_mark(bytes.get(at..at + MARK_LEN)?))
}

fn parse_mark(mark: &[u8]) -> Option<(u32, u32)> {
    let (&MARK_START, rest) = mark.split_first()? else {
        return None;
    };
    let (&MARK_END, body) = rest.split_last()? else {
        return None;
    };
    let hex = std::str::from_utf8(body.strip_prefix(b"DEL")?).ok()?;
    let i = u32::from_str_radix(hex.get(..8)?, 16).ok()?;
    let v = u32::from_str_radix(hex.get(8..)?, 16).ok()?;
    Some((i, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_back_and_damage_is_noticed() {
        for i in [0, 7, 123_456] {
            for v in [0, 1, 99] {
                let bytes = value(i, v, 200);
                assert_eq!(parse_value(i, &bytes, 200), Some(v));
                assert_eq!(
                    parse_value(i + 1, &bytes, 200),
                    None,
                    "a value of another key"
                );
                let mut bad = bytes.clone();
                if let Some(last) = bad.last_mut() {
                    *last ^= 1;
                }
                assert_eq!(parse_value(i, &bad, 200), None);
            }
        }
        assert_eq!(key_index(&key(42)), Some(42));
    }

    #[test]
    fn every_marker_is_found_where_it_lies_and_nothing_else_is() {
        let mut bytes = b"k000000001\x1fDELzz".to_vec();
        let values = [(1, 2), (0xdead_beef, 7), (u32::MAX, u32::MAX)];
        for &(i, v) in &values {
            bytes.extend_from_slice(&marked(i, v, 60));
            bytes.extend_from_slice(&[0x1f, 0x00]);
        }
        bytes.extend(marked(9, 9, 60).into_iter().take(MARK_LEN - 1));
        let found: Vec<(u32, u32)> = find_marks(&bytes).collect();
        assert_eq!(found, values);
        assert_eq!(
            marked(3, 4, 5).len(),
            MARK_LEN,
            "a marker is never cut short"
        );
    }
}
