//! The harness on the real engine: short runs pass, with reopens, with faults, across power
//! losses. (The planted-bug tests are in `planted_bugs.rs`.)

use std::time::Duration;

use cairn_stress::CrashConfig;
use cairn_stress::{Limit, OpWeights, StressConfig};

fn short(seed: u64) -> StressConfig {
    let weights = OpWeights {
        reopen: 20,
        compact_range: 100,
        flush: 100,
        ..OpWeights::default()
    };
    StressConfig {
        threads: 4,
        keys: 2_000,
        seed,
        limit: Limit::Ops(15_000),
        weights,
        memtable_size: 32 * 1024,
        grace: Duration::from_millis(seed % 2 * 100),
        ..StressConfig::default()
    }
}

#[test]
fn a_short_stress_with_reopens_finds_nothing_wrong() -> Result<(), cairn_stress::StressError> {
    for seed in 0..2 {
        let report = cairn_stress::run_stress(short(seed))?;
        assert!(
            report.failures.is_clean(),
            "seed {seed}: {}",
            report.summary()
        );
        assert!(report.verifications > 10_000);
        assert!(
            report.compactions > Some(0) && report.flushes > Some(0),
            "{}",
            report.summary()
        );
        assert!(report.ops.get("reopen").copied().unwrap_or(0) > 0);
        assert!(report.ops.get("snapshot_reread").copied().unwrap_or(0) > 0);
        assert!(
            report.held.readers > 0 && report.held.checks > 0 && report.held.scenes > 0,
            "no held reader was checked: {}",
            report.summary()
        );
    }
    Ok(())
}

#[test]
fn injected_io_errors_never_produce_wrong_data_and_each_stop_is_recovered_and_verified()
-> Result<(), cairn_stress::StressError> {
    let mut config = short(7);
    config.weights.reopen = 0;
    config.limit = Limit::Ops(5_000);
    let report = cairn_stress::run_with_faults(config, 50)?;
    println!("{}", report.summary());
    assert!(
        report.engine_errors > 0,
        "no fault was injected: {}",
        report.summary()
    );
    assert!(
        report.fault_recoveries >= cairn_stress::MIN_FAULT_CYCLES
            && report.recoveries >= report.fault_recoveries - report.harness_resumes,
        "{}",
        report.summary()
    );
    assert!(
        report.stopped_ops * 2 < report.ops.values().sum::<u64>(),
        "mostly a stopped database: {}",
        report.summary()
    );
    assert!(
        report.ops.get("snapshot_reread").copied().unwrap_or(0) > 0,
        "no held snapshot was read twice: {}",
        report.summary()
    );
    assert!(report.seconds > 0.0 && report.fatal.is_none());
    assert_eq!(report.exit_code(), 0, "{}", report.summary());
    Ok(())
}

/// Log syncs that fail, dropping the unsynced bytes or keeping them: the engine recovers from
/// each (a new log, the memtables flushed), the run goes on without a reopen, and every check
/// after — the `reopen` operation's and the end's — is strict: no acknowledged write is lost,
/// and no reopen is judged as a prefix of the writes.
fn log_sync_failures(sync_failure: cairn_fs::SyncFailure, seed: u64) -> cairn_stress::StressReport {
    let mut config = short(seed);
    config.weights.reopen = 5;
    config.limit = Limit::Ops(5_000);
    config.memtable_size = 16 * 1024;
    config.sync_probability = 0.05;
    let plan = cairn_stress::FaultPlan {
        one_in: 4,
        kinds: vec![cairn_fs::OpKind::Sync],
        sync_failure,
        path_contains: ".log".into(),
    };
    let report = cairn_stress::run_with_fault_plan(config, &plan).expect("the fault run");
    println!("{sync_failure:?}: {}", report.summary());
    assert!(
        report.fault_recoveries >= cairn_stress::MIN_FAULT_CYCLES,
        "{}",
        report.summary()
    );
    assert!(report.recoveries > 0, "{}", report.summary());
    assert!(
        report.ops.get("reopen").copied().unwrap_or(0) > 0,
        "no strict reopen after a recovery: {}",
        report.summary()
    );
    assert_eq!(
        (report.fault_reopens, report.lossy_reopens),
        (0, 0),
        "{}",
        report.summary()
    );
    assert_eq!(report.exit_code(), 0, "{}", report.summary());
    report
}

#[test]
fn log_syncs_that_drop_their_bytes_are_recovered_from_losing_no_acknowledged_write() {
    log_sync_failures(cairn_fs::SyncFailure::DropsUnsynced, 11);
}

#[test]
fn log_syncs_that_keep_their_bytes_are_recovered_from_losing_no_acknowledged_write() {
    log_sync_failures(cairn_fs::SyncFailure::KeepsBytes, 12);
}

/// The checker fails closed: a run whose database cannot be read at the end is a failure.
#[test]
fn a_verification_that_cannot_read_the_database_fails() -> Result<(), cairn_stress::StressError> {
    let dir = tempfile::tempdir()?;
    // Without the held-reader work: 200 operations may spend their few held ones on readers a
    // reopen drops, which fails the run as unexercised before the check under test.
    let config = StressConfig {
        limit: Limit::Ops(200),
        keys: 200,
        weights: OpWeights {
            held_readers: 0,
            held_scene: 0,
            ..short(3).weights
        },
        ..short(3)
    };
    let harness = cairn_stress::Harness::open(
        config,
        dir.path(),
        std::sync::Arc::new(cairn_fs::RealFs::new()),
        None,
    )?;
    let report = harness.run()?;
    assert_eq!(report.exit_code(), 0, "{}", report.summary());
    harness
        .with_db(|db| db.drop_column_family(cairn_stress::STRESS_CF))
        .expect("open")
        .expect("drop the stressed family");
    harness.verify_all("after the family went");
    let report = harness.report();
    assert!(report.failures.unreadable > 0, "{}", report.summary());
    assert_eq!(report.exit_code(), 1);
    Ok(())
}

#[test]
fn power_loss_cycles_keep_synced_writes_and_recover_a_prefix()
-> Result<(), cairn_stress::StressError> {
    let dir = tempfile::tempdir()?;
    let config = CrashConfig {
        cycles: 5,
        seed: 3,
        writes_per_cycle: 800,
        stress: StressConfig {
            keys: 1_000,
            ..StressConfig::default()
        },
        ..CrashConfig::default()
    };
    let report = cairn_stress::power_loss(&config, dir.path())?;
    assert_eq!(report.cycles, 5);
    assert_eq!(report.faults, 2, "cycles 1 and 3 meet a disk fault");
    assert_eq!(
        report.recoveries, 2,
        "the engine recovers from each fault, and loses nothing it had acknowledged"
    );
    assert!(report.failures.is_clean(), "{:?}", report.failures);
    Ok(())
}

/// The held-reader work fails closed: a run that has it on but whose held readers checked
/// nothing does not pass.
#[test]
fn a_run_whose_held_readers_checked_nothing_fails_as_unexercised()
-> Result<(), cairn_stress::StressError> {
    let weights = OpWeights {
        held_readers: 1,
        held_scene: 0,
        ..OpWeights::default()
    };
    let config = StressConfig {
        threads: 1,
        keys: 200,
        limit: Limit::Ops(200),
        weights,
        ..StressConfig::default()
    };
    let report = cairn_stress::run_stress(config)?;
    assert_eq!(report.held.checks, 0, "{}", report.summary());
    assert_eq!(
        report.failures.count(cairn_stress::Failure::Unexercised),
        1,
        "{}",
        report.summary()
    );
    Ok(())
}
