//! The expected state of the held-reader family: per key its live put (version, write time,
//! cell TTL) or nothing, the family's TTL, and what a reader made at a clock reading must
//! return (DESIGN §2 rules 3–4 with `max_versions = 1`: a put is live until
//! `write_time + min(family TTL, cell TTL)`).
//!
//! Time is exact as in [`crate::ttl_model`]: every held operation holds the clock gate's read
//! guard, and every write and read of the family is made under the held work's one lock, so a
//! reader's answer is fixed by the model and the clock reading when it is made.
//!
//! The one uncertainty is the compaction filter: a put whose version is odd is **doomed**, and
//! while the filter is armed any compaction (the harness's own or a background one) may remove
//! it. Arming it makes every doomed put a *maybe*: present or absent for a reader made from
//! then on, until a fresh read of the newest view sees it absent (a removed put never comes
//! back) or a write replaces it. Readers made before the arming saw it, exactly.

/// The column family the held readers read.
pub(crate) const HELD_CF: &str = "held";

/// Keys of the held family.
pub(crate) const HELD_KEYS: usize = 256;

/// One put of a held key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldCell {
    pub(crate) version: u32,
    pub(crate) write_time: u64,
    pub(crate) ttl_ms: Option<u64>,
    /// The filter was armed since it was written: a compaction may have removed it.
    pub(crate) maybe_filtered: bool,
}

/// True if the filter removes version `version` while armed.
pub(crate) fn doomed(version: u32) -> bool {
    version % 2 == 1
}

/// What a reader must find at one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expect {
    Absent,
    Live(u32),
    /// This version, or nothing (the filter may have removed it).
    Maybe(u32),
}

impl Expect {
    fn allows(self, found: Option<u32>) -> bool {
        match (self, found) {
            (Self::Absent | Self::Maybe(_), None) => true,
            (Self::Live(v) | Self::Maybe(v), Some(f)) => v == f,
            _ => false,
        }
    }
}

/// The filter is armed: every doomed put of `cells` may be removed from now on. That holds for
/// the puts a snapshot sees too: a compaction protects only the snapshots alive when it began,
/// so one that began before the snapshot and asks the filter now may remove what it sees.
pub(crate) fn arm(cells: &mut [Option<HeldCell>]) {
    for cell in cells.iter_mut().flatten() {
        if doomed(cell.version) {
            cell.maybe_filtered = true;
        }
    }
}

/// What each key of `cells` reads as at `now` under the family TTL `cf_ttl_ms`.
pub(crate) fn expectation(
    cells: &[Option<HeldCell>],
    cf_ttl_ms: Option<u64>,
    now: u64,
) -> Vec<Expect> {
    cells
        .iter()
        .map(|cell| match cell {
            None => Expect::Absent,
            Some(c) => {
                let ttl = match (c.ttl_ms, cf_ttl_ms) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if ttl.is_some_and(|ttl| now >= c.write_time.saturating_add(ttl)) {
                    Expect::Absent
                } else if c.maybe_filtered {
                    Expect::Maybe(c.version)
                } else {
                    Expect::Live(c.version)
                }
            }
        })
        .collect()
}

/// The model of the held family.
#[derive(Debug)]
pub(crate) struct HeldModel {
    pub(crate) cells: Vec<Option<HeldCell>>,
    /// Per key, versions handed out (by twos: the low bit says doomed).
    issued: Vec<u32>,
    pub(crate) cf_ttl_ms: Option<u64>,
}

impl HeldModel {
    pub(crate) fn new() -> Self {
        Self {
            cells: vec![None; HELD_KEYS],
            issued: vec![0; HELD_KEYS],
            cf_ttl_ms: None,
        }
    }

    /// Every key absent and no family TTL (what a reset writes), versions never reused.
    pub(crate) fn reset(&mut self) {
        self.cells.fill(None);
        self.cf_ttl_ms = None;
    }

    /// A version of key `k` no write used, doomed or not.
    pub(crate) fn next_version(&mut self, k: usize, doomed: bool) -> u32 {
        let Some(n) = self.issued.get_mut(k) else {
            return 0;
        };
        *n += 1;
        *n * 2 + u32::from(doomed)
    }

    pub(crate) fn put(&mut self, k: usize, cell: HeldCell) {
        if let Some(slot) = self.cells.get_mut(k) {
            *slot = Some(cell);
        }
    }

    pub(crate) fn delete(&mut self, k: usize) {
        if let Some(slot) = self.cells.get_mut(k) {
            *slot = None;
        }
    }

    /// The filter is armed: every doomed put may be removed from now on.
    pub(crate) fn arm(&mut self) {
        arm(&mut self.cells);
    }

    /// What a reader made now reads.
    pub(crate) fn expect_now(&self, now: u64) -> Vec<Expect> {
        expectation(&self.cells, self.cf_ttl_ms, now)
    }

    /// A read of the newest view found key `k` absent where the filter may have removed it:
    /// it did, for good.
    pub(crate) fn seen_absent(&mut self, k: usize) {
        if let Some(slot) = self.cells.get_mut(k)
            && slot.is_some_and(|c| c.maybe_filtered)
        {
            *slot = None;
        }
    }
}

