//! Counting what happened and what went wrong, and the report a run ends with.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::expected::Acceptable;

/// What kind of wrong a check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// A key that should hold a value was absent.
    LostWrite,
    /// A deleted key came back.
    ResurrectedDelete,
    /// A key held a value it should not (an older version, another key's, or damaged bytes).
    WrongValue,
    /// A crash recovered writes that are not a prefix of those made.
    Hole,
    /// A snapshot read something other than the expected state at its sequence number.
    SnapshotMismatch,
    /// A transaction committed although a key it read was written after its snapshot.
    LostUpdate,
    /// A verification could not read the database: it could not be opened, a column family
    /// could not be found, or a scan or get failed. Nothing was checked, so nothing passed.
    Unreadable,
    /// The run did not exercise what it claims: a fault run with too few fault → recovery (or
    /// reopen) cycles, or one whose operations mostly met a stopped database.
    Unexercised,
    /// A TTL family showed versions the expiry and `max_versions` rules do not allow at the
    /// clock's reading: an expired one, one a newer write replaced, or too few.
    Expiry,
    /// A reader held open across compactions read something other than what was live when it
    /// was made (its view: tables, family options, clock reading).
    HeldReader,
    /// A fault run's database stayed stopped after an injected (transient) fault: the engine
    /// did not recover, and `Db::resume` failed even with the faults paused.
    Unrecovered,
}

impl Failure {
    const ALL: [Failure; 11] = [
        Failure::LostWrite,
        Failure::ResurrectedDelete,
        Failure::WrongValue,
        Failure::Hole,
        Failure::SnapshotMismatch,
        Failure::LostUpdate,
        Failure::Unreadable,
        Failure::Unexercised,
        Failure::Expiry,
        Failure::HeldReader,
        Failure::Unrecovered,
    ];

    fn index(self) -> usize {
        Self::ALL.iter().position(|&f| f == self).unwrap_or(0)
    }
}

/// Counters shared by the workers.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    ops: Mutex<BTreeMap<&'static str, u64>>,
    verifications: AtomicU64,
    /// One counter per kind, in [`Failure::ALL`]'s order.
    failures: [AtomicU64; Failure::ALL.len()],
    engine_errors: AtomicU64,
    conflicts: AtomicU64,
    messages: Mutex<Vec<String>>,
}

/// Messages kept about failures; the rest are only counted.
const MAX_MESSAGES: usize = 20;

impl Tally {
    /// Counts one operation of `kind`.
    pub(crate) fn op(&self, kind: &'static str) {
        *self
            .ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(kind)
            .or_insert(0) += 1;
    }

    /// Counts one verified read.
    pub(crate) fn verified(&self) {
        self.verifications.fetch_add(1, Ordering::Relaxed);
    }

    /// Records a failure.
    pub(crate) fn fail(&self, kind: Failure, message: String) {
        if let Some(counter) = self.failures.get(kind.index()) {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        let mut message = message;
        message.insert_str(0, &format!("{kind:?}: "));
        tracing::error!("{message}");
        let mut messages = self
            .messages
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if messages.len() < MAX_MESSAGES {
            messages.push(message);
        }
    }

    /// Judges one read of key `i` that observed `observed` (the version read, or absent).
    pub(crate) fn judge(&self, i: usize, observed: Observed, ok: &Acceptable, context: &str) {
        self.verified();
        let version = match observed {
            Observed::Damaged => {
                self.fail(
                    Failure::WrongValue,
                    format!("{context}: key {i} holds bytes no write produced"),
                );
                return;
            }
            Observed::Absent => None,
            Observed::Version(v) => Some(v),
        };
        if ok.allows(version) {
            return;
        }
        let kind = match version {
            None => Failure::LostWrite,
            Some(_) if !ok.before.exists() && !ok.after.exists() => Failure::ResurrectedDelete,
            Some(_) => Failure::WrongValue,
        };
        self.fail(
            kind,
            format!("{context}: key {i} read {version:?}, expected {ok:?}"),
        );
    }

    /// Counts an engine error that the run tolerates (injected faults, conflicts).
    pub(crate) fn engine_error(&self) {
        self.engine_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a transaction conflict.
    pub(crate) fn conflict(&self) {
        self.conflicts.fetch_add(1, Ordering::Relaxed);
    }

    /// Failures so far, of every kind.
    pub(crate) fn total_failures(&self) -> u64 {
        self.failures
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .sum()
    }

    /// The counts as a report section.
    pub(crate) fn summary(&self) -> Failures {
        let get = |kind: Failure| {
            self.failures
                .get(kind.index())
                .map_or(0, |f| f.load(Ordering::Relaxed))
        };
        Failures {
            lost_writes: get(Failure::LostWrite),
            resurrected_deletes: get(Failure::ResurrectedDelete),
            wrong_values: get(Failure::WrongValue),
            holes: get(Failure::Hole),
            snapshot_mismatches: get(Failure::SnapshotMismatch),
            lost_updates: get(Failure::LostUpdate),
            unreadable: get(Failure::Unreadable),
            unexercised: get(Failure::Unexercised),
            expiry_violations: get(Failure::Expiry),
            held_reader_mismatches: get(Failure::HeldReader),
            unrecovered: get(Failure::Unrecovered),
            messages: self
                .messages
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
        }
    }

    pub(crate) fn ops_by_type(&self) -> BTreeMap<String, u64> {
        self.ops
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(k, v)| ((*k).to_string(), *v))
            .collect()
    }

    pub(crate) fn verifications(&self) -> u64 {
        self.verifications.load(Ordering::Relaxed)
    }

    pub(crate) fn engine_errors(&self) -> u64 {
        self.engine_errors.load(Ordering::Relaxed)
    }

    pub(crate) fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}

/// What a read found for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Observed {
    /// No value.
    Absent,
    /// The value of this version.
    Version(u32),
    /// Bytes that are no version's value.
    Damaged,
}

