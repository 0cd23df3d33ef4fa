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
}
