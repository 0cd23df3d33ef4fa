//! The harness catches wrong GC rules. Built only with a planted-bug feature:
//!
//! ```sh
//! cargo test -p cairn-stress --features bug-ignore-snapshots --test planted_bugs
//! cargo test -p cairn-stress --features bug-drop-above-bottom --test planted_bugs
//! ```

#![cfg(feature = "planted-bugs")]

use cairn_stress::{Limit, OpWeights, StressConfig};

/// A short run heavy on what the planted bugs break: deletes, snapshots and compactions over a
/// tree deep enough that not every compaction is bottommost.
fn deletion_heavy(seed: u64) -> StressConfig {
    let weights = OpWeights {
        delete: 1500,
        delete_range: 400,
        snapshot: 600,
        compact_range: 150,
        flush: 150,
        reopen: 0,
        ..OpWeights::default()
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

#[test]
fn the_harness_fails_on_a_planted_gc_bug_within_a_short_run()
-> Result<(), cairn_stress::StressError> {
    cairn::planted::set(cairn::planted::Bug::IgnoreSnapshots, true);
    let mut caught = 0;
    for seed in 0..3 {
        let report = cairn_stress::run_stress(deletion_heavy(seed))?;
        println!("seed {seed}:\n{}", report.summary());
        if !report.failures.is_clean() {
            caught += 1;
        }
    }
    assert!(
        caught > 0,
        "a planted GC bug went unnoticed by three short runs"
    );
    Ok(())
}