impl Observed {
    /// The version read, `None` for absent; damaged bytes match no state (`Some(u32::MAX)`).
    pub(crate) fn version(self) -> Option<u32> {
        match self {
            Self::Absent => None,
            Self::Version(v) => Some(v),
            Self::Damaged => Some(u32::MAX),
        }
    }
}

/// The failures of a run: the four zeros, snapshot mismatches, reads that could not be made,
/// and runs that did not exercise what they claim.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    /// Acknowledged writes that were not there.
    pub lost_writes: u64,
    /// Deleted keys that came back.
    pub resurrected_deletes: u64,
    /// Wrong or damaged values.
    pub wrong_values: u64,
    /// Recovered writes that were not a prefix.
    pub holes: u64,
    /// Snapshot reads that differed from the expected state at their sequence number.
    pub snapshot_mismatches: u64,
    /// Transactions that committed over a write to a key they read.
    #[serde(default)]
    pub lost_updates: u64,
    /// Verifications that could not read the database.
    pub unreadable: u64,
    /// Claims the run could not back (see [`Failure::Unexercised`]).
    pub unexercised: u64,
    /// Reads of TTL families the expiry rules do not allow (see [`Failure::Expiry`]).
    #[serde(default)]
    pub expiry_violations: u64,
    /// Held readers that read other than what was live when they were made (see
    /// [`Failure::HeldReader`]).
    #[serde(default)]
    pub held_reader_mismatches: u64,
    /// Transient faults the database never recovered from (see [`Failure::Unrecovered`]).
    #[serde(default)]
    pub unrecovered: u64,
    /// The first few failures, described.
    pub messages: Vec<String>,
}

impl Failures {
    /// Adds `other`'s counts and messages to these (keeping at most a few messages).
    pub fn merge(&mut self, other: Failures) {
        self.lost_writes += other.lost_writes;
        self.resurrected_deletes += other.resurrected_deletes;
        self.wrong_values += other.wrong_values;
        self.holes += other.holes;
        self.snapshot_mismatches += other.snapshot_mismatches;
        self.lost_updates += other.lost_updates;
        self.unreadable += other.unreadable;
        self.unexercised += other.unexercised;
        self.expiry_violations += other.expiry_violations;
        self.held_reader_mismatches += other.held_reader_mismatches;
        self.unrecovered += other.unrecovered;
        let room = MAX_MESSAGES.saturating_sub(self.messages.len());
        self.messages.extend(other.messages.into_iter().take(room));
    }

    /// True if nothing went wrong.
    pub fn is_clean(&self) -> bool {
        self.total() == 0
    }

    /// Failures of every kind.
    pub fn total(&self) -> u64 {
        self.lost_writes
            + self.resurrected_deletes
            + self.wrong_values
            + self.holes
            + self.snapshot_mismatches
            + self.lost_updates
            + self.unreadable
            + self.unexercised
            + self.expiry_violations
            + self.held_reader_mismatches
            + self.unrecovered
    }

    /// How many failures of `kind`.
    pub fn count(&self, kind: Failure) -> u64 {
        match kind {
            Failure::LostWrite => self.lost_writes,
            Failure::ResurrectedDelete => self.resurrected_deletes,
            Failure::WrongValue => self.wrong_values,
            Failure::Hole => self.holes,
            Failure::SnapshotMismatch => self.snapshot_mismatches,
            Failure::LostUpdate => self.lost_updates,
            Failure::Unreadable => self.unreadable,
            Failure::Unexercised => self.unexercised,
            Failure::Expiry => self.expiry_violations,
            Failure::HeldReader => self.held_reader_mismatches,
            Failure::Unrecovered => self.unrecovered,
        }
    }
}

