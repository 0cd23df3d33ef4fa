//! Keys and values: 16-byte keys whose byte order is their index order, and db_bench-style
//! values that compress to about half their size.

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Every key is this long.
pub const KEY_LEN: usize = 16;

/// The key of index `i`: sixteen decimal digits, so keys sort as their indexes do.
pub fn key(i: u64) -> [u8; KEY_LEN] {
    let mut k = [b'0'; KEY_LEN];
    let mut n = i;
    for b in k.iter_mut().rev() {
        *b = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
    }
    k
}

/// A key that is never written: the key of `i` with its last digit replaced by `m`, so it lies
/// between two written keys (those ending in 9 and 0) and only the bloom filter spares a block
/// read.
pub fn missing_key(i: u64) -> [u8; KEY_LEN] {
    let mut k = key(i);
    if let Some(last) = k.last_mut() {
        *last = b'm';
    }
    k
}

/// The key of the `i`th item pushed onto the queue: `q` and fifteen digits.
pub fn queue_key(i: u64) -> [u8; KEY_LEN] {
    let mut k = key(i);
    if let Some(first) = k.first_mut() {
        *first = b'q';
    }
    k
}

/// `0..n` in an order drawn from `rng`.
pub fn shuffled(n: u64, rng: &mut SmallRng) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    order.shuffle(rng);
    order
}

/// Values in the manner of `db_bench`'s `RandomGenerator`: slices of a 1 MiB pool built from
/// pieces whose second half repeats their first, so any compressor halves them.
pub struct Values {
    pool: Vec<u8>,
    len: usize,
    pos: usize,
}

impl Values {
    const POOL: usize = 1 << 20;

    /// Values of `len` bytes from a pool drawn with `seed`.
    pub fn new(len: usize, seed: u64) -> Self {
        let mut rng = SmallRng::seed_from_u64(seed);
        let piece = len.clamp(2, 100);
        let mut pool = Vec::with_capacity(Self::POOL + len);
        while pool.len() < Self::POOL.max(len) {
            let half: Vec<u8> = (0..piece / 2)
                .map(|_| rng.random_range(b' '..=b'~'))
                .collect();
            pool.extend_from_slice(&half);
            pool.extend_from_slice(&half);
        }
        Self { pool, len, pos: 0 }
    }

    /// The next value.
    pub fn next_value(&mut self) -> &[u8] {
        if self.pos + self.len > self.pool.len() {
            self.pos = 0;
        }
        let start = self.pos;
        self.pos += self.len;
        self.pool.get(start..start + self.len).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_as_their_indexes() {
        assert_eq!(&key(42), b"0000000000000042");
        assert!(key(9) < key(10));
        assert!(key(49) < missing_key(41) && missing_key(41) < key(50));
        assert_eq!(&queue_key(7), b"q000000000000007");
    }

    #[test]
    fn values_have_the_asked_length() {
        let mut values = Values::new(100, 1);
        for _ in 0..20_000 {
            assert_eq!(values.next_value().len(), 100);
        }
    }
}
