//! The expected state: what every key should hold, with writes in flight marked pending.
//!
//! As in `RocksDB`'s `ExpectedState`, each key has a committed state and, while a write to it is in
//! flight, the state that write will leave. A reader that races a writer accepts either; a writer
//! holds the key's stripe lock, so at most one write per key is in flight. A write whose outcome
//! is unknown (the engine returned an error) stays pending forever: both outcomes remain legal.

use std::fs::File;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A key's state packed in 32 bits: bit 31 "exists", bits 0..31 the value version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KeyState(u32);

const EXISTS: u32 = 1 << 31;
/// No write in flight.
const NONE: u32 = u32::MAX;

impl KeyState {
    /// The state of a key never written.
    pub const ABSENT: Self = Self(0);

    /// The key holds the value of `version`.
    pub fn present(version: u32) -> Self {
        Self(EXISTS | (version & !EXISTS))
    }

    /// The key is deleted; `version` is kept so the next put gets a fresh one.
    pub fn deleted(version: u32) -> Self {
        Self(version & !EXISTS)
    }

    /// True if the key holds a value.
    pub fn exists(self) -> bool {
        self.0 & EXISTS != 0
    }

    /// The value version.
    pub fn version(self) -> u32 {
        self.0 & !EXISTS
    }

    fn raw(self) -> u32 {
        self.0
    }
}

/// The states a read may legally observe for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acceptable {
    /// The committed state before the read.
    pub before: KeyState,
    /// The committed state after the read.
    pub after: KeyState,
    /// A pending write's target seen before or after the read.
    pub pending: [Option<KeyState>; 2],
}

impl Acceptable {
    /// True if `observed` is one of the legal states.
    pub fn allows(&self, observed: Option<u32>) -> bool {
        let matches = |s: KeyState| match observed {
            Some(version) => s.exists() && s.version() == version,
            None => !s.exists(),
        };
        matches(self.before)
            || matches(self.after)
            || self.pending.iter().flatten().any(|&s| matches(s))
    }

    /// True if no write was in flight: the read must match exactly.
    pub fn is_settled(&self) -> bool {
        self.before == self.after && self.pending.iter().all(Option::is_none)
    }
}

/// Every key's expected state, shared by all worker threads.
#[derive(Debug)]
pub struct ExpectedState {
    committed: Vec<AtomicU32>,
    pending: Vec<AtomicU32>,
    stripes: Vec<Mutex<()>>,
    /// Where state changes are recorded for a later process (blackbox crash tests).
    journal: Option<Mutex<File>>,
}

/// Keys per stripe lock.
const STRIPE_SHIFT: usize = 4;

impl ExpectedState {
    /// `keys` keys, all absent.
    pub fn new(keys: usize) -> Self {
        Self {
            committed: (0..keys)
                .map(|_| AtomicU32::new(KeyState::ABSENT.raw()))
                .collect(),
            pending: (0..keys).map(|_| AtomicU32::new(NONE)).collect(),
            stripes: (0..=(keys >> STRIPE_SHIFT))
                .map(|_| Mutex::new(()))
                .collect(),
            journal: None,
        }
    }

    /// The number of keys.
    pub fn len(&self) -> usize {
        self.committed.len()
    }

    /// True if there are no keys.
    pub fn is_empty(&self) -> bool {
        self.committed.is_empty()
    }

    /// Locks the stripes of `keys` (in stripe order, so two writers never deadlock).
    pub fn lock(&self, keys: &[usize]) -> Vec<MutexGuard<'_, ()>> {
        let mut stripes: Vec<usize> = keys.iter().map(|k| k >> STRIPE_SHIFT).collect();
        stripes.sort_unstable();
        stripes.dedup();
        stripes
            .into_iter()
            .filter_map(|s| self.stripes.get(s))
            .map(|m| m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
            .collect()
    }

    /// The committed state of `key`.
    pub fn get(&self, key: usize) -> KeyState {
        KeyState(
            self.committed
                .get(key)
                .map_or(0, |a| a.load(Ordering::Acquire)),
        )
    }

    /// The target of a write in flight to `key`, if any.
    pub fn pending(&self, key: usize) -> Option<KeyState> {
        self.pending
            .get(key)
            .map(|a| a.load(Ordering::Acquire))
            .filter(|&p| p != NONE)
            .map(KeyState)
    }

    /// Snapshot of what a read of `key` may see, taken before the read; finish it with
    /// [`after`](Self::after).
    pub fn before(&self, key: usize) -> (KeyState, Option<KeyState>) {
        (self.get(key), self.pending(key))
    }

    /// Completes the acceptable set after the read.
    pub fn after(&self, key: usize, before: (KeyState, Option<KeyState>)) -> Acceptable {
        Acceptable {
            before: before.0,
            after: self.get(key),
            pending: [before.1, self.pending(key)],
        }
    }

    /// Marks writes to `targets` as in flight (the caller holds their stripes).
    pub fn begin(&self, targets: &[(usize, KeyState)]) {
        for &(key, state) in targets {
            if let Some(p) = self.pending.get(key) {
                p.store(state.raw(), Ordering::Release);
            }
        }
        self.journal(b'B', targets);
    }

    /// The writes to `targets` took effect.
    pub fn commit(&self, targets: &[(usize, KeyState)]) {
        for &(key, state) in targets {
            if let Some(c) = self.committed.get(key) {
                c.store(state.raw(), Ordering::Release);
            }
            if let Some(p) = self.pending.get(key) {
                p.store(NONE, Ordering::Release);
            }
        }
        self.journal(b'C', targets);
    }

