//! Choosing the next compaction.
//!
//! Leveled compaction with dynamic level sizes (as `RocksDB`'s
//! `level_compaction_dynamic_level_bytes`): the last level holds most of the data, each level above
//! it targets a tenth of the one below, and level 0 compacts straight into the highest level whose
//! target is at least `level_base_bytes` (the base level). When nothing is over its target, the
//! deletion-aware triggers of DESIGN.md §3 are tried in priority order:
//!
//! 1. level-0 file count and level sizes;
//! 2. the **delete persistence deadline** (Lethe's FADE): a tombstone whose grace is over must be
//!    gone within `D`. The deadline is split evenly over the stages a tombstone passes (the
//!    memtable, then each level down to the bottom, then the bottom compaction that drops it): a
//!    table at level `l` whose oldest tombstone became droppable more than
//!    `D × (l + 2) / (levels + 1)` ago is pushed down (or, at the bottom, rewritten);
//! 3. **tombstone density**: a table with at least `density_trigger` point tombstones in some 128
//!    consecutive entries is compacted on its own;
//! 4. **read-triggered**: key ranges where scans stepped over many tombstones;
//! 5. **TTL**: tables holding values whose cell TTL has passed, or, above the bottom, data older
//!    than the column family's TTL;
//! 6. **droppable tombstones at the bottom**, which is what a snapshot release or the end of a
//!    grace period leaves behind.
//!
//! A bottom-level table is rewritten in place when its oldest tombstone by seqno is not pinned by
//! a snapshot and its oldest by time is past its grace. Those can be two tombstones, each kept
//! for its own reason (a value expired into a tombstone keeps its seqno and takes a later time;
//! a wall clock steps back), and then the rewrite drops nothing: the engine marks its output
//! [`FileInfo::futile`] (as it does every automatic rewrite in place at the bottom) until the
//! oldest snapshot changes or the clock reaches the first grace end that rewrite kept, so the
//! picker does not choose it again and again. The TTL picker, whose bottom rewrites drop the
//! expired value that chose them, ignores the mark, unless the rewrite had to keep an expired
//! value (`max_versions > 1` with an older version under it): then it leaves the table until
//! the oldest snapshot changes or another value in it expires
//! ([`FileInfo::futile_for_ttl`]).

use bytes::Bytes;
use cairn_sstable::{EntryMeta, SeqNo};

/// What the picker knows about one table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileInfo {
    /// The table's file number.
    pub number: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Its smallest user key (entries and range tombstones).
    pub smallest: Bytes,
    /// Its largest user key (or range tombstone end).
    pub largest: Bytes,
    /// The smallest seqno in it.
    pub smallest_seqno: SeqNo,
    /// The largest seqno in it.
    pub largest_seqno: SeqNo,
    /// Point tombstones plus range tombstone pieces.
    pub num_tombstones: u64,
    /// The oldest deletion time of a tombstone in it, in ms.
    pub oldest_tombstone_time: Option<u64>,
    /// The smallest seqno of a tombstone in it.
    pub smallest_tombstone_seqno: Option<SeqNo>,
    /// The most point tombstones in any 128 consecutive entries.
    pub max_tombstones_in_window: u32,
    /// The earliest `write_time + cell ttl` of a put in it.
    pub earliest_expiry: Option<u64>,
    /// The oldest write time of anything in it.
    pub oldest_write_time: Option<u64>,
    /// True while a running compaction holds it.
    pub being_compacted: bool,
    /// The output of an automatic in-place rewrite at the last level, while what could let a
    /// new rewrite drop more (a change of the oldest snapshot, the end of a grace it kept) has
    /// not happened: the pickers driven by its tombstones or by reads leave it, or they could
    /// rewrite it forever. (A table's oldest tombstone by seqno and its oldest by time can
    /// differ, each kept for its own reason.) The TTL picker does not look at it.
    pub futile: bool,
    /// The output of an automatic in-place rewrite at the last level that kept expired puts
    /// (`max_versions > 1`, an older version under them), while the oldest snapshot is
    /// the same and no other put in it has expired since: the TTL picker leaves it, or it
    /// could rewrite it for those puts forever.
    pub futile_for_ttl: bool,
}

impl FileInfo {
    fn overlaps(&self, start: &[u8], end: &[u8]) -> bool {
        self.smallest.as_ref() <= end && self.largest.as_ref() >= start
    }
}

