//! The compaction iterator: what lives and what dies when tables are rewritten.
//!
//! A compaction reads every version of every key in its inputs, newest first, and writes out only
//! what some reader could still need. This module is the one place that decides; each rule below
//! is the row of DESIGN.md §3 of the same name, and every drop is counted under its rule.
//!
//! # Snapshot stripes
//!
//! Live snapshots cut the sequence numbers into **stripes**. A version belongs to the stripe of
//! the oldest snapshot that can see it (the first snapshot at or above its seqno), or to the top
//! stripe if no snapshot can: only readers of "now" see it.
//!
//! ```text
//! snapshots:            s=10            s=20
//! seqnos:    1 .. 10 |  11 .. 20  |  21 ..
//! stripe:        0   |      1     |    2 (top)
//! ```
//!
//! Within one stripe every reader sees the same newest version, so older versions in the same
//! stripe are invisible to everyone. Across a stripe boundary they are not: the snapshot between
//! them still reads the older one.
//!
//! # The rules
//!
//! **shadowed** — a version is dropped when its stripe already holds `max_versions` newer puts,
//! or a newer tombstone. With `max_versions = 1`:
//!
//! ```text
//! k@30 Put "c" | k@25 Put "b" | k@12 Put "a"      snapshot at 20
//! stripe 2       stripe 2       stripe 1
//! keep           drop (shadowed) keep (the snapshot reads "a")
//! ```
//!
//! **obsolete tombstone** — a `Delete` is dropped only when all three hold: no live snapshot is
//! older than it (it is in stripe 0), no older version of the key can exist below the output level
//! (the compaction is bottommost for the key), and its grace period is over
//! (`now >= deletion_time + grace`). Anything older in its stripe goes with it, as shadowed.
//!
//! ```text
//! k@40 Delete (t=1000) | k@5 Put "a"      no snapshots, bottommost, grace 60 s
//! now = 1000 + 59_999:  keep the Delete, drop the Put (shadowed)
//! now = 1000 + 60_000:  drop both
//! ```
//!
//! Dropping it earlier would resurrect: a snapshot older than it would keep "a" in an older
//! stripe, or a put below would show through once the tombstone is gone.
//!
//! **single delete** — a `SingleDelete` that meets the `Put` it cancels in its own stripe removes
//! it. The `SingleDelete` goes too under the obsolete-tombstone conditions (no older snapshot,
//! nothing below, grace over); until then it stays as a tombstone, so a put that misuse left
//! further down can never show through. (`RocksDB` drops the pair at any level; Cairn keeps the
//! marker until the bottom, where misuse can be seen.) A second put under one `SingleDelete` is
//! **misuse**: it is counted, and the `SingleDelete` then acts as a `Delete`, so nothing is
//! resurrected. With a snapshot between the two, both stay: the snapshot reads the put.
//!
//! ```text
//! k@9 SingleDelete | k@4 Put "a"     no snapshot: both dropped
//! k@9 SingleDelete | k@4 Put "a"     snapshot at 6: both kept
//! ```
//!
//! **range tombstone** — a point version covered by a range tombstone newer than it *in the same
//! stripe* is dropped (a snapshot between them still reads it). A range tombstone itself is dropped
//! under the obsolete-tombstone conditions, with "nothing below the output level overlaps its
//! range" for "bottommost"; an older tombstone piece in the same stripe as a newer one over the
//! same fragment is redundant and dropped.
//!
//! **expired** — a put whose TTL is over (`now >= write_time + min(cf_ttl, cell_ttl)`). With
//! `max_versions > 1` it is dropped: older versions are meant to show through. With
//! `max_versions = 1` it is dropped only when no older version survives in the output and none can
//! lie below; otherwise it is rewritten as a `Delete` at the same seqno, deleted at its expiry
//! time, so no older value comes back at any snapshot. Expired puts still count as candidates for
//! `max_versions`, as they do for reads, so results never depend on whether compaction ran.
//!
//! **filter** — a user [`CompactionFilter`] is asked about the newest version of a key only, and
//! only when no live snapshot can read it (it is newer than every snapshot: the top stripe), so a
//! filter never changes what a snapshot sees. `Remove` drops the put when nothing older survives
//! or can lie below; otherwise the put becomes a `Delete` so nothing older shows through to new
//! readers. `ChangeValue` rewrites the value in place.

use std::collections::VecDeque;

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, FragmentedRangeTombstones, InternalIterator, Kind, RangeTombstone, SeqNo,
    internal_key, parse_internal_key,
};