    /// The writes to `targets` certainly did not take effect.
    pub fn abort(&self, targets: &[(usize, KeyState)]) {
        for &(key, _) in targets {
            if let Some(p) = self.pending.get(key) {
                p.store(NONE, Ordering::Release);
            }
        }
        self.journal(b'A', targets);
    }

    /// Settles `key` on `state` after a check resolved an uncertain write.
    pub fn resolve(&self, key: usize, state: KeyState) {
        self.commit(&[(key, state)]);
    }

    /// Takes over another state's committed and pending writes (same key space).
    pub fn copy_from(&self, other: &Self) {
        for (mine, theirs) in self.committed.iter().zip(&other.committed) {
            mine.store(theirs.load(Ordering::Acquire), Ordering::Release);
        }
        for (mine, theirs) in self.pending.iter().zip(&other.pending) {
            mine.store(theirs.load(Ordering::Acquire), Ordering::Release);
        }
    }

    /// Keys with a write whose outcome is unknown.
    pub fn uncertain_keys(&self) -> Vec<usize> {
        (0..self.len())
            .filter(|&k| self.pending(k).is_some())
            .collect()
    }

    /// Starts recording every change to `path`, one line per change, each handed to the OS
    /// before the write it describes, so a killed process leaves a usable record.
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub fn journal_to(&mut self, path: &Path) -> std::io::Result<()> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        self.journal = Some(Mutex::new(file));
        Ok(())
    }

    fn journal(&self, tag: u8, targets: &[(usize, KeyState)]) {
        let Some(journal) = &self.journal else {
            return;
        };
        let mut line = Vec::with_capacity(16 + 20 * targets.len());
        line.push(tag);
        for (key, state) in targets {
            line.extend_from_slice(format!(" {key}={}", state.raw()).as_bytes());
        }
        line.push(b'\n');
        let mut file = journal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = file.write_all(&line) {
            tracing::error!(error = %e, "could not record the expected state");
        }
    }

    /// Rebuilds the expected state from a journal: committed changes apply; begun writes with no
    /// commit or abort stay pending (a crash cut them short).
    ///
    /// # Errors
    /// If the file cannot be read or a line is malformed.
    pub fn from_journal(path: &Path, keys: usize) -> std::io::Result<Self> {
        let state = Self::new(keys);
        if !path.exists() {
            return Ok(state);
        }
        let file = File::open(path)?;
        for line in std::io::BufReader::new(file).lines() {
            let line = line?;
            let mut parts = line.split(' ');
            let tag = parts.next().unwrap_or_default();
            let mut targets = Vec::new();
            for part in parts {
                let parsed = part.split_once('=').and_then(|(k, v)| {
                    Some((k.parse::<usize>().ok()?, KeyState(v.parse::<u32>().ok()?)))
                });
                match parsed {
                    Some(t) if t.0 < keys => targets.push(t),
                    // A line cut short by a kill: the write it began is pending either way.
                    _ => {}
                }
            }
            match tag {
                "B" => {
                    for &(key, s) in &targets {
                        if let Some(p) = state.pending.get(key) {
                            p.store(s.raw(), Ordering::Release);
                        }
                    }
                }
                "C" => {
                    for &(key, s) in &targets {
                        if let Some(c) = state.committed.get(key) {
                            c.store(s.raw(), Ordering::Release);
                        }
                        if let Some(p) = state.pending.get(key) {
                            p.store(NONE, Ordering::Release);
                        }
                    }
                }
                "A" => {
                    for &(key, _) in &targets {
                        if let Some(p) = state.pending.get(key) {
                            p.store(NONE, Ordering::Release);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_racing_read_accepts_old_and_new_and_nothing_else() {
        let state = ExpectedState::new(4);
        state.commit(&[(1, KeyState::present(3))]);
        let before = state.before(1);
        state.begin(&[(1, KeyState::deleted(3))]);
        let ok = state.after(1, before);
        assert!(ok.allows(Some(3)));
        assert!(ok.allows(None));
        assert!(!ok.allows(Some(2)), "an older version is a resurrection");
        state.commit(&[(1, KeyState::deleted(3))]);
        let settled = state.after(1, state.before(1));
        assert!(settled.is_settled());
        assert!(!settled.allows(Some(3)));
    }

    #[test]
    fn the_journal_rebuilds_committed_and_pending_writes() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("expected.log");
        let mut state = ExpectedState::new(8);
        state.journal_to(&path)?;
        state.begin(&[(1, KeyState::present(1)), (2, KeyState::present(1))]);
        state.commit(&[(1, KeyState::present(1)), (2, KeyState::present(1))]);
        state.begin(&[(3, KeyState::present(1))]);
        state.begin(&[(4, KeyState::present(1))]);
        state.abort(&[(4, KeyState::present(1))]);
        drop(state);
        let rebuilt = ExpectedState::from_journal(&path, 8)?;
        assert_eq!(rebuilt.get(1), KeyState::present(1));
        assert_eq!(rebuilt.pending(3), Some(KeyState::present(1)));
        assert_eq!(rebuilt.pending(4), None);
        assert_eq!(rebuilt.get(4), KeyState::ABSENT);
        Ok(())
    }
}
