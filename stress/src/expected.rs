//! The expected state: what every key should hold, now and at past sequence numbers, with
//! writes in flight marked pending.
//!
//! As in `RocksDB`'s `ExpectedState`, each key has a committed state and, while a write to it is in
//! flight, the state that write will leave. A reader that races a writer accepts either; a writer
//! holds the key's stripe lock, so at most one write per key is in flight. A write the engine
//! refused (it says so: `Stopped`, `InvalidArgument`, …) is aborted; a write whose outcome is
//! unknown (an I/O error mid-write) stays pending until a full verification settles it on what
//! the database holds.
//!
//! Each key also keeps its history: the state each committed write left, at the write's
//! sequence number. A snapshot is judged against the history at its own sequence number, not
//! only against itself. History is kept back to the oldest live snapshot (registered with a
//! [`Floor`] before the snapshot is taken) and, in a fault run, back to the last write known
//! durable: after a fault the writes after it may be lost, and the history says what each key
//! may then hold.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A sequence number, as the engine hands them out.
pub type SeqNo = u64;

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acceptable {
    /// The committed state before the read (or the state at a snapshot's sequence number).
    pub before: KeyState,
    /// The committed state after the read.
    pub after: KeyState,
    /// A pending write's target seen before or after the read.
    pub pending: [Option<KeyState>; 2],
    /// Further legal states: after a fault, those of writes not known durable.
    pub also: Vec<KeyState>,
}

impl Acceptable {
    fn exactly(state: KeyState) -> Self {
        Self {
            before: state,
            after: state,
            pending: [None; 2],
            also: Vec::new(),
        }
    }

    /// True if `observed` is one of the legal states.
    pub fn allows(&self, observed: Option<u32>) -> bool {
        self.states().any(|s| match observed {
            Some(version) => s.exists() && s.version() == version,
            None => !s.exists(),
        })
    }

    /// Every legal state.
    pub fn states(&self) -> impl Iterator<Item = KeyState> + '_ {
        [self.before, self.after]
            .into_iter()
            .chain(self.pending.iter().flatten().copied())
            .chain(self.also.iter().copied())
    }

    /// True if no write was in flight: the read must match exactly.
    pub fn is_settled(&self) -> bool {
        self.before == self.after
            && self.pending.iter().all(Option::is_none)
            && self.also.is_empty()
    }
}

/// Every key's expected state, shared by all worker threads.
#[derive(Debug)]
pub struct ExpectedState {
    committed: Vec<AtomicU32>,
    pending: Vec<AtomicU32>,
    /// Per key, `(seqno, state)` of its committed writes, oldest first: the first entry is the
    /// state at every sequence number up to the second's.
    history: Vec<Mutex<Vec<(SeqNo, KeyState)>>>,
    /// History older than this can go (the newest entry at or below it stays).
    floor: AtomicU64,
    floors: Mutex<Floors>,
    stripes: Vec<Mutex<()>>,
    /// Where state changes are recorded for a later process (blackbox crash tests).
    journal: Option<Mutex<File>>,
}

#[derive(Debug, Default)]
struct Floors {
    /// Registered snapshot floors by token.
    snapshots: BTreeMap<u64, SeqNo>,
    next_token: u64,
    /// The last write known durable, while a fault run needs the history after it.
    durable: Option<SeqNo>,
}

impl Floors {
    fn min(&self) -> SeqNo {
        self.snapshots
            .values()
            .copied()
            .chain(self.durable)
            .min()
            .unwrap_or(SeqNo::MAX)
    }
}

/// Keeps the history at and after a sequence number while it lives: register one before taking
/// a snapshot (with a number at or below the snapshot's), drop it after the snapshot's last check.
#[derive(Debug)]
pub struct Floor<'a> {
    state: &'a ExpectedState,
    token: u64,
}

impl Floor<'_> {
    /// Raises the floor to the snapshot's own sequence number once it is known.
    pub fn raise(&self, seqno: SeqNo) {
        self.state.update_floors(|f| {
            if let Some(s) = f.snapshots.get_mut(&self.token) {
                *s = seqno;
            }
        });
    }
}

impl Drop for Floor<'_> {
    fn drop(&mut self) {
        self.state.update_floors(|f| {
            f.snapshots.remove(&self.token);
        });
    }
}