use crate::Result;
use crate::filter::{CompactionFilter, Decision};
use crate::stats::DropCounts;

/// Tells a compaction whether data for a key may lie in levels below its output level.
pub trait BelowOracle {
    /// True if a version of `user_key` may exist below the output level.
    fn key_may_exist_below(&self, user_key: &[u8]) -> bool;

    /// True if any key in `[start, end)` may exist below the output level.
    fn range_may_exist_below(&self, start: &[u8], end: &[u8]) -> bool;
}

/// An oracle for a compaction into the bottom of the tree: nothing lies below.
#[derive(Debug, Clone, Copy, Default)]
pub struct NothingBelow;

impl BelowOracle for NothingBelow {
    fn key_may_exist_below(&self, _: &[u8]) -> bool {
        false
    }

    fn range_may_exist_below(&self, _: &[u8], _: &[u8]) -> bool {
        false
    }
}

/// What the rules need to know besides the entries.
pub struct GcContext<'a> {
    /// Live snapshot seqnos, ascending.
    pub snapshots: &'a [SeqNo],
    /// The clock reading, in milliseconds.
    pub now: u64,
    /// The column family's tombstone grace period, in milliseconds.
    pub grace_ms: u64,
    /// The column family's version limit (at least 1).
    pub max_versions: u32,
    /// The column family's TTL in milliseconds, if any.
    pub cf_ttl_ms: Option<u64>,
    /// What lies below the output level.
    pub below: &'a dyn BelowOracle,
    /// The user's filter, if any, with the column family's name.
    pub filter: Option<(&'a dyn CompactionFilter, &'a str)>,
}

impl std::fmt::Debug for GcContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcContext")
            .field("snapshots", &self.snapshots)
            .field("now", &self.now)
            .field("grace_ms", &self.grace_ms)
            .field("max_versions", &self.max_versions)
            .field("cf_ttl_ms", &self.cf_ttl_ms)
            .finish_non_exhaustive()
    }
}

impl GcContext<'_> {
    /// The stripe of a seqno: the index of the oldest snapshot that sees it.
    pub fn stripe(&self, seqno: SeqNo) -> usize {
        if crate::planted::active(crate::planted::GcBug::IgnoreSnapshots) {
            // Planted bug: every version in one stripe, as if no snapshot were alive.
            return 0;
        }
        self.snapshots.partition_point(|&s| s < seqno)
    }

    fn grace_over(&self, deletion_time: u64) -> bool {
        self.now >= deletion_time.saturating_add(self.grace_ms)
    }

    /// When a put expires, if it has a TTL.
    fn expiry(&self, meta: EntryMeta) -> Option<u64> {
        let ttl = match (self.cf_ttl_ms, meta.ttl) {
            (Some(a), Some(b)) => a.min(b),
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => return None,
        };
        Some(meta.write_time.saturating_add(ttl))
    }
}

/// One version of a key as it goes in or out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// Its sequence number.
    pub seqno: SeqNo,
    /// Its kind.
    pub kind: Kind,
    /// Write time and TTL.
    pub meta: EntryMeta,
    /// The value (empty for tombstones).
    pub value: Bytes,
}

/// An entry the compaction writes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputEntry {
    /// The internal key.
    pub key: Vec<u8>,
    /// Write time and TTL.
    pub meta: EntryMeta,
    /// The value.
    pub value: Bytes,
}

/// Applies the rules to a sorted stream of internal entries.
pub struct CompactionIter<'a, I> {
    input: I,
    ctx: GcContext<'a>,
    range_tombstones: FragmentedRangeTombstones,
    ready: VecDeque<OutputEntry>,
    drops: DropCounts,
    single_delete_misuse: u64,
    entries_in: u64,
}

