//! A memtable's size, which the flush trigger and `Stats::memtable_bytes` count, is the heap its
//! entries hold (as RocksDB's arena counts it), measured by a wrapping allocator: never less,
//! so a 64 MiB memtable does not hold 80 MiB.

#![allow(
    unsafe_code,
    reason = "a counting global allocator must implement the unsafe `GlobalAlloc`"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

use cairn::{Db, Options};

struct Counting;

/// Bytes allocated and not yet freed, by every thread.
static LIVE: AtomicI64 = AtomicI64::new(0);

fn size(layout: Layout) -> i64 {
    i64::try_from(layout.size()).unwrap_or(i64::MAX)
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a side effect.
// `realloc` is the trait's default, which goes through these two.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(size(layout), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on whole.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(size(layout), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The heap `write` leaves held, and what the memtable counts for it.
fn held_and_counted(write: impl Fn(&Db, u32)) -> (i64, i64) {
    let dir = tempfile::tempdir().expect("tempdir");
    // Large enough that nothing is flushed: the writes stay in the one memtable.
    let db = Db::open(dir.path(), Options::default().memtable_size(1 << 30)).expect("open");
    write(&db, 0);
    let counted_before = db.stats().memtable_bytes;
    let before = LIVE.load(Ordering::SeqCst);
    for i in 1..20_000 {
        write(&db, i);
    }
    let held = LIVE.load(Ordering::SeqCst) - before;
    let counted = db.stats().memtable_bytes - counted_before;
    (held, i64::try_from(counted).expect("fits"))
}

fn check(what: &str, (held, counted): (i64, i64)) {
    assert!(
        counted >= held,
        "{what}: the memtable counts {counted} bytes for {held} it holds"
    );
    assert!(
        counted * 10 <= held * 13,
        "{what}: the memtable counts {counted} bytes for only {held} it holds"
    );
}

#[test]
fn a_memtable_counts_the_heap_its_puts_and_tombstones_hold() {
    let value = [b'v'; 100];
    check(
        "puts",
        held_and_counted(|db, i| db.put(format!("key{i:08}"), value).expect("put")),
    );
    check(
        "tombstones",
        held_and_counted(|db, i| db.delete(format!("key{i:08}")).expect("delete")),
    );
    // A key too long to sit inside the node has an allocation of its own.
    check(
        "long keys",
        held_and_counted(|db, i| db.put(format!("{i:064}"), value).expect("put")),
    );
}
