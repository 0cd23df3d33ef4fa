//! Planted bugs: each wrong rule, planted at run time, is caught by the harness as the kind of
//! failure it causes, while the same seeds and settings without it pass. Built only with the
//! `planted-bugs` feature:
//!
//! ```sh
//! cargo test -p cairn-stress --features planted-bugs --test planted_bugs
//! ```
//!
//! `CAIRN_SEEDS` sets how many seeds each bug runs (default 3).

#![cfg(feature = "planted-bugs")]

use std::sync::Mutex;

use cairn::planted::{self, Bug};
use cairn_stress::{Failure, FaultPlan, Limit, OpWeights, StressConfig, StressError, StressReport};

/// Planted bugs are process-wide: one case at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn seeds() -> u64 {
    std::env::var("CAIRN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
}

/// Deletes, snapshots and compactions over a tree deep enough that not every compaction is
/// bottommost, with reopens.
fn deletion_heavy(seed: u64) -> StressConfig {
    let weights = OpWeights {
        delete: 1500,
        delete_range: 400,
        snapshot: 600,
        compact_range: 150,
        flush: 150,
        reopen: 3,
        // Calibrated on the default family's work alone.
        ..OpWeights::default().without_ttl()
    };
    StressConfig {
        threads: 4,
        keys: 4_000,
        seed,
        limit: Limit::Ops(30_000),
        weights,
        memtable_size: 32 * 1024,
        ..StressConfig::default()
    }
}

/// Overwrites of few keys under many snapshots, flushed and compacted all the time, with
/// reopens: a version a snapshot should see is soon shadowed, flushed and compacted.
fn snapshot_heavy(seed: u64) -> StressConfig {
    let weights = OpWeights {
        get: 300,
        scan: 100,
        put: 3000,
        batch: 500,
        snapshot: 1500,
        flush: 400,
        compact_range: 300,
        reopen: 3,
        // Calibrated on the default family's work alone.
        ..OpWeights::default().without_ttl()
    };
    StressConfig {
        threads: 4,
        keys: 400,
        seed,
        limit: Limit::Ops(20_000),
        weights,
        memtable_size: 16 * 1024,
        ..StressConfig::default()
    }
}

/// Transactions over few keys, racing plain writes to the keys they read.
fn transaction_heavy(seed: u64) -> StressConfig {
    let weights = OpWeights {
        get: 100,
        put: 1000,
        transaction: 1000,
        // Calibrated on the default family's work alone.
        ..OpWeights::default().without_ttl()
    };
    StressConfig {
        threads: 4,
        keys: 64,
        seed,
        limit: Limit::Ops(20_000),
        weights,
        ..StressConfig::default()
    }
}

/// TTL work alone over few keys: puts with short and zero cell TTLs over older versions, the
/// clock moving often, flushes and compactions of the TTL families all the time, with reopens.
fn ttl_heavy(seed: u64) -> StressConfig {
    let weights = OpWeights {
        ttl_put: 3000,
        ttl_delete: 300,
        ttl_get: 2000,
        ttl_scan: 300,
        ttl_compact: 150,
        advance_clock: 40,
        // Snapshots (of the default family) cut every family's versions into stripes, so an
        // older version of a TTL key often survives a compaction beside the expired newer one.
        snapshot: 300,
        reopen: 3,
        ..OpWeights::default().only_ttl()
    };
    StressConfig {
        threads: 4,
        keys: 64,
        ttl_keys: 200,
        seed,
        limit: Limit::Ops(20_000),
        weights,
        memtable_size: 16 * 1024,
        ..StressConfig::default()
    }
}

/// The held-reader work alone: readers held across drops (clock, family TTL, filter) and fresh
/// reads recording runs of deleted keys over what they dropped, scenes with the other workers
/// paused, and reopens.
fn held_heavy(seed: u64) -> StressConfig {
    let weights = OpWeights {
        held_readers: 3000,
        held_scene: 100,
        // The TTL families' work, lighter, so other families write meanwhile.
        ttl_put: 300,
        ttl_get: 300,
        advance_clock: 40,
        reopen: 2,
        ..OpWeights::default().only_ttl()
    };
    StressConfig {
        threads: 4,
        keys: 64,
        ttl_keys: 200,
        seed,
        limit: Limit::Ops(10_000),
        weights,
        memtable_size: 64 * 1024,
        ..StressConfig::default()
    }
}