impl<I> std::fmt::Debug for CompactionIter<'_, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompactionIter")
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl<'a, I: InternalIterator> CompactionIter<'a, I> {
    /// Rules over `input` (positioned nowhere; it is read from its first entry) with the
    /// inputs' range tombstones.
    ///
    /// # Errors
    /// `Corruption` or `Io` if the input cannot be read.
    pub fn new(
        mut input: I,
        range_tombstones: FragmentedRangeTombstones,
        ctx: GcContext<'a>,
    ) -> Result<Self> {
        input.seek_to_first()?;
        Ok(Self {
            input,
            ctx,
            range_tombstones,
            ready: VecDeque::new(),
            drops: DropCounts::default(),
            single_delete_misuse: 0,
            entries_in: 0,
        })
    }

    /// Entries dropped so far, by rule.
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    /// `SingleDelete`s found covering more than one put.
    pub fn single_delete_misuse(&self) -> u64 {
        self.single_delete_misuse
    }

    /// Point entries read so far.
    pub fn entries_in(&self) -> u64 {
        self.entries_in
    }

    /// The next entry to write, or `None` when the input is exhausted.
    ///
    /// # Errors
    /// `Corruption` or `Io` if the input cannot be read.
    pub fn next_entry(&mut self) -> Result<Option<OutputEntry>> {
        while self.ready.is_empty() {
            let Some((user_key, versions)) = self.next_key()? else {
                return Ok(None);
            };
            let kept = self.decide(&user_key, versions);
            self.ready.extend(kept.into_iter().map(|v| OutputEntry {
                key: internal_key(&user_key, v.seqno, v.kind),
                meta: v.meta,
                value: v.value,
            }));
        }
        Ok(self.ready.pop_front())
    }

    /// The range tombstone pieces that survive, fragmented.
    pub fn surviving_range_tombstones(&mut self) -> FragmentedRangeTombstones {
        let mut kept = Vec::new();
        for fragment in self.range_tombstones.fragments() {
            let mut kept_stripes: Vec<usize> = Vec::new();
            for version in &fragment.versions {
                let stripe = self.ctx.stripe(version.seqno);
                let redundant = kept_stripes.contains(&stripe);
                let obsolete = stripe == 0
                    && self.ctx.grace_over(version.write_time)
                    && !self
                        .ctx
                        .below
                        .range_may_exist_below(&fragment.start, &fragment.end);
                if redundant || obsolete {
                    self.drops.range += 1;
                    continue;
                }
                kept_stripes.push(stripe);
                kept.push(RangeTombstone {
                    start: fragment.start.clone(),
                    end: fragment.end.clone(),
                    seqno: version.seqno,
                    write_time: version.write_time,
                });
            }
        }
        FragmentedRangeTombstones::fragment(kept)
    }

    /// Reads every version of the next user key, newest first.
    fn next_key(&mut self) -> Result<Option<(Vec<u8>, Vec<Version>)>> {
        if !self.input.valid() {
            return Ok(None);
        }
        let user_key = cairn_sstable::key::user_key(self.input.key()).to_vec();
        let mut versions = Vec::new();
        while self.input.valid()
            && cairn_sstable::key::user_key(self.input.key()) == user_key.as_slice()
        {
            let parsed = parse_internal_key(self.input.key()).ok_or_else(|| {
                cairn_sstable::Error::Corruption {
                    file: std::path::PathBuf::new(),
                    offset: 0,
                    reason: "malformed internal key in compaction input".into(),
                }
            })?;
            versions.push(Version {
                seqno: parsed.seqno,
                kind: parsed.kind,
                meta: self.input.meta(),
                value: self.input.value_bytes(),
            });
            self.entries_in += 1;
            self.input.next()?;
        }
        Ok(Some((user_key, versions)))
    }

    /// True if a range tombstone newer than `seqno` and in the same stripe covers `key`.
    fn covered_in_stripe(&self, key: &[u8], seqno: SeqNo, stripe: usize) -> bool {
        self.range_tombstones.fragment_at(key).is_some_and(|f| {
            f.versions
                .iter()
                .any(|t| t.seqno > seqno && self.ctx.stripe(t.seqno) == stripe)
        })
    }

    /// Applies the rules to one key's versions (newest first); returns those to write.
    fn decide(&mut self, key: &[u8], versions: Vec<Version>) -> Vec<Version> {
        let mut out = Vec::new();
        let mut below = Below::new(key);
        let mut stripe_now = usize::MAX;
        let mut puts_in_stripe = 0u32;
        let mut tombstone_in_stripe = false;
        let mut versions = versions.into_iter().enumerate().peekable();
        while let Some((index, v)) = versions.next() {
            let stripe = self.ctx.stripe(v.seqno);
            if stripe != stripe_now {
                stripe_now = stripe;
                puts_in_stripe = 0;
                tombstone_in_stripe = false;
            }
            if self.covered_in_stripe(key, v.seqno, stripe) {
                self.drops.range += 1;
                continue;
            }
            if tombstone_in_stripe || puts_in_stripe >= self.ctx.max_versions {
                self.drops.shadowed += 1;
                continue;
            }
            if v.kind == Kind::Put {
                puts_in_stripe += 1;
                // Do all the versions still to come share this stripe? Then none of them survives
                // a put that hides what is older.
                let rest_in_stripe = versions
                    .clone()
                    .all(|(_, next)| self.ctx.stripe(next.seqno) == stripe);
                match self.decide_put(key, index == 0, stripe, rest_in_stripe, v, &mut below) {
                    PutFate::Keep(kept) => {
                        tombstone_in_stripe = kept.kind != Kind::Put;
                        out.push(kept);
                    }
                    PutFate::Drop { hides_older } => tombstone_in_stripe = hides_older,
                }
                continue;
            }
            tombstone_in_stripe = true;
            let cancels_put = v.kind == Kind::SingleDelete
                && versions.peek().is_some_and(|(_, next)| {
                    next.kind == Kind::Put
                        && self.ctx.stripe(next.seqno) == stripe
                        && !self.covered_in_stripe(key, next.seqno, stripe)
                });
            let mut misuse = false;
            if cancels_put {
                versions.next();
                self.drops.single_delete += 1;
                // A put that a range tombstone hides in its stripe is already deleted: no misuse.
                misuse = versions.peek().is_some_and(|(_, next)| {
                    next.kind == Kind::Put
                        && !self.covered_in_stripe(key, next.seqno, self.ctx.stripe(next.seqno))
                });
                if misuse {
                    self.single_delete_misuse += 1;
                    tracing::warn!(key = ?String::from_utf8_lossy(key), "SingleDelete covers more than one put");
                }
            }
            if !self.obsolete(stripe, v.meta.write_time, &mut below) {
                out.push(v);
            } else if cancels_put && !misuse {
                self.drops.single_delete += 1;
            } else {
                self.drops.obsolete_tombstone += 1;
            }
        }
        out
    }

    /// The rules for a put that nothing newer in its stripe hides.
    fn decide_put(
        &mut self,
        key: &[u8],
        newest: bool,
        stripe: usize,
        rest_in_stripe: bool,
        v: Version,
        below: &mut Below<'_>,
    ) -> PutFate {
        if let Some(expiry) = self.ctx.expiry(v.meta).filter(|&e| self.ctx.now >= e) {
            self.drops.expired += 1;
            if self.ctx.max_versions > 1 {
                return PutFate::Drop { hides_older: false };
            }
            if rest_in_stripe && !below.get(&self.ctx) {
                return PutFate::Drop { hides_older: true };
            }
            return PutFate::Keep(tombstone_for(v.seqno, expiry));
        }
        let top_stripe = stripe == self.ctx.snapshots.len();
        let Some((filter, cf)) = self.ctx.filter.filter(|_| newest && top_stripe) else {
            return PutFate::Keep(v);
        };
        match filter.filter(cf, key, &v.value) {
            Decision::Keep => PutFate::Keep(v),
            Decision::ChangeValue(value) => PutFate::Keep(Version { value, ..v }),
            Decision::Remove => {
                self.drops.filter += 1;
                if rest_in_stripe && !below.get(&self.ctx) {
                    PutFate::Drop { hides_older: true }
                } else {
                    PutFate::Keep(tombstone_for(v.seqno, self.ctx.now))
                }
            }
        }
    }

    /// True if a tombstone in `stripe` written at `deletion_time` may be dropped: no snapshot is
    /// older than it, its grace is over, and nothing older can lie below.
    fn obsolete(&self, stripe: usize, deletion_time: u64, below: &mut Below<'_>) -> bool {
        stripe == 0 && self.ctx.grace_over(deletion_time) && !below.get(&self.ctx)
    }
}

/// What happens to a put.
enum PutFate {
    /// Write this version (the put itself, a new value, or a tombstone in its place).
    Keep(Version),
    /// Write nothing; `hides_older` when older versions in its stripe must go with it.
    Drop { hides_older: bool },
}

/// A `Delete` standing in for a put, so nothing older shows through.
fn tombstone_for(seqno: SeqNo, deletion_time: u64) -> Version {
    Version {
        seqno,
        kind: Kind::Delete,
        meta: EntryMeta::at(deletion_time),
        value: Bytes::new(),
    }
}

/// Asks the oracle about one key at most once.
struct Below<'k> {
    key: &'k [u8],
    answer: Option<bool>,
}

impl<'k> Below<'k> {
    fn new(key: &'k [u8]) -> Self {
        Self { key, answer: None }
    }

    fn get(&mut self, ctx: &GcContext<'_>) -> bool {
        if crate::planted::active(crate::planted::GcBug::DropAboveBottom) {
            // Planted bug: every compaction believes it is bottommost.
            return false;
        }
        *self
            .answer
            .get_or_insert_with(|| ctx.below.key_may_exist_below(self.key))
    }
}
