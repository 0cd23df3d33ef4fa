//! Range reads: a merge of every memtable and table of a column family, with the visibility
//! rules applied per key, in both directions.
//!
//! Each source (a memtable, a level-0 table, or a deeper level walked as one sorted run by
//! [`LevelIter`]) is wrapped in a [`SourceIter`] that hides what the read
//! must not see: entries newer than the snapshot, and entries deleted by a range tombstone.
//! When a range tombstone of a *newer* source covers a key, every entry of this source in the
//! tombstone's range is older than it (newer data always lies above older data), so the source
//! seeks past the tombstone's end instead of stepping over the covered keys. The merged stream
//! then only needs the per-key rules: tombstones, version limits and TTL.
//!
//! Runs of deleted keys a read stepped over are recorded in the newest memtable
//! ([`converted_runs`](crate::converted_runs)), and later reads seek past them the same way, in
//! that memtable and every older source.

use std::ops::Bound;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, InternalIterator, MAX_SEQNO, MergingIter, SeqNo, Table, parse_internal_key, seek_key,
};

use crate::clock::Clock;
use crate::converted_runs::{Learned, ReadPoint, RunMap};
use crate::cursor::{Rules, Walk};
use crate::error::{Error, Result};
use crate::level_iter::{LevelIter, LevelTombstones};
use crate::memtable::Memtable;
use crate::read::Visibility;
use crate::super_version::SuperVersion;
use crate::version_edit::FileMeta;
use crate::write_queue::lock;

/// Where a source's range tombstones live.
#[derive(Debug, Clone)]
enum Tombstones {
    /// A memtable's, which later range deletes may cut further (never changing what covers a
    /// key at the reader's snapshot).
    Memtable(Arc<Memtable>),
    Table(Table),
    /// A sorted level's, from those of its tables that hold any.
    Level(LevelTombstones),
}

impl Tombstones {
    fn is_empty(&self) -> bool {
        match self {
            Self::Memtable(mem) => !mem.has_range_tombstones(),
            Self::Table(table) => table.range_tombstones().is_empty(),
            Self::Level(level) => level.is_empty(),
        }
    }

    /// The bounds of a fragment around `key` covered by a tombstone visible at `snapshot`.
    /// Fails only for a level whose table holding them cannot be opened.
    fn visible_cover(
        &self,
        key: &[u8],
        snapshot: SeqNo,
    ) -> cairn_sstable::Result<Option<(Bytes, Bytes)>> {
        match self {
            Self::Memtable(mem) => Ok(mem.range_tombstone_cover(key, snapshot)),
            Self::Table(table) => Ok(table.range_tombstones().visible_cover(key, snapshot)),
            Self::Level(level) => level.visible_cover(key, snapshot),
        }
    }

    /// Where a tombstone here may next cover a key, for a reader that found none visible to it
    /// covering `key`: no key from `key` up to the bound (exclusive) is covered either, and
    /// `None` means no key after `key` is. Later range deletes into a memtable cut its pieces
    /// further but add nothing a reader's snapshot sees, so the bound stays true for the read.
    fn next_start_after(&self, key: &[u8]) -> cairn_sstable::Result<Option<Bytes>> {
        match self {
            Self::Memtable(mem) => Ok(mem.range_tombstone_next_start(key)),
            Self::Table(table) => Ok(table.range_tombstones().next_start_after(key).cloned()),
            Self::Level(level) => level.next_start_after(key),
        }
    }

    /// The newest tombstone seqno covering `key` visible at `snapshot`.
    fn covering_seqno(&self, key: &[u8], snapshot: SeqNo) -> cairn_sstable::Result<Option<SeqNo>> {
        match self {
            Self::Memtable(mem) => Ok(mem.range_tombstone_seqno(key, snapshot)),
            Self::Table(table) => Ok(table.range_tombstones().covering_seqno(key, snapshot)),
            Self::Level(level) => level.covering_seqno(key, snapshot),
        }
    }
}

