//! Cairn's stress harness: random concurrent operations against the engine, every read checked
//! against an expected state, and crash loops that kill the process or cut the power.
//!
//! - [`run_stress`]: worker threads pick operations from a weighted mix (reads, scans, puts,
//!   batches, deletes, single deletes where legal, range deletes, snapshots, transactions,
//!   flushes, `compact_range`, reopens). Every read is judged against the [`ExpectedState`],
//!   which marks writes in flight as pending so a read that races a write is judged fairly, as
//!   `RocksDB`'s `db_stress` does. A snapshot's range checksum must not change before it is
//!   released, whatever compactions ran meanwhile.
//! - [`crashtest`]: the blackbox loop (a child process killed with SIGKILL, every acknowledged
//!   write must survive) and the power-loss loop (in process, on the faulty file system: every
//!   synced write survives, the rest recovered form a prefix).
//! - [`run_with_faults`]: I/O errors injected one in N; the database may fail operations but never
//!   serves wrong data, and verifies clean once reopened without faults.
//!
//! It tests through the public API only; it does not know the engine's internals.

pub mod config;
pub mod crashtest;
pub mod expected;
mod harness;
pub mod replay;
mod report;
pub mod value;
mod worker;

use std::sync::Arc;

pub use config::{Limit, OpWeights, StressConfig};
pub use expected::{ExpectedState, KeyState};
pub use harness::{Harness, STRESS_CF, StressError};
pub use report::{Failure, Failures, StressReport};

/// Runs a stress against a real directory (a temporary one unless the config names one).
///
/// # Errors
/// `Config` for bad settings (exit code 3); `Engine` if the engine fails (exit code 2).
pub fn run_stress(config: StressConfig) -> Result<StressReport, StressError> {
    let temp = match config.db {
        Some(_) => None,
        None => Some(tempfile::tempdir()?),
    };
    let path = config
        .db
        .clone()
        .or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()))
        .unwrap_or_default();
    let harness = Harness::open(config, &path, Arc::new(cairn_fs::RealFs::new()), false)?;
    let report = harness.run()?;
    harness.close()?;
    Ok(report)
}

/// Runs a stress with I/O errors injected one operation in `one_in` of every kind, then stops
/// the faults, reopens the database and verifies every key.
///
/// # Errors
/// `Config` for bad settings; `Engine` if the database cannot be reopened once the faults stop.
pub fn run_with_faults(config: StressConfig, one_in: u32) -> Result<StressReport, StressError> {
    use cairn_fs::{FaultyFs, OpKind};
    let dir = tempfile::tempdir()?;
    let fs = FaultyFs::new(config.seed);
    let harness = Harness::open(config.clone(), dir.path(), Arc::new(fs.clone()), true)?;
    for kind in [
        OpKind::Append,
        OpKind::Sync,
        OpKind::Create,
        OpKind::Rename,
        OpKind::SyncDir,
        OpKind::Read,
    ] {
        fs.inject_errors(kind, one_in);
    }
    let faulted = harness.run()?;
    fs.clear_errors();
    harness.abandon();
    let mut clean = config;
    clean.expected_journal = None;
    let reopened = Harness::open(clean, dir.path(), Arc::new(fs), false)?;
    // The expected state carries over: writes that failed stay pending, both outcomes legal.
    reopened.adopt_expected(&harness);
    reopened.verify_all("after faults stopped and reopen");
    let mut report = reopened.report();
    report.ops = faulted.ops;
    report.engine_errors = faulted.engine_errors;
    let mut failures = faulted.failures;
    failures.merge(report.failures);
    report.failures = failures;
    reopened.close()?;
    Ok(report)
}