/// Why a compaction was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reason {
    /// Too many level-0 tables.
    Level0,
    /// A level is over its target size.
    LevelSize,
    /// The delete persistence deadline.
    Deadline,
    /// A table dense with tombstones.
    TombstoneDensity,
    /// Scans stepped over many tombstones in a range.
    ReadTriggered,
    /// Values have expired.
    Ttl,
    /// Tombstones at the bottom became droppable (a snapshot went away, a grace period ended).
    DroppableTombstones,
    /// `compact_range`.
    Manual,
}

/// A chosen compaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    /// Why.
    pub reason: Reason,
    /// The level the inputs come from.
    pub input_level: usize,
    /// The level the outputs go to (the same level for a rewrite in place).
    pub output_level: usize,
    /// Input tables from `input_level`.
    pub inputs: Vec<u64>,
    /// Input tables from `output_level` that overlap them (empty for a rewrite in place).
    pub output_level_inputs: Vec<u64>,
}

impl Pick {
    /// Every input table.
    pub fn all_inputs(&self) -> impl Iterator<Item = u64> + '_ {
        self.inputs.iter().chain(&self.output_level_inputs).copied()
    }
}

/// What the picker is told besides the tables.
#[derive(Debug, Clone)]
pub struct PickerConfig<'a> {
    /// Level-0 tables that trigger a compaction (default 4).
    pub l0_trigger: usize,
    /// The base level's target size (default 256 MiB).
    pub level_base_bytes: u64,
    /// Size ratio between adjacent levels (default 10).
    pub fan_out: u64,
    /// Point tombstones in 128 consecutive entries that make a table dense (default 64).
    pub density_trigger: u32,
    /// The delete persistence deadline in ms.
    pub deadline_ms: Option<u64>,
    /// The column family's tombstone grace in ms.
    pub grace_ms: u64,
    /// The column family's TTL in ms.
    pub cf_ttl_ms: Option<u64>,
    /// The clock reading in ms.
    pub now: u64,
    /// The oldest live snapshot.
    pub oldest_snapshot: Option<SeqNo>,
    /// Ranges `[start, end]` where scans met many tombstones.
    pub read_triggered: &'a [(Bytes, Bytes)],
}

impl PickerConfig<'_> {
    /// The obsolete-tombstone rule as this configuration sees it.
    pub fn tombstone_rules(&self) -> crate::rules::TombstoneRules {
        crate::rules::TombstoneRules {
            oldest_snapshot: self.oldest_snapshot,
            now: self.now,
            grace_ms: self.grace_ms,
        }
    }
}

impl Default for PickerConfig<'_> {
    fn default() -> Self {
        Self {
            l0_trigger: 4,
            level_base_bytes: 256 << 20,
            fan_out: 10,
            density_trigger: 64,
            deadline_ms: None,
            grace_ms: 0,
            cf_ttl_ms: None,
            now: 0,
            oldest_snapshot: None,
            read_triggered: &[],
        }
    }
}

/// The levels of one column family. Level 0 newest first; deeper levels sorted, disjoint.
#[derive(Debug, Clone)]
pub struct LevelsView {
    /// Tables per level.
    pub levels: Vec<Vec<FileInfo>>,
}

impl LevelsView {
    /// The deepest level.
    pub fn last_level(&self) -> usize {
        self.levels.len().saturating_sub(1)
    }

    fn level(&self, level: usize) -> &[FileInfo] {
        self.levels.get(level).map_or(&[], Vec::as_slice)
    }

    fn size(&self, level: usize) -> u64 {
        self.level(level).iter().map(|f| f.size).sum()
    }

    /// The level level 0 compacts into, and each level's target size (0 above the base level).
    pub fn targets(&self, config: &PickerConfig<'_>) -> (usize, Vec<u64>) {
        let last = self.last_level();
        let fan_out = config.fan_out.max(2);
        let mut base_level = last;
        let mut cur = self.size(last).max(config.level_base_bytes);
        while base_level > 1 && cur / fan_out >= config.level_base_bytes {
            cur /= fan_out;
            base_level -= 1;
        }
        let mut targets = vec![0; self.levels.len()];
        let mut target = cur;
        for slot in targets.iter_mut().take(last + 1).skip(base_level) {
            *slot = target;
            target = target.saturating_mul(fan_out);
        }
        (base_level, targets)
    }

    /// The next compaction to run, if any.
    pub fn pick(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        self.pick_by_size(config)
            .or_else(|| self.pick_deadline(config))
            .or_else(|| self.pick_dense(config))
            .or_else(|| self.pick_read_triggered(config))
            .or_else(|| self.pick_ttl(config))
            .or_else(|| self.pick_bottom_droppable(config))
    }