/// Keys per stripe lock.
const STRIPE_SHIFT: usize = 4;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl ExpectedState {
    /// `keys` keys, all absent.
    pub fn new(keys: usize) -> Self {
        Self {
            committed: (0..keys)
                .map(|_| AtomicU32::new(KeyState::ABSENT.raw()))
                .collect(),
            pending: (0..keys).map(|_| AtomicU32::new(NONE)).collect(),
            history: (0..keys)
                .map(|_| Mutex::new(vec![(0, KeyState::ABSENT)]))
                .collect(),
            floor: AtomicU64::new(SeqNo::MAX),
            floors: Mutex::new(Floors::default()),
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
            .map(lock)
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
            also: Vec::new(),
        }
    }

    /// What a read of `key` at sequence number `seqno` (a snapshot's) may see: the state the
    /// newest write at or below it left, or a write still in flight (whose number is not known
    /// yet). `None` if the history no longer reaches back that far — a harness fault.
    pub fn at(&self, key: usize, seqno: SeqNo) -> Option<Acceptable> {
        let history = lock(self.history.get(key)?);
        let state = history
            .iter()
            .take_while(|(s, _)| *s <= seqno)
            .last()
            .map(|&(_, state)| state)?;
        let mut ok = Acceptable::exactly(state);
        ok.pending = [self.pending(key), None];
        Some(ok)
    }

    /// What `key` may hold after a fault that can lose every write after `durable`: the state
    /// at `durable`, or any a later write left, or a write's still in flight.
    pub fn since(&self, key: usize, durable: SeqNo) -> Acceptable {
        let mut ok = self
            .at(key, durable)
            .unwrap_or_else(|| Acceptable::exactly(self.get(key)));
        ok.after = self.get(key);
        if let Some(history) = self.history.get(key) {
            ok.also = lock(history)
                .iter()
                .filter(|(s, _)| *s > durable)
                .map(|&(_, state)| state)
                .collect();
        }
        ok
    }

    /// Registers a floor at `seqno` (at or below the snapshot about to be taken).
    pub fn floor(&self, seqno: SeqNo) -> Floor<'_> {
        let mut token = 0;
        self.update_floors(|f| {
            token = f.next_token;
            f.next_token += 1;
            f.snapshots.insert(token, seqno);
        });
        Floor { state: self, token }
    }

    /// Keeps the history after `durable`, the last write known durable (`None`: no need).
    pub fn set_durable(&self, durable: Option<SeqNo>) {
        self.update_floors(|f| f.durable = durable);
    }

    fn update_floors(&self, change: impl FnOnce(&mut Floors)) {
        let mut floors = lock(&self.floors);
        change(&mut floors);
        self.floor.store(floors.min(), Ordering::Release);
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

    /// The writes to `targets` took effect at sequence number `seqno`.
    pub fn commit(&self, targets: &[(usize, KeyState)], seqno: SeqNo) {
        let floor = self.floor.load(Ordering::Acquire);
        for &(key, state) in targets {
            if let Some(history) = self.history.get(key) {
                let mut history = lock(history);
                history.push((seqno, state));
                // Keep the newest entry at or below the floor, and all after it.
                let keep_from = history.iter().rposition(|(s, _)| *s <= floor).unwrap_or(0);
                history.drain(..keep_from);
            }
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

    /// Settles `key` on `state` after a full verification found it there. Every later read
    /// (and snapshot) is at or above the database's present sequence number, so the key's
    /// history starts afresh.
    pub fn resolve(&self, key: usize, state: KeyState) {
        if let Some(history) = self.history.get(key) {
            *lock(history) = vec![(0, state)];
        }
        if let Some(c) = self.committed.get(key) {
            c.store(state.raw(), Ordering::Release);
        }
        if let Some(p) = self.pending.get(key) {
            p.store(NONE, Ordering::Release);
        }
        self.journal(b'C', &[(key, state)]);
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
        if let Err(e) = lock(journal).write_all(&line) {
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
            for &(key, s) in &targets {
                match tag {
                    "B" => state.set_pending(key, Some(s)),
                    "C" => state.resolve(key, s),
                    "A" => state.set_pending(key, None),
                    _ => {}
                }
            }
        }
        Ok(state)
    }

    fn set_pending(&self, key: usize, target: Option<KeyState>) {
        if let Some(p) = self.pending.get(key) {
            p.store(target.map_or(NONE, KeyState::raw), Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_racing_read_accepts_old_and_new_and_nothing_else() {
        let state = ExpectedState::new(4);
        state.commit(&[(1, KeyState::present(3))], 10);
        let before = state.before(1);
        state.begin(&[(1, KeyState::deleted(3))]);
        let ok = state.after(1, before);
        assert!(ok.allows(Some(3)));
        assert!(ok.allows(None));
        assert!(!ok.allows(Some(2)), "an older version is a resurrection");
        state.commit(&[(1, KeyState::deleted(3))], 11);
        let settled = state.after(1, state.before(1));
        assert!(settled.is_settled());
        assert!(!settled.allows(Some(3)));
    }

    #[test]
    fn a_snapshot_is_judged_at_its_sequence_number_while_its_floor_lives() {
        let state = ExpectedState::new(2);
        state.commit(&[(0, KeyState::present(1))], 5);
        let floor = state.floor(5);
        state.commit(&[(0, KeyState::present(2))], 8);
        state.commit(&[(0, KeyState::deleted(2))], 9);
        let at = |s| state.at(0, s).map(|ok| ok.before);
        assert_eq!(at(4), None, "before any floor: gone with the first commit");
        assert_eq!(at(5), Some(KeyState::present(1)));
        assert_eq!(at(8), Some(KeyState::present(2)));
        assert_eq!(at(100), Some(KeyState::deleted(2)));
        drop(floor);
        state.commit(&[(0, KeyState::present(3))], 12);
        assert_eq!(at(5), None, "history before the floor went with it");
        assert_eq!(at(12), Some(KeyState::present(3)));
    }

    #[test]
    fn after_a_fault_any_write_past_the_durable_one_may_be_lost() {
        let state = ExpectedState::new(1);
        state.set_durable(Some(10));
        state.commit(&[(0, KeyState::present(1))], 10);
        state.commit(&[(0, KeyState::present(2))], 11);
        state.commit(&[(0, KeyState::present(3))], 12);
        let ok = state.since(0, 10);
        assert!(ok.allows(Some(1)) && ok.allows(Some(2)) && ok.allows(Some(3)));
        assert!(!ok.allows(None), "the durable write stays");
    }

    #[test]
    fn the_journal_rebuilds_committed_and_pending_writes() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("expected.log");
        let mut state = ExpectedState::new(8);
        state.journal_to(&path)?;
        state.begin(&[(1, KeyState::present(1)), (2, KeyState::present(1))]);
        state.commit(&[(1, KeyState::present(1)), (2, KeyState::present(1))], 3);
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