/// What a read returned: the keys (by index) and the version each value names, in the order
/// read, `None` for bytes no write produced; and whether it read to the end of its span.
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) entries: Vec<(usize, Option<u32>)>,
    pub(crate) to_the_end: bool,
}

/// Judges a forward read from key `from` against `expect`: every key it returned holds its
/// expected version, every key it stepped past may be absent, and if it read to the end, so
/// may every key after the last. Returns the keys judged, or what was wrong.
pub(crate) fn judge_forward(expect: &[Expect], from: usize, found: &Found) -> Result<u64, String> {
    let mut next = from;
    let mut judged = 0u64;
    for &(k, version) in &found.entries {
        if k < next {
            return Err(format!(
                "returned key {k} out of order (expected a key >= {next})"
            ));
        }
        judged += skipped(expect, next..k)?;
        let want = expect.get(k).copied().unwrap_or(Expect::Absent);
        if version.is_none() || !want.allows(version) {
            return Err(format!("key {k} read {version:?}, expected {want:?}"));
        }
        judged += 1;
        next = k + 1;
    }
    if found.to_the_end {
        judged += skipped(expect, next..expect.len())?;
    }
    Ok(judged)
}

/// Judges a backward seek (the last key at or before `at`) that found `found` (`None`: none).
pub(crate) fn judge_backward(
    expect: &[Expect],
    at: usize,
    found: Option<(usize, Option<u32>)>,
) -> Result<u64, String> {
    match found {
        None => skipped(expect, 0..at + 1),
        Some((k, _)) if k > at => Err(format!("a seek back from {at} landed on {k}")),
        Some((k, version)) => {
            let judged = skipped(expect, k + 1..at + 1)?;
            let want = expect.get(k).copied().unwrap_or(Expect::Absent);
            if version.is_none() || !want.allows(version) {
                return Err(format!("key {k} read {version:?}, expected {want:?}"));
            }
            Ok(judged + 1)
        }
    }
}

/// Keys of `span` a read stepped past: none may be certainly live.
fn skipped(expect: &[Expect], span: std::ops::Range<usize>) -> Result<u64, String> {
    let mut judged = 0;
    for k in span {
        match expect.get(k) {
            Some(Expect::Live(v)) => return Err(format!("skipped key {k}, live at version {v}")),
            Some(_) => judged += 1,
            None => {}
        }
    }
    Ok(judged)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(version: u32, write_time: u64, ttl_ms: Option<u64>) -> HeldCell {
        HeldCell {
            version,
            write_time,
            ttl_ms,
            maybe_filtered: false,
        }
    }

    #[test]
    fn a_put_lives_until_the_shorter_of_its_ttls() {
        let cells = [Some(cell(2, 100, Some(50))), Some(cell(4, 100, None)), None];
        assert_eq!(
            expectation(&cells, Some(80), 149),
            [Expect::Live(2), Expect::Live(4), Expect::Absent]
        );
        assert_eq!(
            expectation(&cells, Some(80), 150),
            [Expect::Absent, Expect::Live(4), Expect::Absent]
        );
        assert_eq!(
            expectation(&cells, Some(80), 180),
            [Expect::Absent, Expect::Absent, Expect::Absent]
        );
    }

    #[test]
    fn arming_the_filter_makes_doomed_puts_maybe_until_seen_absent() {
        let mut model = HeldModel::new();
        let doomed_version = model.next_version(0, true);
        let kept = model.next_version(1, false);
        assert!(doomed(doomed_version) && !doomed(kept));
        model.put(0, cell(doomed_version, 0, None));
        model.put(1, cell(kept, 0, None));
        model.arm();
        let now = model.expect_now(0);
        assert_eq!(now.first(), Some(&Expect::Maybe(doomed_version)));
        assert_eq!(now.get(1), Some(&Expect::Live(kept)));
        model.seen_absent(0);
        model.seen_absent(1);
        assert_eq!(model.expect_now(0).first(), Some(&Expect::Absent));
        assert_eq!(model.expect_now(0).get(1), Some(&Expect::Live(kept)));
    }

    #[test]
    fn a_read_that_skips_a_live_key_is_wrong_and_one_that_skips_a_maybe_is_not() {
        let expect = [
            Expect::Absent,
            Expect::Live(2),
            Expect::Maybe(3),
            Expect::Absent,
            Expect::Live(6),
        ];
        let found = |entries: Vec<(usize, Option<u32>)>, to_the_end| Found {
            entries,
            to_the_end,
        };
        assert_eq!(
            judge_forward(&expect, 0, &found(vec![(1, Some(2)), (4, Some(6))], true)),
            Ok(5)
        );
        assert!(judge_forward(&expect, 0, &found(vec![(4, Some(6))], true)).is_err());
        assert!(judge_forward(&expect, 2, &found(vec![], true)).is_err());
        assert_eq!(judge_forward(&expect, 2, &found(vec![], false)), Ok(0));
        assert!(judge_forward(&expect, 0, &found(vec![(1, Some(4))], false)).is_err());
        assert_eq!(judge_backward(&expect, 3, Some((1, Some(2)))), Ok(3));
        assert!(judge_backward(&expect, 4, Some((1, Some(2)))).is_err());
        assert!(judge_backward(&expect, 1, None).is_err());
    }
}