/// One source with what its reader must not see removed.
pub(crate) struct SourceIter {
    inner: Box<dyn InternalIterator + Send>,
    snapshot: SeqNo,
    /// The number of the read's view: runs learned under a newer one do not hold for it.
    view: u64,
    own: Tombstones,
    /// Range tombstones of every newer source that has any.
    newer: Arc<Vec<Tombstones>>,
    /// Entries stepped over one by one because a range tombstone of this source hid them.
    hidden: u64,
    /// The recorded runs of deleted keys this source may seek past, as they were when the read
    /// began (every source of it skips the same ones): those of its own memtable and every
    /// newer one that held runs within the read's range.
    runs: Arc<Vec<Arc<RunMap>>>,
    /// How many times this source sought past a recorded run.
    skipped_runs: u64,
    /// Nothing to hide: no range tombstone or recorded run here or in a newer source, and no
    /// entry newer than the snapshot. Steps then skip the checks.
    plain: bool,
    /// While walking forward: keys below this bound are covered by no tombstone of a newer
    /// source nor of this one visible at the snapshot (see [`Clear`]), so steps skip the checks
    /// (RocksDB's range-deletion aggregator keeps the same position in the fragments).
    clear: Clear,
}

/// How far a forward walk knows a source's keys to be covered by no visible range tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Clear {
    /// Not known: check the next key.
    Unknown,
    /// Keys from the last checked one up to this one (exclusive).
    Until(Bytes),
    /// Every key from the last checked one on.
    ToEnd,
}

impl Clear {
    /// True if `key`, at or after the key the bound was found for, is known uncovered.
    fn holds(&self, key: &[u8]) -> bool {
        match self {
            Self::Unknown => false,
            Self::Until(bound) => key < bound.as_ref(),
            Self::ToEnd => true,
        }
    }

    /// The nearer of two bounds found at the same key.
    fn min(self, other: Option<Bytes>) -> Self {
        match (self, other) {
            (Self::Unknown, _) => Self::Unknown,
            (Self::ToEnd, None) => Self::ToEnd,
            (Self::ToEnd, Some(b)) => Self::Until(b),
            (Self::Until(a), None) => Self::Until(a),
            (Self::Until(a), Some(b)) => Self::Until(a.min(b)),
        }
    }
}

impl SourceIter {
    /// Entries stepped over one by one because a range tombstone of this source hid them.
    pub(crate) fn hidden(&self) -> u64 {
        self.hidden
    }

    /// How many times this source sought past a recorded run of deleted keys.
    pub(crate) fn skipped_runs(&self) -> u64 {
        self.skipped_runs
    }

    /// A recorded run of deleted keys holding `key` that the snapshot may skip.
    fn run_cover(&self, key: &[u8]) -> Option<(Bytes, Bytes)> {
        let at = ReadPoint {
            snapshot: self.snapshot,
            view: self.view,
        };
        self.runs.iter().find_map(|runs| runs.cover(key, at))
    }

    /// A fragment of a newer source visible at the snapshot that covers `key`.
    fn newer_cover(&self, key: &[u8]) -> cairn_sstable::Result<Option<(Bytes, Bytes)>> {
        for tombstones in self.newer.iter() {
            if let Some(cover) = tombstones.visible_cover(key, self.snapshot)? {
                return Ok(Some(cover));
            }
        }
        Ok(None)
    }

    /// How far from `key`, which no tombstone of a newer source or of this one visible at the
    /// snapshot covers, that stays true.
    fn clear_after(&self, key: &[u8]) -> cairn_sstable::Result<Clear> {
        let mut clear = Clear::ToEnd.min(self.own.next_start_after(key)?);
        for tombstones in self.newer.iter() {
            clear = clear.min(tombstones.next_start_after(key)?);
        }
        Ok(clear)
    }

    /// True if the current entry (seqno `seqno`) is hidden by its own source's tombstones.
    fn hidden_by_own(&self, key: &[u8], seqno: SeqNo) -> cairn_sstable::Result<bool> {
        Ok(self
            .own
            .covering_seqno(key, self.snapshot)?
            .is_some_and(|t| t > seqno))
    }

