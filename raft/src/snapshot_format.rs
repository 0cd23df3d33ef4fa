//! The bytes of a state machine snapshot: every key and stored value (expiry in front) of the
//! data family, in key order, written and read as a stream so a snapshot never has to fit in
//! memory.
//!
//! `CRS2`, then for each pair the key's and the value's length (u32, big-endian) and bytes, then
//! an end mark (a key length of `u32::MAX`) and the pair count (u64). Decoding checks each
//! length against the engine's limits and the count against the pairs read, and refuses bytes
//! after the end, so a damaged or cut snapshot is an error, never a partial state.

use std::io::{Read, Write};

use crate::error::Malformed;

const MAGIC: &[u8; 4] = b"CRS2";
const END: u32 = u32::MAX;

/// Writes pairs in the snapshot format to `out`.
pub(crate) struct PairEncoder<W: Write> {
    out: W,
    count: u64,
}

impl<W: Write> PairEncoder<W> {
    pub(crate) fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(MAGIC)?;
        Ok(Self { out, count: 0 })
    }

    pub(crate) fn push(&mut self, key: &[u8], value: &[u8]) -> std::io::Result<()> {
        for part in [key, value] {
            let len = u32::try_from(part.len())
                .ok()
                .filter(|len| *len != END)
                .ok_or_else(|| std::io::Error::other("a pair part of 4 GiB or more"))?;
            self.out.write_all(&len.to_be_bytes())?;
            self.out.write_all(part)?;
        }
        self.count += 1;
        Ok(())
    }

    /// Writes the end mark and the count.
    pub(crate) fn finish(mut self) -> std::io::Result<W> {
        self.out.write_all(&END.to_be_bytes())?;
        self.out.write_all(&self.count.to_be_bytes())?;
        Ok(self.out)
    }
}

/// Reads the pairs of a snapshot from `input`, handing each to `each`; the pair count.
pub(crate) fn decode_pairs<R: Read, E: From<Malformed>>(
    mut input: R,
    mut each: impl FnMut(Vec<u8>, Vec<u8>) -> Result<(), E>,
) -> Result<u64, E> {
    let bad = |why: String| Malformed(format!("snapshot data: {why}"));
    let mut read = |buf: &mut [u8], what: &str, n: u64| {
        input
            .read_exact(buf)
            .map_err(|e| bad(format!("cut short in {what} {n}: {e}")))
    };
    let mut magic = [0; 4];
    read(&mut magic, "the header", 0)?;
    if &magic != MAGIC {
        return Err(bad("no CRS2 header".to_owned()).into());
    }
    let mut count = 0;
    loop {
        let mut len = [0; 4];
        read(&mut len, "pair", count)?;
        let key_len = u32::from_be_bytes(len);
        if key_len == END {
            break;
        }
        let key = read_part(&mut read, key_len, cairn::MAX_KEY_LEN, count)?;
        read(&mut len, "pair", count)?;
        let value = read_part(
            &mut read,
            u32::from_be_bytes(len),
            cairn::MAX_VALUE_LEN,
            count,
        )?;
        each(key, value)?;
        count += 1;
    }
    let mut stated = [0; 8];
    read(&mut stated, "the trailer", count)?;
    if u64::from_be_bytes(stated) != count {
        return Err(bad(format!(
            "the trailer counts {} pairs, {count} were read",
            u64::from_be_bytes(stated)
        ))
        .into());
    }
    let mut after = [0; 1];
    if input.read(&mut after).map_err(|e| bad(e.to_string()))? != 0 {
        return Err(bad("bytes after the trailer".to_owned()).into());
    }
    Ok(count)
}

/// One key or value of `len` bytes, refused over `limit` before anything is allocated.
fn read_part(
    read: &mut impl FnMut(&mut [u8], &str, u64) -> Result<(), Malformed>,
    len: u32,
    limit: usize,
    n: u64,
) -> Result<Vec<u8>, Malformed> {
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    if len > limit {
        return Err(Malformed(format!(
            "snapshot data: pair {n} has a part of {len} bytes, over the limit of {limit}"
        )));
    }
    let mut part = vec![0; len];
    read(&mut part, "pair", n)?;
    Ok(part)
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

    fn encode(pairs: &Pairs) -> Vec<u8> {
        let mut encoder = PairEncoder::new(Vec::new()).expect("header");
        for (k, v) in pairs {
            encoder.push(k, v).expect("push");
        }
        encoder.finish().expect("finish")
    }

    fn decode(bytes: &[u8]) -> Result<Pairs, Malformed> {
        let mut pairs = Vec::new();
        decode_pairs(bytes, |k, v| {
            pairs.push((k, v));
            Ok::<_, Malformed>(())
        })?;
        Ok(pairs)
    }

    #[test]
    fn pairs_round_trip_and_damage_is_an_error() {
        let pairs = vec![
            (b"a".to_vec(), vec![0; 9]),
            (Vec::new(), Vec::new()),
            (vec![0xff; 300], b"v".to_vec()),
        ];
        let bytes = encode(&pairs);
        assert_eq!(decode(&bytes).map_err(|e| e.0), Ok(pairs));
        for cut in 0..bytes.len() {
            assert!(
                decode(bytes.get(..cut).unwrap_or_default()).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let mut miscounted = bytes;
        if let Some(last) = miscounted.last_mut() {
            *last += 1;
        }
        assert!(decode(&miscounted).is_err());
    }

    #[test]
    fn a_length_over_the_limit_is_refused_before_it_is_allocated() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&(u32::MAX - 1).to_be_bytes());
        let err = decode(&bytes).expect_err("a 4 GiB key");
        assert!(err.0.contains("over the limit"), "{}", err.0);
    }
}
