//! `explain_tombstones` agrees with what compaction then does. Random histories — puts, deletes,
//! single deletes, range deletes, snapshots taken and released, flushes, partial compactions,
//! clock moves — then every tombstone's reason is read, a full `compact_range` runs, and:
//!
//! - a point tombstone explained as awaiting compaction has no older version of its key (other
//!   than a range tombstone, which resurrects nothing) in a table below it, and it, or one kept
//!   only by older data below (which a full compaction merges), is gone afterwards;
//! - one pinned by a snapshot or inside its grace period is still there, for the same reason.
//!
//! Only tombstones nothing newer touches are judged: a newer write to the key, or a newer range
//! delete over it, may drop a tombstone by other rules (shadowed, covered), which is not what
//! `explain_tombstones` speaks of.
//!
//! The tombstones judged are counted by reason and printed (`--nocapture`). From
//! [`COVERAGE_CASES`] histories on (CI runs 500), every reason must have been judged at least
//! once, or the test fails: a history mix that stopped producing one (say, no partial
//! compaction leaving data below) would otherwise pass without checking it. The default 48
//! histories judge "older data below" only a few times (1 to 10 in six runs), too few to demand.
//!
//! `PROPTEST_CASES` sets the number of histories (default 48).

#![allow(
    clippy::indexing_slicing,
    reason = "in a test, a panic is the failure report"
)]

mod common;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use cairn::{
    CfOptions, ColumnFamily, Db, Kind, Location, ManualClock, Options, SeqNo, Snapshot,
    TombstoneExplanation, TombstoneReason, WriteBatch,
};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;

const KEYS: u8 = 12;
const GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, Clone)]
enum Op {
    Put(u8),
    Delete(u8),
    SingleDelete(u8),
    DeleteRange(u8, u8),
    Snapshot,
    Release(usize),
    Flush,
    CompactSome(u8, u8),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..KEYS).prop_map(Op::Put),
        3 => (0..KEYS).prop_map(Op::Delete),
        1 => (0..KEYS).prop_map(Op::SingleDelete),
        1 => (0..KEYS, 1..4u8).prop_map(|(a, n)| Op::DeleteRange(a, a.saturating_add(n))),
        1 => Just(Op::Snapshot),
        1 => (0..4usize).prop_map(Op::Release),
        2 => Just(Op::Flush),
        1 => (0..KEYS, 1..6u8).prop_map(|(a, n)| Op::CompactSome(a, a.saturating_add(n))),
        2 => (0..1_500u64).prop_map(Op::Advance),
        // The grace period's edge, where "one millisecond early" and "just over" live.
        1 => prop_oneof![Just(999u64), Just(1_000), Just(1_001)].prop_map(Op::Advance),
    ]
}

fn key(k: u8) -> String {
    format!("k{k:02}")
}

/// What a write touched, for deciding which tombstones nothing newer touches.
#[derive(Debug, Clone)]
struct Write {
    seqno: SeqNo,
    start: u8,
    /// Exclusive.
    end: u8,
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(48)
}

/// From this many histories on, every reason must have been judged.
const COVERAGE_CASES: u32 = 200;

/// Tombstones judged, by reason.
type Judged = RefCell<BTreeMap<&'static str, u64>>;

#[test]
fn explain_agrees_with_what_compaction_does() {
    let judged = Judged::default();
    // The source file names the regressions file: without it the saved failing histories
    // would not be replayed (only the `proptest!` macro fills it in).
    let mut runner = TestRunner::new(ProptestConfig {
        source_file: Some(file!()),
        ..ProptestConfig::with_cases(cases())
    });
    let histories = proptest::collection::vec(op(), 1..60);
    if let Err(e) = runner.run(&histories, |ops| run(&ops, &judged)) {
        panic!("{e}");
    }
    let judged = judged.into_inner();
    println!("tombstones judged, by reason: {judged:?}");
    if cases() < COVERAGE_CASES {
        return;
    }
    for reason in ["awaiting", "data below", "snapshot", "grace"] {
        assert!(
            judged.get(reason).is_some_and(|&n| n > 0),
            "no tombstone was judged {reason:?} in {} histories: {judged:?}",
            cases()
        );
    }
}

fn run(ops: &[Op], judged: &Judged) -> Result<(), TestCaseError> {
    let dir = common::tempdir();
    let clock = Arc::new(ManualClock::new(1_000_000));
    let db = Db::open(dir.path(), Options::default().clock(clock.clone())).expect("open");
    let cf = db
        .create_column_family("t", CfOptions::default().tombstone_grace(GRACE))
        .expect("cf");
    let mut snapshots = Vec::new();
    let writes = apply(ops, &db, &cf, &clock, &mut snapshots);
    db.wait_for_background_work().expect("settle");
    let before = cf.explain_tombstones::<&str>(..).expect("explain");
    check_nothing_below(&cf, &before)?;
    cf.compact_range::<&str>(..).expect("compact");
    db.wait_for_background_work().expect("settle");
    let after = cf.explain_tombstones::<&str>(..).expect("explain");
    check_agreement(&before, &after, &writes, judged)?;
    drop(snapshots);
    Ok(())
}

