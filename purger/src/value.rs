//! Column types and values, and their two encodings: the compact one rows are stored in, and
//! the order-preserving one index keys are built from (so an engine range scan over an index
//! is a range scan over the column's values).

use serde::{Deserialize, Serialize};

/// The type of a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ColumnType {
    /// A signed 64-bit integer.
    Integer,
    /// UTF-8 text.
    Text,
    /// Raw bytes.
    Bytes,
    /// `true` or `false`.
    Bool,
    /// Milliseconds on the engine clock (the type of `deleted_at`).
    Timestamp,
}

/// A column's value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// An [`Integer`](ColumnType::Integer).
    Integer(i64),
    /// A [`Text`](ColumnType::Text).
    Text(String),
    /// A [`Bytes`](ColumnType::Bytes).
    Bytes(Vec<u8>),
    /// A [`Bool`](ColumnType::Bool).
    Bool(bool),
    /// A [`Timestamp`](ColumnType::Timestamp) in milliseconds.
    Timestamp(u64),
}

impl Value {
    /// The type of a non-null value; `None` for `Null`.
    pub fn column_type(&self) -> Option<ColumnType> {
        match self {
            Value::Null => None,
            Value::Integer(_) => Some(ColumnType::Integer),
            Value::Text(_) => Some(ColumnType::Text),
            Value::Bytes(_) => Some(ColumnType::Bytes),
            Value::Bool(_) => Some(ColumnType::Bool),
            Value::Timestamp(_) => Some(ColumnType::Timestamp),
        }
    }

    /// Whether this is `Null`.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The text, if this is a `Text`.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The integer, if this is an `Integer`.
    pub fn as_integer(&self) -> Option<i64> {
        match self {
            Value::Integer(i) => Some(*i),
            _ => None,
        }
    }