    fn pick_by_size(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        let (base_level, targets) = self.targets(config);
        let last = self.last_level();
        let l0 = self.level(0).len();
        let mut best: Option<(f64, usize)> = None;
        if l0 >= config.l0_trigger.max(1) {
            best = Some((ratio(l0 as u64, config.l0_trigger as u64), 0));
        }
        for level in 1..last {
            let size = self.size(level);
            if size == 0 {
                continue;
            }
            let target = targets.get(level).copied().unwrap_or(0);
            // Levels above the base level should be empty: anything there moves down.
            let score = if level < base_level || target == 0 {
                f64::MAX
            } else {
                ratio(size, target)
            };
            if score >= 1.0 && best.is_none_or(|(b, _)| score > b) {
                best = Some((score, level));
            }
        }
        let (_, level) = best?;
        if level == 0 {
            return self.whole_level0(Reason::Level0, base_level);
        }
        let file = self.least_overlapping_file(level)?;
        self.push_down(Reason::LevelSize, level, &file)
    }

    /// Every level-0 table into the base level, unless level 0 is already being compacted.
    fn whole_level0(&self, reason: Reason, base_level: usize) -> Option<Pick> {
        let l0 = self.level(0);
        if l0.is_empty() || l0.iter().any(|f| f.being_compacted) {
            return None;
        }
        let output_level = self.level0_target(base_level);
        let start = l0.iter().map(|f| f.smallest.clone()).min()?;
        let end = l0.iter().map(|f| f.largest.clone()).max()?;
        let overlapping = self.overlapping(output_level, &start, &end)?;
        Some(Pick {
            reason,
            input_level: 0,
            output_level,
            inputs: l0.iter().map(|f| f.number).collect(),
            output_level_inputs: overlapping,
        })
    }

    /// Where level 0 goes: the base level, unless a level above it still holds data (the base
    /// level moved down when the last level shrank). Level-0 data is newer than anything below
    /// it, so it must land no deeper than the shallowest level with data.
    fn level0_target(&self, base_level: usize) -> usize {
        (1..base_level)
            .find(|&l| !self.level(l).is_empty())
            .unwrap_or(base_level)
    }

    /// Numbers of the tables at `level` overlapping `[start, end]`; `None` if one is busy.
    fn overlapping(&self, level: usize, start: &[u8], end: &[u8]) -> Option<Vec<u64>> {
        let files: Vec<&FileInfo> = self
            .level(level)
            .iter()
            .filter(|f| f.overlaps(start, end))
            .collect();
        if files.iter().any(|f| f.being_compacted) {
            return None;
        }
        Some(files.iter().map(|f| f.number).collect())
    }

    /// The table at `level` whose overlap with the level below is smallest for its size.
    fn least_overlapping_file(&self, level: usize) -> Option<FileInfo> {
        self.level(level)
            .iter()
            .filter(|f| !f.being_compacted)
            .min_by_key(|f| {
                let below: u64 = self
                    .level(level + 1)
                    .iter()
                    .filter(|g| g.overlaps(&f.smallest, &f.largest))
                    .map(|g| g.size)
                    .sum();
                below.saturating_mul(1024) / f.size.max(1)
            })
            .cloned()
    }

    /// Moves `file` from `level` to the next level down, or rewrites it in place at the bottom.
    fn push_down(&self, reason: Reason, level: usize, file: &FileInfo) -> Option<Pick> {
        if file.being_compacted || level == 0 {
            return None;
        }
        if level >= self.last_level() {
            return Some(Pick {
                reason,
                input_level: level,
                output_level: level,
                inputs: vec![file.number],
                output_level_inputs: Vec::new(),
            });
        }
        let output_level_inputs = self.overlapping(level + 1, &file.smallest, &file.largest)?;
        Some(Pick {
            reason,
            input_level: level,
            output_level: level + 1,
            inputs: vec![file.number],
            output_level_inputs,
        })
    }

    /// Pushes `file` at `level` on, level 0 going to the base level as a whole.
    fn advance(
        &self,
        reason: Reason,
        level: usize,
        file: &FileInfo,
        config: &PickerConfig<'_>,
    ) -> Option<Pick> {
        if level == 0 {
            let (base_level, _) = self.targets(config);
            return self.whole_level0(reason, base_level);
        }
        if level == self.last_level() && !bottom_droppable(file, config) {
            return None;
        }
        self.push_down(reason, level, file)
    }

