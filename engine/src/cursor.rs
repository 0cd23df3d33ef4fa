//! A borrowing cursor over a column family's live entries, in the shape of RocksDB's
//! `Iterator`: [`DbCursor::key`] and [`DbCursor::value`] are slices valid until the cursor
//! moves, so a scan allocates nothing per entry. Going forward the key is copied into a reused
//! buffer and the value is read in place from the block it lies in; going backward a key's
//! versions are gathered before they are judged, so the value kept is a shared slice of its
//! block (no copy either).
//!
//! [`Walk`] is the part both cursors share: a merge of every source with the per-key rules
//! (tombstones, version limits, TTL) applied, stepping from one live key to the next, and
//! turning around at its key when the direction changes. [`DbCursor`] moves one walk both
//! ways and seeks; the owned [`DbIterator`](crate::DbIterator) runs one walk from each end.
//!
//! Like every read, a cursor pins the tables it reads until it is dropped: a long-lived one
//! keeps deleted data on disk (and can hold it past the delete persistence deadline).

use std::ops::{Bound, ControlFlow};
use std::sync::Arc;

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, InternalIterator, Kind, MAX_SEQNO, MergingIter, SeqNo, internal_key, key::user_key,
    parse_internal_key, seek_key,
};

use crate::clock::Clock;
use crate::converted_runs::MIN_STEPPED;
use crate::error::Result;
use crate::iterator::{Read, ReadTrigger, RunSink, SourceIter, above_lower, below_upper};
use crate::read::{Resolver, Visibility};

/// What a walk judges entries by: the scan's visibility, the clock for expiry, and the range;
/// and where it records the runs of deleted keys it steps over.
pub(crate) struct Rules<'a> {
    pub(crate) vis: &'a Visibility,
    pub(crate) clock: &'a dyn Clock,
    pub(crate) range: &'a (Bound<Bytes>, Bound<Bytes>),
    pub(crate) runs: RunSink<'a>,
}

/// A run of deleted keys a forward walk is stepping over, from `Walk::run_start` (inclusive).
struct Run {
    /// Keys whose newest visible version is a `Delete`, stepped over so far.
    deleted: u64,
    /// The sources' hidden entries and recorded runs skipped when the run began.
    hidden: u64,
    skipped_runs: u64,
}

/// Where the current entry's value is.
enum Held {
    /// At the merged stream's position (forward: it stops on the version it took).
    Merged,
    /// Kept from the versions gathered going backward.
    Saved(Bytes),
}

/// A merged stream of sources stepping from live key to live key, either way.
pub(crate) struct Walk {
    merged: MergingIter<SourceIter>,
    forward: bool,
    valid: bool,
    /// The current user key (a buffer reused from step to step).
    key: Vec<u8>,
    held: Held,
    /// A key's versions gathered going backward, oldest first (reused).
    versions: Vec<(Kind, EntryMeta, Bytes)>,
    /// The run of deleted keys behind the position, going forward.
    run: Option<Run>,
    /// Where that run starts (a buffer reused from run to run).
    run_start: Vec<u8>,
    /// The key resolved before the current one, if `prev_known` (a reused buffer): a run that
    /// begins at a deleted key starts just after it.
    prev: Vec<u8>,
    prev_known: bool,
}

impl Walk {
    pub(crate) fn new(merged: MergingIter<SourceIter>) -> Self {
        Self {
            merged,
            forward: true,
            valid: false,
            key: Vec::new(),
            held: Held::Merged,
            versions: Vec::new(),
            run: None,
            run_start: Vec::new(),
            prev: Vec::new(),
            prev_known: false,
        }
    }

    pub(crate) fn valid(&self) -> bool {
        self.valid
    }

    /// Ends the walk until it is positioned again.
    pub(crate) fn invalidate(&mut self) {
        self.valid = false;
    }

    /// The current key; empty when not valid.
    pub(crate) fn key(&self) -> &[u8] {
        if self.valid { &self.key } else { &[] }
    }

    /// The current value; empty when not valid.
    pub(crate) fn value(&self) -> &[u8] {
        match (&self.held, self.valid) {
            (_, false) => &[],
            (Held::Merged, true) => self.merged.value(),
            (Held::Saved(value), true) => value,
        }
    }

    /// The current value as shared bytes (a slice of its block, not a copy).
    pub(crate) fn value_bytes(&self) -> Bytes {
        match (&self.held, self.valid) {
            (_, false) => Bytes::new(),
            (Held::Merged, true) => self.merged.value_bytes(),
            (Held::Saved(value), true) => value.clone(),
        }
    }

    /// Entries the sources stepped over one by one because a range tombstone hid them.
    pub(crate) fn hidden(&self) -> u64 {
        self.merged.children().iter().map(SourceIter::hidden).sum()
    }

