//! The expected state of the TTL families: per key, the versions written since its last
//! tombstone, each with its write time and TTL, and what a read at a clock reading must return
//! under DESIGN §2 rules 3–4 (the `max_versions` newest since the last tombstone are the
//! candidates; the newest not expired is the value; `get_versions` lists the candidates not
//! expired, newest first).
//!
//! Time is exact: the harness's `ManualClock` moves only while no TTL operation runs (they hold
//! a read guard of the clock gate, the advance holds its write guard), so a write's time is the
//! clock reading taken under its key's lock before it, and a read is judged at the reading taken
//! before it. A key's lock is held across its write or read, so no read races a write of its key.
//!
//! A key's state is a small set of **alternatives**: one, unless a write's outcome is unknown (a
//! process killed with the write in flight), which adds a second with the write applied. Every
//! read keeps the alternatives that explain it and fails if none does; a delete collapses them.
//! With a journal, every change is recorded before the write it describes (and the clock before
//! it advances), so a later process rebuilds the state after a SIGKILL.
//!
//! It does not model snapshots or transactions on these families, nor a fault run's lost log
//! suffix: the harness runs the TTL work in normal runs, reopens and kill cycles only.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

/// A column family of the TTL work.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TtlFamily {
    /// Its name.
    pub name: &'static str,
    /// Its TTL, ms.
    pub cf_ttl_ms: u64,
    /// Its version limit.
    pub max_versions: u32,
}

/// The TTL families: one where an expired newest put hides the older ones, one where it reveals
/// the next candidate.
pub(crate) const TTL_FAMILIES: [TtlFamily; 2] = [
    TtlFamily {
        name: "ttl_one",
        cf_ttl_ms: 30_000,
        max_versions: 1,
    },
    TtlFamily {
        name: "ttl_three",
        cf_ttl_ms: 20_000,
        max_versions: 3,
    },
];

/// One put: the value's version, its write time and its cell TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cell {
    pub version: u32,
    pub write_time: u64,
    pub ttl_ms: Option<u64>,
}

impl Cell {
    /// DESIGN §2 rule 4: expired at `write_time + min(cf_ttl, cell_ttl)`.
    fn expired(self, family: TtlFamily, now: u64) -> bool {
        let ttl = self
            .ttl_ms
            .map_or(family.cf_ttl_ms, |t| t.min(family.cf_ttl_ms));
        now >= self.write_time.saturating_add(ttl)
    }
}

/// A write to one key of a TTL family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TtlWrite {
    Put(Cell),
    /// A point or range delete.
    Delete,
}

/// One possible state of a key: its candidates, newest first (older puts can never be
/// candidates again, so only `max_versions` are kept).
type Alternative = Vec<Cell>;

/// Alternatives a key keeps at most; past it the oldest unknown outcomes are forgotten.
const MAX_ALTERNATIVES: usize = 64;

/// What the model holds for one key.
#[derive(Debug)]
pub(crate) struct TtlKey {
    alternatives: Vec<Alternative>,
    /// The highest version handed out, so that none is reused.
    issued: u32,
}

impl Default for TtlKey {
    fn default() -> Self {
        Self {
            alternatives: vec![Vec::new()],
            issued: 0,
        }
    }
}

fn applied(alternative: &Alternative, write: TtlWrite, family: TtlFamily) -> Alternative {
    match write {
        TtlWrite::Delete => Vec::new(),
        TtlWrite::Put(cell) => {
            let limit = usize::try_from(family.max_versions).unwrap_or(usize::MAX);
            std::iter::once(cell)
                .chain(alternative.iter().copied())
                .take(limit)
                .collect()
        }
    }
}

/// The versions a read at `now` sees, newest first.
fn visible(alternative: &Alternative, family: TtlFamily, now: u64) -> Vec<u32> {
    alternative
        .iter()
        .filter(|c| !c.expired(family, now))
        .map(|c| c.version)
        .collect()
}

/// What judging a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// It matches an alternative; `expiry_mattered` if some candidate was expired.
    Ok { expiry_mattered: bool },
    /// It matches none: what each alternative would have shown.
    Wrong { expected: Vec<Vec<u32>> },
}

impl TtlKey {
    /// A version no write to the key has used.
    pub(crate) fn next_version(&mut self) -> u32 {
        self.issued += 1;
        self.issued
    }

    /// A write committed.
    pub(crate) fn commit(&mut self, write: TtlWrite, family: TtlFamily) {
        let mut next: Vec<Alternative> = self
            .alternatives
            .iter()
            .map(|a| applied(a, write, family))
            .collect();
        next.dedup();
        self.alternatives = next;
        self.note_issued(write);
    }

    /// A write whose outcome is unknown: the key may be as before or as after it.
    pub(crate) fn unknown(&mut self, write: TtlWrite, family: TtlFamily) {
        let after: Vec<Alternative> = self
            .alternatives
            .iter()
            .map(|a| applied(a, write, family))
            .collect();
        for a in after {
            if !self.alternatives.contains(&a) {
                self.alternatives.push(a);
            }
        }
        if self.alternatives.len() > MAX_ALTERNATIVES {
            let excess = self.alternatives.len() - MAX_ALTERNATIVES;
            self.alternatives.drain(..excess);
        }
        self.note_issued(write);
    }