    /// Every (level, table) pair, top down.
    fn files(&self) -> impl Iterator<Item = (usize, &FileInfo)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(level, files)| files.iter().map(move |f| (level, f)))
    }

    /// The tables the pickers driven by tombstones and reads may choose.
    fn worth_rewriting(&self) -> impl Iterator<Item = (usize, &FileInfo)> {
        self.files().filter(|(_, f)| !f.futile)
    }

    fn pick_deadline(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        let deadline = config.deadline_ms?;
        let rules = config.tombstone_rules();
        self.worth_rewriting().find_map(|(level, file)| {
            let droppable_since = rules.grace_end(file.oldest_tombstone_time?);
            let budget = crate::rules::deadline_budget(deadline, self.levels.len(), Some(level));
            let due = config.now >= droppable_since.saturating_add(budget) && !pinned(file, config);
            if due {
                self.advance(Reason::Deadline, level, file, config)
            } else {
                None
            }
        })
    }

    fn pick_dense(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        self.worth_rewriting().find_map(|(level, file)| {
            if file.max_tombstones_in_window >= config.density_trigger.max(1) {
                self.advance(Reason::TombstoneDensity, level, file, config)
            } else {
                None
            }
        })
    }

    fn pick_read_triggered(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        config.read_triggered.iter().find_map(|(start, end)| {
            self.worth_rewriting().find_map(|(level, file)| {
                if file.num_tombstones > 0 && file.overlaps(start, end) {
                    self.advance(Reason::ReadTriggered, level, file, config)
                } else {
                    None
                }
            })
        })
    }

    fn pick_ttl(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        // Not `worth_rewriting`: at the bottom it fires only on an expired value, which the
        // rewrite drops (or, if it must keep it, marks `futile_for_ttl`), so it
        // cannot loop, and skipping would only delay the expiry.
        self.files().find_map(|(level, file)| {
            let cell_expired = file.earliest_expiry.is_some_and(|e| config.now >= e);
            // The family TTL is judged by the oldest write, which a tombstone left in place of an
            // expired value keeps old: at the bottom only cell expiry (gone once rewritten) counts,
            // so a rewrite can never be picked again for the same reason.
            let cf_expired = level < self.last_level()
                && config
                    .cf_ttl_ms
                    .zip(file.oldest_write_time)
                    .is_some_and(|(ttl, written)| {
                        crate::rules::expired(EntryMeta::at(written), Some(ttl), config.now)
                    });
            if !cell_expired && !cf_expired {
                return None;
            }
            if level == self.last_level() {
                if file.futile_for_ttl {
                    return None;
                }
                return self.push_down(Reason::Ttl, level, file);
            }
            self.advance(Reason::Ttl, level, file, config)
        })
    }

    fn pick_bottom_droppable(&self, config: &PickerConfig<'_>) -> Option<Pick> {
        let last = self.last_level();
        self.level(last)
            .iter()
            .find(|f| !f.futile && bottom_droppable(f, config))
            .and_then(|f| self.push_down(Reason::DroppableTombstones, last, f))
    }

    /// The compaction `compact_range` runs at `level` for `[start, end]`: the overlapping tables
    /// into the next level, or rewritten in place at the last level. `None` if none overlap.
    pub fn pick_manual(
        &self,
        level: usize,
        start: &[u8],
        end: &[u8],
        config: &PickerConfig<'_>,
    ) -> Option<Pick> {
        let files: Vec<&FileInfo> = self
            .level(level)
            .iter()
            .filter(|f| f.overlaps(start, end))
            .collect();
        if files.is_empty() || files.iter().any(|f| f.being_compacted) {
            return None;
        }
        let last = self.last_level();
        let (base_level, _) = self.targets(config);
        let output_level = match level {
            0 => self.level0_target(base_level),
            l if l >= last => last,
            l => l + 1,
        };
        let (inputs, output_level_inputs) = if level == 0 {
            // Level-0 tables overlap each other: take them all so no older version stays above.
            let pick = self.whole_level0(Reason::Manual, base_level)?;
            (pick.inputs, pick.output_level_inputs)
        } else if output_level == level {
            (files.iter().map(|f| f.number).collect(), Vec::new())
        } else {
            let lo = files.iter().map(|f| f.smallest.clone()).min()?;
            let hi = files.iter().map(|f| f.largest.clone()).max()?;
            (
                files.iter().map(|f| f.number).collect(),
                self.overlapping(output_level, &lo, &hi)?,
            )
        };
        Some(Pick {
            reason: Reason::Manual,
            input_level: level,
            output_level,
            inputs,
            output_level_inputs,
        })
    }
}