fn cairn_name() -> String {
    "cairn".to_string()
}

/// A count an engine may not keep: `n/a` when it does not.
pub(crate) fn counted(n: Option<u64>) -> String {
    n.map_or_else(|| "n/a".to_string(), |n| n.to_string())
}

/// The report a run ends with (printed, and written as JSON on request).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StressReport {
    /// The engine under test (`cairn`, `fjall`, `rocksdb`).
    #[serde(default = "cairn_name")]
    pub engine: String,
    /// Operations the engine lacks that the harness emulated exactly, and how.
    #[serde(default)]
    pub emulated: BTreeMap<String, String>,
    /// Work left out because the engine lacks it, and why.
    #[serde(default)]
    pub skipped: BTreeMap<String, String>,
    /// The engine returns no sequence numbers, so the harness stamped its writes and snapshots
    /// in one order, serializing them: races inside the engine between a write and a snapshot
    /// were not exercised.
    #[serde(default)]
    pub sequenced_by_harness: bool,
    /// The seed, to replay the run's choices.
    pub seed: u64,
    /// Seconds the run took.
    pub seconds: f64,
    /// Operations by type.
    pub ops: BTreeMap<String, u64>,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Reads checked against the expected state.
    pub verifications: u64,
    /// Flushes the engine ran (`None`: the engine does not count them).
    pub flushes: Option<u64>,
    /// Compactions the engine ran (`None`: the engine does not count them).
    pub compactions: Option<u64>,
    /// Entries compaction dropped, by rule.
    pub dropped: BTreeMap<String, u64>,
    /// Point and range tombstones on disk or in memtables at the end (`None`: the engine
    /// does not count them).
    pub tombstones_pending: Option<u64>,
    /// Engine errors tolerated (injected faults).
    pub engine_errors: u64,
    /// The engine's recoveries from a stop caused by an I/O error (`Stats::recoveries`, over
    /// every database the run opened): automatic ones and those `Db::resume` made.
    #[serde(default)]
    pub recoveries: u64,
    /// Fault runs: times a fault stopped the database and the run went on without a reopen once
    /// it had recovered, after a full, strict verification.
    #[serde(default)]
    pub fault_recoveries: u64,
    /// Of the recoveries the harness waited for, those that came from its own `Db::resume`
    /// call (the engine had not recovered on its own in time, or had given up because injected
    /// faults kept failing the recovery itself), including the one before each reopen.
    #[serde(default)]
    pub harness_resumes: u64,
    /// Fault runs: times a stopped database could not be brought back (an `Unrecovered`
    /// failure) and was closed while stopped, reopened on a healthy disk, fully verified, and
    /// the run went on.
    pub fault_reopens: u64,
    /// Of the reopens, those of a database closed while stopped after a failed sync had dropped
    /// log bytes: it was then held only to a prefix of the writes, reaching the last durable one.
    /// Every other verification is strict: no acknowledged write may be missing.
    #[serde(default)]
    pub lossy_reopens: u64,
    /// Operations refused because the database had stopped.
    pub stopped_ops: u64,
    /// The engine error that ended the run early, if one did (the final verification still
    /// ran, and its failures count).
    pub fatal: Option<String>,
    /// A Ctrl-C or SIGTERM stopped the run before its limit; the workers stopped after their
    /// operation and the final verification ran as at any end.
    #[serde(default)]
    pub interrupted: bool,
    /// Transactions that failed with a conflict.
    pub conflicts: u64,
    /// The TTL work: reads of TTL families checked, those where a candidate had expired, and
    /// how far the clock moved (zero when the TTL work is off).
    #[serde(default)]
    pub ttl: TtlCounts,
    /// The held-reader work (zero when it is off).
    #[serde(default)]
    pub held: HeldCounts,
    /// What went wrong.
    pub failures: Failures,
}

impl StressReport {
    /// The process exit code: 1 if a verification failed, else 2 if the engine failed, else 0.
    pub fn exit_code(&self) -> i32 {
        if !self.failures.is_clean() {
            1
        } else if self.fatal.is_some() {
            2
        } else {
            0
        }
    }