    fn note_issued(&mut self, write: TtlWrite) {
        if let TtlWrite::Put(cell) = write {
            self.issued = self.issued.max(cell.version);
        }
    }

    /// Judges a read at `now` that returned `observed` (newest first) and could return at most
    /// `limit` versions; keeps only the alternatives it matches.
    pub(crate) fn judge(
        &mut self,
        family: TtlFamily,
        now: u64,
        observed: &[u32],
        limit: usize,
    ) -> Verdict {
        let shown = |a: &Alternative| -> Vec<u32> {
            visible(a, family, now).into_iter().take(limit).collect()
        };
        let matching: Vec<Alternative> = self
            .alternatives
            .iter()
            .filter(|a| shown(a) == observed)
            .cloned()
            .collect();
        if matching.is_empty() {
            return Verdict::Wrong {
                expected: self.alternatives.iter().map(shown).collect(),
            };
        }
        let expiry_mattered = matching
            .iter()
            .any(|a| a.iter().any(|c| c.expired(family, now)));
        self.alternatives = matching;
        Verdict::Ok { expiry_mattered }
    }
}

/// The model of every TTL family, with its journal.
#[derive(Debug)]
pub(crate) struct TtlState {
    /// Per family, per key.
    families: Vec<Vec<Mutex<TtlKey>>>,
    /// The clock reading the journal last recorded (a kill may have cut the run there).
    pub(crate) clock_ms: Option<u64>,
    journal: Option<Mutex<File>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl TtlState {
    /// `keys` keys per family, all absent.
    pub(crate) fn new(keys: usize) -> Self {
        Self {
            families: TTL_FAMILIES
                .iter()
                .map(|_| (0..keys).map(|_| Mutex::new(TtlKey::default())).collect())
                .collect(),
            clock_ms: None,
            journal: None,
        }
    }

    /// Keys per family.
    pub(crate) fn len(&self) -> usize {
        self.families.first().map_or(0, Vec::len)
    }

    /// Locks `keys` (ascending, so two writers never deadlock) of family `family`.
    pub(crate) fn lock(
        &self,
        family: usize,
        keys: std::ops::Range<usize>,
    ) -> Vec<MutexGuard<'_, TtlKey>> {
        self.families
            .get(family)
            .map(|f| f.get(keys).unwrap_or_default().iter().map(lock).collect())
            .unwrap_or_default()
    }

    /// Records `lines` (each ended by a newline) before what they describe happens.
    pub(crate) fn journal(&self, lines: &str) {
        let Some(journal) = &self.journal else {
            return;
        };
        if let Err(e) = lock(journal).write_all(lines.as_bytes()) {
            tracing::error!(error = %e, "could not record the TTL expected state");
        }
    }

    /// Starts recording every change to `path` (see [`from_journal`](Self::from_journal)).
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub(crate) fn journal_to(&mut self, path: &Path) -> std::io::Result<()> {
        self.journal = Some(Mutex::new(crate::expected::open_journal(path)?));
        Ok(())
    }

    /// Rebuilds the state from a journal: `T ms` the clock, `B f k P version time ttl|-` and
    /// `B f k D` a write begun, `C`/`A`/`U f k` committed, refused, of unknown outcome. A write
    /// begun and never ended (a kill cut it short) is of unknown outcome; a cut line counts for
    /// nothing.
    ///
    /// # Errors
    /// If the file cannot be read.
    pub(crate) fn from_journal(path: &Path, keys: usize) -> std::io::Result<Self> {
        let mut state = Self::new(keys);
        if !path.exists() {
            return Ok(state);
        }
        let text = std::fs::read(path)?;
        let mut in_flight: BTreeMap<(usize, usize), TtlWrite> = BTreeMap::new();
        let mut lines = text.split(|&b| b == b'\n').peekable();
        while let Some(line) = lines.next() {
            if lines.peek().is_none() || line.ends_with(b"~") {
                continue;
            }
            let line = String::from_utf8_lossy(line);
            let parts: Vec<&str> = line.split(' ').collect();
            state.replay_line(&parts, &mut in_flight);
        }
        for ((f, k), write) in in_flight {
            state.with_key(f, k, |key, family| key.unknown(write, family));
        }
        Ok(state)
    }

    fn replay_line(&mut self, parts: &[&str], in_flight: &mut BTreeMap<(usize, usize), TtlWrite>) {
        let number = |i: usize| parts.get(i).and_then(|p| p.parse::<u64>().ok());
        let index = |i: usize| number(i).and_then(|n| usize::try_from(n).ok());
        match (parts.first().copied(), index(1), index(2)) {
            (Some("T"), _, _) => {
                if let Some(ms) = number(1) {
                    self.clock_ms = Some(self.clock_ms.map_or(ms, |c| c.max(ms)));
                }
            }
            (Some("B"), Some(f), Some(k)) => {
                if let Some(write) = parse_write(parts.get(3..).unwrap_or_default()) {
                    in_flight.insert((f, k), write);
                }
            }
            (Some(tag @ ("C" | "A" | "U")), Some(f), Some(k)) => {
                let Some(write) = in_flight.remove(&(f, k)) else {
                    return;
                };
                self.with_key(f, k, |key, family| match tag {
                    "C" => key.commit(write, family),
                    "U" => key.unknown(write, family),
                    _ => key.note_issued(write),
                });
            }
            _ => {}
        }
    }

