//! The compaction iterator: applies the garbage-collection rules of [`crate::rules`] to a sorted
//! stream of versions, key by key, newest first, and counts every drop under its rule.
//!
//! The rules themselves — stripes, and when a tombstone, a shadowed, covered or expired version
//! may go — are stated, with an example each, in [`crate::rules`]; this file applies them and
//! restates none.

use std::collections::VecDeque;

use bytes::Bytes;
use cairn_sstable::{
    EntryMeta, FragmentedRangeTombstones, InternalIterator, Kind, RangeTombstone, SeqNo,
    internal_key, parse_internal_key,
};

use crate::Result;
use crate::filter::{CompactionFilter, Decision};
use crate::rules::{self, TombstoneRules};
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

    /// The obsolete-tombstone rule's view of this compaction.
    pub fn tombstone_rules(&self) -> TombstoneRules {
        let ignore_snapshots = crate::planted::active(crate::planted::GcBug::IgnoreSnapshots);
        TombstoneRules {
            // Planted bug: as if no snapshot were alive (only compaction is wrong, so the
            // engine's explanations stay truthful and can disagree with it).
            oldest_snapshot: self
                .snapshots
                .first()
                .copied()
                .filter(|_| !ignore_snapshots),
            now: self.now,
            grace_ms: self.grace_ms,
        }
    }
}