    /// The milliseconds, if this is a `Timestamp`.
    pub fn as_timestamp(&self) -> Option<u64> {
        match self {
            Value::Timestamp(t) => Some(*t),
            _ => None,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Integer(i)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<Vec<u8>> for Value {
    fn from(b: Vec<u8>) -> Self {
        Value::Bytes(b)
    }
}

impl From<&[u8]> for Value {
    fn from(b: &[u8]) -> Self {
        Value::Bytes(b.to_vec())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

const TAG_NULL: u8 = 0;
const TAG_INTEGER: u8 = 1;
const TAG_TEXT: u8 = 2;
const TAG_BYTES: u8 = 3;
const TAG_BOOL: u8 = 4;
const TAG_TIMESTAMP: u8 = 5;

/// Appends the stored form of `value`: a tag byte, then a fixed-width payload or a length
/// (u32, little-endian) and the bytes.
pub(crate) fn encode_stored(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(TAG_NULL),
        Value::Integer(i) => {
            out.push(TAG_INTEGER);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Value::Text(s) => encode_stored_bytes(TAG_TEXT, s.as_bytes(), out),
        Value::Bytes(b) => encode_stored_bytes(TAG_BYTES, b, out),
        Value::Bool(b) => out.extend_from_slice(&[TAG_BOOL, u8::from(*b)]),
        Value::Timestamp(t) => {
            out.push(TAG_TIMESTAMP);
            out.extend_from_slice(&t.to_le_bytes());
        }
    }
}

fn encode_stored_bytes(tag: u8, bytes: &[u8], out: &mut Vec<u8>) {
    out.push(tag);
    // Rows are engine values, bounded far below 4 GiB; the table layer checks the total.
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads one stored value from the front of `input`, advancing it. `Err` says what was wrong.
pub(crate) fn decode_stored(input: &mut &[u8]) -> Result<Value, String> {
    let (&tag, rest) = input.split_first().ok_or("truncated value tag")?;
    *input = rest;
    Ok(match tag {
        TAG_NULL => Value::Null,
        TAG_INTEGER => Value::Integer(i64::from_le_bytes(take_array(input)?)),
        TAG_TEXT => {
            let bytes = take_len_prefixed(input)?;
            Value::Text(String::from_utf8(bytes).map_err(|_| "text is not UTF-8")?)
        }
        TAG_BYTES => Value::Bytes(take_len_prefixed(input)?),
        TAG_BOOL => match take_array::<1>(input)? {
            [0] => Value::Bool(false),
            [1] => Value::Bool(true),
            [b] => return Err(format!("bad bool byte {b}")),
        },
        TAG_TIMESTAMP => Value::Timestamp(u64::from_le_bytes(take_array(input)?)),
        other => return Err(format!("unknown value tag {other}")),
    })
}

fn take_array<const N: usize>(input: &mut &[u8]) -> Result<[u8; N], String> {
    let (head, rest) = input
        .split_first_chunk::<N>()
        .ok_or_else(|| format!("truncated: wanted {N} bytes, {} left", input.len()))?;
    *input = rest;
    Ok(*head)
}

fn take_len_prefixed(input: &mut &[u8]) -> Result<Vec<u8>, String> {
    let len = usize::try_from(u32::from_le_bytes(take_array(input)?))
        .map_err(|_| "length does not fit in memory")?;
    if len > input.len() {
        return Err(format!(
            "length {len} runs past the end ({} left)",
            input.len()
        ));
    }
    let (bytes, rest) = input.split_at(len);
    *input = rest;
    Ok(bytes.to_vec())
}

/// Appends the order-preserving form of `value` to an index key: byte-wise comparison of two
/// encodings orders them as the values (NULL first). Text and bytes escape `0x00` as
/// `0x00 0xFF` and end with `0x00 0x01`, so a shorter string sorts before its extensions and
/// the next column's bytes can never be mistaken for this one's.
pub(crate) fn encode_ordered(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(0x00),
        Value::Integer(i) => {
            out.push(0x01);
            out.extend_from_slice(&(i.cast_unsigned() ^ (1 << 63)).to_be_bytes());
        }
        Value::Timestamp(t) => {
            out.push(0x01);
            out.extend_from_slice(&t.to_be_bytes());
        }
        Value::Bool(b) => out.extend_from_slice(&[0x01, u8::from(*b)]),
        Value::Text(s) => encode_ordered_bytes(s.as_bytes(), out),
        Value::Bytes(b) => encode_ordered_bytes(b, out),
    }
}

fn encode_ordered_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(0x01);
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0x00, 0x01]);
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]
mod tests {
    use super::*;

    fn ordered(v: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_ordered(v, &mut out);
        out
    }

    #[test]
    fn ordered_encoding_sorts_like_the_values() {
        let groups = [
            vec![
                Value::Null,
                Value::Integer(i64::MIN),
                Value::Integer(-1),
                Value::Integer(0),
                Value::Integer(7),
                Value::Integer(i64::MAX),
            ],
            vec![
                Value::Null,
                Value::from(""),
                Value::from("\0"),
                Value::from("\0\0"),
                Value::from("a"),
                Value::from("a\0"),
                Value::from("ab"),
                Value::from("b"),
            ],
            vec![
                Value::Null,
                Value::Timestamp(0),
                Value::Timestamp(1),
                Value::Timestamp(u64::MAX),
            ],
        ];
        for group in groups {
            for pair in group.windows(2) {
                let [a, b] = pair else { unreachable!() };
                assert!(ordered(a) < ordered(b), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn stored_encoding_round_trips_and_rejects_damage() {
        let values = [
            Value::Null,
            Value::Integer(-5),
            Value::from("héllo"),
            Value::Bytes(vec![0, 1, 2]),
            Value::Bool(true),
            Value::Timestamp(42),
        ];
        let mut bytes = Vec::new();
        for v in &values {
            encode_stored(v, &mut bytes);
        }
        let mut input = &bytes[..];
        for v in &values {
            assert_eq!(&decode_stored(&mut input).expect("decodes"), v);
        }
        assert!(input.is_empty());
        for cut in 0..bytes.len() {
            let mut input = &bytes[..cut];
            let decoded: Result<Vec<_>, _> =
                values.iter().map(|_| decode_stored(&mut input)).collect();
            assert!(decoded.is_err(), "a cut at {cut} decoded");
        }
        assert!(decode_stored(&mut &[9u8][..]).is_err());
        assert!(decode_stored(&mut &[TAG_BOOL, 2][..]).is_err());
        assert!(decode_stored(&mut &[TAG_TEXT, 2, 0, 0, 0, 0xFF, 0xFE][..]).is_err());
    }
}
