//! A state machine snapshot's bytes: every key and stored value (expiry in front) of the data
//! family, in key order. `CRS1`, the pair count (u64), then for each pair the key's and the
//! value's length (u32, big-endian) and bytes. Decoding checks every length against what is
//! left, so a damaged or cut snapshot is an error, never a partial state.

use crate::error::Malformed;

/// A key and its stored value.
pub(crate) type Pair = (Vec<u8>, Vec<u8>);

const MAGIC: &[u8; 4] = b"CRS1";

pub(crate) fn encode_pairs(pairs: &[Pair]) -> Vec<u8> {
    let size: usize = pairs.iter().map(|(k, v)| 8 + k.len() + v.len()).sum();
    let mut out = Vec::with_capacity(12 + size);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(pairs.len() as u64).to_be_bytes());
    for (key, value) in pairs {
        for part in [key, value] {
            let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    out
}

pub(crate) fn decode_pairs(bytes: &[u8]) -> Result<Vec<Pair>, Malformed> {
    let bad = |why: &str| Malformed(format!("snapshot data: {why}"));
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("no CRS1 header"))?;
    let (count, mut rest) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| bad("cut short in its header"))?;
    let count = u64::from_be_bytes(*count);
    let mut pairs = Vec::new();
    for n in 0..count {
        let mut take = || -> Result<Vec<u8>, Malformed> {
            let (len, after) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| bad(&format!("cut short at pair {n}")))?;
            let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|_| bad("length"))?;
            let part = after
                .get(..len)
                .ok_or_else(|| bad(&format!("pair {n} runs past the end")))?;
            rest = after.get(len..).unwrap_or_default();
            Ok(part.to_vec())
        };
        let key = take()?;
        let value = take()?;
        pairs.push((key, value));
    }
    if !rest.is_empty() {
        return Err(bad(&format!("{} bytes after the last pair", rest.len())));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_and_damage_is_an_error() {
        let pairs = vec![
            (b"a".to_vec(), vec![0; 9]),
            (Vec::new(), Vec::new()),
            (vec![0xff; 300], b"v".to_vec()),
        ];
        let bytes = encode_pairs(&pairs);
        assert_eq!(decode_pairs(&bytes).map_err(|e| e.0), Ok(pairs));
        for cut in 0..bytes.len() {
            assert!(
                decode_pairs(bytes.get(..cut).unwrap_or_default()).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_pairs(&longer).is_err());
    }
}
