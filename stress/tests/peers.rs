//! The harness pointed at the peers through the engine trait: a short stress with reopens,
//! snapshots and range deletes (emulated on fjall) passes, and the report says what was
//! emulated and what was skipped. Built only with `--features fjall` (CI runs it) or
//! `--features rocksdb` (run by hand: RocksDB takes about 20 minutes to build); the default
//! build compiles no peer.
#![cfg(any(feature = "fjall", feature = "rocksdb"))]

use std::time::Duration;

use cairn_stress::engine::EngineKind;
use cairn_stress::{Limit, OpWeights, StressConfig, StressError};

fn short(engine: EngineKind, seed: u64) -> StressConfig {
    StressConfig {
        engine,
        threads: 4,
        keys: 2_000,
        seed,
        limit: Limit::Ops(20_000),
        weights: OpWeights {
            reopen: 20,
            compact_range: 5,
            flush: 50,
            snapshot: 200,
            ..OpWeights::default()
        },
        memtable_size: 64 * 1024,
        grace: Duration::ZERO,
        ..StressConfig::default()
    }
}

fn a_short_stress_with_reopens_and_snapshots_finds_nothing_wrong(
    engine: EngineKind,
) -> Result<(), StressError> {
    let report = cairn_stress::run_stress(short(engine, 1))?;
    println!("{}", report.summary());
    assert!(report.failures.is_clean(), "{}", report.summary());
    assert_eq!(report.fatal, None, "{}", report.summary());
    assert!(report.verifications > 10_000, "{}", report.summary());
    for op in ["reopen", "snapshot_reread", "delete_range", "single_delete"] {
        assert!(
            report.ops.get(op).copied().unwrap_or(0) > 0,
            "no {op}: {}",
            report.summary()
        );
    }
    for op in ["transaction", "ttl_put", "held_readers"] {
        assert_eq!(report.ops.get(op), None, "{op} ran on {}", engine.name());
    }
    assert_eq!(report.engine, engine.name());
    assert_eq!(
        report.emulated.contains_key("delete_range"),
        engine == EngineKind::Fjall,
        "{:?}",
        report.emulated
    );
    assert!(report.skipped.contains_key("ttl") && report.skipped.contains_key("transactions"));
    assert!(report.sequenced_by_harness);
    assert_eq!(report.flushes, None, "{} counts no flushes", engine.name());
    Ok(())
}

fn a_fault_run_is_refused_as_a_bad_argument(engine: EngineKind) {
    let refused = cairn_stress::run_with_faults(short(engine, 2), 50);
    match refused {
        Err(e @ StressError::Config(_)) => assert!(e.to_string().contains("cairn alone"), "{e}"),
        other => panic!(
            "a fault run on {} was not refused: {other:?}",
            engine.name()
        ),
    }
}

#[cfg(feature = "fjall")]
#[test]
fn a_short_fjall_stress_with_reopens_and_snapshots_finds_nothing_wrong() -> Result<(), StressError>
{
    a_short_stress_with_reopens_and_snapshots_finds_nothing_wrong(EngineKind::Fjall)
}

#[cfg(feature = "fjall")]
#[test]
fn a_fault_run_on_fjall_is_refused_as_a_bad_argument() {
    a_fault_run_is_refused_as_a_bad_argument(EngineKind::Fjall);
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_short_rocksdb_stress_with_reopens_and_snapshots_finds_nothing_wrong() -> Result<(), StressError>
{
    a_short_stress_with_reopens_and_snapshots_finds_nothing_wrong(EngineKind::Rocksdb)
}

#[cfg(feature = "rocksdb")]
#[test]
fn a_fault_run_on_rocksdb_is_refused_as_a_bad_argument() {
    a_fault_run_is_refused_as_a_bad_argument(EngineKind::Rocksdb);
}
