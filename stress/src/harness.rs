//! The harness: the database under test, the expected state, the workers, and the checks that
//! run between and after them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use cairn::{CfOptions, Db, Options};
use cairn_fs::FileSystem;

use crate::config::{Limit, StressConfig};
use crate::expected::{ExpectedState, KeyState};
use crate::report::{Failure, StressReport, Tally};
use crate::value::key_index;
use crate::worker::{Worker, observe};

/// The column family the harness stresses (it has the configured grace period).
pub const STRESS_CF: &str = "stress";

/// Why a run could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StressError {
    /// The configuration is invalid.
    #[error("bad arguments: {0}")]
    Config(String),
    /// The engine failed where the run does not tolerate failures.
    #[error("engine error: {0}")]
    Engine(#[from] cairn::Error),
    /// Files of the harness itself (op log, journal, report) could not be written.
    #[error("harness I/O: {0}")]
    Io(#[from] std::io::Error),
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

/// Everything the workers share.
pub struct Harness {
    pub(crate) config: StressConfig,
    pub(crate) expected: ExpectedState,
    pub(crate) tally: Tally,
    pub(crate) epoch: AtomicU64,
    path: PathBuf,
    options: Options,
    db: RwLock<Option<Db>>,
    stop: AtomicBool,
    ops: AtomicU64,
    started: Instant,
    /// Engine errors are expected (fault injection) rather than fatal.
    tolerate_errors: bool,
    fatal: Mutex<Option<String>>,
    /// Flush, compaction and drop counts of the databases closed by reopens: a database's
    /// counters start again at zero when it is opened.
    carried: Mutex<cairn::Stats>,
    op_log: Option<Mutex<std::fs::File>>,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Harness {
    /// Opens (or creates) the database at `path` through `fs` and loads the expected state (from
    /// the journal, if the config names one that exists).
    ///
    /// # Errors
    /// `Config` for bad settings; `Engine` if the database cannot be opened; `Io` for the journal.
    pub fn open(
        config: StressConfig,
        path: &Path,
        fs: Arc<dyn FileSystem>,
        tolerate_errors: bool,
    ) -> Result<Self, StressError> {
        config.validate().map_err(StressError::Config)?;
        let mut options = Options::default()
            .file_system(fs)
            .memtable_size(config.memtable_size)
            // Levels scaled to the memtable, so even a short run fills several of them.
            .level_base_bytes(config.memtable_size as u64 / 2)
            .target_file_size(config.memtable_size as u64 / 4);
        if let Some(deadline) = config.deadline {
            options = options.delete_persistence_deadline(deadline);
        }
        let db = Db::open(path, options.clone())?;
        if db.column_family(STRESS_CF).is_err() {
            db.create_column_family(
                STRESS_CF,
                CfOptions::default().tombstone_grace(config.grace),
            )?;
        }
        let mut expected = match &config.expected_journal {
            Some(journal) => ExpectedState::from_journal(journal, config.keys)?,
            None => ExpectedState::new(config.keys),
        };
        if let Some(journal) = &config.expected_journal {
            expected.journal_to(journal)?;
        }
        let op_log = match &config.op_log {
            Some(p) => Some(Mutex::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            )),
            None => None,
        };
        Ok(Self {
            config,
            expected,
            tally: Tally::default(),
            epoch: AtomicU64::new(0),
            path: path.to_path_buf(),
            options,
            db: RwLock::new(Some(db)),
            stop: AtomicBool::new(false),
            ops: AtomicU64::new(0),
            started: Instant::now(),
            tolerate_errors,
            fatal: Mutex::new(None),
            carried: Mutex::new(cairn::Stats::default()),
            op_log,
        })
    }

    pub(crate) fn db(&self) -> RwLockReadGuard<'_, Option<Db>> {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Asks the workers to stop after their current operation.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub(crate) fn should_stop(&self) -> bool {
        if self.stop.load(Ordering::Acquire) || self.fatal_error().is_some() {
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

    fn fatal_error(&self) -> Option<String> {
        self.fatal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records an engine error: tolerated under fault injection, fatal otherwise.
    pub(crate) fn engine_error(&self, op: &str, e: &cairn::Error) {
        self.tally.engine_error();
        if self.tolerate_errors {
            tracing::debug!(op, error = %e, "tolerated engine error");
            return;
        }
        let mut fatal = self
            .fatal
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if fatal.is_none() {
            *fatal = Some(format!("{op}: {e}"));
        }
    }

    /// Runs a write to `targets`: pending before, committed after. If the engine fails, the
    /// outcome is unknown and the targets stay pending.
    pub(crate) fn apply(
        &self,
        targets: &[(usize, KeyState)],
        op: &'static str,
        write: impl FnOnce() -> cairn::Result<()>,
    ) {
        self.expected.begin(targets);
        match write() {
            Ok(()) => {
                self.expected.commit(targets);
                self.log_op(0, op, targets);
            }
            Err(e) => self.engine_error(op, &e),
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
        let mut file = log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "could not append to the op log");
        }
    }

    /// Closes and reopens the database, then checks every key.
    pub(crate) fn reopen(&self) {
        let mut slot = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(db) = slot.take() {
            self.carry(&db.stats());
            if let Err(e) = db.close() {
                self.engine_error("close", &e);
            }
        }
        match Db::open(&self.path, self.options.clone()) {
            Ok(db) => {
                // Checked before any worker can write again.
                self.verify_db(&db, "after reopen");
                *slot = Some(db);
                self.epoch.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) => self.engine_error("reopen", &e),
        }
    }

    /// Checks every key against the expected state, and settles keys whose last write's outcome
    /// was unknown on what the database holds. Nothing may write meanwhile: call it before or
    /// after the workers run.
    pub fn verify_all(&self, context: &str) {
        let guard = self.db();
        if let Some(db) = guard.as_ref() {
            self.verify_db(db, context);
        }
    }

    fn verify_db(&self, db: &Db, context: &str) {
        let cf = match db.column_family(STRESS_CF) {
            Ok(cf) => cf,
            Err(e) => return self.engine_error("verify", &e),
        };
        let mut found: Vec<Option<bytes::Bytes>> = vec![None; self.expected.len()];
        let scan = cf.iter().and_then(|iter| {
            for item in iter {
                let (k, v) = item?;
                match key_index(&k).and_then(|i| found.get_mut(i)) {
                    Some(slot) => *slot = Some(v),
                    None => self.tally.fail(
                        Failure::WrongValue,
                        format!("{context}: unknown key {:?}", String::from_utf8_lossy(&k)),
                    ),
                }
            }
            Ok(())
        });
        if let Err(e) = scan {
            return self.engine_error("verify scan", &e);
        }
        for (k, value) in found.iter().enumerate() {
            let ok = self.expected.after(k, self.expected.before(k));
            let observed = observe(k, value.as_deref(), self.config.max_value_size);
            self.tally.judge(k, observed, &ok, context);
            if !ok.is_settled() {
                self.settle(k, observed, &ok);
            }
        }
    }

    /// Settles a key whose last write's outcome was unknown on what the database holds.
    fn settle(
        &self,
        k: usize,
        observed: crate::report::Observed,
        ok: &crate::expected::Acceptable,
    ) {
        let newest = ok
            .pending
            .iter()
            .flatten()
            .chain([&ok.before, &ok.after])
            .map(|s| s.version())
            .max()
            .unwrap_or(0);
        let state = match observed {
            crate::report::Observed::Version(v) if ok.allows(Some(v)) => KeyState::present(v),
            crate::report::Observed::Absent if ok.allows(None) => KeyState::deleted(newest),
            _ => return,
        };
        self.expected.resolve(k, state);
    }

    /// Runs the workers to the end, then verifies everything and reports.
    ///
    /// # Errors
    /// `Engine` if the engine failed where the run does not tolerate it.
    pub fn run(&self) -> Result<StressReport, StressError> {
        self.verify_all("at start");
        std::thread::scope(|scope| {
            for id in 0..self.config.threads {
                scope.spawn(move || Worker::new(self, id).run());
            }
            if self.config.progress {
                scope.spawn(|| self.show_progress());
            }
        });
        if let Some(fatal) = self.fatal_error() {
            return Err(StressError::Engine(cairn::Error::InvalidArgument(fatal)));
        }
        if let Some(db) = self.db().as_ref()
            && let Err(e) = db.wait_for_background_work()
        {
            self.engine_error("wait_for_background_work", &e);
        }
        self.verify_all("at the end");
        Ok(self.report())
    }

    fn show_progress(&self) {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let mut last = (Instant::now(), 0u64);
        while !self.should_stop() {
            std::thread::sleep(Duration::from_millis(250));
            let ops = self.ops.load(Ordering::Relaxed);
            let rate = per_sec(ops - last.1, last.0.elapsed().as_secs_f64());
            last = (Instant::now(), ops);
            let stats = self.stats();
            bar.set_message(format!(
                "{ops} ops ({rate:.0}/s) | flushes {} | compactions {} | tombstones {} | failures {}",
                stats.flushes,
                stats.compactions,
                stats.tombstones_pending,
                self.tally.total_failures()
            ));
            bar.tick();
        }
        bar.finish_and_clear();
    }

    fn carry(&self, closing: &cairn::Stats) {
        let mut carried = self
            .carried
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        add_counters(&mut carried, closing);
    }

    /// The database's statistics, with the counters of the databases reopens closed added in.
    fn stats(&self) -> cairn::Stats {
        let mut stats = self.db().as_ref().map(Db::stats).unwrap_or_default();
        add_counters(
            &mut stats,
            &self
                .carried
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        stats
    }

    /// The report as things stand.
    pub fn report(&self) -> StressReport {
        let stats = self.stats();
        let seconds = self.started.elapsed().as_secs_f64();
        let d = stats.dropped;
        let dropped = [
            ("shadowed", d.shadowed),
            ("obsolete_tombstone", d.obsolete_tombstone),
            ("single_delete", d.single_delete),
            ("range", d.range),
            ("expired", d.expired),
            ("filter", d.filter),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let ops = self.tally.ops_by_type();
        StressReport {
            seed: self.config.seed,
            seconds,
            ops_per_sec: per_sec(ops.values().sum::<u64>(), seconds),
            ops,
            verifications: self.tally.verifications(),
            flushes: stats.flushes,
            compactions: stats.compactions,
            dropped,
            tombstones_pending: stats.tombstones_pending,
            engine_errors: self.tally.engine_errors(),
            conflicts: self.tally.conflicts(),
            failures: self.tally.summary(),
        }
    }

    /// Takes over another harness's expected state (after a reopen of the same database).
    pub fn adopt_expected(&self, other: &Harness) {
        self.expected.copy_from(&other.expected);
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
        if let Some(db) = db {
            db.close()?;
        }
        Ok(())
    }

    /// The database under test, while open (for fault injection and crash drivers).
    pub fn with_db<T>(&self, f: impl FnOnce(&Db) -> T) -> Option<T> {
        self.db().as_ref().map(f)
    }

    /// Drops the database without closing it cleanly (the caller has made the file system
    /// refuse writes, as a crash would).
    pub fn abandon(&self) {
        let db = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(db);
    }
}

fn per_sec(count: u64, seconds: f64) -> f64 {
    #[expect(
        clippy::cast_precision_loss,
        reason = "operation counts are far below 2^52"
    )]
    let count = count as f64;
    count / seconds.max(1e-3)
}

/// Adds the counters a reopen would reset (flushes, compactions, drops) of `from` to `to`.
fn add_counters(to: &mut cairn::Stats, from: &cairn::Stats) {
    to.flushes += from.flushes;
    to.compactions += from.compactions;
    to.dropped.add(&from.dropped);
}