    /// Moves forward until on an entry the read may see.
    fn settle_forward(&mut self) -> cairn_sstable::Result<()> {
        if self.plain {
            return Ok(());
        }
        while self.inner.valid() {
            let key = self.inner.key();
            let Some(parsed) = parse_internal_key(key) else {
                return Err(self
                    .inner
                    .corruption_here("malformed internal key from a source"));
            };
            let clear = self.clear.holds(parsed.user_key);
            if !clear && let Some((_, end)) = self.newer_cover(parsed.user_key)? {
                self.clear = Clear::Unknown;
                self.inner.seek(&seek_key(&end, MAX_SEQNO))?;
                continue;
            }
            if let Some((_, end)) = self.run_cover(parsed.user_key) {
                self.skipped_runs += 1;
                self.inner.seek(&seek_key(&end, MAX_SEQNO))?;
                continue;
            }
            if parsed.seqno <= self.snapshot {
                if clear {
                    return Ok(());
                }
                match self.own.covering_seqno(parsed.user_key, self.snapshot)? {
                    None => {
                        self.clear = self.clear_after(parsed.user_key)?;
                        return Ok(());
                    }
                    // Covered only by older tombstones of its own source: visible.
                    Some(tombstone) if tombstone <= parsed.seqno => return Ok(()),
                    Some(_) => {}
                }
            }
            if parsed.seqno <= self.snapshot {
                self.hidden += 1;
            }
            self.inner.next()?;
        }
        Ok(())
    }

    /// Moves backward until on an entry the read may see.
    fn settle_backward(&mut self) -> cairn_sstable::Result<()> {
        if self.plain {
            return Ok(());
        }
        while self.inner.valid() {
            let key = self.inner.key();
            let Some(parsed) = parse_internal_key(key) else {
                return Err(self
                    .inner
                    .corruption_here("malformed internal key from a source"));
            };
            if let Some((start, _)) = self.newer_cover(parsed.user_key)? {
                self.inner.seek_for_prev(&seek_key(&start, MAX_SEQNO))?;
                continue;
            }
            if let Some((start, _)) = self.run_cover(parsed.user_key) {
                self.skipped_runs += 1;
                self.inner.seek_for_prev(&seek_key(&start, MAX_SEQNO))?;
                continue;
            }
            if parsed.seqno <= self.snapshot
                && !self.hidden_by_own(parsed.user_key, parsed.seqno)?
            {
                return Ok(());
            }
            if parsed.seqno <= self.snapshot {
                self.hidden += 1;
            }
            self.inner.prev()?;
        }
        Ok(())
    }
}

impl InternalIterator for SourceIter {
    fn valid(&self) -> bool {
        self.inner.valid()
    }
    fn key(&self) -> &[u8] {
        self.inner.key()
    }
    fn corruption_here(&self, reason: &str) -> cairn_sstable::Error {
        self.inner.corruption_here(reason)
    }
    fn meta(&self) -> EntryMeta {
        self.inner.meta()
    }
    fn value(&self) -> &[u8] {
        self.inner.value()
    }
    fn value_bytes(&self) -> Bytes {
        self.inner.value_bytes()
    }
    fn seek_to_first(&mut self) -> cairn_sstable::Result<()> {
        self.clear = Clear::Unknown;
        self.inner.seek_to_first()?;
        self.settle_forward()
    }
    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        self.clear = Clear::Unknown;
        self.inner.seek_to_last()?;
        self.settle_backward()
    }
    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.clear = Clear::Unknown;
        self.inner.seek(target)?;
        self.settle_forward()
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.clear = Clear::Unknown;
        self.inner.seek_for_prev(target)?;
        self.settle_backward()
    }
    fn next(&mut self) -> cairn_sstable::Result<()> {
        self.inner.next()?;
        self.settle_forward()
    }
    fn prev(&mut self) -> cairn_sstable::Result<()> {
        self.clear = Clear::Unknown;
        self.inner.prev()?;
        self.settle_backward()
    }
}

