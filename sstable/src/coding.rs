//! Varints, fixed-width integers and length-prefixed byte strings, decoded without trusting the
//! input: every read returns `None` where the input ends early or a varint overflows, never
//! panics. Tables use it, and so do the engine's log records and MANIFEST edits, so the
//! project has one varint codec.

/// Appends `v` as a LEB128 varint (7 bits a byte, low bits first).
#[expect(
    clippy::cast_possible_truncation,
    reason = "each byte is masked to 7 bits first"
)]
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The bytes `put_varint` writes for `v`.
pub fn varint_len(v: u64) -> usize {
    let bits = 64 - v.leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Decodes a varint from the front of `input`: the value and the bytes it used, or `None` if the
/// input ends inside it or it does not fit in 64 bits.
#[inline]
pub fn get_varint(input: &[u8]) -> Option<(u64, usize)> {
    // Most varints in a block (shared and unshared key lengths, value lengths) are one byte.
    if let Some(&byte) = input.first()
        && byte < 0x80
    {
        return Some((u64::from(byte), 1));
    }
    get_varint_long(input)
}

/// [`get_varint`] past its one-byte case.
fn get_varint_long(input: &[u8]) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &byte) in input.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        let shift = 7 * i;
        if shift == 63 && bits > 1 {
            return None;
        }
        value |= bits << shift;
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Reads a little-endian `u32` at `pos`.
pub fn get_u32(input: &[u8], pos: usize) -> Option<u32> {
    let bytes = input.get(pos..pos.checked_add(4)?)?;
    Some(u32::from_le_bytes(bytes.try_into().ok()?))
}

/// Reads a little-endian `u64` at `pos`.
pub fn get_u64(input: &[u8], pos: usize) -> Option<u64> {
    let bytes = input.get(pos..pos.checked_add(8)?)?;
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

/// A cursor that decodes fields in order from a byte slice.
pub struct Cursor<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `input`.
    pub fn new(input: &'a [u8]) -> Self {
        Self { input, pos: 0 }
    }

    /// Bytes decoded so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// True once every byte is decoded.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.input.len()
    }

    /// A varint.
    #[inline]
    pub fn varint(&mut self) -> Option<u64> {
        let (v, n) = get_varint(self.input.get(self.pos..)?)?;
        self.pos += n;
        Some(v)
    }

    /// A varint that must fit a `usize`.
    #[inline]
    pub fn varint_usize(&mut self) -> Option<usize> {
        usize::try_from(self.varint()?).ok()
    }

    /// The next `len` bytes.
    pub fn bytes(&mut self, len: usize) -> Option<&'a [u8]> {
        let out = self.input.get(self.pos..self.pos.checked_add(len)?)?;
        self.pos += len;
        Some(out)
    }

    /// One byte.
    pub fn byte(&mut self) -> Option<u8> {
        let b = *self.input.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// A little-endian `u64`.
    pub fn u64_le(&mut self) -> Option<u64> {
        let v = get_u64(self.input, self.pos)?;
        self.pos += 8;
        Some(v)
    }

    /// A varint length followed by that many bytes.
    pub fn length_prefixed(&mut self) -> Option<&'a [u8]> {
        let len = self.varint_usize()?;
        self.bytes(len)
    }
}

/// Appends a varint length and then `bytes`.
pub fn put_length_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_at_every_width() {
        let mut buf = Vec::new();
        let values = [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ];
        for v in values {
            buf.clear();
            put_varint(&mut buf, v);
            assert_eq!(get_varint(&buf), Some((v, buf.len())));
            assert_eq!(
                get_varint(buf.get(..buf.len() - 1).unwrap_or_default()),
                None
            );
        }
    }

    #[test]
    fn overlong_varints_are_rejected() {
        assert_eq!(get_varint(&[0xff; 10]), None);
        assert_eq!(get_varint(&[0x80; 11]), None);
        let mut too_big = vec![0xff; 9];
        too_big.push(0x02);
        assert_eq!(get_varint(&too_big), None);
    }
}