/// A fault run whose MANIFEST syncs fail keeping their bytes (the edit of a failed sync may be
/// durable), with reopens after every fault.
fn manifest_faults(seed: u64) -> Result<StressReport, StressError> {
    let weights = OpWeights {
        flush: 300,
        compact_range: 100,
        reopen: 3,
        // Calibrated on the default family's work alone.
        ..OpWeights::default().without_ttl()
    };
    let config = StressConfig {
        threads: 4,
        keys: 2_000,
        seed,
        limit: Limit::Ops(15_000),
        weights,
        memtable_size: 16 * 1024,
        ..StressConfig::default()
    };
    let plan = FaultPlan {
        one_in: 3,
        kinds: vec![cairn_fs::OpKind::Sync],
        sync_failure: cairn_fs::SyncFailure::KeepsBytes,
        path_contains: "MANIFEST".into(),
    };
    cairn_stress::run_with_fault_plan(config, &plan)
}

/// A fault run whose log syncs fail, dropping their unsynced bytes or keeping them: each stop
/// is recovered from and the run goes on, and the `reopen` operations and the end reopen the
/// database and check every acknowledged write.
fn log_sync_faults(seed: u64) -> Result<StressReport, StressError> {
    let weights = OpWeights {
        // The bug shows only at an open after a recovery and before the next flush writes the
        // kept memtables: at 5 (about three reopens a run) seed 2 went unnoticed in three runs
        // in CI; at 50 there are about thirty.
        reopen: 50,
        // Calibrated on the default family's work alone.
        ..OpWeights::default().without_ttl()
    };
    let config = StressConfig {
        threads: 4,
        keys: 2_000,
        seed,
        limit: Limit::Ops(5_000),
        weights,
        memtable_size: 16 * 1024,
        sync_probability: 0.05,
        ..StressConfig::default()
    };
    let plan = FaultPlan {
        one_in: 4,
        kinds: vec![cairn_fs::OpKind::Sync],
        sync_failure: cairn_fs::SyncFailure::Either,
        path_contains: ".log".into(),
    };
    cairn_stress::run_with_fault_plan(config, &plan)
}

/// Runs with `DropAboveBottom` planted allowed per seed before it counts as missed. Four threads
/// schedule differently from run to run, and at seed 0 that bug found no resurrected delete in
/// about one run of six, at 883e273 as after it. A harness blind to it misses it in every run
/// and still fails. Every other bug must be caught in one run per seed.
const DROP_ABOVE_BOTTOM_ATTEMPTS: u32 = 3;

/// Runs `run` for each seed without and with `bug`: every bug-free run must pass, and with the
/// bug each seed must fail with `expect` within `attempts` runs.
fn caught(
    bug: Bug,
    expect: Failure,
    attempts: u32,
    run: impl Fn(u64) -> Result<StressReport, StressError>,
) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut missed_by = Vec::new();
    for seed in 0..seeds() {
        planted::set(bug, false);
        let clean = run(seed).expect("the bug-free run");
        println!("{bug:?} seed {seed} without the bug:\n{}", clean.summary());
        assert_eq!(clean.exit_code(), 0, "seed {seed} fails without {bug:?}");
        let found = (1..=attempts).any(|attempt| {
            planted::set(bug, true);
            let buggy = run(seed);
            planted::set(bug, false);
            let buggy = buggy.expect("the run with the bug");
            println!(
                "{bug:?} seed {seed} with the bug, run {attempt}:\n{}",
                buggy.summary()
            );
            buggy.failures.count(expect) > 0
        });
        if !found {
            missed_by.push(seed);
        }
    }
    assert!(
        missed_by.is_empty(),
        "{bug:?} went unnoticed as {expect:?} in {attempts} run(s) with seeds {missed_by:?}"
    );
}

