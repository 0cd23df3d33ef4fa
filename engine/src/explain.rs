//! Explain: why each tombstone is still in a memtable or on disk.
//!
//! `explain_tombstones` says, per tombstone, which garbage-collection condition keeps it — a
//! snapshot, its grace period, older data below, or only a compaction that has not reached it.
//! The answer is the obsolete-tombstone rule of `cairn_compaction::rules`, the one compaction
//! applies. (Where a key still lies is `audit.rs`'s question.)

use std::ops::Bound;

use bytes::Bytes;
use cairn_compaction::rules::{KeepReason, TombstoneRules};
use cairn_sstable::{
    FragmentedRangeTombstones, InternalIterator, Kind, MAX_SEQNO, SeqNo, parse_internal_key,
    seek_key,
};

use crate::audit::Location;
use crate::error::Result;
use crate::inner::DbInner;
use crate::super_version::SuperVersion;

/// Why a tombstone is still kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TombstoneReason {
    /// A live snapshot older than the tombstone may read what it deletes.
    PinnedBySnapshot {
        /// The oldest such snapshot.
        seqno: SeqNo,
    },
    /// Its grace period runs until then (ms).
    GraceUntil {
        /// The end of the grace period.
        time: u64,
    },
    /// Older data for its key may lie at this deeper level.
    OlderDataBelow {
        /// The level.
        level: usize,
    },
    /// Nothing keeps it: the next compaction that reaches it (or a flush, for a memtable) drops it.
    AwaitingCompaction,
}

/// One tombstone and why it is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TombstoneExplanation {
    /// The deleted key, or the start of a deleted range.
    pub key: Bytes,
    /// The end of a deleted range (exclusive); `None` for a point tombstone.
    pub end: Option<Bytes>,
    /// The tombstone's sequence number.
    pub seqno: SeqNo,
    /// `Delete`, `SingleDelete` or `RangeDelete`.
    pub kind: Kind,
    /// When it was written.
    pub deleted_at: u64,
    /// Where it lies.
    pub location: Location,
    /// Why it is still there.
    pub reason: TombstoneReason,
}

impl DbInner {
    /// Every tombstone of `cf` in `range` still in a memtable or table, and why it is kept,
    /// judged as though the snapshots at `assumed` were held beside the live ones.
    pub(crate) fn explain_tombstones(
        &self,
        cf: u32,
        range: &(Bound<Bytes>, Bound<Bytes>),
        assumed: &[SeqNo],
    ) -> Result<Vec<TombstoneExplanation>> {
        let sv = self.super_version();
        let oldest_snapshot = self
            .snapshots
            .oldest()
            .into_iter()
            .chain(assumed.iter().copied())
            .min();
        let judge = Judge {
            db: self,
            sv: &sv,
            cf,
            rules: TombstoneRules {
                oldest_snapshot,
                now: self.options.clock.now_ms(),
                grace_ms: crate::clock::millis(sv.cf_options(cf)?.tombstone_grace),
            },
        };
        let mut out = Vec::new();
        for set in &sv.memsets {
            let Some(mem) = set.tables.get(&cf) else {
                continue;
            };
            let mut iter = mem.iter();
            collect_point(&mut iter, range, Location::Memtable, &judge, None, &mut out)?;
            collect_ranges(
                &mem.range_tombstones(),
                range,
                Location::Memtable,
                &judge,
                None,
                &mut out,
            );
        }
        if let Some(files) = sv.version.cf(cf) {
            for (level, file) in files.all_files() {
                if !overlaps(range, &file.smallest, &file.largest) {
                    continue;
                }
                let table = self.tables.table(file)?;
                let location = Location::Table {
                    level,
                    number: file.number,
                };
                if file.num_point_tombstones > 0 {
                    collect_point(
                        &mut table.iter(),
                        range,
                        location,
                        &judge,
                        Some(level),
                        &mut out,
                    )?;
                }
                collect_ranges(
                    table.range_tombstones(),
                    range,
                    location,
                    &judge,
                    Some(level),
                    &mut out,
                );
            }
        }
        Ok(out)
    }
}

/// True if the deleted range `[start, end)` meets the range (`end` is exclusive, so a range
/// ending at `s` does not meet one starting at `s`, nor one starting at `e` a range that
/// excludes `e`).
fn fragment_overlaps(range: &(Bound<Bytes>, Bound<Bytes>), start: &[u8], end: &[u8]) -> bool {
    let after_start = match &range.0 {
        Bound::Included(s) | Bound::Excluded(s) => end > s.as_ref(),
        Bound::Unbounded => true,
    };
    after_start && below_end(range, start)
}

/// True if `[smallest, largest]` meets the range.
fn overlaps(range: &(Bound<Bytes>, Bound<Bytes>), smallest: &[u8], largest: &[u8]) -> bool {
    let after_start = match &range.0 {
        Bound::Included(s) | Bound::Excluded(s) => largest >= s.as_ref(),
        Bound::Unbounded => true,
    };
    after_start && below_end(range, smallest)
}

fn in_range(range: &(Bound<Bytes>, Bound<Bytes>), key: &[u8]) -> bool {
    let above = match &range.0 {
        Bound::Included(s) => key >= s.as_ref(),
        Bound::Excluded(s) => key > s.as_ref(),
        Bound::Unbounded => true,
    };
    above && below_end(range, key)
}

