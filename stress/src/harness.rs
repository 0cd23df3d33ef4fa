//! The harness: the database under test, the expected state, the workers, and the checks that
//! run between and after them.
//!
//! Every full verification fails closed: a database that cannot be opened, a column family that
//! cannot be found, a scan that errors — each is an `Unreadable` failure, never a pass. The final
//! verification runs even after a fatal engine error.
//!
//! In a fault run (I/O errors injected through `FaultyFs`) every fault is transient, and the
//! engine must recover from it without losing an acknowledged write (DESIGN.md §4). A database
//! stopped by a fault is not reopened: the next worker to look waits for the engine's own
//! recovery (a new log, the memtables flushed through a fresh MANIFEST), or, if that has not
//! come in time — the engine gives up after a few attempts when injected faults keep failing
//! the recovery itself — calls `Db::resume`, with the faults paused if it must. It then checks
//! every key, strictly, and the run goes on on the same database. Every verification after that
//! (the `reopen` operation's, the end's) is strict too: no acknowledged write may be missing,
//! even when a failed sync dropped log bytes, since the memtables held them.
//!
//! Only a database that could not be brought back even with the faults paused (an
//! `Unrecovered` failure, which fails the run) is closed while stopped and reopened; if a
//! failed sync dropped bytes of a log since it was last known whole (a reopen or a recovery),
//! writes may then be lost, but only as a suffix: the database must hold exactly the state
//! after some prefix of the writes, one that reaches the last write known durable (a synced
//! write returned, or the engine's `durable_seqno` covered it).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use cairn::{CfOptions, Db, ManualClock, Options};

use crate::engine::{
    self, EngineError, EngineSettings, EngineStats, OpenMode, Sequencer, StressEngine, Support,
};
use cairn_fs::{FaultyFs, FileSystem};

use crate::config::{Limit, StressConfig};
use crate::expected::{Acceptable, ExpectedState, KeyState, SeqNo, intersect};
use crate::held_work::HeldWork;
use crate::report::{Failure, Observed, StressReport, Tally};
use crate::ttl_model::{TTL_FAMILIES, TtlState};
use crate::ttl_work::TtlWork;
use crate::value::{key_index, observe};

/// Where the harness's clock starts when no journal says otherwise (ms; any fixed reading will
/// do, the TTL families measure against it alone).
const CLOCK_START_MS: u64 = 1_000_000_000_000;

/// A fault run with fewer fault → recovery (or reopen) cycles than this exercised too little.
pub const MIN_FAULT_CYCLES: u64 = 10;

/// How long a worker that found the database stopped by a fault waits for the engine to recover
/// on its own before it calls `Db::resume` itself: the engine's attempts, with their doubling
/// backoff, are over well within it. A deadlock guard, not a timing claim.
const AUTO_RECOVERY_WAIT: Duration = Duration::from_secs(3);

/// `Db::resume` calls with the faults paused before a stop counts as unrecovered (a recovery
/// finds a job still ending and asks to be called again).
const PAUSED_RESUME_ATTEMPTS: u32 = 50;

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StressError {
    /// The configuration is invalid.
    #[error("bad arguments: {0}")]
    Config(String),
    /// The engine failed where the run does not tolerate failures.
    #[error("engine error: {0}")]
    Engine(#[from] EngineError),
    /// Files of the harness itself (op log, journal, report) could not be written.
    #[error("harness I/O: {0}")]
    Io(#[from] std::io::Error),
}

impl From<cairn::Error> for StressError {
    fn from(e: cairn::Error) -> Self {
        Self::Engine(EngineError::Cairn(e))
    }
}

impl StressError {
    /// The process exit code: 2 for an engine error, 3 for bad arguments.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Config(_) => 3,
            _ => 2,
        }
    }
}

/// Opens the engine at a directory, as the mode says.
pub(crate) type Opener =
    Box<dyn Fn(&Path, OpenMode) -> Result<Box<dyn StressEngine>, EngineError> + Send + Sync>;

/// Why the database is being reopened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reopen {
    /// The `reopen` operation of the mix.
    Op,
    /// A fault stopped it, and it could not be brought back without a reopen.
    AfterFault,
    /// The end of a fault run, on a healthy disk.
    Final,
}

/// How a database a fault stopped was brought back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AfterFault {
    /// It recovered, and the run went on on it.
    Recovered,
    /// It could not be brought back, and was reopened.
    Reopened,
}

