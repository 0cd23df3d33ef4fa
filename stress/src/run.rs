//! The entry points: a stress on a real directory, and fault runs on the faulty file system.

use std::path::Path;
use std::sync::Arc;

use crate::config::StressConfig;
use crate::engine::EngineKind;
use crate::harness::{Harness, StressError};
use crate::report::StressReport;

/// The file the harness leaves in a database it created, so that a later run on it knows the
/// directory is its own to write into. The engine ignores files that are not its own in a
/// directory with a `CURRENT`.
pub const STRESS_MARKER: &str = "CAIRN-STRESS";

/// Runs a stress against a real directory (a temporary one unless the config names one).
///
/// A named directory must be empty, missing, or one a stress created (it holds
/// [`STRESS_MARKER`]); any other — a user's database — is refused unless `config.reuse` says
/// to write into it, before anything is opened. Without an expected-state journal the
/// harness's families start empty (see [`Harness::open`]).
///
/// # Errors
/// `Config` for bad settings or a directory that is not the harness's (exit code 3); `Engine`
/// if the database cannot be opened (exit code 2). An engine error during the run ends it
/// early but still returns a report (with `fatal` set, and the final verification's failures).
pub fn run_stress(config: StressConfig) -> Result<StressReport, StressError> {
    config.validate().map_err(StressError::Config)?;
    let fresh = match &config.db {
        Some(dir) => claim(dir, config.reuse, config.engine)?,
        None => true,
    };
    let temp = match config.db {
        Some(_) => None,
        None => Some(crate::TemporaryDir::new()?),
    };
    let path = config
        .db
        .clone()
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .unwrap_or_default();
    let engine = config.engine;
    let harness = Harness::open(config, &path, Arc::new(cairn_fs::RealFs::new()), None)?;
    if fresh {
        mark_engine(&path, engine)?;
    }
    let report = harness.run()?;
    if report.fatal.is_none() {
        harness.close()?;
    }
    Ok(report)
}

/// Whether the stress may write into `dir`: true if it is new to the harness (missing or
/// empty), false if a stress made it or `reuse` allows it; an error (`Config`) for anything
/// else: a user's database, or any directory with files a stress did not leave. `stress
/// replay` and `crashtest` ask the same before they write.
///
/// # Errors
/// `Config` naming the directory, or `Io` if it cannot be listed.
pub fn claim(dir: &Path, reuse: bool, engine: EngineKind) -> Result<bool, StressError> {
    let mut entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(StressError::Config(format!(
                "{} is a file, not a directory",
                dir.display()
            )));
        }
        Err(e) => return Err(e.into()),
    };
    if entries.next().is_none() {
        return Ok(true);
    }
    if let Some(made_by) = marker_engine(dir)?
        && made_by != engine.name()
    {
        // Even with --reuse: a journal or a database of one engine means nothing to another.
        return Err(StressError::Config(format!(
            "{} is a stress database of {made_by}, not {}: give --engine {made_by}, or an empty \
             or new directory",
            dir.display(),
            engine.name()
        )));
    }
    if reuse || dir.join(STRESS_MARKER).exists() {
        return Ok(false);
    }
    Err(StressError::Config(format!(
        "{} is not empty and no stress created it: a stress would add its column families \
         (stress, ttl_one, ttl_three, held) and write into them; `cairn stress --reuse` allows \
         it, a replay or a crash test needs an empty or new directory",
        dir.display()
    )))
}

/// Leaves [`STRESS_MARKER`] in `dir`, a directory the harness made its own (Cairn's, or one
/// that holds no database of its own, as a cluster's).
///
/// # Errors
/// `Io` if the file cannot be written.
pub fn mark(dir: &Path) -> Result<(), StressError> {
    std::fs::write(dir.join(STRESS_MARKER), MARKER_TEXT)?;
    Ok(())
}

