//! Crash loops: kill the process, or cut the power, and check what survives.
//!
//! - **Blackbox**: a child `cairn stress` runs with its expected state journaled to a file (each
//!   change handed to the OS before the write it describes) and is killed with SIGKILL at a random
//!   moment. The parent reopens the database and checks every key: each write the child was told
//!   had succeeded must be there, synced or not (a process crash loses nothing the log had been
//!   handed), and no deleted key may return.
//! - **Power loss**: in process, on [`FaultyFs`]: one writer makes numbered writes, some synced;
//!   every other cycle meets a disk fault (a log sync that fails dropping or keeping its bytes,
//!   or a torn append). The fault stops the database, which must refuse every write until it has
//!   recovered (a new log, the memtables flushed through a fresh MANIFEST); once it has, it must
//!   hold every acknowledged write, the failed one being optional, and the writes go on. Then the
//!   disk stops, the power goes (unsynced bytes dropped all, as a random tail, or as random
//!   pages), and the database is reopened. What it holds must be exactly the state after some
//!   prefix of the writes — no holes — and that prefix must include every write acknowledged
//!   with sync and, strictly, every write acknowledged before a recovery (the recovery made them
//!   durable): a shorter prefix is a lost write, not a power loss's due.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{Db, Options, WriteBatch, WriteOptions};
use cairn_fs::{FaultyFs, OpKind, PowerLoss, SyncFailure};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::config::StressConfig;
use crate::engine::{EngineKind, Support};
use crate::expected::intersect;
use crate::harness::{Harness, StressError};
use crate::report::{Failures, Observed};
use crate::value::{key, key_index, value};

/// What a crash loop does.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Kill or power-loss cycles.
    pub cycles: usize,
    /// Seed for timing, writes and power-loss modes.
    pub seed: u64,
    /// Shortest and longest run before a kill, in ms (blackbox).
    pub kill_after_ms: (u64, u64),
    /// Writes per power-loss cycle, at most.
    pub writes_per_cycle: usize,
    /// The stress settings of each child (blackbox) or the key space (power loss).
    pub stress: StressConfig,
    /// The number of the first cycle: a loop run one cycle at a time still rotates through
    /// the faults and power-loss modes, which are picked by cycle number.
    pub first_cycle: usize,
}

impl Default for CrashConfig {
    fn default() -> Self {
        Self {
            cycles: 5,
            seed: 0,
            kill_after_ms: (500, 3000),
            writes_per_cycle: 2000,
            stress: StressConfig {
                keys: 10_000,
                ..StressConfig::default()
            },
            first_cycle: 0,
        }
    }
}

/// What a crash loop found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CrashReport {
    /// `blackbox` or `power-loss`.
    pub mode: String,
    /// The engine under test (`cairn`, `fjall`, `rocksdb`).
    #[serde(default)]
    pub engine: String,
    /// Why the mode did not run on this engine (the power-loss loop needs its file I/O routed
    /// through `FaultyFs`); `None` for a mode that ran.
    #[serde(default)]
    pub skipped: Option<String>,
    /// Cycles survived.
    pub cycles: usize,
    /// Keys checked after crashes.
    pub verifications: u64,
    /// Writes acknowledged before crashes (power loss) or child operations (blackbox).
    pub writes: u64,
    /// Seconds the loop took.
    pub seconds: f64,
    /// Power-loss cycles in which an injected disk fault failed a write (each is followed by
    /// further writes, which a stopped database must refuse until it has recovered).
    #[serde(default)]
    pub faults: u64,
    /// The engine's recoveries from those faults (`Stats::recoveries`), each followed by a
    /// strict check and more writes before the power went.
    #[serde(default)]
    pub recoveries: u64,
    /// A Ctrl-C or SIGTERM ended the loop before its cycles or time were done; every cycle
    /// counted ran to its check (a blackbox child is killed and checked at once).
    #[serde(default)]
    pub interrupted: bool,
    /// What went wrong.
    pub failures: Failures,
}

impl CrashReport {
    /// The process exit code: 0 clean, 1 a check failed.
    pub fn exit_code(&self) -> i32 {
        i32::from(!self.failures.is_clean())
    }
}

