//! Point reads: the visibility rules of DESIGN §2 applied to one key.
//!
//! At snapshot `S`, a key's versions are walked newest first across memtables and tables. An
//! entry newer than `S` does not exist; an entry older than a range tombstone visible at `S`
//! that covers the key is deleted; a point tombstone ends the walk. Of the `max_versions`
//! newest puts since the last tombstone, the newest one not expired is the value.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use cairn_compaction::rules;
use cairn_sstable::{EntryMeta, InternalIterator, Kind, SeqNo, TableIter, seek_key};

use crate::clock::Clock;
use crate::error::Result;
use crate::inner::DbInner;
use crate::options::CfOptions;
use crate::super_version::SuperVersion;
use crate::version::level_candidates;

/// One version of a value, as `ColumnFamily::get_versions` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// The value.
    pub value: Bytes,
    /// The write's sequence number.
    pub seqno: SeqNo,
    /// When it was written, in milliseconds of the database's clock.
    pub write_time: u64,
    /// When it expires (ms of the database's clock): its write time plus the shorter of its
    /// own TTL and its column family's; `None` if neither is set.
    pub expires_at: Option<u64>,
}

/// What decides expiry: the column family's TTL, the clock, the version limit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Visibility {
    /// When expiry is judged: read once when a scan starts (every entry of it is judged at
    /// that instant); `None` for a point read, which reads the clock only if it meets an entry
    /// that can expire (most reads meet none, and a clock read costs as much as a bloom probe).
    pub(crate) now: Option<u64>,
    pub(crate) cf_ttl: Option<u64>,
    pub(crate) max_versions: u32,
}

impl Visibility {
    /// For a scan: expiry judged at the clock's reading now.
    pub(crate) fn scan(clock: &dyn Clock, options: &CfOptions) -> Self {
        Self {
            now: Some(clock.now_ms()),
            ..Self::point(options)
        }
    }

    /// For a point read: the clock read on first need.
    pub(crate) fn point(options: &CfOptions) -> Self {
        Self {
            now: None,
            cf_ttl: options.ttl.map(crate::clock::millis),
            max_versions: options.max_versions.max(1),
        }
    }
}

/// Walks versions newest first and keeps the candidates the rules allow.
pub(crate) struct Resolver<'a> {
    vis: &'a Visibility,
    /// Read if the visibility has no time yet and an entry can expire.
    clock: &'a dyn Clock,
    now: Option<u64>,
    candidates: u32,
}

impl<'a> Resolver<'a> {
    pub(crate) fn new(vis: &'a Visibility, clock: &'a dyn Clock) -> Self {
        Self {
            vis,
            clock,
            now: vis.now,
            candidates: 0,
        }
    }

    /// True if a put with `meta` has expired (DESIGN §3, `rules::expired`).
    fn expired(&mut self, meta: cairn_sstable::EntryMeta) -> bool {
        let cf_ttl = self.vis.cf_ttl;
        if rules::expiry(meta, cf_ttl).is_none() {
            return false;
        }
        let now = *self.now.get_or_insert_with(|| self.clock.now_ms());
        rules::expired(meta, cf_ttl, now)
    }

    /// Considers the next older version. `Break(true)` when it is a live value to return,
    /// `Break(false)` when the walk is over with nothing more to return, `Continue` when the
    /// version is an expired candidate and an older one may still show.
    pub(crate) fn offer(
        &mut self,
        kind: Kind,
        meta: cairn_sstable::EntryMeta,
    ) -> ControlFlow<bool> {
        if kind != Kind::Put {
            return ControlFlow::Break(false);
        }
        self.candidates += 1;
        if !self.expired(meta) {
            return ControlFlow::Break(true);
        }
        if self.candidates >= self.vis.max_versions {
            ControlFlow::Break(false)
        } else {
            ControlFlow::Continue(())
        }
    }

    /// After a live value: may an older version still be listed by `get_versions`?
    pub(crate) fn room_for_more(&self) -> bool {
        self.candidates < self.vis.max_versions
    }
}