/// Leaves [`STRESS_MARKER`] in `dir`, a database of `engine` the harness made its own: a
/// stress of another engine is refused there.
///
/// # Errors
/// `Io` if the file cannot be written.
pub fn mark_engine(dir: &Path, engine: EngineKind) -> Result<(), StressError> {
    let text = format!("{MARKER_TEXT}{ENGINE_LINE}{}\n", engine.name());
    std::fs::write(dir.join(STRESS_MARKER), text)?;
    Ok(())
}

const MARKER_TEXT: &str = "A `cairn stress` database: later stresses may write into it.\n";
const ENGINE_LINE: &str = "engine: ";

/// The engine the marker in `dir` names: `cairn` for a marker that names none (written before
/// there were other engines, or by `mark` for a directory of Cairn's); `None` with no marker.
fn marker_engine(dir: &Path) -> Result<Option<String>, StressError> {
    match std::fs::read_to_string(dir.join(STRESS_MARKER)) {
        Ok(text) => Ok(Some(
            text.lines()
                .find_map(|l| l.strip_prefix(ENGINE_LINE))
                .unwrap_or(EngineKind::Cairn.name())
                .to_string(),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Runs a stress with I/O errors injected one operation in `one_in` of every kind: appends fail
/// torn, syncs fail dropping or keeping the unsynced bytes. Each time a fault stops the
/// database the harness waits for its recovery (or calls `Db::resume`, with the faults paused
/// if they keep failing it), verifies every key strictly, and the run goes on; at the end the
/// faults stop, the database is reopened and everything is verified once more, as strictly:
/// no acknowledged write may be missing. A run with fewer than
/// [`MIN_FAULT_CYCLES`](crate::MIN_FAULT_CYCLES) fault → recovery cycles, or whose operations
/// mostly met a stopped database, fails as unexercised; a stop that `Db::resume` could not end
/// even with the faults paused fails as unrecovered.
///
/// # Errors
/// `Config` for bad settings; `Engine` if the database cannot be created.
pub fn run_with_faults(config: StressConfig, one_in: u32) -> Result<StressReport, StressError> {
    run_with_fault_plan(config, &FaultPlan::every_kind(one_in))
}

/// Which faults a fault run injects.
#[derive(Debug, Clone)]
pub struct FaultPlan {
    /// One operation in this many of each kind fails.
    pub one_in: u32,
    /// The kinds of operation that fail.
    pub kinds: Vec<cairn_fs::OpKind>,
    /// What a failed sync does to the unsynced bytes.
    pub sync_failure: cairn_fs::SyncFailure,
    /// Only files whose path contains this fail (empty: every file).
    pub path_contains: String,
}

impl FaultPlan {
    /// Every kind that writes or reads, one in `one_in`; syncs drop or keep bytes at random.
    pub fn every_kind(one_in: u32) -> Self {
        use cairn_fs::OpKind;
        Self {
            one_in,
            kinds: vec![
                OpKind::Append,
                OpKind::Sync,
                OpKind::Create,
                OpKind::Rename,
                OpKind::SyncDir,
                OpKind::Read,
            ],
            sync_failure: cairn_fs::SyncFailure::Either,
            path_contains: String::new(),
        }
    }
}

/// Runs a fault run with `plan`'s faults (see [`run_with_faults`]).
///
/// # Errors
/// `Config` for bad settings; `Engine` if the database cannot be created.
pub fn run_with_fault_plan(
    config: StressConfig,
    plan: &FaultPlan,
) -> Result<StressReport, StressError> {
    let dir = crate::TemporaryDir::new()?;
    let fs = cairn_fs::FaultyFs::new(config.seed);
    fs.set_sync_failure(plan.sync_failure);
    let harness = Harness::open(config, dir.path(), Arc::new(fs.clone()), Some(fs.clone()))?;
    for &kind in &plan.kinds {
        fs.inject_errors_matching(kind, plan.one_in, &plan.path_contains);
    }
    let report = harness.run()?;
    if report.fatal.is_none() {
        harness.close()?;
    }
    Ok(report)
}