/// Everything the workers share.
pub struct Harness {
    pub(crate) config: StressConfig,
    pub(crate) expected: ExpectedState,
    pub(crate) tally: Tally,
    /// Bumped by every reopen: workers drop handles of an older database.
    pub(crate) epoch: AtomicU64,
    path: PathBuf,
    /// Opens the database (again, at a reopen).
    opener: Opener,
    db: RwLock<Option<Box<dyn StressEngine>>>,
    /// The faulty disk of a fault run.
    pub(crate) faults: Option<FaultyFs>,
    /// A fault stopped the database of this epoch: the next worker to look brings it back.
    stopped_epoch: AtomicU64,
    /// Stops that ended in a recovery, after which the run went on without a reopen.
    fault_recoveries: AtomicU64,
    /// Recoveries that the harness's own `Db::resume` call made.
    own_resumes: AtomicU64,
    /// The open database's count of recoveries when the harness last looked.
    recoveries_seen: AtomicU64,
    pub(crate) fault_reopens: AtomicU64,
    /// Reopens of a database closed while stopped after a failed sync dropped log bytes,
    /// judged as a prefix of the writes.
    lossy_reopens: AtomicU64,
    stopped_ops: AtomicU64,
    /// The sequence number of the last write known durable (fault runs).
    durable: AtomicU64,
    /// Log bytes failed syncs had dropped when the database was last known to hold every
    /// acknowledged write: at a reopen, or a recovery (fault runs).
    dropped_when_whole: AtomicU64,
    stop: AtomicBool,
    pub(crate) ops: AtomicU64,
    started: Instant,
    fatal: Mutex<Option<String>>,
    /// Flush, compaction, recovery and drop counts of the databases closed by reopens: a database's
    /// counters start again at zero when it is opened.
    carried: Mutex<EngineStats>,
    op_log: Option<Mutex<std::fs::File>>,
    /// The TTL work's clock, model and counters, when it runs.
    pub(crate) ttl: Option<TtlWork>,
    /// The held-reader work, when it runs (it needs the TTL work's clock).
    pub(crate) held: Option<HeldWork>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Harness {
    /// Opens (or creates) the database at `path` through `fs` and loads the expected state (from
    /// the journal, if the config names one that exists). With `faults`, the run is a fault run
    /// on that faulty disk (`fs` should be it).
    ///
    /// # Errors
    /// `Config` for bad settings; `Engine` if the database cannot be opened; `Io` for the journal.
    pub fn open(
        config: StressConfig,
        path: &Path,
        fs: Arc<dyn FileSystem>,
        faults: Option<FaultyFs>,
    ) -> Result<Self, StressError> {
        let mut config = config;
        config.validate().map_err(StressError::Config)?;
        let engine_offers = config.engine.capabilities();
        if let (Some(_), Support::Missing(why)) = (&faults, engine_offers.faulty_fs) {
            return Err(StressError::Config(format!(
                "a fault run runs on cairn alone ({}: {why})",
                config.engine.name()
            )));
        }
        let weights = config.weights.for_engine(&engine_offers);
        if weights != config.weights && !weights.writes_any() {
            return Err(StressError::Config(format!(
                "exercised nothing: on {} the mix writes nothing once its Cairn-only operations \
                 are left out",
                config.engine.name()
            )));
        }
        config.weights = weights;
        // A fault run's database closed while stopped may lose a suffix of the writes, which the
        // TTL model does not follow.
        let ttl = if config.ttl && faults.is_none() && engine_offers.ttl == Support::Native {
            Some(open_ttl_state(&config)?)
        } else {
            config.weights = config.weights.without_ttl();
            None
        };
        let mut options = Options::default()
            .file_system(fs)
            .memtable_size(config.memtable_size)
            // Levels scaled to the memtable, so even a short run fills several of them.
            .level_base_bytes(config.memtable_size as u64 / 2)
            .target_file_size(config.memtable_size as u64 / 4);
        if let Some(deadline) = config.deadline {
            options = options.delete_persistence_deadline(deadline);
        }
        let held = ttl.as_ref().map(|_| HeldWork::new(config.max_value_size));
        if let Some(work) = &ttl {
            options = options.clock(work.clock.clone());
        }
        if let Some(held) = &held {
            options = options.compaction_filter(held.filter.clone());
        }
        let settings = EngineSettings {
            kind: config.engine,
            memtable_size: config.memtable_size,
            target_file_size: config.memtable_size as u64 / 4,
            level_base_bytes: config.memtable_size as u64 / 2,
            grace: config.grace,
            compression: true,
            cairn: options,
            sequencer: Arc::new(Sequencer::default()),
        };
        let opener: Opener = Box::new(move |dir, mode| engine::open(dir, &settings, mode));
        Self::open_with(config, path, faults, (ttl, held), opener)
    }

    /// A harness on the engine `opener` opens, without the work that needs Cairn's own API
    /// (TTL, held readers, transactions): the peer path, on a test's model engine.
    #[cfg(test)]
    pub(crate) fn on_engine(
        mut config: StressConfig,
        path: &Path,
        opener: Opener,
    ) -> Result<Self, StressError> {
        config.validate().map_err(StressError::Config)?;
        config.ttl = false;
        config.weights = config.weights.without_ttl();
        config.weights.transaction = 0;
        Self::open_with(config, path, None, (None, None), opener)
    }

    /// Opens the database with `opener` and builds the harness around it (see [`Self::open`]).
    fn open_with(
        config: StressConfig,
        path: &Path,
        faults: Option<FaultyFs>,
        (ttl, held): (Option<TtlWork>, Option<HeldWork>),
        opener: Opener,
    ) -> Result<Self, StressError> {
        let mode = if config.expected_journal.is_none() {
            OpenMode::Fresh
        } else {
            OpenMode::Create
        };
        let engine = opener(path, mode)?;
        if let Some(db) = engine.as_cairn() {
            if ttl.is_some() {
                create_ttl_families(db)?;
            }
            if let Some(held) = &held {
                held.reset(db)?;
            }
        }
        let mut expected = match &config.expected_journal {
            Some(journal) => ExpectedState::from_journal(journal, config.keys)?,
            None => ExpectedState::new(config.keys),
        };
        if let Some(journal) = &config.expected_journal {
            expected.journal_to(journal)?;
        }
        let durable = engine.latest_seqno();
        if faults.is_some() {
            expected.set_durable(Some(durable));
        }
        // One run per log, starting with the settings a replay needs.
        let op_log = match &config.op_log {
            Some(p) => {
                let mut file = std::fs::File::create(p)?;
                file.write_all(crate::op_log::header_line(&config, &engine.families()).as_bytes())?;
                Some(Mutex::new(file))
            }
            None => None,
        };
        Ok(Self {
            config,
            expected,
            tally: Tally::default(),
            epoch: AtomicU64::new(0),
            path: path.to_path_buf(),
            opener,
            db: RwLock::new(Some(engine)),
            faults,
            stopped_epoch: AtomicU64::new(u64::MAX),
            fault_recoveries: AtomicU64::new(0),
            own_resumes: AtomicU64::new(0),
            recoveries_seen: AtomicU64::new(0),
            fault_reopens: AtomicU64::new(0),
            lossy_reopens: AtomicU64::new(0),
            stopped_ops: AtomicU64::new(0),
            durable: AtomicU64::new(durable),
            dropped_when_whole: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            started: Instant::now(),
            fatal: Mutex::new(None),
            carried: Mutex::new(EngineStats::default()),
            op_log,
            ttl,
            held,
        })
    }

    pub(crate) fn db(&self) -> RwLockReadGuard<'_, Option<Box<dyn StressEngine>>> {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the workers to stop after their current operation.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub(crate) fn should_stop(&self) -> bool {
        if self.stop.load(Ordering::Acquire)
            || crate::interrupt::stop_requested()
            || self.fatal_error().is_some()
        {
            return true;
        }
        match self.config.limit {
            Limit::Duration(d) => self.started.elapsed() >= d,
            Limit::Ops(n) => self.ops.load(Ordering::Relaxed) >= n,
        }
    }