/// True if `file` may hold keys in `range`.
fn in_range(file: &FileMeta, range: &(Bound<Bytes>, Bound<Bytes>)) -> bool {
    let start = match &range.0 {
        Bound::Included(k) | Bound::Excluded(k) => k.as_ref(),
        Bound::Unbounded => &[],
    };
    let end = match &range.1 {
        Bound::Included(k) if file.smallest.as_ref() > k.as_ref() => return false,
        Bound::Excluded(k) => Some(k.as_ref()),
        _ => None,
    };
    file.overlaps(start, end)
}

/// The keys of `range` as `[lower, upper)`, `None` above if unbounded.
fn key_span(range: &(Bound<Bytes>, Bound<Bytes>)) -> (&[u8], Option<Vec<u8>>) {
    let lower = match &range.0 {
        Bound::Included(k) | Bound::Excluded(k) => k.as_ref(),
        Bound::Unbounded => &[],
    };
    let upper = match &range.1 {
        Bound::Included(k) => Some([k.as_ref(), &[0]].concat()),
        Bound::Excluded(k) => Some(k.to_vec()),
        Bound::Unbounded => None,
    };
    (lower, upper)
}

/// Builds the sources of `cf` overlapping `[lower, upper)`, newest first: each memtable, each
/// level-0 table, and one per deeper level (its tables opened as the read reaches them).
fn sources(
    db: &crate::inner::DbInner,
    sv: &SuperVersion,
    cf: u32,
    snapshot: SeqNo,
    range: &(Bound<Bytes>, Bound<Bytes>),
) -> Result<Vec<SourceIter>> {
    let mut out = Vec::new();
    let mut newer: Vec<Tombstones> = Vec::new();
    // The memtables pushed so far holding runs in the range: a run holds for its own memtable
    // and every older source.
    let mut runs: Vec<Arc<RunMap>> = Vec::new();
    let (lower, upper) = key_span(range);
    // `newest_seqno`: the source's newest entry, if known (tables), to tell whether the
    // snapshot can see all of it.
    let mut push = |inner: Box<dyn InternalIterator + Send>,
                    own: Tombstones,
                    newest_seqno: Option<SeqNo>,
                    out: &mut Vec<SourceIter>| {
        if let Tombstones::Memtable(mem) = &own
            && let Some(recorded) = mem.converted_runs()
            && recorded.any_within(lower, upper.as_deref())
        {
            runs.push(recorded);
        }
        let has_tombstones = !own.is_empty();
        let plain = !has_tombstones
            && newer.is_empty()
            && runs.is_empty()
            && newest_seqno.is_some_and(|newest| newest <= snapshot);
        out.push(SourceIter {
            inner,
            snapshot,
            view: sv.number,
            own: own.clone(),
            hidden: 0,
            newer: Arc::new(newer.clone()),
            runs: Arc::new(runs.clone()),
            skipped_runs: 0,
            plain,
            clear: Clear::Unknown,
        });
        if has_tombstones {
            newer.push(own);
        }
    };
    for mem in sv.memtables(cf) {
        push(
            Box::new(mem.iter()),
            Tombstones::Memtable(Arc::clone(mem)),
            None,
            &mut out,
        );
    }
    let Some(version) = sv.version.cf(cf) else {
        return Ok(out);
    };
    for (level, files) in version.levels.iter().enumerate() {
        let files: Vec<Arc<FileMeta>> = files
            .iter()
            .filter(|f| in_range(f, range))
            .cloned()
            .collect();
        if level == 0 {
            for file in files {
                let table = db.tables.table(&file)?;
                push(
                    Box::new(table.iter()),
                    Tombstones::Table(table),
                    Some(file.largest_seqno),
                    &mut out,
                );
            }
            continue;
        }
        let Some(newest) = files.iter().map(|f| f.largest_seqno).max() else {
            continue;
        };
        let tombstones = LevelTombstones::new(Arc::clone(&db.tables), &files);
        push(
            Box::new(LevelIter::new(Arc::clone(&db.tables), files)),
            Tombstones::Level(tombstones),
            Some(newest),
            &mut out,
        );
    }
    Ok(out)
}