    fn with_key(&self, f: usize, k: usize, change: impl FnOnce(&mut TtlKey, TtlFamily)) {
        let (Some(family), Some(key)) = (
            TTL_FAMILIES.get(f),
            self.families.get(f).and_then(|keys| keys.get(k)),
        ) else {
            return;
        };
        change(&mut lock(key), *family);
    }
}

/// The journal line beginning `write` to key `k` of family `f`.
pub(crate) fn begin_line(f: usize, k: usize, write: TtlWrite) -> String {
    match write {
        TtlWrite::Delete => format!("B {f} {k} D\n"),
        TtlWrite::Put(c) => {
            let ttl = c.ttl_ms.map_or_else(|| "-".to_string(), |t| t.to_string());
            format!("B {f} {k} P {} {} {ttl}\n", c.version, c.write_time)
        }
    }
}

fn parse_write(parts: &[&str]) -> Option<TtlWrite> {
    match parts {
        ["D"] => Some(TtlWrite::Delete),
        ["P", version, time, ttl] => Some(TtlWrite::Put(Cell {
            version: version.parse().ok()?,
            write_time: time.parse().ok()?,
            ttl_ms: match *ttl {
                "-" => None,
                t => Some(t.parse().ok()?),
            },
        })),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: TtlFamily = TTL_FAMILIES[0];
    const THREE: TtlFamily = TTL_FAMILIES[1];

    fn put(version: u32, write_time: u64, ttl_ms: Option<u64>) -> TtlWrite {
        TtlWrite::Put(Cell {
            version,
            write_time,
            ttl_ms,
        })
    }

    fn ok(key: &mut TtlKey, family: TtlFamily, now: u64, seen: &[u32]) -> bool {
        matches!(key.judge(family, now, seen, 10), Verdict::Ok { .. })
    }

    #[test]
    fn with_one_version_an_expired_newest_put_hides_the_older_one() {
        let mut key = TtlKey::default();
        key.commit(put(1, 0, None), ONE);
        key.commit(put(2, 100, Some(50)), ONE);
        assert!(ok(&mut key, ONE, 149, &[2]));
        assert!(ok(&mut key, ONE, 150, &[]));
        assert!(!ok(&mut key, ONE, 150, &[1]), "expiry never resurrects");
    }

    #[test]
    fn with_three_versions_an_expired_newest_reveals_the_next_candidate_only() {
        let mut key = TtlKey::default();
        for (v, ttl) in [(1, None), (2, None), (3, None), (4, Some(0))] {
            key.commit(put(v, 0, ttl), THREE);
        }
        assert!(
            ok(&mut key, THREE, 0, &[3, 2]),
            "v1 is no candidate any more"
        );
        assert!(!ok(&mut key, THREE, 0, &[3, 2, 1]));
        assert!(ok(&mut key, THREE, THREE.cf_ttl_ms, &[]), "the family TTL");
        key.commit(TtlWrite::Delete, THREE);
        assert!(ok(&mut key, THREE, 0, &[]));
    }

    #[test]
    fn an_unknown_outcome_allows_both_until_a_read_decides() {
        let mut key = TtlKey::default();
        key.commit(put(1, 0, None), ONE);
        key.unknown(put(2, 0, Some(0)), ONE);
        assert!(ok(&mut key, ONE, 0, &[1]), "not applied");
        assert!(!ok(&mut key, ONE, 0, &[]), "decided by the read before");
        let mut other = TtlKey::default();
        other.commit(put(1, 0, None), ONE);
        other.unknown(put(2, 0, Some(0)), ONE);
        assert!(ok(&mut other, ONE, 0, &[]), "applied, and expired at once");
        assert_eq!(other.next_version(), 3);
    }

    #[test]
    fn the_journal_rebuilds_commits_unknowns_and_the_clock() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("ttl.journal");
        let journal =
            "T 500\nB 0 1 P 1 400 -\nC 0 1\nB 0 1 P 2 500 0\nB 1 2 D\nA 1 2\nT 900\nC 0 9";
        std::fs::write(&path, journal)?;
        let state = TtlState::from_journal(&path, 4)?;
        assert_eq!(state.clock_ms, Some(900));
        let mut key = state.lock(0, 1..2);
        let key = key.first_mut().expect("key 1");
        assert_eq!(key.alternatives.len(), 2, "v2 was in flight at the kill");
        assert!(ok(key, ONE, 900, &[1]) || ok(key, ONE, 900, &[]));
        assert_eq!(key.next_version(), 3);
        Ok(())
    }
}
