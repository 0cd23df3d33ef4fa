//! Version edits: the records of the MANIFEST (see `engine/MANIFEST.md`).

use std::path::Path;

use bytes::Bytes;
use cairn_sstable::coding::{Cursor, put_length_prefixed, put_varint};

use crate::error::Error;
use crate::options::CfOptions;

/// The id of the default column family.
pub(crate) const DEFAULT_CF: u32 = 0;

/// Where an edit lies (or is about to) in a MANIFEST: what a `Corruption` about it names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EditAt<'a> {
    pub(crate) file: &'a Path,
    pub(crate) offset: u64,
}

impl EditAt<'_> {
    pub(crate) fn corruption(self, why: impl Into<String>) -> Error {
        Error::corruption(self.file, self.offset, why)
    }
}

/// One table in a version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FileMeta {
    pub(crate) number: u64,
    pub(crate) file_size: u64,
    /// The smallest user key of any entry or range tombstone.
    pub(crate) smallest: Bytes,
    /// The largest user key of any entry, or the end of the last range tombstone (whose end is
    /// exclusive, so this bound may be one key too generous).
    pub(crate) largest: Bytes,
    pub(crate) smallest_seqno: u64,
    pub(crate) largest_seqno: u64,
    pub(crate) num_entries: u64,
    pub(crate) num_point_tombstones: u64,
    pub(crate) num_range_tombstones: u64,
    /// What the picker reads: see `cairn_compaction::picker::FileInfo`.
    pub(crate) oldest_tombstone_time: Option<u64>,
    pub(crate) smallest_tombstone_seqno: Option<u64>,
    pub(crate) max_tombstones_in_window: u32,
    pub(crate) earliest_expiry: Option<u64>,
    pub(crate) oldest_write_time: Option<u64>,
}

impl FileMeta {
    /// True if the table may hold `user_key`.
    pub(crate) fn may_contain_key(&self, user_key: &[u8]) -> bool {
        self.smallest.as_ref() <= user_key && user_key <= self.largest.as_ref()
    }

    /// True if the table may hold keys in `[start, end)` (`end` `None`: unbounded).
    pub(crate) fn overlaps(&self, start: &[u8], end: Option<&[u8]>) -> bool {
        self.largest.as_ref() >= start && end.is_none_or(|end| self.smallest.as_ref() < end)
    }
}

/// A change to the set of tables and column families.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct VersionEdit {
    pub(crate) log_number: Option<u64>,
    pub(crate) next_file_number: Option<u64>,
    pub(crate) last_seqno: Option<u64>,
    pub(crate) next_cf_id: Option<u32>,
    pub(crate) added_cfs: Vec<(u32, String, CfOptions)>,
    pub(crate) dropped_cfs: Vec<u32>,
    pub(crate) new_files: Vec<(u32, usize, FileMeta)>,
    pub(crate) deleted_files: Vec<(u32, usize, u64)>,
    /// The format of the logs the writer writes ([`LOG_FORMAT`](crate::manifest::LOG_FORMAT)):
    /// in every snapshot edit, so a build that reads only older logs refuses the database (an
    /// unknown tag is a malformed edit to it) instead of misreading them.
    pub(crate) log_format: Option<u64>,
}

const TAG_LOG_NUMBER: u8 = 1;
const TAG_NEXT_FILE: u8 = 2;
const TAG_LAST_SEQNO: u8 = 3;
const TAG_NEXT_CF_ID: u8 = 4;
const TAG_ADD_CF: u8 = 5;
const TAG_DROP_CF: u8 = 6;
const TAG_NEW_FILE: u8 = 7;
const TAG_DELETED_FILE: u8 = 8;
const TAG_LOG_FORMAT: u8 = 9;

