//! A cache-local bloom filter over user keys (the layout of `RocksDB`'s `FastLocalBloom`).
//!
//! ```text
//! line*  num_probes: u8  num_lines: u32 LE
//! ```
//!
//! A key's 64-bit XXH3 hash picks one 64-byte line with its high half; its low half, stepped by a
//! golden-ratio multiply, picks `num_probes` bits inside that line. A probe therefore touches one
//! cache line. At 10 bits per key the false-positive rate is about 1%.

use crate::coding::get_u32;

/// Bytes in one filter line (a cache line).
const LINE_BYTES: usize = 64;
/// The trailer: probe count and line count.
const TRAILER_LEN: usize = 5;

/// The default bits per key.
pub const DEFAULT_BITS_PER_KEY: u32 = 10;

/// The hash a filter uses for a user key.
pub fn bloom_hash(user_key: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(user_key)
}

/// Collects key hashes and builds a filter from them.
#[derive(Debug, Default)]
pub(crate) struct BloomBuilder {
    hashes: Vec<u64>,
}

impl BloomBuilder {
    pub(crate) fn add_hash(&mut self, hash: u64) {
        self.hashes.push(hash);
    }

    /// The filter bytes for every hash added, at `bits_per_key` (0 builds an empty filter that
    /// matches everything).
    pub(crate) fn finish(&self, bits_per_key: u32) -> Vec<u8> {
        if bits_per_key == 0 || self.hashes.is_empty() {
            return Vec::new();
        }
        let bits = self.hashes.len().saturating_mul(bits_per_key as usize);
        let num_lines = bits.div_ceil(LINE_BYTES * 8).max(1);
        let num_lines_u32 = u32::try_from(num_lines).unwrap_or(u32::MAX);
        let num_probes = probes_for(bits_per_key);
        let mut out = vec![0u8; num_lines_u32 as usize * LINE_BYTES];
        for &hash in &self.hashes {
            let line = line_of(hash, num_lines_u32) * LINE_BYTES;
            for bit in probe_bits(hash, num_probes) {
                if let Some(byte) = out.get_mut(line + bit / 8) {
                    *byte |= 1 << (bit % 8);
                }
            }
        }
        out.push(num_probes);
        out.extend_from_slice(&num_lines_u32.to_le_bytes());
        out
    }
}

/// A filter read back from a table.
#[derive(Debug, Clone)]
pub(crate) struct Bloom {
    bytes: bytes::Bytes,
    num_lines: u32,
    num_probes: u8,
}

impl Bloom {
    /// Parses a filter; `None` if its trailer disagrees with its length. An empty input is a
    /// filter that matches everything.
    pub(crate) fn new(bytes: bytes::Bytes) -> Option<Self> {
        if bytes.is_empty() {
            return Some(Self {
                bytes,
                num_lines: 0,
                num_probes: 0,
            });
        }
        let body = bytes.len().checked_sub(TRAILER_LEN)?;
        let num_probes = *bytes.get(body)?;
        let num_lines = get_u32(&bytes, body + 1)?;
        let expected = usize::try_from(num_lines).ok()?.checked_mul(LINE_BYTES)?;
        if expected != body || num_lines == 0 || num_probes == 0 || num_probes > 30 {
            return None;
        }
        Some(Self {
            bytes,
            num_lines,
            num_probes,
        })
    }

    /// False only if the key's hash was certainly never added.
    pub(crate) fn may_contain_hash(&self, hash: u64) -> bool {
        if self.num_lines == 0 {
            return true;
        }
        let line = line_of(hash, self.num_lines) * LINE_BYTES;
        probe_bits(hash, self.num_probes).all(|bit| {
            self.bytes
                .get(line + bit / 8)
                .is_some_and(|byte| byte & (1 << (bit % 8)) != 0)
        })
    }

    /// The filter's size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }
}

/// k = `bits_per_key` × ln 2, rounded, in 1..=30.
fn probes_for(bits_per_key: u32) -> u8 {
    let k = (bits_per_key * 69 + 50) / 100;
    u8::try_from(k.clamp(1, 30)).unwrap_or(30)
}

/// The line a hash falls in: the high 32 bits scaled to `num_lines` without division.
fn line_of(hash: u64, num_lines: u32) -> usize {
    let line = ((hash >> 32) * u64::from(num_lines)) >> 32;
    usize::try_from(line).unwrap_or(0)
}

/// The bit positions (0..512) a hash sets within its line.
fn probe_bits(hash: u64, num_probes: u8) -> impl Iterator<Item = usize> {
    let mut h = u32::try_from(hash & 0xffff_ffff).unwrap_or(0);
    (0..num_probes).map(move |_| {
        let bit = h >> (32 - 9);
        h = h.wrapping_mul(0x9e37_79b9);
        bit as usize
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter_of(keys: impl Iterator<Item = Vec<u8>>, bits_per_key: u32) -> Bloom {
        let mut builder = BloomBuilder::default();
        for key in keys {
            builder.add_hash(bloom_hash(&key));
        }
        Bloom::new(builder.finish(bits_per_key).into()).expect("valid filter")
    }

    #[test]
    fn every_added_key_matches() {
        let bloom = filter_of((0..10_000u32).map(|i| i.to_be_bytes().to_vec()), 10);
        for i in 0..10_000u32 {
            assert!(bloom.may_contain_hash(bloom_hash(&i.to_be_bytes())));
        }
    }

    #[test]
    fn false_positive_rate_at_10_bits_per_key_is_within_one_and_a_half_percent() {
        let keys = 100_000u32;
        let bloom = filter_of((0..keys).map(|i| format!("key{i:010}").into_bytes()), 10);
        let false_positives = (0..keys)
            .filter(|i| bloom.may_contain_hash(bloom_hash(format!("absent{i:010}").as_bytes())))
            .count();
        let rate = f64::from(u32::try_from(false_positives).unwrap_or(u32::MAX)) / f64::from(keys);
        assert!(rate <= 0.015, "false-positive rate {rate:.4} above 1.5%");
        assert!(
            rate > 0.0001,
            "rate {rate:.5} is implausibly low: are probes set?"
        );
    }

    #[test]
    fn empty_filter_matches_everything_and_bad_trailers_are_rejected() {
        let empty = Bloom::new(bytes::Bytes::new()).expect("empty filter");
        assert!(empty.may_contain_hash(bloom_hash(b"x")));
        assert!(Bloom::new(bytes::Bytes::from_static(&[1, 2, 3])).is_none());
        let mut builder = BloomBuilder::default();
        builder.add_hash(1);
        let mut bytes = builder.finish(10);
        if let Some(last) = bytes.last_mut() {
            *last = 9;
        }
        assert!(Bloom::new(bytes.into()).is_none());
    }
}