/// What every range read holds: the pinned view and snapshot it reads, its range, the
/// visibility and clock entries are judged by, and the read trigger tombstone runs are
/// reported to. The owned iterator and the cursor both read through one.
pub(crate) struct Read {
    /// The database, for the counters a recorded run bumps (the trigger holds it too).
    db: Arc<crate::inner::DbInner>,
    /// See [`RunSink`].
    older_newest: OnceLock<SeqNo>,
    /// Runs of deleted keys the read learned, recorded when it ends (or when many wait).
    learned: Mutex<Vec<Learned>>,
    sv: Arc<SuperVersion>,
    snapshot: SeqNo,
    range: (Bound<Bytes>, Bound<Bytes>),
    vis: Visibility,
    /// The database's clock, for the resolver (a scan's `vis` already holds its time).
    clock: Arc<dyn Clock>,
    trigger: ReadTrigger,
}

impl Read {
    /// A read of `range` in family `cf` at `snapshot` (the latest if `None`).
    pub(crate) fn start(
        db: Arc<crate::inner::DbInner>,
        cf: u32,
        snapshot: Option<SeqNo>,
        range: (Bound<Bytes>, Bound<Bytes>),
    ) -> Result<Self> {
        let (sv, snapshot) = db.read_view(snapshot)?;
        let clock = Arc::clone(&db.options.clock);
        let vis = Visibility::scan(clock.as_ref(), &sv.cf_options(cf)?);
        let trigger = ReadTrigger {
            threshold: db.options.compaction.read_trigger,
            db: Arc::clone(&db),
            cf,
            deleted_keys: 0,
            hidden_base: 0,
            first_key: None,
            run_low: None,
            reported: false,
        };
        Ok(Self {
            db,
            older_newest: OnceLock::new(),
            learned: Mutex::new(Vec::new()),
            sv,
            snapshot,
            range,
            vis,
            clock,
            trigger,
        })
    }

    /// The range read.
    pub(crate) fn range(&self) -> &(Bound<Bytes>, Bound<Bytes>) {
        &self.range
    }

    /// Every source of the range, merged.
    pub(crate) fn merged(&self) -> Result<MergingIter<SourceIter>> {
        let (db, cf) = (&self.trigger.db, self.trigger.cf);
        let sources = sources(db, &self.sv, cf, self.snapshot, &self.range)?;
        Ok(MergingIter::new(sources))
    }

    /// What a walk's steps take: the rules to judge by and the trigger to count into.
    pub(crate) fn parts(&mut self) -> (Rules<'_>, &mut ReadTrigger) {
        let rules = Rules {
            vis: &self.vis,
            clock: self.clock.as_ref(),
            range: &self.range,
            runs: RunSink {
                counters: &self.db.stats,
                sv: &self.sv,
                cf: self.trigger.cf,
                snapshot: self.snapshot,
                older_newest: &self.older_newest,
                learned: &self.learned,
            },
        };
        (rules, &mut self.trigger)
    }

    /// `Stopped` once the database is closed: the directory may belong to another process by
    /// then, so a reader made before reads no further.
    pub(crate) fn check_open(&self) -> Result<()> {
        self.trigger.db.check_open()
    }

    /// `error`, or `Stopped` if the database closed: a table opened mid-read may have been
    /// swept by another process after a close, and the reader should say closed, not that a
    /// file is missing.
    pub(crate) fn closed_or(&self, error: Error) -> Error {
        self.check_open().err().unwrap_or(error)
    }
}

impl Drop for Read {
    /// Records the runs of deleted keys the read learned. While unwinding it only withdraws
    /// their announcement (recording copies the map, and a second panic there would abort);
    /// left announced, they would make every later write to the memtable take the runs' lock
    /// until the flush.
    fn drop(&mut self) {
        let (rules, _) = self.parts();
        if std::thread::panicking() {
            rules.runs.withdraw_learned();
        } else {
            rules.runs.record_learned();
        }
    }
}

