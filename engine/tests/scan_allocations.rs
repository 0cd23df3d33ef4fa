//! What a scan allocates, counted per thread by a wrapping allocator: a cursor step allocates
//! nothing, and recording runs of deleted keys costs in proportion to the runs, not their square.

#![allow(
    unsafe_code,
    reason = "a counting global allocator must implement the unsafe `GlobalAlloc`"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use cairn::{Db, Options};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a side effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract for `alloc` is passed on whole.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations the current thread makes while `f` runs.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

/// No background compaction or read trigger: the tombstones stay where the test put them.
fn options() -> Options {
    Options::default()
        .level0_triggers(100, 200, 300)
        .read_trigger_tombstones(u64::MAX)
}

#[test]
fn a_cursor_step_allocates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    for i in 0..10_000 {
        db.put(format!("key{i:08}"), "value").expect("put");
    }
    db.flush().expect("flush");
    let mut cursor = db.cursor().expect("cursor");
    cursor.seek_to_first().expect("seek");
    let mut steps = 0;
    let made = allocations(|| {
        while cursor.valid() {
            cursor.next().expect("next");
            steps += 1;
        }
    });
    assert_eq!(steps, 10_000);
    // Blocks of the table are decoded as the cursor reaches them: a few allocations a block.
    // In debug builds the merging iterator also copies each key to assert the order.
    let debug_copies = if cfg!(debug_assertions) { steps } else { 0 };
    assert!(
        made < 1_000 + debug_copies,
        "{made} allocations over {steps} steps"
    );
}

/// `gaps` runs of 32 deleted keys, each followed by a live one, flushed; one scan records a
/// run at every live key. The allocations it makes, per run.
fn scan_allocations_per_gap(gaps: u32) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Db::open(dir.path(), options()).expect("open");
    let key = |i: u32| format!("key{i:010}");
    for i in 0..gaps * 33 {
        db.put(key(i), "value").expect("put");
    }
    db.flush().expect("flush");
    for i in 0..gaps * 33 {
        if i % 33 != 32 {
            db.delete(key(i)).expect("delete");
        }
    }
    db.flush().expect("flush");
    let mut live = 0;
    let made = allocations(|| {
        let mut cursor = db.cursor().expect("cursor");
        cursor.seek_to_first().expect("seek");
        while cursor.valid() {
            live += 1;
            cursor.next().expect("next");
        }
    });
    assert_eq!(live, gaps);
    assert!(
        db.stats().deleted_runs_recorded >= u64::from(gaps) - 1,
        "{} runs recorded",
        db.stats().deleted_runs_recorded
    );
    // Counts stay far below 2^52: the conversion is exact.
    f64::from(u32::try_from(made).expect("fewer than 4G allocations")) / f64::from(gaps)
}

#[test]
fn recording_runs_costs_in_proportion_to_the_runs() {
    let small = scan_allocations_per_gap(1_000);
    let large = scan_allocations_per_gap(4_000);
    eprintln!("allocations a run: {small:.1} over 1,000 runs, {large:.1} over 4,000");
    assert!(
        large < small * 1.5,
        "{small:.1} allocations a run over 1,000 runs, {large:.1} over 4,000"
    );
}
