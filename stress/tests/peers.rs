//! The harness pointed at fjall through the engine trait: a short stress with reopens,
//! snapshots and emulated range deletes passes, and the report says what was emulated and
//! what was skipped. Built only with `--features fjall` (CI runs it; the default build
//! compiles no peer).
#![cfg(feature = "fjall")]

use std::time::Duration;

use cairn_stress::engine::EngineKind;
use cairn_stress::{Limit, OpWeights, StressConfig, StressError};

fn short_fjall(seed: u64) -> StressConfig {
    StressConfig {
        engine: EngineKind::Fjall,
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

#[test]
fn a_short_fjall_stress_with_reopens_and_snapshots_finds_nothing_wrong() -> Result<(), StressError>
{
    let report = cairn_stress::run_stress(short_fjall(1))?;
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
        assert_eq!(report.ops.get(op), None, "{op} ran on fjall");
    }
    assert_eq!(report.engine, "fjall");
    assert!(report.emulated.contains_key("delete_range"));
    assert!(report.skipped.contains_key("ttl") && report.skipped.contains_key("transactions"));
    assert!(report.sequenced_by_harness);
    assert_eq!(report.flushes, None, "fjall counts no flushes");
    Ok(())
}

#[test]
fn a_fault_run_on_fjall_is_refused_as_a_bad_argument() {
    let refused = cairn_stress::run_with_faults(short_fjall(2), 50);
    match refused {
        Err(e @ StressError::Config(_)) => assert!(e.to_string().contains("cairn alone"), "{e}"),
        other => panic!("a fault run on fjall was not refused: {other:?}"),
    }
}