impl VersionEdit {
    /// Checks the numbers an edit read from disk may hold: sequence numbers within 56 bits, file
    /// numbers below [`MAX_FILE_NUMBER`](crate::filename::MAX_FILE_NUMBER), column family ids
    /// below `u32::MAX`, levels that exist. A message says what is out of range.
    pub(crate) fn check_ranges(&self) -> Result<(), String> {
        use crate::filename::MAX_FILE_NUMBER;
        let seqnos = self.last_seqno.into_iter().chain(
            self.new_files
                .iter()
                .flat_map(|(_, _, f)| [f.smallest_seqno, f.largest_seqno]),
        );
        if let Some(s) = seqnos.into_iter().find(|&s| s > cairn_sstable::MAX_SEQNO) {
            return Err(format!("sequence number {s} past 56 bits"));
        }
        let numbers = self.next_file_number.into_iter().chain(
            self.new_files
                .iter()
                .map(|(_, _, f)| f.number)
                .chain(self.deleted_files.iter().map(|(_, _, n)| *n))
                .chain(self.log_number),
        );
        if let Some(n) = numbers.into_iter().find(|&n| n >= MAX_FILE_NUMBER) {
            return Err(format!("file number {n} out of range"));
        }
        let ids = self.next_cf_id.into_iter().chain(
            self.added_cfs
                .iter()
                .map(|(id, _, _)| *id)
                .chain(self.dropped_cfs.iter().copied()),
        );
        if ids.into_iter().any(|id| id == u32::MAX) {
            return Err("column family id out of range".into());
        }
        let levels = self
            .new_files
            .iter()
            .map(|(_, l, _)| *l)
            .chain(self.deleted_files.iter().map(|(_, l, _)| *l));
        if let Some(l) = levels
            .into_iter()
            .find(|&l| l >= crate::options::NUM_LEVELS)
        {
            return Err(format!("level {l} does not exist"));
        }
        Ok(())
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (tag, value) in [
            (TAG_LOG_NUMBER, self.log_number),
            (TAG_NEXT_FILE, self.next_file_number),
            (TAG_LAST_SEQNO, self.last_seqno),
            (TAG_NEXT_CF_ID, self.next_cf_id.map(u64::from)),
            (TAG_LOG_FORMAT, self.log_format),
        ] {
            if let Some(v) = value {
                out.push(tag);
                put_varint(&mut out, v);
            }
        }
        for (id, name, options) in &self.added_cfs {
            out.push(TAG_ADD_CF);
            put_varint(&mut out, u64::from(*id));
            put_length_prefixed(&mut out, name.as_bytes());
            put_varint(
                &mut out,
                options
                    .ttl
                    .map_or(0, |t| crate::clock::millis(t).saturating_add(1)),
            );
            put_varint(&mut out, u64::from(options.max_versions));
            put_varint(&mut out, crate::clock::millis(options.tombstone_grace));
        }
        for id in &self.dropped_cfs {
            out.push(TAG_DROP_CF);
            put_varint(&mut out, u64::from(*id));
        }
        for (cf, level, f) in &self.new_files {
            out.push(TAG_NEW_FILE);
            put_varint(&mut out, u64::from(*cf));
            put_varint(&mut out, *level as u64);
            for v in [f.number, f.file_size] {
                put_varint(&mut out, v);
            }
            put_length_prefixed(&mut out, &f.smallest);
            put_length_prefixed(&mut out, &f.largest);
            for v in [
                f.smallest_seqno,
                f.largest_seqno,
                f.num_entries,
                f.num_point_tombstones,
                f.num_range_tombstones,
            ] {
                put_varint(&mut out, v);
            }
            for v in [f.oldest_tombstone_time, f.smallest_tombstone_seqno] {
                put_varint(&mut out, optional(v));
            }
            put_varint(&mut out, u64::from(f.max_tombstones_in_window));
            for v in [f.earliest_expiry, f.oldest_write_time] {
                put_varint(&mut out, optional(v));
            }
        }
        for (cf, level, number) in &self.deleted_files {
            out.push(TAG_DELETED_FILE);
            put_varint(&mut out, u64::from(*cf));
            put_varint(&mut out, *level as u64);
            put_varint(&mut out, *number);
        }
        out
    }

    /// Decodes an edit; `None` if malformed.
    pub(crate) fn decode(record: &[u8]) -> Option<Self> {
        let mut r = Cursor::new(record);
        let mut edit = Self::default();
        while !r.is_empty() {
            match r.byte()? {
                TAG_LOG_NUMBER => edit.log_number = Some(r.varint()?),
                TAG_NEXT_FILE => edit.next_file_number = Some(r.varint()?),
                TAG_LAST_SEQNO => edit.last_seqno = Some(r.varint()?),
                TAG_NEXT_CF_ID => edit.next_cf_id = Some(u32::try_from(r.varint()?).ok()?),
                TAG_LOG_FORMAT => edit.log_format = Some(r.varint()?),
                TAG_ADD_CF => edit.added_cfs.push(decode_cf(&mut r)?),
                TAG_DROP_CF => edit.dropped_cfs.push(u32::try_from(r.varint()?).ok()?),
                TAG_NEW_FILE => edit.new_files.push(decode_file(&mut r)?),
                TAG_DELETED_FILE => {
                    let cf = u32::try_from(r.varint()?).ok()?;
                    let level = usize::try_from(r.varint()?).ok()?;
                    edit.deleted_files.push((cf, level, r.varint()?));
                }
                _ => return None,
            }
        }
        Some(edit)
    }
}

/// `None` as 0, `Some(v)` as `v + 1` (times and seqnos stay far below `u64::MAX`).
fn optional(v: Option<u64>) -> u64 {
    v.map_or(0, |v| v.saturating_add(1))
}

/// The encoded optional read back (0 → `None`); `Err` if the input ends.
fn read_optional(r: &mut Cursor<'_>) -> Result<Option<u64>, ()> {
    r.varint().map(|v| v.checked_sub(1)).ok_or(())
}