/// Why the power-loss loop cannot run on `engine` (its file I/O cannot be routed through
/// `FaultyFs`), or `None` if it can.
pub fn power_loss_skipped(engine: EngineKind) -> Option<String> {
    match engine.capabilities().faulty_fs {
        Support::Missing(why) => Some(format!("{}: {why}", engine.name())),
        _ => None,
    }
}

/// Runs the blackbox loop: `program` with `args` is the child `cairn` command (the loop appends
/// `stress` and its options).
///
/// # Errors
/// `Io` if the child cannot be started; `Engine` if the database cannot be reopened.
pub fn blackbox(
    config: &CrashConfig,
    dir: &Path,
    program: &Path,
    args: &[String],
) -> Result<CrashReport, StressError> {
    let started = Instant::now();
    let journal = dir.join("expected-state.journal");
    let db_dir = dir.join("db");
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let mut report = CrashReport {
        mode: "blackbox".into(),
        engine: config.stress.engine.name().into(),
        ..CrashReport::default()
    };
    let committed_before = committed_writes(&journal);
    for cycle in 0..config.cycles {
        if crate::interrupt::stop_requested() {
            report.interrupted = true;
            break;
        }
        let mut child = Command::new(program)
            .args(args)
            .arg("stress")
            .arg(&db_dir)
            .args(["--expected-journal", &journal.to_string_lossy()])
            // The loop owns the directory: the child writes into what earlier cycles left.
            .args(["--duration", "3600", "--no-progress", "--quiet", "--reuse"])
            .args([
                "--keys",
                &config.stress.keys.to_string(),
                "--threads",
                &config.stress.threads.to_string(),
            ])
            .args(["--seed", &(config.seed + cycle as u64).to_string()])
            .args(["--engine", config.stress.engine.name()])
            .args([
                "--sync-probability",
                &config.stress.sync_probability.to_string(),
            ])
            .stdout(Stdio::null())
            // A group of its own: a Ctrl-C at the terminal reaches the loop, which kills and
            // checks the child, rather than the child, which would stop cleanly.
            .process_group(0)
            .spawn()?;
        let (lo, hi) = config.kill_after_ms;
        let kill_at = Instant::now() + Duration::from_millis(rng.random_range(lo..=hi.max(lo)));
        while Instant::now() < kill_at && !crate::interrupt::stop_requested() {
            std::thread::sleep(Duration::from_millis(20).min(kill_at - Instant::now()));
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(StressError::Config(format!(
                "the child stress exited before it was killed: {status}"
            )));
        }
        child.kill()?;
        child.wait()?;
        let checked = check_after_kill(config, &db_dir, &journal)?;
        report.verifications += checked.verifications;
        report.writes = committed_writes(&journal) - committed_before;
        report.failures.merge(checked.failures);
        report.cycles = cycle + 1;
        tracing::info!(cycle, "survived a SIGKILL");
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Writes the journal records as committed, over every run that used it.
fn committed_writes(journal: &Path) -> u64 {
    std::fs::read(journal).map_or(0, |bytes| {
        bytes
            .split(|&b| b == b'\n')
            .filter(|l| l.first() == Some(&b'C'))
            .count() as u64
    })
}

fn check_after_kill(
    config: &CrashConfig,
    db: &Path,
    journal: &Path,
) -> Result<crate::StressReport, StressError> {
    let mut stress = config.stress.clone();
    stress.expected_journal = Some(journal.to_path_buf());
    let harness = Harness::open(stress, db, Arc::new(cairn_fs::RealFs::new()), None)?;
    harness.verify_all("after SIGKILL");
    let report = harness.report();
    harness.close()?;
    Ok(report)
}

/// A key's state in the power-loss check: the version it holds, or absent.
type State = Option<u32>;

/// One write of the power-loss loop.
#[derive(Clone)]
struct Write {
    changes: Vec<(usize, State)>,
    synced: bool,
    /// False for the write a fault failed: it may or may not have reached the log.
    acknowledged: bool,
}

/// A disk fault a power-loss cycle meets before the power goes.
#[derive(Debug, Clone, Copy)]
struct Fault {
    /// The write it falls on.
    at: usize,
    kind: FaultKind,
}

#[derive(Debug, Clone, Copy)]
enum FaultKind {
    /// A log sync fails and drops the unsynced bytes.
    SyncDrops,
    /// A log sync fails but its bytes stay.
    SyncKeeps,
    /// A log append fails after writing a prefix of the record.
    TornAppend,
}

impl Fault {
    /// Every other cycle meets one, on a random write.
    fn pick(cycle: usize, rng: &mut SmallRng, writes: usize) -> Option<Self> {
        if cycle.is_multiple_of(2) || writes < 2 {
            return None;
        }
        let kind = match rng.random_range(0..3) {
            0 => FaultKind::SyncDrops,
            1 => FaultKind::SyncKeeps,
            _ => FaultKind::TornAppend,
        };
        Some(Self {
            at: rng.random_range(1..writes),
            kind,
        })
    }

    fn arm(self, fs: &FaultyFs) {
        match self.kind {
            FaultKind::SyncDrops => {
                fs.set_sync_failure(SyncFailure::DropsUnsynced);
                // Every sync from here on fails until one is asked for and fails.
                fs.inject_errors(OpKind::Sync, 1);
            }
            FaultKind::SyncKeeps => {
                fs.set_sync_failure(SyncFailure::KeepsBytes);
                fs.inject_errors(OpKind::Sync, 1);
            }
            FaultKind::TornAppend => fs.fail_next(OpKind::Append, ".log"),
        }
    }
}

/// Runs the power-loss loop in `dir`.
///
/// # Errors
/// `Engine` if the database cannot be reopened after a power loss.
pub fn power_loss(config: &CrashConfig, dir: &Path) -> Result<CrashReport, StressError> {
    if let Some(skipped) = power_loss_skipped(config.stress.engine) {
        return Err(StressError::Config(format!(
            "the power-loss loop runs on cairn alone: {skipped}"
        )));
    }
    let mut report = power_loss_on_cairn(config, dir)?;
    report.engine = EngineKind::Cairn.name().into();
    Ok(report)
}

/// The power-loss loop on Cairn over `FaultyFs` (see [`power_loss`]).
fn power_loss_on_cairn(config: &CrashConfig, dir: &Path) -> Result<CrashReport, StressError> {
    let started = Instant::now();
    let fs = FaultyFs::new(config.seed);
    let options = || {
        Options::default()
            .file_system(Arc::new(fs.clone()))
            .memtable_size(64 * 1024)
            .level_base_bytes(256 * 1024)
            .target_file_size(64 * 1024)
    };
    let keys = config.stress.keys;
    let max_value = config.stress.max_value_size;
    let mut rng = SmallRng::seed_from_u64(config.seed);
    let mut report = CrashReport {
        mode: "power-loss".into(),
        ..CrashReport::default()
    };
    // Start from whatever an earlier loop left in the directory.
    let mut baseline: BTreeMap<usize, u32> = {
        let db = Db::open(dir, options())?;
        let observed = read_all(&db, keys, max_value, &mut report.failures)?;
        db.close()?;
        observed
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect()
    };
    let floor = read_version_floor(dir)?;
    let mut next_version: Vec<u32> = (0..keys)
        .map(|k| baseline.get(&k).map_or(1, |v| v + 1).max(floor))
        .collect();
    for cycle in config.first_cycle..config.first_cycle + config.cycles {
        if crate::interrupt::stop_requested() {
            report.interrupted = true;
            break;
        }
        let db = Db::open(dir, options())?;
        let sync_every = rng.random_range(1..20);
        let writes = rng.random_range(config.writes_per_cycle / 4..=config.writes_per_cycle.max(4));
        // Some cycles meet a disk fault first: the database stops at it, then the power goes.
        let fault = Fault::pick(cycle, &mut rng, writes);
        let mut run = CycleWrites {
            db: &db,
            rng: &mut rng,
            next_version: &mut next_version,
            keys,
            max_value,
        };
        let history = run.until_fault(&fs, fault, writes, sync_every, cycle, &baseline)?;
        if history.faulted {
            report.faults += 1;
        }
        report.recoveries += db.stats().recoveries;
        if history.taken_after_fault > 0 {
            // Writes after a lost one could survive it: the holes of tomorrow.
            report.failures.holes += 1;
            report.failures.messages.push(format!(
                "cycle {cycle} (fault {fault:?}): the database took {} writes after a failed one, before it had recovered",
                history.taken_after_fault
            ));
        }
        report.failures.merge(history.failures);
        let made_durable = history.made_durable;
        let history = history.writes;
        fs.clear_errors();
        report.writes += history.len() as u64;
        // The disk stops as a dying machine's would, then the power goes.
        fs.set_active(false);
        drop(db);
        let mode = power_loss_mode(cycle, &mut rng);
        fs.power_loss(mode).map_err(cairn::Error::from)?;
        fs.set_active(true);
        let db = Db::open(dir, options())?;
        let observed = read_all(&db, keys, max_value, &mut report.failures)?;
        report.verifications += keys as u64;
        let last_synced = history
            .iter()
            .rposition(|w| w.synced && w.acknowledged)
            .map_or(0, |i| i + 1);
        let required = last_synced.max(made_durable);
        if consistent_prefix(&baseline, &history, &observed, required).is_none() {
            if consistent_prefix(&baseline, &history, &observed, last_synced).is_some() {
                report.failures.lost_writes += 1;
                report.failures.messages.push(format!(
                    "cycle {cycle} ({mode:?}, fault {fault:?}): the reopened state is a prefix of the {} writes short of the {made_durable} acknowledged before the recovery",
                    history.len()
                ));
            } else {
                report.failures.holes += 1;
                report.failures.messages.push(format!(
                    "cycle {cycle} ({mode:?}, fault {fault:?}): the reopened state is no prefix of the {} writes that includes the {required} up to the last synced one or the recovery",
                    history.len()
                ));
            }
        }
        baseline = observed
            .iter()
            .filter_map(|(&k, &v)| v.map(|v| (k, v)))
            .collect();
        db.close()?;
        write_version_floor(dir, &next_version)?;
        report.cycles += 1;
    }
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// How a cycle's power loss treats unsynced bytes: all dropped, a random tail, or random pages,
/// in turn.
fn power_loss_mode(cycle: usize, rng: &mut SmallRng) -> PowerLoss {
    match cycle % 3 {
        0 => PowerLoss::DropAllUnsynced,
        1 => PowerLoss::DropRandomTail { seed: rng.random() },
        _ => PowerLoss::ReorderedPages { seed: rng.random() },
    }
}

/// Writes made at once after a fault fails one: until it has recovered, the stopped database
/// must refuse them all.
const WRITES_AFTER_FAULT: usize = 20;

/// How long a cycle waits for the engine to recover from its fault: a deadlock guard, not a
/// timing claim (its attempts are over in about a second).
const RECOVERY_WAIT: Duration = Duration::from_secs(60);

/// The writes of one power-loss cycle, in order.
struct CycleHistory {
    writes: Vec<Write>,
    /// An injected fault failed a write.
    faulted: bool,
    /// Writes the database took after a fault had failed one, before it had recovered.
    taken_after_fault: u64,
    /// The first writes, those acknowledged before the recovery from the fault: the recovery
    /// made them durable, so no power loss may take them.
    made_durable: usize,
    /// What the checks at the recovery found.
    failures: Failures,
}

/// Where a power-loss loop keeps the highest version it has written, so that a later loop in
/// the same directory never writes one again (a value a lost write left must not pass for a
/// later write's).
const VERSIONS_FILE: &str = "power-loss-versions";

fn read_version_floor(dir: &Path) -> Result<u32, StressError> {
    match std::fs::read_to_string(dir.join(VERSIONS_FILE)) {
        Ok(text) => text.trim().parse().map_err(|e| {
            StressError::Config(format!("{}: {e}", dir.join(VERSIONS_FILE).display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(e.into()),
    }
}

fn write_version_floor(dir: &Path, versions: &[u32]) -> Result<(), StressError> {
    let highest = versions.iter().copied().max().unwrap_or(0);
    std::fs::write(dir.join(VERSIONS_FILE), highest.to_string())?;
    Ok(())
}

/// The stop a cycle's fault caused.
struct Stop {
    /// The write the fault failed.
    at: usize,
    /// Writes acknowledged before it.
    acked_before: usize,
    /// Positions in the history of writes that failed (not refused): each may or may not
    /// have taken effect.
    uncertain: Vec<usize>,
    recovered: bool,
}

/// One power-loss cycle's single writer and what it writes with.
struct CycleWrites<'a> {
    db: &'a Db,
    rng: &'a mut SmallRng,
    /// Per key, the last version written: none is reused, not even a failed write's.
    next_version: &'a mut [u32],
    keys: usize,
    max_value: usize,
}

impl CycleWrites<'_> {
    /// Makes `writes` writes, every `sync_every`th synced, arming `fault` when its write comes.
    /// After the first write the fault fails, the faults stop and a few more writes follow at
    /// once, which the database must refuse until it has recovered: one it took before is a
    /// failure (and goes in the history, as does one that failed otherwise: it may or may not
    /// have reached the log). Then the cycle waits for the recovery, checks that the database
    /// holds every acknowledged write, and makes a few more writes before the power goes.
    fn until_fault(
        &mut self,
        fs: &FaultyFs,
        fault: Option<Fault>,
        writes: usize,
        sync_every: usize,
        cycle: usize,
        baseline: &BTreeMap<usize, u32>,
    ) -> Result<CycleHistory, StressError> {
        let mut history = CycleHistory {
            writes: Vec::new(),
            faulted: false,
            taken_after_fault: 0,
            made_durable: 0,
            failures: Failures::default(),
        };
        let mut stop: Option<Stop> = None;
        let mut recoveries_before = 0;
        for i in 0..writes {
            let armed = fault.filter(|f| f.at == i);
            if let Some(fault) = armed {
                recoveries_before = self.db.stats().recoveries;
                fault.arm(fs);
            }
            // The write the fault falls on syncs, so that a sync fault fires there.
            let (write, result) = self.one_write(i % sync_every == 0 || armed.is_some());
            let stopped = stop.as_ref().is_some_and(|s| !s.recovered);
            match result {
                Ok(()) => {
                    // Read after the write: a recovery that let it in has been counted.
                    if stopped && self.db.stats().recoveries == recoveries_before {
                        history.taken_after_fault += 1;
                    }
                    history.writes.push(write);
                }
                Err(e) if fault.is_some_and(|f| i >= f.at) && (stop.is_none() || stopped) => {
                    let stop = stop.get_or_insert_with(|| {
                        fs.clear_errors();
                        history.faulted = true;
                        Stop {
                            at: i,
                            acked_before: history.writes.len(),
                            uncertain: Vec::new(),
                            recovered: false,
                        }
                    });
                    if !crate::engine::cairn_refused(&e) {
                        stop.uncertain.push(history.writes.len());
                        history.writes.push(write);
                    }
                }
                Err(e) => {
                    return Err(StressError::Config(format!(
                        "cycle {cycle}: write {i} failed with no fault injected: {e}"
                    )));
                }
            }
            if let Some(stop) = stop.as_mut() {
                if !stop.recovered
                    && i >= stop.at + WRITES_AFTER_FAULT
                    && !self.recovered(stop, recoveries_before, &mut history, baseline, cycle)?
                {
                    break;
                }
                // The power goes soon after the recovery, before a flush could make up for one
                // that wrote no tables.
                if i >= stop.at + 2 * WRITES_AFTER_FAULT {
                    break;
                }
            }
            if fault.is_none() && self.rng.random_ratio(1, 200) {
                self.db.flush()?;
            }
        }
        if let Some(stop) = stop.as_mut()
            && !stop.recovered
        {
            self.recovered(stop, recoveries_before, &mut history, baseline, cycle)?;
        }
        Ok(history)
    }

    /// Waits for the engine to recover from `stop`, then checks that it holds every
    /// acknowledged write (each failed one may or may not be there) and notes the writes the
    /// recovery made durable; false, with a failure noted, if it never recovers.
    fn recovered(
        &self,
        stop: &mut Stop,
        recoveries_before: u64,
        history: &mut CycleHistory,
        baseline: &BTreeMap<usize, u32>,
        cycle: usize,
    ) -> Result<bool, StressError> {
        let waiting = Instant::now();
        while self.db.stats().recoveries <= recoveries_before {
            if waiting.elapsed() > RECOVERY_WAIT {
                history.failures.unrecovered += 1;
                history.failures.messages.push(format!(
                    "cycle {cycle}: no recovery from the fault at write {} in {RECOVERY_WAIT:?}",
                    stop.at
                ));
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        stop.recovered = true;
        let observed = read_all(self.db, self.keys, self.max_value, &mut history.failures)?;
        // Which of the failed writes took effect: try each choice (there are seldom more than
        // one failed write, so few choices).
        let choices = 1usize << stop.uncertain.len().min(6);
        let kept = (0..choices).find_map(|mask| {
            let dropped: Vec<usize> = (0..stop.uncertain.len().min(6))
                .filter(|b| mask & (1 << b) != 0)
                .filter_map(|b| stop.uncertain.get(b).copied())
                .collect();
            let candidate: Vec<Write> = history
                .writes
                .iter()
                .enumerate()
                .filter(|(i, _)| !dropped.contains(i))
                .map(|(_, w)| w.clone())
                .collect();
            consistent_prefix(baseline, &candidate, &observed, candidate.len())
                .map(|_| (candidate, dropped))
        });
        let Some((candidate, dropped)) = kept else {
            history.failures.lost_writes += 1;
            history.failures.messages.push(format!(
                "cycle {cycle}: after the recovery from the fault at write {}, the database does not hold the {} writes acknowledged",
                stop.at,
                history.writes.iter().filter(|w| w.acknowledged).count()
            ));
            return Ok(true);
        };
        // The writes before the fault, and the failed one if it took effect, are in tables now.
        let failed_kept = stop
            .uncertain
            .first()
            .is_some_and(|&f| f == stop.acked_before && !dropped.contains(&f));
        history.made_durable = stop.acked_before + usize::from(failed_kept);
        history.writes = candidate;
        Ok(true)
    }

    /// Makes one random write (put, delete, batch or range delete); returns what it changes
    /// and whether the engine took it.
    fn one_write(&mut self, sync: bool) -> (Write, cairn::Result<()>) {
        let mut batch = WriteBatch::new();
        let mut changes: Vec<(usize, State)> = Vec::new();
        let keys = self.keys;
        match self.rng.random_range(0..10) {
            0 => {
                let start = self.rng.random_range(0..keys);
                let end = (start + self.rng.random_range(1..16)).min(keys);
                batch.delete_range(key(start), key(end));
                changes.extend((start..end).map(|k| (k, None)));
            }
            1..=2 => {
                let k = self.rng.random_range(0..keys);
                batch.delete(key(k));
                changes.push((k, None));
            }
            n => {
                let count = if n == 9 {
                    self.rng.random_range(2..6)
                } else {
                    1
                };
                for _ in 0..count {
                    let k = self.rng.random_range(0..keys);
                    let Some(version) = self.next_version.get_mut(k) else {
                        continue;
                    };
                    *version += 1;
                    batch.put(key(k), value(k, *version, self.max_value));
                    changes.retain(|(c, _)| *c != k);
                    changes.push((k, Some(*version)));
                }
            }
        }
        let written = self.db.write_opt(batch, &WriteOptions { sync });
        let write = Write {
            changes,
            synced: sync,
            acknowledged: written.is_ok(),
        };
        (write, written.map(drop))
    }
}

fn read_all(
    db: &Db,
    keys: usize,
    max_value: usize,
    failures: &mut Failures,
) -> Result<BTreeMap<usize, State>, StressError> {
    let mut observed: BTreeMap<usize, State> = (0..keys).map(|k| (k, None)).collect();
    for item in db.iter()? {
        let (k, v) = item?;
        let Some(i) = key_index(&k).filter(|&i| i < keys) else {
            failures.wrong_values += 1;
            continue;
        };
        if let Observed::Version(version) = crate::value::observe(i, Some(&v), max_value) {
            observed.insert(i, Some(version));
        } else {
            failures.wrong_values += 1;
            failures
                .messages
                .push(format!("key {i} holds bytes no write produced"));
        }
    }
    Ok(observed)
}

/// The length of a prefix of `history` whose result over `baseline` is exactly `observed` and
/// that includes the first `at_least` writes, if there is one.
fn consistent_prefix(
    baseline: &BTreeMap<usize, u32>,
    history: &[Write],
    observed: &BTreeMap<usize, State>,
    at_least: usize,
) -> Option<usize> {
    // Per key, the prefix lengths after which it holds each state.
    let mut touched: BTreeMap<usize, Vec<(usize, State)>> = BTreeMap::new();
    for (i, w) in history.iter().enumerate() {
        for &(k, s) in &w.changes {
            touched.entry(k).or_default().push((i + 1, s));
        }
    }
    let mut allowed: Vec<(usize, usize)> = vec![(at_least, history.len())];
    for (&k, &seen) in observed {
        let base = baseline.get(&k).copied();
        let Some(writes) = touched.get(&k) else {
            if seen != base {
                return None;
            }
            continue;
        };
        // Intervals [from, to] of prefix lengths where the key holds `seen`.
        let mut intervals = Vec::new();
        let mut from = 0;
        let mut state = base;
        for &(at, s) in writes {
            if state == seen {
                intervals.push((from, at - 1));
            }
            from = at;
            state = s;
        }
        if state == seen {
            intervals.push((from, history.len()));
        }
        allowed = intersect(&allowed, &intervals);
        if allowed.is_empty() {
            return None;
        }
    }
    allowed.first().map(|&(lo, _)| lo)
}

/// A directory for a crash loop of `engine`: `dir` if given, else a temporary one (kept alive
/// by the guard).
///
/// # Errors
/// `Config` for a directory that is not empty and not a crash test's of the same engine (its
/// journal and databases mean nothing to another); `Io` if a directory cannot be created.
pub fn work_dir(
    dir: Option<PathBuf>,
    engine: EngineKind,
) -> Result<(PathBuf, Option<crate::TemporaryDir>), crate::StressError> {
    if let Some(d) = dir {
        // Never a user's directory: empty, new, or one a crash test of this engine made.
        let fresh = crate::run::claim(&d, false, engine)?;
        std::fs::create_dir_all(&d)?;
        if fresh {
            crate::run::mark_engine(&d, engine)?;
        }
        return Ok((d, None));
    }
    let t = crate::TemporaryDir::new()?;
    Ok((t.path().to_path_buf(), Some(t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(changes: &[(usize, State)]) -> Write {
        Write {
            changes: changes.to_vec(),
            synced: false,
            acknowledged: true,
        }
    }

    #[test]
    fn a_prefix_is_found_and_a_hole_is_not() {
        let history = [
            w(&[(1, Some(1))]),
            w(&[(2, Some(1))]),
            w(&[(1, Some(2)), (3, Some(1))]),
        ];
        let base = BTreeMap::new();
        let state = |pairs: &[(usize, State)]| -> BTreeMap<usize, State> {
            let mut m: BTreeMap<usize, State> = (0..4).map(|k| (k, None)).collect();
            m.extend(pairs.iter().copied());
            m
        };
        assert_eq!(
            consistent_prefix(&base, &history, &state(&[(1, Some(1)), (2, Some(1))]), 0),
            Some(2)
        );
        assert_eq!(consistent_prefix(&base, &history, &state(&[]), 0), Some(0));
        assert_eq!(
            consistent_prefix(&base, &history, &state(&[]), 1),
            None,
            "a synced write was lost"
        );
        // Write 2 without write 1: a hole.
        assert_eq!(
            consistent_prefix(&base, &history, &state(&[(2, Some(1))]), 0),
            None
        );
        // Half of the batch in write 3: not a prefix.
        assert_eq!(
            consistent_prefix(&base, &history, &state(&[(1, Some(2)), (2, Some(1))]), 0),
            None
        );
    }
}
