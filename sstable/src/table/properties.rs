//! Table properties: what the garbage collector and the picker need to know about a table
//! without reading its data.
//!
//! Stored as a block of `name → value` entries (names sorted, values varints or raw bytes), so
//! an older reader skips names it does not know and a newer one defaults missing ones.

use bytes::Bytes;

use crate::block::{Block, BlockBuilder};
use crate::coding::{Cursor, put_varint};
use crate::error::{Origin, Result};
use crate::key::{Kind, SeqNo};
use crate::meta::EntryMeta;

/// The window, in consecutive entries, over which tombstone density is measured.
pub const TOMBSTONE_WINDOW: u32 = 128;

/// What a table holds, counted as it was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableProperties {
    /// Point entries of every kind.
    pub num_entries: u64,
    /// `Put` entries.
    pub num_puts: u64,
    /// `Delete` entries.
    pub num_deletes: u64,
    /// `SingleDelete` entries.
    pub num_single_deletes: u64,
    /// Range tombstone pieces stored: (fragment, seqno) pairs.
    pub num_range_tombstones: u64,
    /// Data blocks.
    pub num_data_blocks: u64,
    /// The smallest seqno of any entry or range tombstone (0 for an empty table).
    pub smallest_seqno: SeqNo,
    /// The largest seqno of any entry or range tombstone.
    pub largest_seqno: SeqNo,
    /// The oldest write time of any entry or range tombstone, in ms.
    pub oldest_write_time: Option<u64>,
    /// The newest write time of any entry or range tombstone, in ms.
    pub newest_write_time: Option<u64>,
    /// The oldest deletion time of any point or range tombstone, in ms.
    pub oldest_tombstone_time: Option<u64>,
    /// The smallest seqno of any point or range tombstone.
    pub smallest_tombstone_seqno: Option<SeqNo>,
    /// The earliest `write_time + ttl` of any `Put` with a cell TTL, in ms.
    pub earliest_expiry: Option<u64>,
    /// Point entries whose user key is the previous entry's: older versions of a key stored
    /// after its newest. `None` for a table from before the count existed.
    pub older_versions: Option<u64>,
    /// Bytes of user keys (without trailers) across point entries.
    pub raw_key_bytes: u64,
    /// Bytes of user values across point entries.
    pub raw_value_bytes: u64,
    /// The most point tombstones found in any [`TOMBSTONE_WINDOW`] consecutive entries.
    pub max_tombstones_in_window: u32,
    /// Bloom filter bits per key the table was built with (0: no filter).
    pub bloom_bits_per_key: u32,
    /// The largest uncompressed size of any block but the properties block: the bound a reader
    /// holds every decompression to (0: not recorded, a table from before the bound existed).
    pub max_block_bytes: u64,
    /// Where the table's zstd dictionary block lies (0 bytes: it has none).
    pub zstd_dictionary_offset: u64,
    /// The dictionary's length in bytes; 0 when the table has none.
    pub zstd_dictionary_bytes: u64,
    /// The smallest internal key of a point entry.
    pub smallest_key: Option<Bytes>,
    /// The largest internal key of a point entry.
    pub largest_key: Option<Bytes>,
}

impl TableProperties {
    /// Point tombstones: `Delete` plus `SingleDelete` entries.
    pub fn num_point_tombstones(&self) -> u64 {
        self.num_deletes + self.num_single_deletes
    }

    /// Counts a point entry. Entries arrive in key order.
    pub(crate) fn add_entry(
        &mut self,
        user_key_len: usize,
        seqno: SeqNo,
        kind: Kind,
        meta: EntryMeta,
        value_len: usize,
    ) {
        self.num_entries += 1;
        match kind {
            Kind::Put => self.num_puts += 1,
            Kind::Delete => self.num_deletes += 1,
            Kind::SingleDelete => self.num_single_deletes += 1,
            Kind::RangeDelete => {}
        }
        self.raw_key_bytes += user_key_len as u64;
        self.raw_value_bytes += value_len as u64;
        self.note_seqno(seqno, meta.write_time);
        if kind.is_tombstone() {
            self.note_tombstone(seqno, meta.write_time);
        }
        if let Some(expiry) = meta.expiry().filter(|_| kind == Kind::Put) {
            self.earliest_expiry = Some(self.earliest_expiry.map_or(expiry, |e| e.min(expiry)));
        }
    }