fn decode_cf(r: &mut Cursor<'_>) -> Option<(u32, String, CfOptions)> {
    let id = u32::try_from(r.varint()?).ok()?;
    let name = String::from_utf8(r.length_prefixed()?.to_vec()).ok()?;
    let ttl = r.varint()?;
    let mut options = CfOptions::default()
        .max_versions(u32::try_from(r.varint()?).ok()?)
        .tombstone_grace(std::time::Duration::from_millis(r.varint()?));
    if ttl > 0 {
        options = options.ttl(std::time::Duration::from_millis(ttl - 1));
    }
    Some((id, name, options))
}

fn decode_file(r: &mut Cursor<'_>) -> Option<(u32, usize, FileMeta)> {
    let cf = u32::try_from(r.varint()?).ok()?;
    let level = usize::try_from(r.varint()?).ok()?;
    let number = r.varint()?;
    let file_size = r.varint()?;
    let smallest = Bytes::copy_from_slice(r.length_prefixed()?);
    let largest = Bytes::copy_from_slice(r.length_prefixed()?);
    Some((
        cf,
        level,
        FileMeta {
            number,
            file_size,
            smallest,
            largest,
            smallest_seqno: r.varint()?,
            largest_seqno: r.varint()?,
            num_entries: r.varint()?,
            num_point_tombstones: r.varint()?,
            num_range_tombstones: r.varint()?,
            oldest_tombstone_time: read_optional(r).ok()?,
            smallest_tombstone_seqno: read_optional(r).ok()?,
            max_tombstones_in_window: u32::try_from(r.varint()?).ok()?,
            earliest_expiry: read_optional(r).ok()?,
            oldest_write_time: read_optional(r).ok()?,
        },
    ))
}

/// The MANIFEST record of table `number`, built from what its file holds: every field is a copy
/// of, or follows from, its properties and range tombstones, so an open table can be held to
/// its record whole ([`check_bounds`](crate::table_cache::check_bounds)).
pub(crate) fn record_of(
    number: u64,
    file_size: u64,
    props: &cairn_sstable::TableProperties,
    range_tombstones: &cairn_sstable::FragmentedRangeTombstones,
) -> FileMeta {
    let point_smallest = props
        .smallest_key
        .as_ref()
        .map(|k| cairn_sstable::key::user_key(k).to_vec());
    let point_largest = props
        .largest_key
        .as_ref()
        .map(|k| cairn_sstable::key::user_key(k).to_vec());
    let fragments = range_tombstones.fragments();
    let range_smallest = fragments.first().map(|f| f.start.to_vec());
    let range_largest = fragments.last().map(|f| f.end.to_vec());
    let smallest = [point_smallest, range_smallest]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or_default();
    let largest = [point_largest, range_largest]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or_default();
    // The MANIFEST stores an optional time one up (0 is "none"), so the largest it holds is one
    // below the largest u64: a saturated expiry is recorded as that, here and when read back.
    let storable = |v: Option<u64>| v.map(|t| t.min(u64::MAX - 1));
    FileMeta {
        number,
        file_size,
        smallest: Bytes::from(smallest),
        largest: Bytes::from(largest),
        smallest_seqno: props.smallest_seqno,
        largest_seqno: props.largest_seqno,
        num_entries: props.num_entries,
        num_point_tombstones: props.num_point_tombstones(),
        num_range_tombstones: props.num_range_tombstones,
        oldest_tombstone_time: storable(props.oldest_tombstone_time),
        smallest_tombstone_seqno: storable(props.smallest_tombstone_seqno),
        max_tombstones_in_window: props.max_tombstones_in_window,
        earliest_expiry: storable(props.earliest_expiry),
        oldest_write_time: storable(props.oldest_write_time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edits_round_trip_and_malformed_ones_fail() {
        let edit = VersionEdit {
            log_number: Some(7),
            next_file_number: Some(12),
            last_seqno: Some(99),
            next_cf_id: Some(3),
            log_format: Some(2),
            added_cfs: vec![(
                2,
                "users".into(),
                CfOptions::default()
                    .max_versions(3)
                    .ttl(std::time::Duration::from_secs(5)),
            )],
            dropped_cfs: vec![1],
            new_files: vec![(
                0,
                0,
                FileMeta {
                    number: 9,
                    file_size: 4096,
                    smallest: Bytes::from_static(b"a"),
                    largest: Bytes::from_static(b"z"),
                    smallest_seqno: 1,
                    largest_seqno: 50,
                    num_entries: 40,
                    num_point_tombstones: 3,
                    num_range_tombstones: 1,
                    oldest_tombstone_time: Some(0),
                    smallest_tombstone_seqno: None,
                    max_tombstones_in_window: 3,
                    earliest_expiry: Some(77),
                    oldest_write_time: Some(5),
                },
            )],
            deleted_files: vec![(0, 1, 4)],
        };
        let bytes = edit.encode();
        assert_eq!(VersionEdit::decode(&bytes), Some(edit));
        assert_eq!(VersionEdit::decode(&[0x77]), None, "unknown tag");
        assert_eq!(
            VersionEdit::decode(&[TAG_NEW_FILE, 0]),
            None,
            "truncated file"
        );
    }
}