    /// The lines that say what a peer engine ran without, or ran emulated (none for Cairn).
    fn engine_lines(&self, out: &mut String) {
        use std::fmt::Write as _;
        let listed = |what: &BTreeMap<String, String>| {
            what.iter()
                .map(|(name, why)| format!("{name} ({why})"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        if !self.emulated.is_empty() {
            let _ = writeln!(out, "{} emulated: {}", self.engine, listed(&self.emulated));
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "{} skipped: {}", self.engine, listed(&self.skipped));
        }
        if self.sequenced_by_harness {
            let _ = writeln!(
                out,
                "{}: writes and snapshots stamped in one order by the harness (the engine \
                 returns no sequence numbers), so its own write/snapshot races went untested",
                self.engine
            );
        }
    }

    /// A human summary.
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let ops: Vec<String> = self.ops.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(
            out,
            "seed {}: {} ops in {:.1}s ({:.0} ops/s)",
            self.seed,
            self.ops.values().sum::<u64>(),
            self.seconds,
            self.ops_per_sec
        );
        if self.interrupted {
            let _ = writeln!(
                out,
                "interrupted: stopped by a signal before its limit; the final verification ran"
            );
        }
        self.engine_lines(&mut out);
        let _ = writeln!(out, "ops: {}", ops.join(" "));
        let _ = writeln!(
            out,
            "flushes {}, compactions {}, verifications {}, tombstones pending {}",
            counted(self.flushes),
            counted(self.compactions),
            self.verifications,
            counted(self.tombstones_pending)
        );
        let dropped: Vec<String> = self
            .dropped
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let dropped = if dropped.is_empty() {
            "n/a (the engine does not count them)".to_string()
        } else {
            dropped.join(" ")
        };
        let _ = writeln!(out, "dropped by rule: {dropped}");
        let _ = writeln!(
            out,
            "engine errors tolerated {}, recoveries {} (fault → recovery cycles {}, {} by the \
             harness's resume), fault reopens {} ({} after dropped log bytes), ops on a stopped \
             database {}, transaction conflicts {}",
            self.engine_errors,
            self.recoveries,
            self.fault_recoveries,
            self.harness_resumes,
            self.fault_reopens,
            self.lossy_reopens,
            self.stopped_ops,
            self.conflicts
        );
        if self.ttl.checks > 0 {
            let _ = writeln!(
                out,
                "ttl families: {} reads checked ({} with an expired candidate), clock advanced {} s",
                self.ttl.checks,
                self.ttl.expiry_checks,
                self.ttl.clock_advanced_ms / 1000
            );
        }
        if self.held.readers + self.held.scenes > 0 {
            let _ = writeln!(
                out,
                "held readers: {} used ({} keys checked against what they saw when made), {} \
                 fresh reads, {} scenes with every other worker paused",
                self.held.readers, self.held.checks, self.held.fresh_reads, self.held.scenes
            );
        }
        let f = &self.failures;
        let _ = writeln!(
            out,
            "lost writes {}, resurrected deletes {}, holes {}, wrong values {}, snapshot \
             mismatches {}, lost updates {}, unreadable {}, unexercised {}, expiry violations \
             {}, held reader mismatches {}, unrecovered {}",
            f.lost_writes,
            f.resurrected_deletes,
            f.holes,
            f.wrong_values,
            f.snapshot_mismatches,
            f.lost_updates,
            f.unreadable,
            f.unexercised,
            f.expiry_violations,
            f.held_reader_mismatches,
            f.unrecovered
        );
        for m in &f.messages {
            let _ = writeln!(out, "  {m}");
        }
        if let Some(fatal) = &self.fatal {
            let _ = writeln!(out, "engine failed: {fatal}");
        }
        let verdict = match self.exit_code() {
            0 => "PASS",
            1 => "FAIL",
            _ => "ENGINE FAILED",
        };
        let _ = write!(out, "{verdict}");
        out
    }
}

/// What the TTL work of a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TtlCounts {
    /// Reads of TTL families judged.
    pub checks: u64,
    /// Of those, the ones where a candidate version had expired.
    pub expiry_checks: u64,
    /// How far the harness moved its clock, ms.
    pub clock_advanced_ms: u64,
}

/// What the held-reader work of a run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldCounts {
    /// Held readers used and judged against what was live when they were made.
    pub readers: u64,
    /// Keys those judgements covered.
    pub checks: u64,
    /// Fresh reads of the held family (of the newest view, or at a held reader's snapshot).
    pub fresh_reads: u64,
    /// Scenes run with every other worker paused.
    pub scenes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_failure_is_counted_and_fails_the_run() {
        for kind in Failure::ALL {
            let tally = Tally::default();
            tally.fail(kind, "planted".to_string());
            let summary = tally.summary();
            assert_eq!(summary.count(kind), 1, "{kind:?} was not counted");
            assert!(!summary.is_clean(), "a run with a {kind:?} failure passed");
            assert_eq!(tally.total_failures(), 1, "{kind:?}");
        }
    }
}