    fn skipped_runs(&self) -> u64 {
        self.merged
            .children()
            .iter()
            .map(SourceIter::skipped_runs)
            .sum()
    }

    /// Starts a run of deleted keys at `run_start`.
    fn begin_run(&mut self) {
        self.run = Some(Run {
            deleted: 0,
            hidden: self.hidden(),
            skipped_runs: self.skipped_runs(),
        });
    }

    /// The walk reached the live key it stops on: records the run behind it if the walk
    /// stepped over enough deletes, or skipped a run recorded before (the new one replaces it).
    /// The deletes of the runs it skipped count toward the read trigger.
    fn end_run(&mut self, rules: &Rules<'_>, trigger: &mut ReadTrigger) {
        let Some(run) = self.run.take() else {
            return;
        };
        let stepped = run.deleted + self.hidden().saturating_sub(run.hidden);
        let skipped = self.skipped_runs() > run.skipped_runs;
        if skipped {
            let deleted = rules.runs.deleted_within(&self.run_start, &self.key);
            trigger.cover(&self.run_start, deleted);
        }
        if stepped >= MIN_STEPPED || (stepped > 0 && skipped) {
            rules.runs.record(&self.run_start, &self.key, stepped);
        }
    }

    /// Positions forward at the first live key at or after `start` (a lower bound of the range
    /// if `None`).
    pub(crate) fn seek(
        &mut self,
        start: Option<&[u8]>,
        rules: &Rules<'_>,
        trigger: &mut ReadTrigger,
        other: Option<&Walk>,
    ) -> Result<()> {
        let lower = match &rules.range.0 {
            Bound::Included(k) | Bound::Excluded(k) => Some(k.as_ref()),
            Bound::Unbounded => None,
        };
        self.valid = false;
        let start = start.max(lower);
        self.run_start.clear();
        self.run_start.extend_from_slice(start.unwrap_or_default());
        self.begin_run();
        self.prev_known = false;
        match start {
            Some(k) => self.merged.seek(&seek_key(k, MAX_SEQNO))?,
            None => self.merged.seek_to_first()?,
        }
        self.forward = true;
        self.settle_forward(rules, trigger, other)
    }

    /// Positions backward at the last live key at or before `end` (an upper bound of the range
    /// if `None`).
    pub(crate) fn seek_for_prev(
        &mut self,
        end: Option<&[u8]>,
        rules: &Rules<'_>,
        trigger: &mut ReadTrigger,
        other: Option<&Walk>,
    ) -> Result<()> {
        // The last entry at or before `key`'s oldest possible version.
        let at_or_before = |key: &[u8]| internal_key(key, 0, Kind::Delete);
        let target = match (&rules.range.1, end) {
            (Bound::Excluded(u), Some(k)) if k < u.as_ref() => Some(at_or_before(k)),
            (Bound::Excluded(u), _) => Some(seek_key(u, MAX_SEQNO)),
            (Bound::Included(u), Some(k)) if k < u.as_ref() => Some(at_or_before(k)),
            (Bound::Included(u), _) => Some(at_or_before(u)),
            (Bound::Unbounded, Some(k)) => Some(at_or_before(k)),
            (Bound::Unbounded, None) => None,
        };
        self.valid = false;
        self.run = None;
        self.prev_known = false;
        match target {
            Some(target) => self.merged.seek_for_prev(&target)?,
            None => self.merged.seek_to_last()?,
        }
        self.forward = false;
        self.settle_backward(rules, trigger, other)
    }