/// Where a walk records the runs of deleted keys it stepped over: the newest memtable of its
/// view, if the view holds nothing newer than its snapshot (see
/// [`converted_runs`](crate::converted_runs)).
pub(crate) struct RunSink<'a> {
    counters: &'a crate::counters::Counters,
    sv: &'a SuperVersion,
    cf: u32,
    snapshot: SeqNo,
    /// The newest seqno in the view's sources below its newest memtable, found once a read:
    /// they never gain entries.
    older_newest: &'a OnceLock<SeqNo>,
    learned: &'a Mutex<Vec<Learned>>,
}

/// Learned runs a read records at once, before it ends: each recording copies the memtable's
/// map of runs.
const LEARNED_BATCH: usize = 256;

impl RunSink<'_> {
    /// Where the read reads: runs it learns hold from its view on, and it uses only those
    /// learned under its view or an older one.
    fn at(&self) -> ReadPoint {
        ReadPoint {
            snapshot: self.snapshot,
            view: self.sv.number,
        }
    }

    /// The deleted entries the recorded runs of the view within `[start, end)` stand for.
    pub(crate) fn deleted_within(&self, start: &[u8], end: &[u8]) -> u64 {
        self.sv
            .memtables(self.cf)
            .filter_map(|mem| mem.converted_runs())
            .map(|runs| runs.deleted_within(start, end, self.at()))
            .sum()
    }

    /// Learns that nothing in `[start, end)` with seqno up to the snapshot is visible (the
    /// walk stepped over `deleted` entries to learn it): announced in the newest memtable of
    /// the view now, unless it or an older source holds an entry newer than the snapshot, and
    /// recorded with the read's other runs.
    pub(crate) fn record(&self, start: &[u8], end: &[u8], deleted: u64) {
        let Some(newest) = self.sv.memtables(self.cf).next() else {
            return;
        };
        let older_newest =
            *self.older_newest.get_or_init(|| {
                let memtables = self.sv.memtables(self.cf).skip(1).map(|m| m.newest_seqno());
                let tables =
                    self.sv.version.cf(self.cf).into_iter().flat_map(|version| {
                        version.all_files().map(|(_, file)| file.largest_seqno)
                    });
                memtables.chain(tables).max().unwrap_or(0)
            });
        if older_newest > self.snapshot {
            return;
        }
        let Some(run) = newest.learn_run(start, end, self.at(), deleted) else {
            return;
        };
        let mut learned = lock(self.learned);
        learned.push(run);
        if learned.len() >= LEARNED_BATCH {
            let batch = std::mem::take(&mut *learned);
            drop(learned);
            self.record_all(&batch);
        }
    }

    /// Withdraws the runs learned and not recorded yet.
    fn withdraw_learned(&self) {
        let batch = std::mem::take(&mut *lock(self.learned));
        if let Some(newest) = self.sv.memtables(self.cf).next() {
            newest.withdraw_runs(&batch);
        }
    }

    /// Records the runs learned so far.
    fn record_learned(&self) {
        let batch = std::mem::take(&mut *lock(self.learned));
        self.record_all(&batch);
    }

    /// Moves `batch`, announced in the newest memtable of the view, into its map.
    fn record_all(&self, batch: &[Learned]) {
        let Some(newest) = self.sv.memtables(self.cf).next() else {
            return;
        };
        let recorded = newest.record_runs(batch);
        self.counters
            .runs_recorded
            .fetch_add(recorded, std::sync::atomic::Ordering::Relaxed);
    }
}

/// An iterator over a column family's live keys and values in a range, at one snapshot.
/// Double-ended: `next` walks up from the start, `next_back` down from the end, and the two
/// never cross. Each entry is handed out owned; [`DbCursor`](crate::DbCursor) lends them
/// instead, without allocating.
pub struct DbIterator {
    read: Read,
    front: End,
    back: End,
    failed: bool,
}

/// One end of a [`DbIterator`]: its walk, made on first use, and the last key it returned (a
/// reused buffer: a scan must not allocate for it per step).
#[derive(Default)]
struct End {
    walk: Option<Walk>,
    last: Option<Vec<u8>>,
}