/// True if every tombstone in the table is newer than some live snapshot (its oldest one is).
fn pinned(file: &FileInfo, config: &PickerConfig<'_>) -> bool {
    file.smallest_tombstone_seqno
        .is_some_and(|seqno| config.tombstone_rules().pinned_by(seqno).is_some())
}

/// True if rewriting the bottom-level table now would drop at least one tombstone: the rules
/// let its oldest tombstone go, with nothing below the bottom.
fn bottom_droppable(file: &FileInfo, config: &PickerConfig<'_>) -> bool {
    file.num_tombstones > 0
        && !pinned(file, config)
        && file
            .oldest_tombstone_time
            .is_some_and(|t| config.tombstone_rules().grace_over(t))
}

fn ratio(a: u64, b: u64) -> f64 {
    #[expect(clippy::cast_precision_loss, reason = "sizes are far below 2^52")]
    let r = a as f64 / b.max(1) as f64;
    r
}

#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]
mod tests {
    use super::*;

    fn file(number: u64, size: u64, smallest: &'static str, largest: &'static str) -> FileInfo {
        FileInfo {
            number,
            size,
            smallest: Bytes::from_static(smallest.as_bytes()),
            largest: Bytes::from_static(largest.as_bytes()),
            ..FileInfo::default()
        }
    }

    #[test]
    fn level0_never_lands_below_a_level_that_still_holds_data() {
        // A small last level puts the base level at the bottom; an older table left at level 5
        // (from when the tree was bigger) must stay below the newer level-0 data.
        let mut levels = vec![Vec::new(); 7];
        levels[0] = (1..=4).map(|n| file(n, 100, "a", "z")).collect();
        levels[5] = vec![file(10, 100, "m", "n")];
        levels[6] = vec![file(11, 1000, "a", "z")];
        let view = LevelsView { levels };
        let config = PickerConfig::default();
        assert_eq!(
            view.targets(&config).0,
            6,
            "a small tree compacts level 0 into the last level"
        );
        let pick = view
            .pick_manual(0, b"a", b"z", &config)
            .expect("a manual pick");
        assert_eq!(pick.output_level, 5);
        let by_size = view.pick(&config).expect("a pick");
        assert!(
            by_size.input_level == 5 || by_size.output_level == 5,
            "{by_size:?}"
        );
    }

    #[test]
    fn the_fan_out_sets_each_level_target_and_how_many_levels_are_used() {
        let mut levels = vec![Vec::new(); 7];
        levels[6] = vec![file(1, 100_000, "a", "z")];
        let view = LevelsView { levels };
        let with = |fan_out| PickerConfig {
            level_base_bytes: 1000,
            fan_out,
            ..PickerConfig::default()
        };
        // 100,000 bytes at the bottom: ten times per level above it down to 1000 bytes.
        let (base, targets) = view.targets(&with(10));
        assert_eq!(base, 4);
        assert_eq!(targets, vec![0, 0, 0, 0, 1000, 10_000, 100_000]);
        // Four times per level, divided while the base stays at least 1000 bytes: 1562.
        let (base, targets) = view.targets(&with(4));
        assert_eq!(base, 3);
        assert_eq!(targets, vec![0, 0, 0, 1562, 6248, 24_992, 99_968]);
        // A fan-out under 2 would never shrink: it is taken as 2.
        assert_eq!(view.targets(&with(1)), view.targets(&with(2)));
    }

    #[test]
    fn dynamic_levels_move_the_base_up_as_the_last_level_grows() {
        let config = PickerConfig {
            level_base_bytes: 1000,
            ..PickerConfig::default()
        };
        let mut levels = vec![Vec::new(); 7];
        levels[6] = vec![file(1, 5_000, "a", "z")];
        assert_eq!(
            LevelsView {
                levels: levels.clone()
            }
            .targets(&config)
            .0,
            6
        );
        levels[6] = vec![file(1, 50_000, "a", "z")];
        let (base, targets) = LevelsView {
            levels: levels.clone(),
        }
        .targets(&config);
        assert_eq!(base, 5);
        assert_eq!(targets.get(5), Some(&5_000));
        levels[6] = vec![file(1, 5_000_000, "a", "z")];
        assert_eq!(LevelsView { levels }.targets(&config).0, 3);
    }
}