    /// On to the next live key; a walk that was going backward turns around at its key.
    pub(crate) fn next(
        &mut self,
        rules: &Rules<'_>,
        trigger: &mut ReadTrigger,
        other: Option<&Walk>,
    ) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        // A run begins at the first deleted key met, just after the key before it: this one.
        self.run = None;
        self.prev_known = true;
        if !self.forward {
            self.merged.seek(&seek_key(&self.key, MAX_SEQNO))?;
            self.forward = true;
        }
        self.skip_key()?;
        self.settle_forward(rules, trigger, other)
    }

    /// On to the previous live key; a walk that was going forward turns around at its key.
    pub(crate) fn prev(
        &mut self,
        rules: &Rules<'_>,
        trigger: &mut ReadTrigger,
        other: Option<&Walk>,
    ) -> Result<()> {
        if !self.valid {
            return Ok(());
        }
        self.run = None;
        self.prev_known = false;
        if self.forward {
            // Every version of the key sorts after (key, MAX_SEQNO): this lands on the key
            // before it.
            self.merged.seek_for_prev(&seek_key(&self.key, MAX_SEQNO))?;
            self.forward = false;
        }
        self.settle_backward(rules, trigger, other)
    }

    /// Steps the merged stream past the rest of the current key's versions.
    fn skip_key(&mut self) -> Result<()> {
        while self.merged.valid() && user_key(self.merged.key()) == self.key.as_slice() {
            self.merged.next()?;
        }
        Ok(())
    }

    /// From the merged stream's position, forward onto the first live key in range. Stops on
    /// the version that decided, whose value is then read in place.
    fn settle_forward(
        &mut self,
        rules: &Rules<'_>,
        trigger: &mut ReadTrigger,
        other: Option<&Walk>,
    ) -> Result<()> {
        self.valid = false;
        while self.merged.valid() {
            let key = user_key(self.merged.key());
            if !below_upper(rules.range, key) {
                return Ok(());
            }
            std::mem::swap(&mut self.key, &mut self.prev);
            self.key.clear();
            self.key.extend_from_slice(key);
            let mut resolver = Resolver::new(rules.vis, rules.clock);
            let mut newest = None;
            let (live, deleted) = loop {
                let kind = parse_internal_key(self.merged.key()).map_or(Kind::Delete, |k| k.kind);
                newest.get_or_insert(kind);
                if let ControlFlow::Break(live) = resolver.offer(kind, self.merged.meta()) {
                    break (live, kind.is_tombstone());
                }
                self.merged.next()?;
                if !self.merged.valid() || user_key(self.merged.key()) != self.key.as_slice() {
                    break (false, kind.is_tombstone());
                }
            };
            trigger.deleted_keys += u64::from(deleted);
            let stops = live && above_lower(rules.range, &self.key);
            if stops {
                self.end_run(rules, trigger);
            }
            trigger.note(&self.key, || self.hidden() + other.map_or(0, Walk::hidden));
            if stops {
                self.held = Held::Merged;
                self.valid = true;
                return Ok(());
            }
            // Only a key whose newest visible version is a `Delete` stays deleted for every
            // later reader (see `converted_runs`); any other breaks the run, and the next one
            // may begin just after it.
            if newest == Some(Kind::Delete) {
                if self.run.is_none() && self.prev_known {
                    self.run_start.clear();
                    self.run_start.extend_from_slice(&self.prev);
                    self.run_start.push(0);
                    self.begin_run();
                }
                if let Some(run) = &mut self.run {
                    run.deleted += 1;
                }
            } else {
                self.run = None;
            }
            self.prev_known = true;
            self.skip_key()?;
        }
        Ok(())
    }

    /// From the merged stream's position, backward onto the last live key in range. A key's
    /// versions arrive oldest first going backward: they are gathered, then judged newest
    /// first, and the stream ends on the key before.
    fn settle_backward(
        &mut self,
        rules: &Rules<'_>,
        trigger: &mut ReadTrigger,
        other: Option<&Walk>,
    ) -> Result<()> {
        self.valid = false;
        while self.merged.valid() {
            let key = user_key(self.merged.key());
            if !above_lower(rules.range, key) {
                return Ok(());
            }
            self.key.clear();
            self.key.extend_from_slice(key);
            self.versions.clear();
            while self.merged.valid() && user_key(self.merged.key()) == self.key.as_slice() {
                let kind = parse_internal_key(self.merged.key()).map_or(Kind::Delete, |k| k.kind);
                self.versions
                    .push((kind, self.merged.meta(), self.merged.value_bytes()));
                self.merged.prev()?;
            }
            let deleted = self
                .versions
                .last()
                .is_some_and(|(kind, _, _)| kind.is_tombstone());
            trigger.deleted_keys += u64::from(deleted);
            trigger.note(&self.key, || self.hidden() + other.map_or(0, Walk::hidden));
            let mut resolver = Resolver::new(rules.vis, rules.clock);
            let value = self.versions.iter().rev().find_map(|(kind, meta, value)| {
                match resolver.offer(*kind, *meta) {
                    ControlFlow::Break(true) => Some(Some(value)),
                    ControlFlow::Break(false) => Some(None),
                    ControlFlow::Continue(()) => None,
                }
            });
            if let Some(Some(value)) = value.filter(|_| below_upper(rules.range, &self.key)) {
                self.held = Held::Saved(value.clone());
                self.valid = true;
                return Ok(());
            }
        }
        Ok(())
    }
}

/// A cursor over a column family's live keys and values in a range, at one snapshot, that
/// lends its key and value until it moves (RocksDB's `Iterator`). Made by
/// [`ColumnFamily::cursor`](crate::ColumnFamily::cursor) and its kin; unpositioned until a
/// seek.
///
/// ```
/// # fn main() -> cairn::Result<()> {
/// # let dir = tempfile::tempdir().map_err(cairn_fs::Error::from)?;
/// let db = cairn::Db::open(dir.path(), cairn::Options::default())?;
/// db.put("a", "1")?;
/// db.put("b", "2")?;
/// let mut cursor = db.cursor()?;
/// cursor.seek_to_first()?;
/// let mut keys = Vec::new();
/// while let Some(key) = cursor.key() {
///     keys.push(key.to_vec());
///     cursor.next()?;
/// }
/// assert_eq!(keys, [b"a".to_vec(), b"b".to_vec()]);
/// # Ok(())
/// # }
/// ```
pub struct DbCursor {
    read: Read,
    walk: Option<Walk>,
}

