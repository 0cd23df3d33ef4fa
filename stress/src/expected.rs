//! The expected state: what every key should hold, now and at past sequence numbers, with
//! writes in flight marked pending.
//!
//! As in `RocksDB`'s `ExpectedState`, each key has a committed state and, while a write to it is in
//! flight, the state that write will leave. A reader that races a writer accepts either; a writer
//! holds the key's stripe lock, so at most one write per key is in flight. A write the engine
//! refused (it says so: `Stopped`, `InvalidArgument`, …) is aborted; a write whose outcome is
//! unknown (an I/O error mid-write) becomes *uncertain*, apart from the in-flight slot, until a
//! later write to the key commits or a full verification settles it on what the database holds.
//! Versions are never reused, not even a refused write's: a value a refused write would have
//! left can never pass for a later write's.
//!
//! Each key also keeps its history: the state each committed write left, at the write's
//! sequence number. A snapshot is judged against the history at its own sequence number, not
//! only against itself, and a write in flight counts for it only if it began before the
//! snapshot was taken. History is kept back to the oldest live snapshot (registered with a
//! [`Floor`] before the snapshot is taken), in a fault run back to the last write known durable
//! (after a fault the writes after it may be lost, and the history says what each key may then
//! hold), and always for the last few writes (a read racing them may see any).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A sequence number, as the engine hands them out.
pub(crate) type SeqNo = u64;

/// A key's state packed in 32 bits: bit 31 "exists", bits 0..31 the value version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct KeyState(u32);

const EXISTS: u32 = 1 << 31;
/// No write in the slot.
const NONE: u32 = u32::MAX;

impl KeyState {
    /// The state of a key never written.
    pub(crate) const ABSENT: Self = Self(0);

    /// The key holds the value of `version`.
    pub(crate) fn present(version: u32) -> Self {
        Self(EXISTS | (version & !EXISTS))
    }

    /// The key is deleted; `version` is kept so the next put gets a fresh one.
    pub(crate) fn deleted(version: u32) -> Self {
        Self(version & !EXISTS)
    }

    /// True if the key holds a value.
    pub(crate) fn exists(self) -> bool {
        self.0 & EXISTS != 0
    }

    /// The value version.
    pub(crate) fn version(self) -> u32 {
        self.0 & !EXISTS
    }

    fn raw(self) -> u32 {
        self.0
    }
}

/// The states a read may legally observe for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Acceptable {
    /// The committed state before the read (or the state at a snapshot's sequence number).
    pub before: KeyState,
    /// The committed state after the read.
    pub after: KeyState,
    /// A pending write's target seen before or after the read.
    pub pending: [Option<KeyState>; 2],
    /// Further legal states: a write of unknown outcome, writes committed while the read ran,
    /// and after a fault those not known durable.
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
    pub(crate) fn allows(&self, observed: Option<u32>) -> bool {
        self.states().any(|s| match observed {
            Some(version) => s.exists() && s.version() == version,
            None => !s.exists(),
        })
    }

    /// Every legal state.
    pub(crate) fn states(&self) -> impl Iterator<Item = KeyState> + '_ {
        [self.before, self.after]
            .into_iter()
            .chain(self.pending.iter().flatten().copied())
            .chain(self.also.iter().copied())
    }
}

/// A committed write: its sequence number, the state it left, and its place among the key's
/// commits (which a racing read uses to accept every state committed while it ran).
#[derive(Debug, Clone, Copy)]
struct Commit {
    seqno: SeqNo,
    state: KeyState,
    number: u64,
}

/// The newest commits a key's history keeps whatever the floor, so that a read racing several
/// writes to its key can accept each state they left.
const KEEP_RECENT: usize = 16;

/// What a read of a key may see, noted before the read; finish with [`ExpectedState::after`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Before {
    state: KeyState,
    pending: Option<KeyState>,
    /// The number of the key's newest commit.
    commits: u64,
}

/// Every key's expected state, shared by all worker threads.
#[derive(Debug)]
pub(crate) struct ExpectedState {
    committed: Vec<AtomicU32>,
    /// The target of the write in flight, per key.
    pending: Vec<AtomicU32>,
    /// When each pending write began, in tickets: a snapshot taken before it cannot see it.
    pending_ticket: Vec<AtomicU64>,
    tickets: AtomicU64,
    /// The target of a write whose outcome is unknown, per key.
    uncertain: Vec<AtomicU32>,
    /// The highest version handed out per key, so that none is reused.
    issued: Vec<AtomicU32>,
    /// Per key, its committed writes, oldest first: the first entry is the state at every
    /// sequence number up to the second's.
    history: Vec<Mutex<Vec<Commit>>>,
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
pub(crate) struct Floor<'a> {
    state: &'a ExpectedState,
    token: u64,
}