impl DbInner {
    /// `Stopped` once the database is closed: the directory may belong to another process by
    /// then, so a handle that outlived it (a snapshot, an iterator) reads nothing stale.
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(crate::error::Error::closed());
        }
        Ok(())
    }

    /// The read view and the sequence number to read at: `snapshot`'s, or (for `None`) the
    /// latest, read only *after* the view is taken. The other order races with compaction: a
    /// compaction installed in between may have dropped a version the number sees, shadowed by
    /// one it does not. In this order the view holds every write that finished before the read
    /// began; one that lands in a memtable the view lacks is concurrent with the read.
    ///
    /// # Errors
    /// `Stopped` once the database is closed: a handle that outlived it reads nothing stale.
    pub(crate) fn read_view(&self, snapshot: Option<SeqNo>) -> Result<(Arc<SuperVersion>, SeqNo)> {
        self.check_open()?;
        let sv = self.super_version();
        let seqno = snapshot.unwrap_or_else(|| self.visible_seqno.load(Ordering::Acquire));
        Ok((sv, seqno))
    }

    /// The value of `key` at `snapshot` (`None`: the latest).
    pub(crate) fn get(
        &self,
        cf: u32,
        key: &[u8],
        snapshot: Option<SeqNo>,
    ) -> Result<Option<Bytes>> {
        let (sv, snapshot) = self.read_view(snapshot)?;
        let vis = Visibility::point(&sv.cf_options(cf)?);
        let mut resolver = Resolver::new(&vis, self.options.clock.as_ref());
        let mut found = None;
        self.walk_versions(&sv, cf, key, snapshot, |e| {
            match resolver.offer(e.kind, e.meta) {
                ControlFlow::Break(true) => {
                    found = Some(e.value());
                    ControlFlow::Break(())
                }
                ControlFlow::Break(false) => ControlFlow::Break(()),
                ControlFlow::Continue(()) => ControlFlow::Continue(()),
            }
        })?;
        Ok(found)
    }

    /// Up to `limit` live versions of `key` at `snapshot` (`None`: the latest), newest first.
    pub(crate) fn get_versions(
        &self,
        cf: u32,
        key: &[u8],
        snapshot: Option<SeqNo>,
        limit: usize,
    ) -> Result<Vec<Version>> {
        let (sv, snapshot) = self.read_view(snapshot)?;
        let vis = Visibility::point(&sv.cf_options(cf)?);
        let mut resolver = Resolver::new(&vis, self.options.clock.as_ref());
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.walk_versions(&sv, cf, key, snapshot, |e| {
            match resolver.offer(e.kind, e.meta) {
                ControlFlow::Break(true) => {
                    out.push(Version {
                        value: e.value(),
                        seqno: e.seqno,
                        write_time: e.meta.write_time,
                        expires_at: e.meta.expiry_under(vis.cf_ttl),
                    });
                    if out.len() < limit && resolver.room_for_more() {
                        ControlFlow::Continue(())
                    } else {
                        ControlFlow::Break(())
                    }
                }
                ControlFlow::Break(false) => ControlFlow::Break(()),
                ControlFlow::Continue(()) => ControlFlow::Continue(()),
            }
        })?;
        Ok(out)
    }

    /// The newest seqno of any write touching `key` (a version or a covering range tombstone),
    /// for transaction conflict checks.
    pub(crate) fn latest_seqno(&self, cf: u32, key: &[u8]) -> Result<SeqNo> {
        let sv = self.super_version();
        let snapshot = cairn_sstable::MAX_SEQNO;
        let mut newest = self.covering_seqno(&sv, cf, key, snapshot)?;
        self.walk_versions(&sv, cf, key, snapshot, |e| {
            newest = newest.max(e.seqno);
            ControlFlow::Break(())
        })?;
        Ok(newest)
    }

    /// The largest seqno at or below `snapshot` of a range tombstone covering `key`; 0 if none.
    fn covering_seqno(
        &self,
        sv: &SuperVersion,
        cf: u32,
        key: &[u8],
        snapshot: SeqNo,
    ) -> Result<SeqNo> {
        let mut cover = 0;
        for mem in sv.memtables(cf) {
            cover = cover.max(mem.range_tombstone_seqno(key, snapshot).unwrap_or(0));
        }
        if let Some(files) = sv.version.cf(cf) {
            // Most tables hold no range tombstone: that test first, the key bounds after.
            for (_, file) in files.all_files() {
                if file.num_range_tombstones > 0 && file.may_contain_key(key) {
                    let table = self.tables.table(file)?;
                    cover = cover.max(
                        table
                            .range_tombstones()
                            .covering_seqno(key, snapshot)
                            .unwrap_or(0),
                    );
                }
            }
        }
        Ok(cover)
    }

    /// Calls `visit` with each version of `key` visible at `snapshot` and not hidden by a range
    /// tombstone, newest first, until it breaks.
    fn walk_versions(
        &self,
        sv: &SuperVersion,
        cf: u32,
        key: &[u8],
        snapshot: SeqNo,
        mut visit: impl FnMut(Met<'_>) -> ControlFlow<()>,
    ) -> Result<()> {
        let cover = self.covering_seqno(sv, cf, key, snapshot)?;
        let mut offer = |met: Met<'_>| {
            if met.seqno < cover {
                return ControlFlow::Break(());
            }
            visit(met)
        };
        let limit = usize::try_from(sv.cf_options(cf)?.max_versions)
            .unwrap_or(1)
            .max(1);
        for mem in sv.memtables(cf) {
            let walked = mem.for_each_version(key, snapshot, limit, |seqno, kind, meta, value| {
                offer(Met {
                    seqno,
                    kind,
                    meta,
                    value: MetValue::Memtable(value),
                })
            });
            if walked.is_break() {
                return Ok(());
            }
        }
        let Some(files) = sv.version.cf(cf) else {
            return Ok(());
        };
        let hash = cairn_sstable::bloom_hash(key);
        for (level, level_files) in files.levels.iter().enumerate() {
            for file in level_candidates(level, level_files, key) {
                if !file.may_contain_key(key) {
                    continue;
                }
                let table = self.tables.table(file)?;
                if table.may_contain_hash(hash)
                    && walk_table(&table, key, snapshot, &mut offer)?.is_break()
                {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}

/// Offers each version of `key` in `table` visible at `snapshot`, newest first, until `offer`
/// breaks.
fn walk_table(
    table: &cairn_sstable::Table,
    key: &[u8],
    snapshot: SeqNo,
    mut offer: impl FnMut(Met<'_>) -> ControlFlow<()>,
) -> Result<ControlFlow<()>> {
    let mut iter = table.iter();
    iter.seek(&seek_key(key, snapshot))?;
    while iter.valid() {
        // The table iterator reports a malformed key when it decodes one; this is the same
        // check, so a key it let through never ends the walk silently.
        let Some(parsed) = iter.parsed_key() else {
            return Err(iter.corruption_here("malformed internal key").into());
        };
        if parsed.user_key != key {
            break;
        }
        let met = Met {
            seqno: parsed.seqno,
            kind: parsed.kind,
            meta: iter.meta(),
            value: MetValue::Table(&iter),
        };
        if offer(met).is_break() {
            return Ok(ControlFlow::Break(()));
        }
        iter.next()?;
    }
    Ok(ControlFlow::Continue(()))
}

/// One version a point read meets. Its value is taken only if the read returns it: copied out of
/// a memtable's arena, or sliced out of a table's block (a reference count).
pub(crate) struct Met<'a> {
    seqno: SeqNo,
    kind: Kind,
    meta: EntryMeta,
    value: MetValue<'a>,
}

enum MetValue<'a> {
    Memtable(&'a [u8]),
    Table(&'a TableIter),
}

impl Met<'_> {
    fn value(&self) -> Bytes {
        match self.value {
            MetValue::Memtable(value) => Bytes::copy_from_slice(value),
            MetValue::Table(iter) => iter.value_bytes(),
        }
    }
}