impl std::fmt::Debug for DbCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbCursor")
            .field("range", self.read.range())
            .field("valid", &self.valid())
            .finish_non_exhaustive()
    }
}

impl DbCursor {
    pub(crate) fn new(
        db: Arc<crate::inner::DbInner>,
        cf: u32,
        snapshot: Option<SeqNo>,
        range: (Bound<Bytes>, Bound<Bytes>),
    ) -> Result<Self> {
        Ok(Self {
            read: Read::start(db, cf, snapshot, range)?,
            walk: None,
        })
    }

    /// True when positioned on a live entry.
    pub fn valid(&self) -> bool {
        self.walk.as_ref().is_some_and(Walk::valid)
    }

    /// The current key, until the cursor moves; `None` when not positioned on an entry.
    pub fn key(&self) -> Option<&[u8]> {
        self.walk.as_ref().filter(|w| w.valid()).map(Walk::key)
    }

    /// The current value, until the cursor moves; `None` when not positioned on an entry.
    pub fn value(&self) -> Option<&[u8]> {
        self.walk.as_ref().filter(|w| w.valid()).map(Walk::value)
    }

    /// Moves to the first live entry of the range.
    ///
    /// # Errors
    /// `Corruption` or `Io` when a table cannot be read; `Stopped` once the database is
    /// closed. The cursor is then unpositioned.
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.reposition(|walk, rules, trigger| walk.seek(None, rules, trigger, None))
    }

    /// Moves to the last live entry of the range.
    ///
    /// # Errors
    /// As [`seek_to_first`](Self::seek_to_first).
    pub fn seek_to_last(&mut self) -> Result<()> {
        self.reposition(|walk, rules, trigger| walk.seek_for_prev(None, rules, trigger, None))
    }

    /// Moves to the first live entry at or after `key` (and inside the range).
    ///
    /// # Errors
    /// As [`seek_to_first`](Self::seek_to_first).
    pub fn seek(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.reposition(|walk, rules, trigger| walk.seek(Some(key), rules, trigger, None))
    }

    /// Moves to the last live entry at or before `key` (and inside the range).
    ///
    /// # Errors
    /// As [`seek_to_first`](Self::seek_to_first).
    pub fn seek_for_prev(&mut self, key: impl AsRef<[u8]>) -> Result<()> {
        let key = key.as_ref();
        self.reposition(|walk, rules, trigger| walk.seek_for_prev(Some(key), rules, trigger, None))
    }

    /// Moves to the next live entry; does nothing when not positioned.
    ///
    /// # Errors
    /// As [`seek_to_first`](Self::seek_to_first).
    #[expect(
        clippy::should_implement_trait,
        reason = "a cursor lends its entry until it moves, which `Iterator` cannot express; \
                  the name is the one RocksDB users know"
    )]
    pub fn next(&mut self) -> Result<()> {
        self.step(|walk, rules, trigger| walk.next(rules, trigger, None))
    }

    /// Moves to the previous live entry; does nothing when not positioned.
    ///
    /// # Errors
    /// As [`seek_to_first`](Self::seek_to_first).
    pub fn prev(&mut self) -> Result<()> {
        self.step(|walk, rules, trigger| walk.prev(rules, trigger, None))
    }

    /// Seeks, building the merged sources on first use; the read trigger counts afresh.
    fn reposition(
        &mut self,
        seek: impl FnOnce(&mut Walk, &Rules<'_>, &mut ReadTrigger) -> Result<()>,
    ) -> Result<()> {
        if self.walk.is_none() {
            match self.read.check_open().and_then(|()| self.read.merged()) {
                Ok(merged) => self.walk = Some(Walk::new(merged)),
                Err(e) => return Err(self.read.closed_or(e)),
            }
        }
        self.step(|walk, rules, trigger| {
            trigger.restart(walk.hidden());
            seek(walk, rules, trigger)
        })
    }

    /// Runs `step` on the walk; an error leaves the cursor unpositioned.
    fn step(
        &mut self,
        step: impl FnOnce(&mut Walk, &Rules<'_>, &mut ReadTrigger) -> Result<()>,
    ) -> Result<()> {
        let Some(walk) = self.walk.as_mut() else {
            return Ok(());
        };
        let result = self.read.check_open().and_then(|()| {
            let (rules, trigger) = self.read.parts();
            step(walk, &rules, trigger)
        });
        if result.is_err() {
            walk.invalidate();
        }
        result.map_err(|e| self.read.closed_or(e))
    }
}