    /// Counts a stored range tombstone piece.
    pub(crate) fn add_range_tombstone(&mut self, seqno: SeqNo, write_time: u64) {
        self.num_range_tombstones += 1;
        self.note_seqno(seqno, write_time);
        self.note_tombstone(seqno, write_time);
    }

    fn note_seqno(&mut self, seqno: SeqNo, write_time: u64) {
        let first = self.num_entries + self.num_range_tombstones == 1;
        if first || seqno < self.smallest_seqno {
            self.smallest_seqno = seqno;
        }
        self.largest_seqno = self.largest_seqno.max(seqno);
        self.oldest_write_time = Some(
            self.oldest_write_time
                .map_or(write_time, |t| t.min(write_time)),
        );
        self.newest_write_time = Some(
            self.newest_write_time
                .map_or(write_time, |t| t.max(write_time)),
        );
    }

    fn note_tombstone(&mut self, seqno: SeqNo, time: u64) {
        self.oldest_tombstone_time = Some(self.oldest_tombstone_time.map_or(time, |t| t.min(time)));
        self.smallest_tombstone_seqno = Some(
            self.smallest_tombstone_seqno
                .map_or(seqno, |s| s.min(seqno)),
        );
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut numbers: Vec<(&str, u64)> = vec![
            ("bloom_bits_per_key", u64::from(self.bloom_bits_per_key)),
            ("largest_seqno", self.largest_seqno),
            ("max_block_bytes", self.max_block_bytes),
            (
                "max_tombstones_in_window",
                u64::from(self.max_tombstones_in_window),
            ),
            ("num_data_blocks", self.num_data_blocks),
            ("num_deletes", self.num_deletes),
            ("num_entries", self.num_entries),
            ("num_puts", self.num_puts),
            ("num_range_tombstones", self.num_range_tombstones),
            ("num_single_deletes", self.num_single_deletes),
            ("raw_key_bytes", self.raw_key_bytes),
            ("raw_value_bytes", self.raw_value_bytes),
            ("smallest_seqno", self.smallest_seqno),
        ];
        let optional = [
            ("earliest_expiry", self.earliest_expiry),
            ("newest_write_time", self.newest_write_time),
            ("older_versions", self.older_versions),
            ("oldest_tombstone_time", self.oldest_tombstone_time),
            ("oldest_write_time", self.oldest_write_time),
            ("smallest_tombstone_seqno", self.smallest_tombstone_seqno),
        ];
        numbers.extend(optional.iter().filter_map(|(n, v)| v.map(|v| (*n, v))));
        // Only tables with a dictionary name one: the others stay readable by older readers.
        if self.zstd_dictionary_bytes > 0 {
            numbers.push(("zstd_dictionary_bytes", self.zstd_dictionary_bytes));
            numbers.push(("zstd_dictionary_offset", self.zstd_dictionary_offset));
        }
        let mut entries: Vec<(&str, Vec<u8>)> = numbers
            .into_iter()
            .map(|(name, v)| {
                let mut buf = Vec::new();
                put_varint(&mut buf, v);
                (name, buf)
            })
            .collect();
        for (name, key) in [
            ("largest_key", &self.largest_key),
            ("smallest_key", &self.smallest_key),
        ] {
            if let Some(key) = key {
                entries.push((name, key.to_vec()));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut block = BlockBuilder::new(1);
        for (name, value) in &entries {
            block.add(name.as_bytes(), &[value]);
        }
        block.finish().to_vec()
    }

    pub(crate) fn decode(block: &Block, origin: &Origin) -> Result<Self> {
        let mut props = Self::default();
        let mut iter = block.iter();
        iter.seek_to_first()?;
        while iter.valid() {
            props
                .decode_one(iter.key(), &iter.value_bytes())
                .ok_or_else(|| {
                    iter.corruption_here(format!(
                        "bad value for property {}",
                        String::from_utf8_lossy(iter.key())
                    ))
                })?;
            iter.next()?;
        }
        let by_kind = props
            .num_puts
            .checked_add(props.num_deletes)
            .and_then(|n| n.checked_add(props.num_single_deletes));
        if by_kind != Some(props.num_entries) {
            return Err(origin.corruption(0, "entry counts by kind do not add up"));
        }
        if props.largest_seqno > crate::key::MAX_SEQNO {
            return Err(origin.corruption(0, "sequence number past 56 bits"));
        }
        Ok(props)
    }

    fn decode_one(&mut self, name: &[u8], value: &Bytes) -> Option<()> {
        match name {
            b"smallest_key" => self.smallest_key = Some(value.clone()),
            b"largest_key" => self.largest_key = Some(value.clone()),
            _ => {
                let mut cursor = Cursor::new(value);
                let v = cursor.varint()?;
                if !cursor.is_empty() {
                    return None;
                }
                self.set_number(name, v)?;
            }
        }
        Some(())
    }

    fn set_number(&mut self, name: &[u8], v: u64) -> Option<()> {
        let small = || u32::try_from(v).ok();
        match name {
            b"bloom_bits_per_key" => self.bloom_bits_per_key = small()?,
            b"earliest_expiry" => self.earliest_expiry = Some(v),
            b"largest_seqno" => self.largest_seqno = v,
            b"max_block_bytes" => self.max_block_bytes = v,
            b"max_tombstones_in_window" => self.max_tombstones_in_window = small()?,
            b"newest_write_time" => self.newest_write_time = Some(v),
            b"num_data_blocks" => self.num_data_blocks = v,
            b"num_deletes" => self.num_deletes = v,
            b"num_entries" => self.num_entries = v,
            b"num_puts" => self.num_puts = v,
            b"num_range_tombstones" => self.num_range_tombstones = v,
            b"num_single_deletes" => self.num_single_deletes = v,
            b"older_versions" => self.older_versions = Some(v),
            b"oldest_tombstone_time" => self.oldest_tombstone_time = Some(v),
            b"oldest_write_time" => self.oldest_write_time = Some(v),
            b"zstd_dictionary_bytes" => self.zstd_dictionary_bytes = v,
            b"zstd_dictionary_offset" => self.zstd_dictionary_offset = v,
            b"raw_key_bytes" => self.raw_key_bytes = v,
            b"raw_value_bytes" => self.raw_value_bytes = v,
            b"smallest_seqno" => self.smallest_seqno = v,
            b"smallest_tombstone_seqno" => self.smallest_tombstone_seqno = Some(v),
            _ => {} // A property from a newer writer: skipped.
        }
        Some(())
    }
}

/// Tracks the densest window of point tombstones over consecutive entries.
#[derive(Debug, Default)]
pub(crate) struct TombstoneWindow {
    /// Bit i set when the entry i places back was a point tombstone.
    bits: u128,
    max: u32,
}

impl TombstoneWindow {
    pub(crate) fn push(&mut self, is_tombstone: bool) {
        self.bits = (self.bits << 1) | u128::from(is_tombstone);
        self.max = self.max.max(self.bits.count_ones());
    }

    pub(crate) fn max(&self) -> u32 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_the_densest_run_of_128() {
        let mut w = TombstoneWindow::default();
        for i in 0..1000 {
            w.push(i % 4 == 0);
        }
        assert_eq!(w.max(), 32);
        for _ in 0..200 {
            w.push(true);
        }
        assert_eq!(w.max(), TOMBSTONE_WINDOW);
    }

    #[test]
    fn properties_round_trip() -> Result<()> {
        let mut props = TableProperties::default();
        props.add_entry(
            3,
            7,
            Kind::Put,
            EntryMeta {
                write_time: 100,
                ttl: Some(50),
            },
            10,
        );
        props.add_entry(3, 9, Kind::Delete, EntryMeta::at(90), 0);
        props.add_range_tombstone(4, 80);
        props.max_tombstones_in_window = 1;
        props.smallest_key = Some(Bytes::from_static(b"abc12345678"));
        let block = Block::new(Bytes::from(props.encode()), Origin::default())?;
        let decoded = TableProperties::decode(&block, &Origin::default())?;
        assert_eq!(decoded, props);
        assert_eq!(decoded.smallest_seqno, 4);
        assert_eq!(decoded.largest_seqno, 9);
        assert_eq!(decoded.oldest_tombstone_time, Some(80));
        assert_eq!(decoded.earliest_expiry, Some(150));
        assert_eq!(decoded.oldest_write_time, Some(80));
        Ok(())
    }
}