/// Runs the history; returns the writes it made.
fn apply(
    ops: &[Op],
    db: &Db,
    cf: &ColumnFamily,
    clock: &ManualClock,
    snapshots: &mut Vec<Snapshot>,
) -> Vec<Write> {
    let mut writes = Vec::new();
    for op in ops {
        let mut batch = WriteBatch::new();
        let touched = match *op {
            Op::Put(k) => {
                batch.put_cf(cf, key(k), "v");
                Some((k, k + 1))
            }
            Op::Delete(k) => {
                batch.delete_cf(cf, key(k));
                Some((k, k + 1))
            }
            Op::SingleDelete(k) => {
                batch.single_delete_cf(cf, key(k));
                Some((k, k + 1))
            }
            Op::DeleteRange(a, b) => {
                batch.delete_range_cf(cf, key(a), key(b));
                Some((a, b))
            }
            Op::Snapshot => {
                snapshots.push(db.snapshot());
                None
            }
            Op::Release(i) => {
                if i < snapshots.len() {
                    snapshots.remove(i);
                }
                None
            }
            Op::Flush => {
                db.flush().expect("flush");
                None
            }
            Op::CompactSome(a, b) => {
                cf.compact_range(key(a)..key(b)).expect("compact");
                None
            }
            Op::Advance(ms) => {
                clock.advance(Duration::from_millis(ms));
                None
            }
        };
        if let Some((start, end)) = touched {
            let seqno = db.write(batch).expect("write");
            writes.push(Write { seqno, start, end });
        }
    }
    writes
}

/// "Nothing keeps it" must be true: no older version of its key in a table below it.
fn check_nothing_below(
    cf: &ColumnFamily,
    before: &[TombstoneExplanation],
) -> Result<(), TestCaseError> {
    for e in before.iter().filter(|e| e.kind != Kind::RangeDelete) {
        if e.reason != TombstoneReason::AwaitingCompaction {
            continue;
        }
        let own_level = match e.location {
            Location::Table { level, .. } => Some(level),
            _ => None,
        };
        // An older range tombstone below deletes, it does not resurrect: it keeps nothing.
        let traces = cf.audit_key(&e.key).expect("audit");
        for trace in traces.iter().filter(|t| t.kind != Some(Kind::RangeDelete)) {
            if let Location::Table { level, .. } = trace.location {
                prop_assert!(
                    trace.seqno >= e.seqno || own_level.is_some_and(|own| level <= own),
                    "{e:?} is explained as awaiting compaction, but an older version lies \
                     below it: {trace:?}"
                );
            }
        }
    }
    Ok(())
}

/// Droppable before ⇒ gone after; kept before ⇒ kept after, for the same reason.
fn check_agreement(
    before: &[TombstoneExplanation],
    after: &[TombstoneExplanation],
    writes: &[Write],
    judged: &Judged,
) -> Result<(), TestCaseError> {
    let untouched_since = |seqno: SeqNo, start: u8, end: u8| {
        !writes
            .iter()
            .any(|w| w.seqno > seqno && w.start < end && start < w.end)
    };
    // What is present after, by seqno: the spans and reasons of its pieces.
    let mut present: BTreeMap<SeqNo, Vec<(u8, u8, TombstoneReason)>> = BTreeMap::new();
    for e in after {
        let (start, end) = span(e);
        present
            .entry(e.seqno)
            .or_default()
            .push((start, end, e.reason));
    }
    for e in before {
        let (start, end) = span(e);
        if !untouched_since(e.seqno, start, end) {
            continue;
        }
        let still: Vec<TombstoneReason> = present
            .get(&e.seqno)
            .into_iter()
            .flatten()
            .filter(|(s, t, _)| *s < end && start < *t)
            .map(|(_, _, r)| *r)
            .collect();
        let name = match e.reason {
            TombstoneReason::AwaitingCompaction => "awaiting",
            TombstoneReason::OlderDataBelow { .. } => "data below",
            TombstoneReason::PinnedBySnapshot { .. } => "snapshot",
            TombstoneReason::GraceUntil { .. } => "grace",
            _ => "other",
        };
        *judged.borrow_mut().entry(name).or_default() += 1;
        match e.reason {
            TombstoneReason::AwaitingCompaction | TombstoneReason::OlderDataBelow { .. } => {
                prop_assert!(
                    still.is_empty(),
                    "{e:?} was explained as droppable but survived a full compaction as {still:?}"
                );
            }
            TombstoneReason::PinnedBySnapshot { .. } | TombstoneReason::GraceUntil { .. } => {
                prop_assert!(
                    !still.is_empty() && still.iter().all(|r| *r == e.reason),
                    "{e:?} was explained as kept but after a full compaction is {still:?}"
                );
            }
            other => prop_assert!(false, "a reason this test does not know: {other:?}"),
        }
    }
    Ok(())
}

fn index(k: &[u8]) -> u8 {
    std::str::from_utf8(k.get(1..).unwrap_or_default())
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(KEYS)
}

/// The key span a tombstone covers: `[start, end)` in key indexes.
fn span(e: &TombstoneExplanation) -> (u8, u8) {
    let start = index(&e.key);
    match (e.kind, e.end.as_deref()) {
        (Kind::RangeDelete, Some(end)) => (start, index(end)),
        _ => (start, start.saturating_add(1)),
    }
}