/// Counts the tombstones a scan steps over and reports the range once they pass the threshold.
pub(crate) struct ReadTrigger {
    db: Arc<crate::inner::DbInner>,
    cf: u32,
    threshold: u64,
    /// Deleted keys stepped over by the resolver (range-deleted ones are counted by sources).
    pub(crate) deleted_keys: u64,
    /// Entries the sources had hidden when counting began (a cursor's last seek).
    hidden_base: u64,
    first_key: Option<Bytes>,
    /// The lowest start of a recorded run a walk sought past, if below every key noted.
    run_low: Option<Bytes>,
    reported: bool,
}

impl ReadTrigger {
    /// Counts afresh from a seek (the sources had hidden `hidden` entries by then): a cursor
    /// that seeks many times reports what one walk stepped over, never a span it jumped.
    pub(crate) fn restart(&mut self, hidden: u64) {
        self.deleted_keys = 0;
        self.hidden_base = hidden;
        self.first_key = None;
        self.run_low = None;
    }

    /// Counts `deleted` entries of recorded runs a walk sought past from `start` on, as if it
    /// had stepped over them: they are still there for compaction to clear.
    pub(crate) fn cover(&mut self, start: &[u8], deleted: u64) {
        if self.reported || deleted == 0 {
            return;
        }
        self.deleted_keys += deleted;
        if self.run_low.as_ref().is_none_or(|low| low.as_ref() > start) {
            self.run_low = Some(Bytes::copy_from_slice(start));
        }
    }

    /// Notes the key a step reached and reports once the scan has stepped over too many
    /// tombstones on its way. `hidden_by_sources` is only asked while nothing is reported.
    pub(crate) fn note(&mut self, key: &[u8], hidden_by_sources: impl FnOnce() -> u64) {
        if self.reported {
            return;
        }
        let first = self
            .first_key
            .get_or_insert_with(|| Bytes::copy_from_slice(key));
        let stepped = self.deleted_keys + hidden_by_sources().saturating_sub(self.hidden_base);
        if stepped >= self.threshold {
            self.reported = true;
            let key = Bytes::copy_from_slice(key);
            let (start, end) = if *first <= key {
                (first.clone(), key)
            } else {
                (key, first.clone())
            };
            // Widened down to the runs sought past, never narrowed.
            let start = match self.run_low.take() {
                Some(low) if low < start => low,
                _ => start,
            };
            self.db.report_tombstone_scan(self.cf, start, end, stepped);
        }
    }
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("range", self.read.range())
            .finish_non_exhaustive()
    }
}

impl DbIterator {
    pub(crate) fn new(
        db: Arc<crate::inner::DbInner>,
        cf: u32,
        snapshot: Option<SeqNo>,
        range: (Bound<Bytes>, Bound<Bytes>),
    ) -> Result<Self> {
        Ok(Self {
            read: Read::start(db, cf, snapshot, range)?,
            front: End::default(),
            back: End::default(),
            failed: false,
        })
    }
}

fn remember(last: &mut Option<Vec<u8>>, key: &[u8]) {
    let last = last.get_or_insert_with(Vec::new);
    last.clear();
    last.extend_from_slice(key);
}

pub(crate) fn below_upper(range: &(Bound<Bytes>, Bound<Bytes>), key: &[u8]) -> bool {
    match &range.1 {
        Bound::Included(end) => key <= end.as_ref(),
        Bound::Excluded(end) => key < end.as_ref(),
        Bound::Unbounded => true,
    }
}

pub(crate) fn above_lower(range: &(Bound<Bytes>, Bound<Bytes>), key: &[u8]) -> bool {
    match &range.0 {
        Bound::Included(start) => key >= start.as_ref(),
        Bound::Excluded(start) => key > start.as_ref(),
        Bound::Unbounded => true,
    }
}