impl Floor<'_> {
    /// Raises the floor to the snapshot's own sequence number once it is known.
    pub(crate) fn raise(&self, seqno: SeqNo) {
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

/// The state in `slots[key]`, if one is set.
fn slot(slots: &[AtomicU32], key: usize) -> Option<KeyState> {
    slots
        .get(key)
        .map(|a| a.load(Ordering::Acquire))
        .filter(|&p| p != NONE)
        .map(KeyState)
}

fn set_slot(slots: &[AtomicU32], key: usize, state: Option<KeyState>) {
    if let Some(a) = slots.get(key) {
        a.store(state.map_or(NONE, KeyState::raw), Ordering::Release);
    }
}

impl ExpectedState {
    /// `keys` keys, all absent.
    pub(crate) fn new(keys: usize) -> Self {
        let slots = || (0..keys).map(|_| AtomicU32::new(NONE)).collect();
        Self {
            committed: (0..keys)
                .map(|_| AtomicU32::new(KeyState::ABSENT.raw()))
                .collect(),
            pending: slots(),
            pending_ticket: (0..keys).map(|_| AtomicU64::new(0)).collect(),
            tickets: AtomicU64::new(1),
            uncertain: slots(),
            issued: (0..keys).map(|_| AtomicU32::new(0)).collect(),
            history: (0..keys)
                .map(|_| {
                    Mutex::new(vec![Commit {
                        seqno: 0,
                        state: KeyState::ABSENT,
                        number: 0,
                    }])
                })
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
    pub(crate) fn len(&self) -> usize {
        self.committed.len()
    }

    /// Locks the stripes of `keys` (in stripe order, so two writers never deadlock).
    pub(crate) fn lock(&self, keys: &[usize]) -> Vec<MutexGuard<'_, ()>> {
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
    pub(crate) fn get(&self, key: usize) -> KeyState {
        KeyState(
            self.committed
                .get(key)
                .map_or(0, |a| a.load(Ordering::Acquire)),
        )
    }

    /// The target of a write in flight to `key`, if any.
    pub(crate) fn pending(&self, key: usize) -> Option<KeyState> {
        slot(&self.pending, key)
    }

    /// The target of a write to `key` whose outcome is unknown, if any.
    pub(crate) fn uncertain(&self, key: usize) -> Option<KeyState> {
        slot(&self.uncertain, key)
    }

    /// A version no write to `key` has used, for its next put.
    pub(crate) fn next_version(&self, key: usize) -> u32 {
        let Some(issued) = self.issued.get(key) else {
            return 0;
        };
        let floor = self.get(key).version();
        let mut current = issued.load(Ordering::Acquire);
        loop {
            let next = current.max(floor) + 1;
            match issued.compare_exchange(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next,
                Err(seen) => current = seen,
            }
        }
    }

    /// A ticket for now: a write that begins later holds a larger one.
    pub(crate) fn ticket(&self) -> u64 {
        self.tickets.load(Ordering::Acquire)
    }

    /// Notes what a read of `key` may see, before the read; finish with [`after`](Self::after).
    pub(crate) fn before(&self, key: usize) -> Before {
        let commits = self
            .history
            .get(key)
            .and_then(|h| lock(h).last().map(|c| c.number))
            .unwrap_or(0);
        Before {
            state: self.get(key),
            pending: self.pending(key),
            commits,
        }
    }

    /// What the read of `key` that began at `before` may have seen: the state then, now, or any
    /// a write left meanwhile; a write in flight then or now; a write of unknown outcome.
    pub(crate) fn after(&self, key: usize, before: Before) -> Acceptable {
        let mut ok = Acceptable {
            before: before.state,
            after: self.get(key),
            pending: [before.pending, self.pending(key)],
            also: self.uncertain(key).into_iter().collect(),
        };
        if let Some(history) = self.history.get(key) {
            ok.also.extend(
                lock(history)
                    .iter()
                    .filter(|c| c.number > before.commits)
                    .map(|c| c.state),
            );
        }
        ok
    }

    /// What a read of `key` at sequence number `seqno` (a snapshot's, taken before `ticket`)
    /// may see: the state the newest write at or below it left; a write in flight that began
    /// before the snapshot (its number is not known yet); a write of unknown outcome. `None` if
    /// the history no longer reaches back that far — a harness fault.
    pub(crate) fn at(&self, key: usize, seqno: SeqNo, ticket: u64) -> Option<Acceptable> {
        let history = lock(self.history.get(key)?);
        let state = history
            .iter()
            .take_while(|c| c.seqno <= seqno)
            .last()
            .map(|c| c.state)?;
        let mut ok = Acceptable::exactly(state);
        // The state first, then its ticket: `begin` stores them the other way round.
        let pending = self.pending(key);
        let began = self
            .pending_ticket
            .get(key)
            .map_or(u64::MAX, |t| t.load(Ordering::Acquire));
        ok.pending = [pending.filter(|_| began < ticket), None];
        ok.also.extend(self.uncertain(key));
        Some(ok)
    }

    /// The sequence numbers at which `key` held a state `observed` matches, as closed
    /// intervals in order; every number if it matches a write of unknown outcome (whose number
    /// is not known). A database that lost the writes after some number `p` holds, for every
    /// key, a state whose intervals contain `p`.
    pub(crate) fn held_at(&self, key: usize, observed: Option<u32>) -> Vec<(SeqNo, SeqNo)> {
        let matches = |s: KeyState| Acceptable::exactly(s).allows(observed);
        if self
            .uncertain(key)
            .into_iter()
            .chain(self.pending(key))
            .any(matches)
        {
            return vec![(0, SeqNo::MAX)];
        }
        let Some(history) = self.history.get(key) else {
            return Vec::new();
        };
        let history = lock(history);
        let mut held = Vec::new();
        for (i, c) in history.iter().enumerate() {
            // The first entry stands for every number up to the second's.
            let from = if i == 0 { 0 } else { c.seqno };
            let to = history.get(i + 1).map_or(SeqNo::MAX, |n| n.seqno - 1);
            if matches(c.state) && from <= to {
                held.push((from, to));
            }
        }
        held
    }

    /// Forgets the writes to `key` after sequence number `to`: a fault lost them, and the
    /// database hands their numbers out again.
    pub(crate) fn rewind(&self, key: usize, to: SeqNo) {
        let Some(history) = self.history.get(key) else {
            return;
        };
        let mut history = lock(history);
        let keep = history.iter().skip(1).take_while(|c| c.seqno <= to).count() + 1;
        history.truncate(keep);
        if let (Some(last), Some(c)) = (history.last(), self.committed.get(key)) {
            c.store(last.state.raw(), Ordering::Release);
            drop(history);
            self.journal(b'C', &[(key, KeyState(c.load(Ordering::Acquire)))]);
        }
    }

    /// True if a commit to `key` has a sequence number strictly between `after` and `before`:
    /// what a transaction that read `key` at `after` and committed at `before` must have
    /// conflicted with. The caller holds the key's stripe, so no write to it is in flight.
    pub(crate) fn written_between(&self, key: usize, after: SeqNo, before: SeqNo) -> bool {
        self.history
            .get(key)
            .is_some_and(|h| lock(h).iter().any(|c| after < c.seqno && c.seqno < before))
    }

    /// Registers a floor at `seqno` (at or below the snapshot about to be taken).
    pub(crate) fn floor(&self, seqno: SeqNo) -> Floor<'_> {
        let mut token = 0;
        self.update_floors(|f| {
            token = f.next_token;
            f.next_token += 1;
            f.snapshots.insert(token, seqno);
        });
        Floor { state: self, token }
    }

    /// Keeps the history after `durable`, the last write known durable (`None`: no need).
    pub(crate) fn set_durable(&self, durable: Option<SeqNo>) {
        self.update_floors(|f| f.durable = durable);
    }

    fn update_floors(&self, change: impl FnOnce(&mut Floors)) {
        let mut floors = lock(&self.floors);
        change(&mut floors);
        self.floor.store(floors.min(), Ordering::Release);
    }

    /// Marks writes to `targets` as in flight (the caller holds their stripes).
    pub(crate) fn begin(&self, targets: &[(usize, KeyState)]) {
        let ticket = self.tickets.fetch_add(1, Ordering::AcqRel);
        for &(key, state) in targets {
            if let Some(t) = self.pending_ticket.get(key) {
                t.store(ticket, Ordering::Release);
            }
            set_slot(&self.pending, key, Some(state));
        }
        self.journal(b'B', targets);
    }

    /// The writes to `targets` took effect at sequence number `seqno`.
    pub(crate) fn commit(&self, targets: &[(usize, KeyState)], seqno: SeqNo) {
        let floor = self.floor.load(Ordering::Acquire);
        for &(key, state) in targets {
            if let Some(history) = self.history.get(key) {
                let mut history = lock(history);
                let number = history.last().map_or(0, |c| c.number) + 1;
                history.push(Commit {
                    seqno,
                    state,
                    number,
                });
                // Keep the newest entry at or below the floor and all after it, and the few
                // newest whatever the floor.
                let keep_from = history
                    .iter()
                    .rposition(|c| c.seqno <= floor)
                    .unwrap_or(0)
                    .min(history.len().saturating_sub(KEEP_RECENT));
                history.drain(..keep_from);
            }
            if let Some(c) = self.committed.get(key) {
                c.store(state.raw(), Ordering::Release);
            }
            // A write of unknown outcome before this one no longer decides the key.
            set_slot(&self.pending, key, None);
            set_slot(&self.uncertain, key, None);
        }
        self.journal(b'C', targets);
    }

    /// The writes to `targets` certainly did not take effect.
    pub(crate) fn abort(&self, targets: &[(usize, KeyState)]) {
        for &(key, _) in targets {
            set_slot(&self.pending, key, None);
        }
        self.journal(b'A', targets);
    }

    /// Whether the writes to `targets` took effect is unknown (an I/O error): each target stays
    /// legal until a later write to its key commits or a verification decides the key.
    pub(crate) fn unknown(&self, targets: &[(usize, KeyState)]) {
        for &(key, state) in targets {
            set_slot(&self.uncertain, key, Some(state));
            set_slot(&self.pending, key, None);
        }
        self.journal(b'U', targets);
    }

    /// Settles `key` on `state`, which a verification found there, as a commit at `seqno`,
    /// keeping its history for the snapshots still held (after a recovery, where a reopen
    /// would [`resolve`](Self::resolve)). A `seqno` below the last commit's (a compaction
    /// zeroed it: every snapshot sees the write) is taken just above it.
    pub(crate) fn settle_at(&self, key: usize, state: KeyState, seqno: SeqNo) {
        let last = self
            .history
            .get(key)
            .and_then(|h| lock(h).last().map(|c| c.seqno))
            .unwrap_or(0);
        let seqno = if seqno > last { seqno } else { last + 1 };
        self.commit(&[(key, state)], seqno);
    }

    /// Settles `key` on `state` after a full verification found it there. Every later read
    /// (and snapshot) is at or above the database's present sequence number, so the key's
    /// history starts afresh.
    pub(crate) fn resolve(&self, key: usize, state: KeyState) {
        if let Some(history) = self.history.get(key) {
            let mut history = lock(history);
            let number = history.last().map_or(0, |c| c.number) + 1;
            *history = vec![Commit {
                seqno: 0,
                state,
                number,
            }];
        }
        if let Some(c) = self.committed.get(key) {
            c.store(state.raw(), Ordering::Release);
        }
        set_slot(&self.pending, key, None);
        set_slot(&self.uncertain, key, None);
        self.journal(b'C', &[(key, state)]);
    }

    /// Starts recording every change to `path`, one line per change, each handed to the OS
    /// before the write it describes, so a killed process leaves a usable record.
    ///
    /// # Errors
    /// If the file cannot be opened.
    pub(crate) fn journal_to(&mut self, path: &Path) -> std::io::Result<()> {
        self.journal = Some(Mutex::new(open_journal(path)?));
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

    /// Rebuilds the expected state from a journal: committed changes apply; a write begun with
    /// no commit or abort (a crash cut it short), or of unknown outcome, stays legal (the first
    /// as in flight, the second as uncertain). A line a kill cut short counts for nothing: its
    /// last number may be cut, and the write it ends was journaled when it began.
    ///
    /// # Errors
    /// If the file cannot be read.
    pub(crate) fn from_journal(path: &Path, keys: usize) -> std::io::Result<Self> {
        let state = Self::new(keys);
        if !path.exists() {
            return Ok(state);
        }
        let text = std::fs::read(path)?;
        let mut in_flight: BTreeMap<usize, KeyState> = BTreeMap::new();
        let mut lines = text.split(|&b| b == b'\n').peekable();
        while let Some(line) = lines.next() {
            // The last piece has no newline: a cut line (or nothing).
            let cut = lines.peek().is_none() || line.ends_with(b"~");
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split(' ');
            let tag = parts.next().unwrap_or_default();
            let targets: Option<Vec<(usize, KeyState)>> = parts
                .map(|part| {
                    let (k, v) = part.split_once('=')?;
                    Some((k.parse::<usize>().ok()?, KeyState(v.parse::<u32>().ok()?)))
                })
                .collect();
            let targets = match targets {
                Some(t) if !cut => t,
                _ => continue,
            };
            for (key, s) in targets.into_iter().filter(|&(k, _)| k < keys) {
                match tag {
                    "B" => {
                        in_flight.insert(key, s);
                    }
                    "U" => {
                        in_flight.remove(&key);
                        set_slot(&state.uncertain, key, Some(s));
                    }
                    "C" => {
                        in_flight.remove(&key);
                        state.resolve(key, s);
                    }
                    "A" if in_flight.get(&key) == Some(&s) => {
                        in_flight.remove(&key);
                    }
                    _ => {}
                }
                // Versions stay unique across the processes that share the journal.
                if let Some(issued) = state.issued.get(key) {
                    issued.fetch_max(s.version(), Ordering::AcqRel);
                }
            }
        }
        for (key, s) in in_flight {
            set_slot(&state.pending, key, Some(s));
        }
        Ok(state)
    }
}

/// The common part of two sorted lists of closed intervals.
pub(crate) fn intersect<T: Ord + Copy>(a: &[(T, T)], b: &[(T, T)]) -> Vec<(T, T)> {
    let mut out = Vec::new();
    for &(a0, a1) in a {
        for &(b0, b1) in b {
            let (lo, hi) = (a0.max(b0), a1.min(b1));
            if lo <= hi {
                out.push((lo, hi));
            }
        }
    }
    out
}

/// What ends a line a killed process left cut short, once another process opens the journal
/// (the `~` marks it cut).
const CUT_LINE_END: &[u8] = b"~\n";

/// Opens a journal for appending. A process killed mid-line left it unended: the line is
/// ended with the mark of a cut line, so that this process's first line is not read as its
/// tail.
pub(crate) fn open_journal(path: &Path) -> std::io::Result<File> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    if ends_mid_line(&mut file)? {
        file.write_all(CUT_LINE_END)?;
    }
    Ok(file)
}

/// True if `file` is not empty and does not end with a newline.
fn ends_mid_line(file: &mut File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8; 1];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
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
        assert!(settled.allows(None), "the settled state: deleted");
        assert!(!settled.allows(Some(3)));
    }

    #[test]
    fn a_read_racing_two_writes_accepts_the_state_between_them() {
        let state = ExpectedState::new(1);
        let before = state.before(0);
        state.commit(&[(0, KeyState::present(1))], 3);
        state.commit(&[(0, KeyState::present(2))], 4);
        let ok = state.after(0, before);
        assert!(ok.allows(Some(1)) && ok.allows(Some(2)) && ok.allows(None));
    }

    #[test]
    fn a_snapshot_is_judged_at_its_sequence_number_while_its_floor_lives() {
        let state = ExpectedState::new(2);
        state.commit(&[(0, KeyState::present(1))], 5);
        let floor = state.floor(5);
        state.commit(&[(0, KeyState::present(2))], 8);
        state.commit(&[(0, KeyState::deleted(2))], 9);
        let at = |s| state.at(0, s, u64::MAX).map(|ok| ok.before);
        assert_eq!(at(5), Some(KeyState::present(1)));
        assert_eq!(at(8), Some(KeyState::present(2)));
        assert_eq!(at(100), Some(KeyState::deleted(2)));
        drop(floor);
        let recent = u32::try_from(KEEP_RECENT).expect("a few");
        for v in 3..3 + recent {
            state.commit(&[(0, KeyState::present(v))], u64::from(v) + 9);
        }
        assert_eq!(at(5), None, "history before the floor went with it");
        assert_eq!(at(12), Some(KeyState::present(3)), "the newest few stay");
        assert_eq!(
            at(u64::from(recent) + 11),
            Some(KeyState::present(recent + 2))
        );
    }

    #[test]
    fn a_snapshot_sees_no_write_that_began_after_it() {
        let state = ExpectedState::new(1);
        let early = state.ticket();
        state.begin(&[(0, KeyState::present(1))]);
        let late = state.ticket();
        assert!(state.at(0, 5, late).is_some_and(|ok| ok.allows(Some(1))));
        assert!(state.at(0, 5, early).is_some_and(|ok| !ok.allows(Some(1))));
    }

    #[test]
    fn a_write_of_unknown_outcome_stays_legal_until_a_later_one_commits() {
        let state = ExpectedState::new(1);
        state.commit(&[(0, KeyState::present(1))], 3);
        let v = state.next_version(0);
        state.begin(&[(0, KeyState::present(v))]);
        state.unknown(&[(0, KeyState::present(v))]);
        // Another write to the key is refused: the unknown one still counts.
        let w = state.next_version(0);
        assert!(w > v, "versions are never reused");
        state.begin(&[(0, KeyState::present(w))]);
        state.abort(&[(0, KeyState::present(w))]);
        let ok = state.after(0, state.before(0));
        assert!(ok.allows(Some(1)) && ok.allows(Some(v)) && !ok.allows(Some(w)));
        state.commit(&[(0, KeyState::present(state.next_version(0)))], 9);
        assert!(!state.after(0, state.before(0)).allows(Some(v)));
    }

    #[test]
    fn a_key_holds_each_state_over_the_numbers_until_the_next_write() {
        let state = ExpectedState::new(1);
        state.set_durable(Some(10));
        state.commit(&[(0, KeyState::present(1))], 10);
        state.commit(&[(0, KeyState::present(2))], 11);
        state.commit(&[(0, KeyState::deleted(2))], 15);
        assert_eq!(state.held_at(0, None), vec![(0, 9), (15, SeqNo::MAX)]);
        assert_eq!(state.held_at(0, Some(1)), vec![(10, 10)]);
        assert_eq!(state.held_at(0, Some(2)), vec![(11, 14)]);
        assert_eq!(state.held_at(0, Some(7)), vec![], "no write left version 7");
        let v = state.next_version(0);
        state.begin(&[(0, KeyState::present(v))]);
        state.unknown(&[(0, KeyState::present(v))]);
        assert_eq!(state.held_at(0, Some(v)), vec![(0, SeqNo::MAX)]);
    }

    #[test]
    fn a_rewind_forgets_lost_writes_so_their_numbers_can_come_again() {
        let state = ExpectedState::new(1);
        state.set_durable(Some(5));
        state.commit(&[(0, KeyState::present(1))], 5);
        state.commit(&[(0, KeyState::deleted(1))], 9);
        state.commit(&[(0, KeyState::deleted(1))], 12);
        state.rewind(0, 8);
        assert_eq!(state.get(0), KeyState::present(1));
        // The engine hands out 9 and up again.
        state.commit(&[(0, KeyState::present(2))], 10);
        let at = |s| state.at(0, s, u64::MAX).map(|ok| ok.before);
        assert_eq!(at(11), Some(KeyState::present(2)));
        assert!(!state.written_between(0, 10, 13));
    }

    #[test]
    fn the_journal_rebuilds_committed_and_uncertain_writes() -> std::io::Result<()> {
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
        assert_eq!(rebuilt.uncertain(4), None);
        assert_eq!(rebuilt.get(4), KeyState::ABSENT);
        assert!(
            rebuilt.next_version(4) > 1,
            "the aborted version is not reused"
        );
        Ok(())
    }

    #[test]
    fn a_replayed_journal_keeps_every_legal_state_and_ignores_cut_lines() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("expected.log");
        let v = |n| KeyState::present(n).raw();
        // Key 5: v1 of unknown outcome, then v2 begun and refused: v1 stays legal. Key 6:
        // committed v1, then a kill cut the line committing v2 (and the next process ended it).
        let journal = format!(
            "U 5={}\nB 5={}\nA 5={}\nC 6={}\nB 6={}\nC 6=21~\nB 7={}\nC 7=1",
            v(1),
            v(2),
            v(2),
            v(1),
            v(2),
            v(1)
        );
        std::fs::write(&path, journal)?;
        let rebuilt = ExpectedState::from_journal(&path, 8)?;
        assert_eq!(rebuilt.uncertain(5), Some(KeyState::present(1)));
        assert_eq!(rebuilt.get(6), KeyState::present(1));
        assert_eq!(
            rebuilt.pending(6),
            Some(KeyState::present(2)),
            "cut, not committed"
        );
        assert_eq!(rebuilt.get(7), KeyState::ABSENT, "the last line is cut");
        assert_eq!(rebuilt.pending(7), Some(KeyState::present(1)));
        // A process that journals after the cut line starts a line of its own.
        let mut next = ExpectedState::new(8);
        next.journal_to(&path)?;
        next.commit(&[(7, KeyState::present(1))], 3);
        drop(next);
        let rebuilt = ExpectedState::from_journal(&path, 8)?;
        assert_eq!(rebuilt.get(7), KeyState::present(1));
        Ok(())
    }
}