/// True if the range's end admits `key`.
fn below_end(range: &(Bound<Bytes>, Bound<Bytes>), key: &[u8]) -> bool {
    match &range.1 {
        Bound::Included(e) => key <= e.as_ref(),
        Bound::Excluded(e) => key < e.as_ref(),
        Bound::Unbounded => true,
    }
}

/// Asks the obsolete-tombstone rule of `cairn_compaction::rules` about each tombstone, with
/// the levels below as the data the rule asks about last.
struct Judge<'a> {
    db: &'a DbInner,
    sv: &'a SuperVersion,
    cf: u32,
    rules: TombstoneRules,
}

impl Judge<'_> {
    /// Why a tombstone at `level` (`None`: a memtable) covering `[start, end]` is kept.
    fn reason(
        &self,
        seqno: SeqNo,
        deleted_at: u64,
        level: Option<usize>,
        start: &[u8],
        end: &[u8],
    ) -> TombstoneReason {
        let below = || self.level_below(level, start, end);
        match self.rules.keep_reason(seqno, deleted_at, below) {
            Some(KeepReason::PinnedBySnapshot { snapshot }) => {
                TombstoneReason::PinnedBySnapshot { seqno: snapshot }
            }
            Some(KeepReason::GraceUntil { time }) => TombstoneReason::GraceUntil { time },
            Some(KeepReason::DataBelow(level)) => TombstoneReason::OlderDataBelow { level },
            None => TombstoneReason::AwaitingCompaction,
        }
    }

    /// The first level below `level` with a table that may hold data in `[start, end]`.
    fn level_below(&self, level: Option<usize>, start: &[u8], end: &[u8]) -> Option<usize> {
        let deeper = level.map_or(0, |l| l + 1);
        self.sv.version.cf(self.cf).and_then(|v| {
            v.levels
                .iter()
                .enumerate()
                .skip(deeper)
                .find_map(|(l, files)| {
                    files
                        .iter()
                        .any(|f| {
                            f.smallest.as_ref() <= end
                                && f.largest.as_ref() >= start
                                && self.may_hold(f, start, end)
                        })
                        .then_some(l)
                })
        })
    }

    /// For a point tombstone, the table's bloom filter says whether it may hold the key.
    fn may_hold(&self, file: &crate::version_edit::FileMeta, start: &[u8], end: &[u8]) -> bool {
        start != end
            || self
                .db
                .tables
                .table(file)
                .map_or(true, |t| t.may_contain(start))
    }
}

fn collect_point(
    iter: &mut dyn InternalIterator,
    range: &(Bound<Bytes>, Bound<Bytes>),
    location: Location,
    judge: &Judge<'_>,
    level: Option<usize>,
    out: &mut Vec<TombstoneExplanation>,
) -> Result<()> {
    match &range.0 {
        Bound::Included(k) | Bound::Excluded(k) => iter.seek(&seek_key(k, MAX_SEQNO))?,
        Bound::Unbounded => iter.seek_to_first()?,
    }
    while iter.valid() {
        let Some(k) = parse_internal_key(iter.key()) else {
            break;
        };
        if !in_range(range, k.user_key) {
            if matches!(&range.0, Bound::Excluded(s) if k.user_key == s.as_ref()) {
                iter.next()?;
                continue;
            }
            break;
        }
        if k.kind.is_point_tombstone() {
            let deleted_at = iter.meta().write_time;
            out.push(TombstoneExplanation {
                key: Bytes::copy_from_slice(k.user_key),
                end: None,
                seqno: k.seqno,
                kind: k.kind,
                deleted_at,
                location,
                reason: judge.reason(k.seqno, deleted_at, level, k.user_key, k.user_key),
            });
        }
        iter.next()?;
    }
    Ok(())
}

fn collect_ranges(
    list: &FragmentedRangeTombstones,
    range: &(Bound<Bytes>, Bound<Bytes>),
    location: Location,
    judge: &Judge<'_>,
    level: Option<usize>,
    out: &mut Vec<TombstoneExplanation>,
) {
    for f in list.fragments() {
        if !fragment_overlaps(range, &f.start, &f.end) {
            continue;
        }
        for v in &f.versions {
            out.push(TombstoneExplanation {
                key: f.start.clone(),
                end: Some(f.end.clone()),
                seqno: v.seqno,
                kind: Kind::RangeDelete,
                deleted_at: v.write_time,
                location,
                reason: judge.reason(v.seqno, v.write_time, level, &f.start, &f.end),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Db, Options, Result};

    #[test]
    fn a_range_tombstone_is_explained_only_for_ranges_it_meets() -> Result<()> {
        let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
        let db = Db::open(dir.path(), Options::default())?;
        db.put("q", "1")?;
        db.delete_range("m", "t")?;
        let count = |found: Vec<crate::TombstoneExplanation>| found.len();
        assert_eq!(
            count(db.explain_tombstones("a".."m")?),
            0,
            "ends where it starts"
        );
        assert_eq!(count(db.explain_tombstones("a"..="m")?), 1);
        assert_eq!(count(db.explain_tombstones("a".."n")?), 1);
        assert_eq!(
            count(db.explain_tombstones("t".."z")?),
            0,
            "its end is exclusive"
        );
        assert_eq!(count(db.explain_tombstones("s".."z")?), 1);
        assert_eq!(count(db.explain_tombstones::<&str>(..)?), 1);
        db.close()
    }
}
