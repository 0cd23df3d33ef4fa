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

use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, InternalIterator, MAX_SEQNO, MergingIter, SeqNo, Table, parse_internal_key, seek_key,
};

use crate::clock::Clock;
use crate::cursor::{Rules, Walk};
use crate::error::Result;
use crate::level_iter::{LevelIter, LevelTombstones};
use crate::memtable::Memtable;
use crate::read::Visibility;
use crate::super_version::SuperVersion;
use crate::version_edit::FileMeta;

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
    own: Tombstones,
    /// Range tombstones of every newer source that has any.
    newer: Arc<Vec<Tombstones>>,
    /// Entries stepped over one by one because a range tombstone of this source hid them.
    hidden: u64,
    /// Nothing to hide: no range tombstone here or in a newer source, and no entry newer than
    /// the snapshot. Steps then skip the checks.
    plain: bool,
}

impl SourceIter {
    /// Entries stepped over one by one because a range tombstone of this source hid them.
    pub(crate) fn hidden(&self) -> u64 {
        self.hidden
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
            if let Some((_, end)) = self.newer_cover(parsed.user_key)? {
                self.inner.seek(&seek_key(&end, MAX_SEQNO))?;
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
        self.inner.seek_to_first()?;
        self.settle_forward()
    }
    fn seek_to_last(&mut self) -> cairn_sstable::Result<()> {
        self.inner.seek_to_last()?;
        self.settle_backward()
    }
    fn seek(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.inner.seek(target)?;
        self.settle_forward()
    }
    fn seek_for_prev(&mut self, target: &[u8]) -> cairn_sstable::Result<()> {
        self.inner.seek_for_prev(target)?;
        self.settle_backward()
    }
    fn next(&mut self) -> cairn_sstable::Result<()> {
        self.inner.next()?;
        self.settle_forward()
    }
    fn prev(&mut self) -> cairn_sstable::Result<()> {
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
    // `newest_seqno`: the source's newest entry, if known (tables), to tell whether the
    // snapshot can see all of it.
    let mut push = |inner: Box<dyn InternalIterator + Send>,
                    own: Tombstones,
                    newest_seqno: Option<SeqNo>,
                    out: &mut Vec<SourceIter>| {
        let has_tombstones = !own.is_empty();
        let plain = !has_tombstones
            && newer.is_empty()
            && newest_seqno.is_some_and(|newest| newest <= snapshot);
        out.push(SourceIter {
            inner,
            snapshot,
            own: own.clone(),
            hidden: 0,
            newer: Arc::new(newer.clone()),
            plain,
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

/// What a read builds its merged stream from: a pinned view of the family at one snapshot.
pub(crate) struct Sources {
    db: Arc<crate::inner::DbInner>,
    sv: Arc<SuperVersion>,
    cf: u32,
    snapshot: SeqNo,
    range: (Bound<Bytes>, Bound<Bytes>),
}

impl Sources {
    /// Every source of the range, merged.
    pub(crate) fn merged(&self) -> Result<MergingIter<SourceIter>> {
        Ok(MergingIter::new(sources(
            &self.db,
            &self.sv,
            self.cf,
            self.snapshot,
            &self.range,
        )?))
    }
}

/// What every range read starts from: the view and snapshot to read, the visibility to judge
/// entries by, and the read trigger to report tombstone runs to.
pub(crate) fn start_read(
    db: Arc<crate::inner::DbInner>,
    cf: u32,
    snapshot: Option<SeqNo>,
    range: &(Bound<Bytes>, Bound<Bytes>),
) -> Result<(Sources, Visibility, ReadTrigger)> {
    let (sv, snapshot) = db.read_view(snapshot)?;
    let vis = Visibility::scan(db.options.clock.as_ref(), &sv.cf_options(cf)?);
    let trigger = ReadTrigger {
        db: Arc::clone(&db),
        cf,
        threshold: db.options.compaction.read_trigger,
        deleted_keys: 0,
        hidden_base: 0,
        first_key: None,
        reported: false,
    };
    let sources = Sources {
        db,
        sv,
        cf,
        snapshot,
        range: range.clone(),
    };
    Ok((sources, vis, trigger))
}

/// An iterator over a column family's live keys and values in a range, at one snapshot.
/// Double-ended: `next` walks up from the start, `next_back` down from the end, and the two
/// never cross. Each entry is handed out owned; [`DbCursor`](crate::DbCursor) lends them
/// instead, without allocating.
pub struct DbIterator {
    vis: Visibility,
    /// The database's clock, for the resolver (a scan's `vis` already holds its time).
    clock: Arc<dyn Clock>,
    range: (Bound<Bytes>, Bound<Bytes>),
    sources: Sources,
    front: Option<Walk>,
    back: Option<Walk>,
    /// The last key each direction returned (reused buffers: a scan must not allocate for
    /// them per step).
    front_last: Option<Vec<u8>>,
    back_last: Option<Vec<u8>>,
    failed: bool,
    trigger: ReadTrigger,
}

/// Counts the tombstones a scan steps over and reports the range once they pass the threshold.
pub(crate) struct ReadTrigger {
    pub(crate) db: Arc<crate::inner::DbInner>,
    cf: u32,
    threshold: u64,
    /// Deleted keys stepped over by the resolver (range-deleted ones are counted by sources).
    pub(crate) deleted_keys: u64,
    /// Entries the sources had hidden when counting began (a cursor's last seek).
    hidden_base: u64,
    first_key: Option<Bytes>,
    reported: bool,
}

impl ReadTrigger {
    /// Counts afresh from a seek (the sources had hidden `hidden` entries by then): a cursor
    /// that seeks many times reports what one walk stepped over, never a span it jumped.
    pub(crate) fn restart(&mut self, hidden: u64) {
        self.deleted_keys = 0;
        self.hidden_base = hidden;
        self.first_key = None;
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
            self.db.report_tombstone_scan(self.cf, start, end, stepped);
        }
    }
}

impl std::fmt::Debug for DbIterator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbIterator")
            .field("range", &self.range)
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
        let clock = Arc::clone(&db.options.clock);
        let (sources, vis, trigger) = start_read(db, cf, snapshot, &range)?;
        Ok(Self {
            vis,
            clock,
            range,
            sources,
            front: None,
            back: None,
            front_last: None,
            back_last: None,
            failed: false,
            trigger,
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

impl DbIterator {
    fn next_front(&mut self) -> Result<Option<(Bytes, Bytes)>> {
        let rules = Rules {
            vis: &self.vis,
            clock: self.clock.as_ref(),
            range: &self.range,
        };
        let walk = if let Some(walk) = self.front.as_mut() {
            walk.next(&rules, &mut self.trigger, self.back.as_ref())?;
            walk
        } else {
            let mut walk = Walk::new(self.sources.merged()?);
            walk.seek(None, &rules, &mut self.trigger, self.back.as_ref())?;
            self.front.insert(walk)
        };
        if !walk.valid() {
            return Ok(None);
        }
        if self
            .back_last
            .as_ref()
            .is_some_and(|b| walk.key() >= b.as_slice())
        {
            walk.invalidate();
            return Ok(None);
        }
        remember(&mut self.front_last, walk.key());
        Ok(Some((
            Bytes::copy_from_slice(walk.key()),
            walk.value_bytes(),
        )))
    }

    fn next_back(&mut self) -> Result<Option<(Bytes, Bytes)>> {
        let rules = Rules {
            vis: &self.vis,
            clock: self.clock.as_ref(),
            range: &self.range,
        };
        let walk = if let Some(walk) = self.back.as_mut() {
            walk.prev(&rules, &mut self.trigger, self.front.as_ref())?;
            walk
        } else {
            let mut walk = Walk::new(self.sources.merged()?);
            walk.seek_for_prev(None, &rules, &mut self.trigger, self.front.as_ref())?;
            self.back.insert(walk)
        };
        if !walk.valid() {
            return Ok(None);
        }
        if self
            .front_last
            .as_ref()
            .is_some_and(|f| walk.key() <= f.as_slice())
        {
            walk.invalidate();
            return Ok(None);
        }
        remember(&mut self.back_last, walk.key());
        Ok(Some((
            Bytes::copy_from_slice(walk.key()),
            walk.value_bytes(),
        )))
    }

    /// `Stopped` once the database is closed: the directory may belong to another process by
    /// then, so an iterator made before reads no further.
    fn check_open(&self) -> Result<()> {
        self.trigger.db.check_open()
    }

    fn wrap(&mut self, step: Result<Option<(Bytes, Bytes)>>) -> Option<Result<(Bytes, Bytes)>> {
        match step {
            Ok(item) => item.map(Ok),
            Err(e) => {
                self.failed = true;
                // A table opened mid-scan may have been swept by another process after a
                // close: say the database closed, not that a file is missing.
                Some(Err(self.check_open().err().unwrap_or(e)))
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
        let step = self.check_open().and_then(|()| self.next_front());
        self.wrap(step)
    }
}

impl DoubleEndedIterator for DbIterator {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let step = self.check_open().and_then(|()| DbIterator::next_back(self));
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