/// Steps `end` of an iterator once, forward or backward, to its next live entry, which must
/// not reach the key the `other` end returned last.
fn step_end(
    read: &mut Read,
    end: &mut End,
    other: &End,
    forward: bool,
) -> Result<Option<(Bytes, Bytes)>> {
    let fresh = end.walk.is_none();
    if fresh {
        end.walk = Some(Walk::new(read.merged()?));
    }
    let (rules, trigger) = read.parts();
    let Some(walk) = end.walk.as_mut() else {
        return Ok(None);
    };
    let other_walk = other.walk.as_ref();
    match (fresh, forward) {
        (true, true) => walk.seek(None, &rules, trigger, other_walk)?,
        (true, false) => walk.seek_for_prev(None, &rules, trigger, other_walk)?,
        (false, true) => walk.next(&rules, trigger, other_walk)?,
        (false, false) => walk.prev(&rules, trigger, other_walk)?,
    }
    if !walk.valid() {
        return Ok(None);
    }
    let crossed = other.last.as_deref().is_some_and(|met| {
        if forward {
            walk.key() >= met
        } else {
            walk.key() <= met
        }
    });
    if crossed {
        walk.invalidate();
        return Ok(None);
    }
    remember(&mut end.last, walk.key());
    Ok(Some((
        Bytes::copy_from_slice(walk.key()),
        walk.value_bytes(),
    )))
}

impl DbIterator {
    fn wrap(&mut self, step: Result<Option<(Bytes, Bytes)>>) -> Option<Result<(Bytes, Bytes)>> {
        match step {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(self.read.closed_or(e)))
            }
        }
    }
}

impl Iterator for DbIterator {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let step = self
            .read
            .check_open()
            .and_then(|()| step_end(&mut self.read, &mut self.front, &self.back, true));
        self.wrap(step)
    }
}

impl DoubleEndedIterator for DbIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let step = self
            .read
            .check_open()
            .and_then(|()| step_end(&mut self.read, &mut self.back, &self.front, false));
        self.wrap(step)
    }
}

/// Converts any range of byte strings into owned bounds.
pub(crate) fn owned_bounds<K: AsRef<[u8]>>(
    range: &impl std::ops::RangeBounds<K>,
) -> (Bound<Bytes>, Bound<Bytes>) {
    let own = |b: Bound<&K>| match b {
        Bound::Included(k) => Bound::Included(Bytes::copy_from_slice(k.as_ref())),
        Bound::Excluded(k) => Bound::Excluded(Bytes::copy_from_slice(k.as_ref())),
        Bound::Unbounded => Bound::Unbounded,
    };
    (own(range.start_bound()), own(range.end_bound()))
}

/// The bounds of every key starting with `prefix`.
pub(crate) fn prefix_bounds(prefix: &[u8]) -> (Bound<Bytes>, Bound<Bytes>) {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return (
                Bound::Included(Bytes::copy_from_slice(prefix)),
                Bound::Excluded(Bytes::from(end)),
            );
        }
    }
    (
        Bound::Included(Bytes::copy_from_slice(prefix)),
        Bound::Unbounded,
    )
}

#[cfg(test)]
mod tests {
    use crate::{Db, Options};

    /// A read that learned a run (pending until it ends) and is dropped by a panic withdraws
    /// it: nothing stays announced to make writes take the runs' lock.
    #[test]
    fn a_read_dropped_by_a_panic_withdraws_its_pending_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = Db::open(dir.path(), Options::default()).expect("open");
        for i in 0..200 {
            db.put(format!("k{i:03}"), "value").expect("put");
        }
        for i in 10..150 {
            db.delete(format!("k{i:03}")).expect("delete");
        }
        let announced = || {
            let sv = db.inner.super_version();
            sv.memtables(0).next().map_or(0, |m| m.runs_announced())
        };
        let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut cursor = db.cursor().expect("cursor");
            cursor.seek("k010").expect("seek");
            assert_eq!(cursor.key(), Some(&b"k150"[..]));
            assert_eq!(announced(), 1, "learned and pending");
            panic!("the reader fails");
        }));
        assert!(read.is_err());
        assert_eq!(
            announced(),
            0,
            "left announced by a read dropped in a panic"
        );
        assert_eq!(db.stats().deleted_runs_recorded, 0);
        // A read that ends normally still records.
        let mut cursor = db.cursor().expect("cursor");
        cursor.seek("k010").expect("seek");
        drop(cursor);
        assert_eq!(announced(), 1);
        assert_eq!(db.stats().deleted_runs_recorded, 1);
    }
}