    pub(crate) fn op_done(&self) {
        self.ops.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn fatal_error(&self) -> Option<String> {
        lock(&self.fatal).clone()
    }

    fn set_fatal(&self, why: String) {
        lock(&self.fatal).get_or_insert(why);
    }

    /// Records an engine error from a write (or a flush, a compaction: anything that changes
    /// the database). In a fault run it is tolerated and, unless the engine merely refused the
    /// request, asks for a recovery: a failed write stops the database. Otherwise it is fatal.
    pub(crate) fn engine_error(&self, op: &str, e: impl Into<EngineError>) {
        let e = e.into();
        self.tally.engine_error();
        if e.stopped() {
            self.stopped_ops.fetch_add(1, Ordering::Relaxed);
        }
        if self.faults.is_none() {
            self.set_fatal(format!("{op}: {e}"));
            return;
        }
        tracing::debug!(op, error = %e, "tolerated engine error");
        if !e.leaves_database_running() {
            self.stopped_epoch
                .store(self.epoch.load(Ordering::Acquire), Ordering::Release);
        }
    }

    /// Records an engine error from a read a worker made: tolerated in a fault run (an injected
    /// read fault fails the read, not the database), fatal otherwise.
    pub(crate) fn read_error(&self, op: &str, e: impl Into<EngineError>) {
        let e = e.into();
        self.tally.engine_error();
        if self.faults.is_none() {
            self.set_fatal(format!("{op}: {e}"));
        } else {
            tracing::debug!(op, error = %e, "tolerated read error");
        }
    }

    /// Runs a write to `targets`: pending before, committed at its sequence number after. If
    /// the engine refused it, it is aborted; if the outcome is unknown, the targets stay pending
    /// until a verification settles them.
    pub(crate) fn apply(
        &self,
        targets: &[(usize, KeyState)],
        op: &'static str,
        sync: bool,
        write: impl FnOnce() -> Result<SeqNo, EngineError>,
    ) {
        self.expected.begin(targets);
        match write() {
            Ok(seqno) => {
                self.expected.commit(targets, seqno);
                if sync {
                    self.note_durable(seqno);
                }
                self.log_op(0, op, targets);
            }
            Err(e) => {
                if e.refused() {
                    self.expected.abort(targets);
                } else {
                    self.expected.unknown(targets);
                }
                self.engine_error(op, e);
            }
        }
    }

    /// Every write up to `seqno` is durable (a synced write returned it).
    pub(crate) fn note_durable(&self, seqno: SeqNo) {
        if self.faults.is_none() {
            return;
        }
        let previous = self.durable.fetch_max(seqno, Ordering::AcqRel);
        if seqno > previous {
            self.expected.set_durable(Some(seqno));
        }
    }

    /// Appends an operation to the op log, if there is one.
    pub(crate) fn log_op(&self, thread: usize, op: &str, targets: &[(usize, KeyState)]) {
        let Some(log) = &self.op_log else {
            return;
        };
        let keys: Vec<String> = targets
            .iter()
            .map(|(k, s)| format!("{k}:{}:{}", u8::from(s.exists()), s.version()))
            .collect();
        let line = format!(
            "{{\"thread\":{thread},\"op\":\"{op}\",\"keys\":\"{}\"}}\n",
            keys.join(" ")
        );
        if let Err(e) = lock(log).write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "could not append to the op log");
        }
    }

    /// True if a fault stopped the database of `epoch` and it should be brought back.
    pub(crate) fn needs_recovery(&self, epoch: u64) -> bool {
        self.stopped_epoch.load(Ordering::Acquire) == epoch
    }

    /// Brings back the database of `epoch`, which a fault stopped, with no other worker
    /// running: waits for the engine's recovery (or makes it), checks every key strictly, and
    /// the run goes on on the same database. Only if it cannot be brought back (an
    /// `Unrecovered` failure) is it closed and reopened. `None` if another worker got there
    /// first.
    pub(crate) fn recover(&self, epoch: u64) -> Option<AfterFault> {
        let slot = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.epoch.load(Ordering::Acquire) != epoch || !self.needs_recovery(epoch) {
            return None;
        }
        // Every worker is between operations: any stop they met is the one handled here.
        self.stopped_epoch.store(u64::MAX, Ordering::Release);
        let engine = slot.as_deref()?;
        let db = engine.as_cairn()?;
        match self.bring_back(db, false) {
            Ok(()) => {
                self.fault_recoveries.fetch_add(1, Ordering::Relaxed);
                // Read faults would fail the check, not the database.
                if let Some(faults) = &self.faults {
                    faults.pause_errors();
                }
                self.verify_recovered(engine);
                if let Some(faults) = &self.faults {
                    faults.resume_errors();
                }
                self.note_whole(db);
                Some(AfterFault::Recovered)
            }
            Err(e) => {
                self.tally.fail(
                    Failure::Unrecovered,
                    format!("a transient fault left the database stopped: Db::resume failed with the faults paused: {e}"),
                );
                drop(slot);
                self.reopen(epoch, Reopen::AfterFault)
                    .then_some(AfterFault::Reopened)
            }
        }
    }

    /// Waits for the engine to recover from the stop a fault caused, for up to
    /// [`AUTO_RECOVERY_WAIT`], then makes sure with `Db::resume` (which returns at once on a
    /// running database); if injected faults fail that, tries again with them paused. With
    /// `paused` the faults are paused already and the database is not waited for.
    fn bring_back(&self, db: &Db, paused: bool) -> cairn::Result<()> {
        let seen = self.recoveries_seen.load(Ordering::Acquire);
        let waiting = Instant::now();
        while !paused && db.stats().recoveries <= seen && waiting.elapsed() < AUTO_RECOVERY_WAIT {
            std::thread::sleep(Duration::from_millis(5));
        }
        let before = db.stats().recoveries;
        let mut resumed = db.resume();
        if resumed.is_err()
            && let Some(faults) = &self.faults
        {
            faults.pause_errors();
            for _ in 0..PAUSED_RESUME_ATTEMPTS {
                resumed = db.resume();
                if resumed.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if !paused {
                faults.resume_errors();
            }
        }
        let after = db.stats().recoveries;
        if after > before {
            self.own_resumes.fetch_add(1, Ordering::Relaxed);
        }
        self.recoveries_seen.store(after, Ordering::Release);
        resumed
    }

    /// `db` is running, and holds every acknowledged write in synced tables or its live log:
    /// log bytes that failed syncs dropped until now cost nothing (each stopped it, and it has
    /// recovered since).
    fn note_whole(&self, db: &Db) {
        self.note_durable(db.durable_seqno());
        if let Some(faults) = &self.faults {
            self.dropped_when_whole
                .store(faults.dropped_bytes(".log"), Ordering::Release);
        }
    }

    /// Closes and reopens the database, then checks every key; false if another worker
    /// reopened it first. In a fault run the faults pause for the close and the reopen, and a
    /// stopped database is brought back first (`Db::resume`), so the check is strict. Only a
    /// database closed while still stopped, after a failed sync dropped log bytes, may have
    /// lost the writes after some point past the last durable one.
    pub(crate) fn reopen(&self, epoch: u64, why: Reopen) -> bool {
        let mut slot = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.epoch.load(Ordering::Acquire) != epoch {
            return false; // Another worker reopened it meanwhile.
        }
        if let Some(faults) = &self.faults {
            faults.pause_errors();
        }
        let mut closed_stopped = false;
        if let Some(held) = &self.held {
            held.forget_readers();
        }
        if let Some(engine) = slot.take() {
            if let Some(db) = engine.as_cairn()
                && self.faults.is_some()
            {
                // A stop not yet handled (the run's last fault, say) is recovered from first.
                match self.bring_back(db, true) {
                    Ok(()) => self.note_whole(db),
                    Err(e) if why == Reopen::AfterFault => {
                        tracing::debug!(error = %e, "closing a stopped database");
                        closed_stopped = true;
                    }
                    Err(e) => {
                        self.tally.fail(
                            Failure::Unrecovered,
                            format!("closing the database for a reopen, Db::resume failed with the faults paused: {e}"),
                        );
                        closed_stopped = true;
                    }
                }
            }
            self.carry(&engine.stats());
            if let Some(db) = engine.as_cairn() {
                // What the engine says no crash can lose must survive whatever it does not say.
                self.note_durable(db.durable_seqno());
            }
            if let Err(e) = engine.close()
                && self.faults.is_none()
            {
                self.set_fatal(format!("close: {e}"));
            }
        }
        let lost_log_bytes = closed_stopped
            && self.faults.as_ref().is_some_and(|f| {
                f.dropped_bytes(".log") > self.dropped_when_whole.load(Ordering::Acquire)
            });
        match (self.opener)(&self.path, OpenMode::Existing) {
            Ok(engine) => {
                // Checked before any worker can write again.
                let durable = self.durable.load(Ordering::Acquire);
                let context = if lost_log_bytes {
                    "after a fault that dropped log bytes, and reopen"
                } else if why == Reopen::Op {
                    "after reopen"
                } else if why == Reopen::Final {
                    "after the final reopen"
                } else {
                    "after a fault and reopen"
                };
                if lost_log_bytes {
                    self.lossy_reopens.fetch_add(1, Ordering::Relaxed);
                    self.verify_prefix(engine.as_ref(), context, durable);
                } else {
                    self.verify_db(engine.as_ref(), context);
                }
                // Everything it holds now is in tables.
                self.durable.store(engine.latest_seqno(), Ordering::Release);
                if let Some(faults) = &self.faults {
                    self.expected.set_durable(Some(engine.latest_seqno()));
                    self.dropped_when_whole
                        .store(faults.dropped_bytes(".log"), Ordering::Release);
                }
                if let Some(held) = &self.held
                    && let Some(db) = engine.as_cairn()
                    && let Err(e) = held.reset(db)
                {
                    self.set_fatal(format!("reset of the held family: {e}"));
                }
                self.recoveries_seen.store(0, Ordering::Release);
                *slot = Some(engine);
                self.epoch.fetch_add(1, Ordering::AcqRel);
                if why == Reopen::AfterFault {
                    self.fault_reopens.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                self.tally.fail(
                    Failure::Unreadable,
                    format!("the database could not be reopened: {e}"),
                );
                self.set_fatal(format!("reopen: {e}"));
            }
        }
        if let Some(faults) = &self.faults {
            faults.resume_errors();
        }
        true
    }

    /// Checks every key against the expected state, and settles keys whose last write's outcome
    /// was unknown on what the database holds. Nothing may write meanwhile: call it before or
    /// after the workers run.
    pub fn verify_all(&self, context: &str) {
        let guard = self.db();
        match guard.as_deref() {
            Some(engine) => self.verify_db(engine, context),
            None => self.tally.fail(
                Failure::Unreadable,
                format!("{context}: no database is open to verify"),
            ),
        }
    }

    /// Checks every key of `db` against every write made, and settles the keys whose last
    /// write's outcome was unknown.
    fn verify_db(&self, engine: &dyn StressEngine, context: &str) {
        if let Some(work) = &self.ttl
            && let Some(db) = engine.as_cairn()
        {
            crate::ttl_work::verify_all(&self.tally, self.config.max_value_size, work, db, context);
        }
        let Some(found) = self.read_all(engine, context) else {
            return;
        };
        for (k, value) in found.iter().enumerate() {
            let ok = self.expected.after(k, self.expected.before(k));
            let observed = observe(k, value.as_deref(), self.config.max_value_size);
            self.tally.judge(k, observed, &ok, context);
            self.settle(k, observed, &ok);
        }
    }

    /// Checks every key of `db` after a recovery, as strictly as after a reopen, and settles the
    /// keys whose last write's outcome was unknown. Snapshots taken before the recovery are
    /// still held, so a key is settled by a commit at its write's own sequence number (read
    /// back for a put; the latest for a delete), not by starting its history afresh.
    fn verify_recovered(&self, engine: &dyn StressEngine) {
        let context = "after a fault and recovery";
        let Some(found) = self.read_all(engine, context) else {
            return;
        };
        let cf = engine
            .as_cairn()
            .and_then(|db| db.column_family(engine::STRESS_CF).ok());
        let latest = engine.latest_seqno();
        for (k, value) in found.iter().enumerate() {
            // A write that failed was never applied (the log write or sync failed before the
            // memtables took it) and recovery replays no log: after an in-process recovery its
            // effect must be absent, unlike after a reopen, which may replay its record.
            let mut ok = self.expected.after(k, self.expected.before(k));
            if let Some(failed) = self.expected.uncertain(k) {
                ok.also.retain(|state| *state != failed);
            }
            let observed = observe(k, value.as_deref(), self.config.max_value_size);
            self.tally.judge(k, observed, &ok, context);
            let undecided =
                self.expected.uncertain(k).is_some() || self.expected.pending(k).is_some();
            if !undecided || !ok.allows(observed.version()) {
                continue;
            }
            let state = match observed {
                Observed::Version(v) => KeyState::present(v),
                Observed::Absent if !self.expected.get(k).exists() => self.expected.get(k),
                Observed::Absent => KeyState::deleted(self.expected.get(k).version()),
                Observed::Damaged => continue,
            };
            let seqno = if state == self.expected.get(k) || !state.exists() {
                latest
            } else {
                cf.as_ref()
                    .and_then(|cf| cf.get_versions(crate::value::key(k), 1).ok())
                    .and_then(|versions| versions.first().map(|v| v.seqno))
                    .unwrap_or(latest)
            };
            self.expected.settle_at(k, state, seqno);
        }
    }

    /// Checks `db` after a fault that dropped unsynced log bytes: it must hold exactly the
    /// state after some prefix of the writes (no holes), a prefix that reaches `durable`, the
    /// last write known durable. The expected state then forgets the writes past the prefix.
    fn verify_prefix(&self, engine: &dyn StressEngine, context: &str, durable: SeqNo) {
        let Some(found) = self.read_all(engine, context) else {
            return;
        };
        let observed: Vec<Observed> = found
            .iter()
            .enumerate()
            .map(|(k, v)| observe(k, v.as_deref(), self.config.max_value_size))
            .collect();
        // The prefixes each key allows, with and without the durable bound.
        let mut reaching = vec![(durable, SeqNo::MAX)];
        let mut any = vec![(0, SeqNo::MAX)];
        for (k, seen) in observed.iter().enumerate() {
            self.tally.verified();
            if *seen == Observed::Damaged {
                self.tally.fail(
                    Failure::WrongValue,
                    format!("{context}: key {k} holds bytes no write produced"),
                );
                continue;
            }
            let held = self.expected.held_at(k, seen.version());
            reaching = intersect(&reaching, &held);
            if !any.is_empty() {
                any = intersect(&any, &held);
            }
        }
        let latest = engine.latest_seqno();
        let Some(&(from, to)) = reaching.first() else {
            let (kind, why) = match any.last() {
                Some(&(_, to)) => (
                    Failure::LostWrite,
                    format!(
                        "it holds the writes up to seqno {to} at most, not to {durable}, the last one synced"
                    ),
                ),
                None => (
                    Failure::Hole,
                    "it is no prefix of the writes made".to_string(),
                ),
            };
            self.tally.fail(kind, format!("{context}: {why}"));
            for (k, seen) in observed.iter().enumerate() {
                self.settle_on(k, *seen);
            }
            return;
        };
        if from > latest {
            self.tally.fail(
                Failure::WrongValue,
                format!("{context}: it holds writes past its latest seqno {latest}"),
            );
        }
        // The numbers after the prefix are handed out again.
        let to = to.min(latest);
        for (k, seen) in observed.iter().enumerate() {
            self.expected.rewind(k, to);
            self.settle_on(k, *seen);
        }
    }

    /// Makes what `key` holds its expected state, if it is not already, and forgets any write
    /// of unknown outcome or in flight.
    fn settle_on(&self, key: usize, seen: Observed) {
        let state = self.expected.get(key);
        let state = match seen {
            Observed::Version(v) => KeyState::present(v),
            Observed::Absent if !state.exists() => state,
            Observed::Absent => KeyState::deleted(state.version()),
            Observed::Damaged => return,
        };
        if self.expected.get(key) != state
            || self.expected.uncertain(key).is_some()
            || self.expected.pending(key).is_some()
        {
            self.expected.resolve(key, state);
        }
    }

    /// Every key's value, or `None` after recording why the database could not be read.
    fn read_all(
        &self,
        engine: &dyn StressEngine,
        context: &str,
    ) -> Option<Vec<Option<bytes::Bytes>>> {
        let entries = match engine.scan_all() {
            Ok(entries) => entries,
            Err(e) => {
                self.tally
                    .fail(Failure::Unreadable, format!("{context}: scan: {e}"));
                return None;
            }
        };
        let mut found: Vec<Option<bytes::Bytes>> = vec![None; self.expected.len()];
        let mut last: Option<&bytes::Bytes> = None;
        for (k, v) in &entries {
            if last.is_some_and(|l| l >= k) {
                self.tally.fail(
                    Failure::WrongValue,
                    format!(
                        "{context}: the scan returned {:?} after {:?}",
                        String::from_utf8_lossy(k),
                        last.map(|l| String::from_utf8_lossy(l))
                    ),
                );
            }
            match key_index(k).and_then(|i| found.get_mut(i)) {
                Some(slot) => *slot = Some(v.clone()),
                None => self.tally.fail(
                    Failure::WrongValue,
                    format!("{context}: unknown key {:?}", String::from_utf8_lossy(k)),
                ),
            }
            last = Some(k);
        }
        Some(found)
    }

    /// Settles a key whose last write's outcome was unknown (or still in flight, in a journal
    /// a killed process left) on what the database holds, if that is legal.
    fn settle(&self, k: usize, observed: Observed, ok: &Acceptable) {
        if ok.allows(observed.version()) {
            self.settle_on(k, observed);
        }
    }

    /// A fault run must have gone through enough fault → recovery (or reopen) cycles, and
    /// mostly on a working database: otherwise its PASS would say little.
    pub(crate) fn check_exercised(&self) {
        let recoveries = self.fault_recoveries.load(Ordering::Relaxed);
        let reopens = self.fault_reopens.load(Ordering::Relaxed);
        if recoveries + reopens < MIN_FAULT_CYCLES {
            self.tally.fail(
                Failure::Unexercised,
                format!(
                    "only {recoveries} fault → recovery and {reopens} fault → reopen cycles (at \
                     least {MIN_FAULT_CYCLES} in all)"
                ),
            );
        }
        // The engine's own recovery is what is under test: cycles the harness's `resume` had to
        // finish do not count for it (a build whose automatic recovery never runs would
        // otherwise pass on the harness's resumes alone).
        let by_engine = self
            .stats()
            .recoveries
            .unwrap_or(0)
            .saturating_sub(self.own_resumes.load(Ordering::Relaxed));
        if recoveries >= MIN_FAULT_CYCLES && by_engine * 2 < recoveries {
            self.tally.fail(
                Failure::Unexercised,
                format!(
                    "the engine recovered on its own in only {by_engine} of {recoveries} fault \
                     cycles; the harness's Db::resume made the rest"
                ),
            );
        }
        let ops = self.ops.load(Ordering::Relaxed);
        let stopped = self.stopped_ops.load(Ordering::Relaxed);
        if stopped * 2 > ops {
            self.tally.fail(
                Failure::Unexercised,
                format!("{stopped} of {ops} operations met a stopped database"),
            );
        }
    }

    fn carry(&self, closing: &EngineStats) {
        lock(&self.carried).add_counters(closing);
    }

    /// The database's statistics, with the counters of the databases reopens closed added in.
    pub(crate) fn stats(&self) -> EngineStats {
        let mut stats = self
            .db()
            .as_deref()
            .map(StressEngine::stats)
            .unwrap_or_default();
        stats.add_counters(&lock(&self.carried));
        stats
    }

    /// The report as things stand.
    pub fn report(&self) -> StressReport {
        let stats = self.stats();
        let seconds = self.started.elapsed().as_secs_f64();
        let ops = self.tally.ops_by_type();
        let offers = self.config.engine.capabilities();
        let by_support = |emulated: bool| {
            offers
                .named()
                .into_iter()
                .filter_map(|(name, support)| match support {
                    Support::Emulated(how) if emulated => Some((name.to_string(), how.to_string())),
                    Support::Missing(why) if !emulated => Some((name.to_string(), why.to_string())),
                    _ => None,
                })
                .collect()
        };
        StressReport {
            engine: self.config.engine.name().to_string(),
            emulated: by_support(true),
            skipped: by_support(false),
            sequenced_by_harness: !offers.own_seqnos,
            seed: self.config.seed,
            seconds,
            ops_per_sec: per_sec(ops.values().sum::<u64>(), seconds),
            ops,
            verifications: self.tally.verifications(),
            flushes: stats.flushes,
            compactions: stats.compactions,
            dropped: stats.dropped,
            tombstones_pending: stats.tombstones_pending,
            engine_errors: self.tally.engine_errors(),
            recoveries: stats.recoveries.unwrap_or(0),
            fault_recoveries: self.fault_recoveries.load(Ordering::Relaxed),
            harness_resumes: self.own_resumes.load(Ordering::Relaxed),
            fault_reopens: self.fault_reopens.load(Ordering::Relaxed),
            lossy_reopens: self.lossy_reopens.load(Ordering::Relaxed),
            stopped_ops: self.stopped_ops.load(Ordering::Relaxed),
            fatal: self.fatal_error(),
            interrupted: crate::interrupt::stop_requested(),
            conflicts: self.tally.conflicts(),
            ttl: self.ttl.as_ref().map(TtlWork::counts).unwrap_or_default(),
            held: self.held.as_ref().map(HeldWork::counts).unwrap_or_default(),
            failures: self.tally.summary(),
        }
    }

    /// Closes the database.
    ///
    /// # Errors
    /// The engine's error from closing.
    pub fn close(&self) -> Result<(), StressError> {
        let db = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(engine) = db {
            engine.close()?;
        }
        Ok(())
    }

    /// The database, held exclusively: no worker runs an operation meanwhile.
    pub(crate) fn db_exclusive(
        &self,
    ) -> std::sync::RwLockWriteGuard<'_, Option<Box<dyn StressEngine>>> {
        self.db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The database under test, while open (for fault injection and crash drivers).
    pub fn with_db<T>(&self, f: impl FnOnce(&Db) -> T) -> Option<T> {
        self.db().as_deref().and_then(StressEngine::as_cairn).map(f)
    }
}

/// The TTL model (from the journal beside the expected state's, if the config names one) and a
/// clock at the reading the journal last recorded.
fn open_ttl_state(config: &StressConfig) -> Result<TtlWork, StressError> {
    let mut state = match &config.expected_journal {
        Some(journal) => TtlState::from_journal(&ttl_journal(journal), config.ttl_keys)?,
        None => TtlState::new(config.ttl_keys),
    };
    if let Some(journal) = &config.expected_journal {
        state.journal_to(&ttl_journal(journal))?;
    }
    let clock = Arc::new(ManualClock::new(state.clock_ms.unwrap_or(CLOCK_START_MS)));
    Ok(TtlWork::new(state, clock))
}

/// The TTL model's journal, beside the expected state's.
fn ttl_journal(journal: &Path) -> PathBuf {
    let mut name = journal.as_os_str().to_owned();
    name.push(".ttl");
    PathBuf::from(name)
}

/// Creates the TTL families a database lacks.
fn create_ttl_families(db: &Db) -> Result<(), StressError> {
    for family in TTL_FAMILIES {
        if db.column_family(family.name).is_err() {
            db.create_column_family(
                family.name,
                CfOptions::default()
                    .ttl(Duration::from_millis(family.cf_ttl_ms))
                    .max_versions(family.max_versions),
            )?;
        }
    }
    Ok(())
}

pub(crate) fn per_sec(count: u64, seconds: f64) -> f64 {
    #[expect(
        clippy::cast_precision_loss,
        reason = "operation counts are far below 2^52"
    )]
    let count = count as f64;
    count / seconds.max(1e-3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OpWeights;

    /// A reopen that finds the stressed family gone reports it (`Unreadable`), rather than
    /// making an empty family and judging that.
    #[test]
    fn a_family_lost_at_a_reopen_is_reported_not_recreated() -> Result<(), StressError> {
        let dir = tempfile::tempdir()?;
        let config = StressConfig {
            keys: 100,
            ttl: false,
            weights: OpWeights::default().without_ttl(),
            ..StressConfig::default()
        };
        let fs: Arc<dyn FileSystem> = Arc::new(cairn_fs::RealFs::new());
        let harness = Harness::open(config, dir.path(), fs, None)?;
        harness
            .with_db(|db| db.drop_column_family(engine::STRESS_CF))
            .expect("open")?;
        assert!(harness.reopen(0, Reopen::Op));
        let report = harness.report();
        assert!(report.failures.unreadable > 0, "{}", report.summary());
        assert!(
            report
                .failures
                .messages
                .iter()
                .any(|m| m.contains("could not be reopened")),
            "{}",
            report.summary()
        );
        Ok(())
    }
}
