//! A memtable's size, which the flush trigger and `Stats::memtable_bytes` count, is the memory its
//! entries hold (as RocksDB's arena counts it): its entries live in an arena of mapped blocks,
//! not on the heap (a wrapping allocator sees next to nothing), and the resident memory they add
//! is what the memtable counts, never much more, so a 64 MiB memtable does not hold 80 MiB.

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

/// The process's resident anonymous memory, in bytes (Linux's `RssAnon`).
fn resident_anon() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .expect("RssAnon in /proc/self/status");
    let kib: i64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("a number of kB");
    kib * 1024
}

/// What `write` adds: on the heap, to resident memory, and to what the memtable counts.
struct Held {
    heap: i64,
    resident: i64,
    counted: i64,
}

fn held_and_counted(write: impl Fn(&Db, u32)) -> Held {
    let dir = tempfile::tempdir().expect("tempdir");
    // Large enough that nothing is flushed: the writes stay in the one memtable.
    let db = Db::open(dir.path(), Options::default().memtable_size(1 << 30)).expect("open");
    write(&db, 0);
    let counted_before = db.stats().memtable_bytes;
    let (heap_before, resident_before) = (LIVE.load(Ordering::SeqCst), resident_anon());
    for i in 1..WRITES {
        write(&db, i);
    }
    Held {
        heap: LIVE.load(Ordering::SeqCst) - heap_before,
        resident: resident_anon() - resident_before,
        counted: i64::try_from(db.stats().memtable_bytes - counted_before).expect("fits"),
    }
}

const WRITES: u32 = 50_000;

const MIB: i64 = 1 << 20;

fn check(what: &str, held: &Held) {
    let Held {
        heap,
        resident,
        counted,
    } = *held;
    eprintln!("{what}: heap {heap}, resident {resident}, counted {counted}");
    // What stays on the heap per write is at most a few bytes (the log's buffer growing).
    assert!(
        heap * 20 <= counted,
        "{what}: the writes left {heap} bytes on the heap, not in the arena ({counted} counted)"
    );
    // Resident memory moves by whole pages and with other threads' work, hence the margins.
    assert!(
        counted * 10 >= resident * 9,
        "{what}: the memtable counts {counted} bytes, but resident memory grew by {resident}"
    );
    assert!(
        counted * 10 <= resident * 13 + 10 * MIB,
        "{what}: the memtable counts {counted} bytes, but resident memory grew by only {resident}"
    );
}

#[test]
fn a_memtable_counts_the_memory_its_puts_and_tombstones_hold() {
    let value = [b'v'; 100];
    check(
        "puts",
        &held_and_counted(|db, i| db.put(format!("key{i:08}"), value).expect("put")),
    );
    check(
        "tombstones",
        &held_and_counted(|db, i| db.delete(format!("key{i:08}")).expect("delete")),
    );
    check(
        "long keys",
        &held_and_counted(|db, i| db.put(format!("{i:064}"), value).expect("put")),
    );
}