#[test]
fn compaction_ignoring_snapshots_is_caught_as_a_snapshot_mismatch() {
    caught(Bug::IgnoreSnapshots, Failure::SnapshotMismatch, 1, |seed| {
        cairn_stress::run_stress(snapshot_heavy(seed))
    });
}

#[test]
fn tombstones_dropped_above_the_bottom_are_caught_as_resurrected_deletes() {
    caught(
        Bug::DropAboveBottom,
        Failure::ResurrectedDelete,
        DROP_ABOVE_BOTTOM_ATTEMPTS,
        |seed| cairn_stress::run_stress(deletion_heavy(seed)),
    );
}

#[test]
fn a_snapshot_registered_after_reading_its_number_is_caught_as_a_snapshot_mismatch() {
    caught(
        Bug::SnapshotBeforeRegister,
        Failure::SnapshotMismatch,
        1,
        |seed| cairn_stress::run_stress(snapshot_heavy(seed)),
    );
}

#[test]
#[ignore = "masked by recovery: a fresh MANIFEST is written from memory before any reopen; \
            engine/tests/manifest.rs catches this bug beside its twin"]
fn deleting_after_a_failed_manifest_sync_is_caught_as_an_unreadable_database() {
    caught(
        Bug::DeleteAfterManifestFailure,
        Failure::Unreadable,
        3,
        manifest_faults,
    );
}

#[test]
fn commits_that_skip_the_conflict_check_are_caught_as_lost_updates() {
    caught(Bug::IgnoreConflicts, Failure::LostUpdate, 1, |seed| {
        cairn_stress::run_stress(transaction_heavy(seed))
    });
}

#[test]
fn expired_puts_dropped_over_older_versions_are_caught_as_expiry_violations() {
    caught(Bug::ExpiredResurrects, Failure::Expiry, 1, |seed| {
        cairn_stress::run_stress(ttl_heavy(seed))
    });
}

#[test]
fn deleted_runs_used_by_readers_of_an_older_view_are_caught_as_held_reader_mismatches() {
    caught(Bug::RunsIgnoreView, Failure::HeldReader, 1, |seed| {
        cairn_stress::run_stress(held_heavy(seed))
    });
}

#[test]
fn recovery_that_skips_the_flush_is_caught_as_a_lost_write_at_the_next_reopen() {
    caught(
        Bug::RecoverySkipsFlush,
        Failure::LostWrite,
        3,
        log_sync_faults,
    );
}

/// The power-loss loop with faults on every other cycle: with recovery skipping the flush, the
/// writes acknowledged before a fault are gone after the power loss, though the recovery was
/// to make them durable; without the bug, nothing is.
#[test]
fn recovery_that_skips_the_flush_is_caught_by_the_power_loss_loop() {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let run = |seed: u64| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let config = cairn_stress::CrashConfig {
            cycles: 4,
            seed,
            writes_per_cycle: 800,
            stress: StressConfig {
                keys: 1_000,
                ..StressConfig::default()
            },
            ..cairn_stress::CrashConfig::default()
        };
        cairn_stress::power_loss(&config, dir.path()).expect("the power-loss loop")
    };
    for seed in 0..seeds() {
        planted::set(Bug::RecoverySkipsFlush, false);
        let clean = run(seed);
        println!("seed {seed} without the bug: {clean:?}");
        assert_eq!(clean.recoveries, 2, "cycles 1 and 3 meet a fault");
        assert!(
            clean.failures.is_clean(),
            "seed {seed}: {:?}",
            clean.failures
        );
        planted::set(Bug::RecoverySkipsFlush, true);
        let buggy = run(seed);
        planted::set(Bug::RecoverySkipsFlush, false);
        println!("seed {seed} with the bug: {buggy:?}");
        assert!(
            buggy.failures.lost_writes + buggy.failures.holes > 0,
            "seed {seed}: RecoverySkipsFlush went unnoticed by the power-loss loop: {:?}",
            buggy.failures
        );
    }
}
