//! Entry metadata: the write time every entry carries and the optional cell TTL of a `Put`.
//!
//! Encoded in front of the value as one varint `(write_time << 1) | has_ttl`, followed by a
//! varint TTL when the flag is set: six bytes for a write time in milliseconds since 1970.

use crate::coding::{Cursor, put_varint};

/// The largest write time (milliseconds) an entry can carry.
pub const MAX_WRITE_TIME: u64 = (1 << 62) - 1;

/// The metadata stored with every entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct EntryMeta {
    /// When the entry was written, in milliseconds of the engine's clock. For a tombstone this is
    /// its deletion time.
    pub write_time: u64,
    /// The cell's time to live in milliseconds, if it has one.
    pub ttl: Option<u64>,
}

impl EntryMeta {
    /// Metadata for an entry written at `write_time` without a TTL.
    pub fn at(write_time: u64) -> Self {
        Self {
            write_time,
            ttl: None,
        }
    }

    /// When the entry expires (`write_time + ttl`), if it has a TTL.
    pub fn expiry(&self) -> Option<u64> {
        self.expiry_under(None)
    }

    /// When the entry expires in a column family whose TTL is `cf_ttl_ms`: at
    /// `write_time + min(cf_ttl, ttl)`, the shorter of the two; `None` if neither is set.
    pub fn expiry_under(&self, cf_ttl_ms: Option<u64>) -> Option<u64> {
        let ttl = match (cf_ttl_ms, self.ttl) {
            (Some(a), Some(b)) => a.min(b),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => return None,
        };
        Some(self.write_time.saturating_add(ttl))
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        let flag = u64::from(self.ttl.is_some());
        put_varint(out, (self.write_time.min(MAX_WRITE_TIME) << 1) | flag);
        if let Some(ttl) = self.ttl {
            put_varint(out, ttl);
        }
    }

    pub(crate) fn decode(cursor: &mut Cursor<'_>) -> Option<Self> {
        let head = cursor.varint()?;
        let ttl = if head & 1 == 1 {
            Some(cursor.varint()?)
        } else {
            None
        };
        Some(Self {
            write_time: head >> 1,
            ttl,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_with_and_without_ttl() {
        for meta in [
            EntryMeta::at(0),
            EntryMeta::at(1_764_000_000_000),
            EntryMeta {
                write_time: 5,
                ttl: Some(0),
            },
            EntryMeta {
                write_time: MAX_WRITE_TIME,
                ttl: Some(u64::MAX),
            },
        ] {
            let mut buf = Vec::new();
            meta.encode(&mut buf);
            let mut cursor = Cursor::new(&buf);
            assert_eq!(EntryMeta::decode(&mut cursor), Some(meta));
            assert!(cursor.is_empty());
        }
    }

    #[test]
    fn a_current_write_time_takes_six_bytes() {
        let mut buf = Vec::new();
        EntryMeta::at(1_764_000_000_000).encode(&mut buf);
        assert_eq!(buf.len(), 6);
    }
}