/// One version of a key as it goes in or out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyVersion {
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
    /// The earliest end of a grace period that kept a tombstone: when the clock alone may let
    /// a rewrite of the output drop it. (Expiries are left out: the TTL picker acts on them.)
    next_change: Option<u64>,
    single_delete_misuse: u64,
    entries_in: u64,
    /// The earliest expiry, still to come, of a put kept.
    next_expiry: Option<u64>,
    /// Expired puts kept (with `max_versions > 1`, where dropping one would let an older
    /// version into a reader's candidates).
    kept_expired: u64,
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
            next_change: None,
            single_delete_misuse: 0,
            entries_in: 0,
            next_expiry: None,
            kept_expired: 0,
        })
    }

    /// [`new`](Self::new) from the inputs' range tombstones as stored, fragmented with only the
    /// versions the rules can choose between in each snapshot stripe
    /// ([`FragmentedRangeTombstones::fragment_in_stripes`]): what is left out counts as dropped,
    /// as the rules would have dropped it, and memory stays bounded when many wide tombstones
    /// lie over many narrow ones.
    ///
    /// # Errors
    /// `Corruption` or `Io` if the input cannot be read.
    pub fn from_raw_tombstones(
        input: I,
        range_tombstones: Vec<RangeTombstone>,
        ctx: GcContext<'a>,
    ) -> Result<Self> {
        let (fragments, left_out) =
            FragmentedRangeTombstones::fragment_in_stripes(range_tombstones, |s| ctx.stripe(s));
        let mut iter = Self::new(input, fragments, ctx)?;
        iter.drops.range += left_out;
        Ok(iter)
    }

    /// Entries dropped so far, by rule.
    pub fn drops(&self) -> &DropCounts {
        &self.drops
    }

    /// The earliest end of a grace period that kept a tombstone in this compaction; `None` if
    /// none did (every tombstone kept is then pinned by a snapshot, or has data below).
    pub fn next_change(&self) -> Option<u64> {
        self.next_change
    }

    /// The earliest expiry still to come of a put written out, if any put kept can expire.
    pub fn next_expiry(&self) -> Option<u64> {
        self.next_expiry
    }

    /// Expired puts written out (their values emptied): with `max_versions > 1`, a put with an
    /// older version under it, in the output or below, which dropping it would move into a
    /// reader's candidates (a reader counts the newer versions of other levels too, which this
    /// compaction does not see).
    pub fn kept_expired(&self) -> u64 {
        self.kept_expired
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
                let below = || {
                    self.ctx
                        .below
                        .range_may_exist_below(&fragment.start, &fragment.end)
                        .then_some(())
                };
                let reason = self.ctx.tombstone_rules().keep_reason(
                    version.seqno,
                    version.write_time,
                    below,
                );
                let obsolete = reason.is_none();
                if redundant || obsolete {
                    self.drops.range += 1;
                    continue;
                }
                note_grace_end(&mut self.next_change, reason.as_ref());
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
    fn next_key(&mut self) -> Result<Option<(Vec<u8>, Vec<KeyVersion>)>> {
        if !self.input.valid() {
            return Ok(None);
        }
        let user_key = cairn_sstable::key::user_key(self.input.key()).to_vec();
        let mut versions = Vec::new();
        while self.input.valid()
            && cairn_sstable::key::user_key(self.input.key()) == user_key.as_slice()
        {
            let parsed = parse_internal_key(self.input.key()).ok_or_else(|| {
                self.input
                    .corruption_here("malformed internal key in compaction input")
            })?;
            versions.push(KeyVersion {
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
    fn decide(&mut self, key: &[u8], versions: Vec<KeyVersion>) -> Vec<KeyVersion> {
        let mut out: Vec<KeyVersion> = Vec::new();
        let mut below = Below::new(key);
        let mut stripe_now = usize::MAX;
        let mut puts_in_stripe = 0u32;
        let mut tombstone_in_stripe = false;
        // Stripes only fall as versions get older, so "every version after this one shares its
        // stripe" is "the oldest version is in its stripe": one check per key, not a walk of
        // the rest per put.
        let oldest_stripe = versions.last().map(|v| self.ctx.stripe(v.seqno));
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
                let place = Place {
                    newest: index == 0,
                    stripe,
                    rest_in_stripe: oldest_stripe == Some(stripe),
                };
                match self.decide_put(key, place, v, &mut below) {
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
            if !self.obsolete(v.seqno, v.meta.write_time, &mut below) {
                out.push(v);
            } else if cancels_put && !misuse {
                self.drops.single_delete += 1;
            } else {
                self.drops.obsolete_tombstone += 1;
            }
        }
        self.trim_expired(&mut out, &mut below);
        out
    }

    /// The rules for a put that nothing newer in its stripe hides.
    fn decide_put(
        &mut self,
        key: &[u8],
        place: Place,
        v: KeyVersion,
        below: &mut Below<'_>,
    ) -> PutFate {
        let Place {
            newest,
            stripe,
            rest_in_stripe,
        } = place;
        match rules::expiry(v.meta, self.ctx.cf_ttl_ms) {
            Some(expiry) if self.ctx.now >= expiry => {
                return self.decide_expired(&v, expiry, rest_in_stripe, below);
            }
            Some(expiry) => {
                self.next_expiry = Some(self.next_expiry.map_or(expiry, |e| e.min(expiry)));
            }
            None => {}
        }
        let top_stripe = stripe == self.ctx.snapshots.len();
        let Some((filter, cf)) = self.ctx.filter.filter(|_| newest && top_stripe) else {
            return PutFate::Keep(v);
        };
        match filter.filter(cf, key, &v.value) {
            Decision::Keep => PutFate::Keep(v),
            Decision::ChangeValue(value) => PutFate::Keep(KeyVersion { value, ..v }),
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

    /// The expired rule for a put that expired at `expiry`; `rest_in_stripe` when every older
    /// version of the key shares its stripe. With `max_versions > 1` it stays a candidate, its
    /// value emptied, until [`trim_expired`](Self::trim_expired) finds nothing older under it.
    fn decide_expired(
        &mut self,
        v: &KeyVersion,
        expiry: u64,
        rest_in_stripe: bool,
        below: &mut Below<'_>,
    ) -> PutFate {
        if crate::planted::active(crate::planted::GcBug::ExpiredResurrects) {
            // Planted bug: an expired put simply goes, whatever lies under it.
            self.drops.expired += 1;
            return PutFate::Drop { hides_older: false };
        }
        if self.ctx.max_versions > 1 {
            // A TTL of zero keeps the placeholder expired whatever happens to the family's TTL
            // (removed or lengthened with `set_options`) or the clock: its emptied value must
            // never be read as a value.
            return PutFate::Keep(KeyVersion {
                seqno: v.seqno,
                kind: v.kind,
                meta: EntryMeta {
                    write_time: v.meta.write_time,
                    ttl: Some(0),
                },
                value: Bytes::new(),
            });
        }
        self.drops.expired += 1;
        if rest_in_stripe && !below.get(&self.ctx) {
            return PutFate::Drop { hides_older: true };
        }
        PutFate::Keep(tombstone_for(v.seqno, expiry))
    }

    /// With `max_versions > 1`, drops the expired puts with no version older than them left in
    /// the output or below: no reader can count them any more. The others stay, counted as kept.
    fn trim_expired(&mut self, out: &mut Vec<KeyVersion>, below: &mut Below<'_>) {
        if self.ctx.max_versions == 1 {
            return;
        }
        let cf_ttl = self.ctx.cf_ttl_ms;
        let now = self.ctx.now;
        let expired = |v: &KeyVersion| v.kind == Kind::Put && rules::expired(v.meta, cf_ttl, now);
        while out.last().is_some_and(expired) && !below.get(&self.ctx) {
            out.pop();
            self.drops.expired += 1;
        }
        let kept = out.iter().filter(|v| expired(v)).count();
        self.kept_expired += u64::try_from(kept).unwrap_or(u64::MAX);
    }

    /// True if the obsolete-tombstone rule lets a tombstone at `seqno` written at
    /// `deletion_time` go.
    fn obsolete(&mut self, seqno: SeqNo, deletion_time: u64, below: &mut Below<'_>) -> bool {
        let data_below = || below.get(&self.ctx).then_some(());
        let reason = self
            .ctx
            .tombstone_rules()
            .keep_reason(seqno, deletion_time, data_below);
        note_grace_end(&mut self.next_change, reason.as_ref());
        reason.is_none()
    }
}

/// Lowers `next_change` to the end of the grace that keeps a tombstone for `reason`, if that is
/// why it is kept (a field, not a method: the range-tombstone loop borrows the iterator).
fn note_grace_end<B>(next_change: &mut Option<u64>, reason: Option<&rules::KeepReason<B>>) {
    if let Some(&rules::KeepReason::GraceUntil { time }) = reason {
        *next_change = Some(next_change.map_or(time, |t| t.min(time)));
    }
}

/// Where a put stands among its key's versions.
#[derive(Debug, Clone, Copy)]
struct Place {
    /// It is the key's newest version.
    newest: bool,
    /// Its snapshot stripe.
    stripe: usize,
    /// Every older version of the key shares its stripe.
    rest_in_stripe: bool,
}

/// What happens to a put.
enum PutFate {
    /// Write this version (the put itself, a new value, or a tombstone in its place).
    Keep(KeyVersion),
    /// Write nothing; `hides_older` when older versions in its stripe must go with it.
    Drop { hides_older: bool },
}

/// A `Delete` standing in for a put, so nothing older shows through.
fn tombstone_for(seqno: SeqNo, deletion_time: u64) -> KeyVersion {
    KeyVersion {
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
