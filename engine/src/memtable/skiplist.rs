//! The memtable's skip list: entries laid out in an arena, each node one allocation holding its
//! links, its metadata, its internal key and its value (RocksDB's `InlineSkipList`, LevelDB's
//! `SkipList` over an `Arena`).
//!
//! One writer at a time (inserts take a mutex, which only the commit leader ever contends for),
//! any number of readers without locks: a node is written whole before a release store links
//! it in, and readers follow links with acquire loads, so a reader sees a node either fully or
//! not at all. Nodes are never removed or changed after they are linked; the arena frees them all
//! at once when the list is dropped, as a flushed memtable is.
//!
//! The arena takes its memory in blocks mapped from the operating system (anonymous `mmap`),
//! handed back whole by `munmap` when the list goes: a memtable's millions of entries are not
//! millions of heap allocations whose frees leave the allocator holding memory after a flush.
//! The bytes the list has handed out ([`SkipList::memory_used`]) are what a memtable counts
//! toward its flush trigger.
//!
//! This is the only module of the engine with `unsafe` code. Its rules:
//! - a node pointer is only ever made by the arena from a block's base pointer, and only
//!   dereferenced while the list that owns the block is alive (a `&SkipList` borrow or the
//!   `Arc` a [`Cursor`] holds);
//! - no `&Node` is ever formed: the links, key and value lie past the header, so every access goes
//!   through a raw pointer with the provenance of the whole block;
//! - node bytes are written only before the node is published, links only by the writer.
//!
//! Its tests run under Miri: `cargo +nightly miri test -p cairn memtable::skiplist`.

#![allow(
    unsafe_code,
    reason = "an arena skip list links raw nodes; see the module doc for the rules"
)]

use std::cmp::Ordering;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};

use cairn_sstable::key::compare_internal_key_to;
use cairn_sstable::{EntryMeta, compare_internal_keys};

/// The most links a node has. With one node in four reaching each next level, 12 levels keep
/// searches logarithmic up to 4^12 (16 million) entries, far more than a memtable holds.
const MAX_HEIGHT: usize = 12;

/// One node in `BRANCHING` reaches each next level.
const BRANCHING: u64 = 4;

/// A node's fixed header. In the arena it is followed by `height` links, then the internal key,
/// then the value; a node is never read through a `&Node` (see the module doc).
#[repr(C)]
struct Node {
    write_time: u64,
    ttl: u64,
    key_len: u32,
    value_len: u32,
    height: u8,
    has_ttl: u8,
}

/// Where a node's links start: right after the header, aligned for pointers.
const LINKS_AT: usize =
    std::mem::size_of::<Node>().next_multiple_of(std::mem::align_of::<AtomicPtr<Node>>());

/// Every allocation from the arena is aligned to this (a node's header and links need it).
const ALIGN: usize = 8;

// The layout's premises (review note A8): an allocation aligned to `ALIGN` is aligned for the
// header and for its links, and the links, at `LINKS_AT`, are pointer-aligned and right after
// the header, so `links` and the byte offsets `key_start` and `new_node` add up agree.
const _: () = assert!(
    std::mem::align_of::<Node>() <= ALIGN
        && std::mem::align_of::<AtomicPtr<Node>>() <= ALIGN
        && LINKS_AT.is_multiple_of(std::mem::align_of::<AtomicPtr<Node>>())
        && LINKS_AT == std::mem::size_of::<Node>()
);

/// The size of the arena's blocks. A node larger than a quarter of it gets a block of its own,
/// so no more than a quarter of a block is left unused when a node does not fit.
const BLOCK: usize = 1 << 20;

/// One entry of the list, borrowed from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EntryRef<'a> {
    /// The internal key (user key and trailer).
    pub key: &'a [u8],
    pub meta: EntryMeta,
    pub value: &'a [u8],
}

/// A skip list of entries ordered by internal key (see the module doc).
pub(crate) struct SkipList {
    /// The head's links; a null link ends its level.
    head: [AtomicPtr<Node>; MAX_HEIGHT],
    /// The tallest node's height (at least 1). Read without ordering: a reader that sees a
    /// height before the head's link at that level only finds the level empty.
    height: AtomicUsize,
    writer: Mutex<Writer>,
    /// Bytes the arena has handed out, counting the unused tail of each full block.
    used: AtomicUsize,
}

// SAFETY: the raw node pointers reachable from the list point into blocks the list owns. Nodes
// are immutable once linked, except for their links, which are atomics; the writer's state is
// behind a mutex. So the list can be sent to and shared between threads like its parts.
unsafe impl Send for SkipList {}
// SAFETY: see `Send`.
unsafe impl Sync for SkipList {}

impl std::fmt::Debug for SkipList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SkipList")
            .field("height", &self.height.load(AtomicOrdering::Relaxed))
            .field("used", &self.used.load(AtomicOrdering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What only the writer touches: the arena and the height generator.
struct Writer {
    arena: Arena,
    /// xorshift64 state for node heights.
    rng: u64,
}

impl Writer {
    fn random_height(&mut self) -> usize {
        let mut height = 1;
        while height < MAX_HEIGHT {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            if !self.rng.is_multiple_of(BRANCHING) {
                break;
            }
            height += 1;
        }
        height
    }
}

impl Default for SkipList {
    fn default() -> Self {
        Self::new()
    }
}

impl SkipList {
    pub(crate) fn new() -> Self {
        Self {
            head: std::array::from_fn(|_| AtomicPtr::new(ptr::null_mut())),
            height: AtomicUsize::new(1),
            writer: Mutex::new(Writer {
                arena: Arena::default(),
                rng: 0x2545_f491_4f6c_dd1d,
            }),
            used: AtomicUsize::new(0),
        }
    }

    /// Bytes of arena memory the entries take (their nodes and the unused ends of full blocks).
    pub(crate) fn memory_used(&self) -> usize {
        self.used.load(AtomicOrdering::Relaxed)
    }

    /// True if nothing was inserted.
    pub(crate) fn is_empty(&self) -> bool {
        self.head_link(0).load(AtomicOrdering::Acquire).is_null()
    }

    /// Inserts the entry whose internal key is `user_key` followed by `trailer`. Returns false,
    /// inserting nothing, if an equal key is present (a log record replayed twice) or if the
    /// key or the value is longer than `u32::MAX` bytes (the engine's limits are far below).
    pub(crate) fn insert(
        &self,
        user_key: &[u8],
        trailer: [u8; 8],
        meta: EntryMeta,
        value: &[u8],
    ) -> bool {
        let mut writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let height = writer.random_height();
        let Some(node) = writer
            .arena
            .new_node(height, user_key, trailer, meta, value)
        else {
            return false;
        };
        self.used
            .store(writer.arena.used(), AtomicOrdering::Relaxed);
        // SAFETY: the node was just written whole by the arena, which this list owns.
        let key = unsafe { node_key(node) };
        let mut prev = [None; MAX_HEIGHT];
        let next = self.find_ge(key, &mut prev);
        // SAFETY: `next` is a node of this list.
        if next.is_some_and(|n| unsafe { node_key(n) } == key) {
            return false;
        }
        let old_height = self.height.load(AtomicOrdering::Relaxed);
        if height > old_height {
            // The levels above the old height start at the head, as `prev` already says.
            self.height.store(height, AtomicOrdering::Relaxed);
        }
        for (level, before) in prev.iter().enumerate().take(height) {
            let link = self.link(*before, level);
            // Only the writer stores links, so this load sees the latest.
            let after = link.load(AtomicOrdering::Relaxed);
            // SAFETY: `node` has `height` links, and nobody can see it yet.
            unsafe { node_link(node, level) }.store(after, AtomicOrdering::Relaxed);
            // Publishes the node: a reader that loads this link sees all of it.
            link.store(node.as_ptr(), AtomicOrdering::Release);
        }
        true
    }

    /// The entries from the first whose internal key is at or after `user_key` followed by
    /// `trailer` (built without allocating), in order.
    pub(crate) fn iter_from<'a>(
        &'a self,
        user_key: &[u8],
        trailer: u64,
    ) -> impl Iterator<Item = EntryRef<'a>> + 'a {
        let first = self.find_ge_by(
            |node| compare_internal_key_to(node, user_key, trailer),
            &mut [None; MAX_HEIGHT],
        );
        self.walk_from(first)
    }

    /// Every entry, in order.
    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        self.walk_from(self.next(None, 0))
    }

    fn walk_from(
        &self,
        mut node: Option<NonNull<Node>>,
    ) -> impl Iterator<Item = EntryRef<'_>> + '_ {
        std::iter::from_fn(move || {
            let at = node?;
            node = self.next(Some(at), 0);
            // SAFETY: `at` is a node of this list, which the borrow keeps alive.
            Some(unsafe { entry(at) })
        })
    }

    /// The link at `level` of `node`, or of the head if `node` is `None`.
    fn link(&self, node: Option<NonNull<Node>>, level: usize) -> &AtomicPtr<Node> {
        match node {
            // SAFETY: a node of this list reached at `level` has a link there: searches only
            // move to a node through a link of that level, and a node is linked at a level
            // only below its height.
            Some(node) => unsafe { node_link(node, level) },
            None => self.head_link(level),
        }
    }

    fn head_link(&self, level: usize) -> &AtomicPtr<Node> {
        // Levels are below `MAX_HEIGHT` (heights are capped there), so this never falls back.
        let [lowest, ..] = &self.head;
        self.head.get(level).unwrap_or(lowest)
    }

    /// The node after `node` (the head if `None`) at `level`.
    fn next(&self, node: Option<NonNull<Node>>, level: usize) -> Option<NonNull<Node>> {
        NonNull::new(self.link(node, level).load(AtomicOrdering::Acquire))
    }

    /// The highest level a search starts at.
    fn top_level(&self) -> usize {
        self.height
            .load(AtomicOrdering::Relaxed)
            .clamp(1, MAX_HEIGHT)
            - 1
    }

    /// The first node at or after `key`; fills `prev` with the last node before `key` at each
    /// level (`None` for the head).
    fn find_ge(
        &self,
        key: &[u8],
        prev: &mut [Option<NonNull<Node>>; MAX_HEIGHT],
    ) -> Option<NonNull<Node>> {
        self.find_ge_by(|node| compare_internal_keys(node, key), prev)
    }

    /// [`Self::find_ge`] with the target given as how a node's key compares to it.
    fn find_ge_by(
        &self,
        compare: impl Fn(&[u8]) -> Ordering,
        prev: &mut [Option<NonNull<Node>>; MAX_HEIGHT],
    ) -> Option<NonNull<Node>> {
        let mut at = None;
        let mut level = self.top_level();
        loop {
            let next = self.next(at, level);
            // SAFETY: `next` is a node of this list.
            if let Some(Ordering::Less) = next.map(|n| compare(unsafe { node_key(n) })) {
                at = next;
                continue;
            }
            if let Some(slot) = prev.get_mut(level) {
                *slot = at;
            }
            if level == 0 {
                return next;
            }
            level -= 1;
        }
    }

    /// The last node before `key` (at or before it if `inclusive`), or `None`.
    fn find_last_before(&self, key: Option<&[u8]>, inclusive: bool) -> Option<NonNull<Node>> {
        let mut at = None;
        let mut level = self.top_level();
        loop {
            let next = self.next(at, level);
            let advance = next.is_some_and(|n| {
                key.is_none_or(|key| {
                    // SAFETY: `n` is a node of this list.
                    let order = compare_internal_keys(unsafe { node_key(n) }, key);
                    order.is_lt() || (inclusive && order.is_eq())
                })
            });
            if advance {
                at = next;
            } else if level == 0 {
                return at;
            } else {
                level -= 1;
            }
        }
    }
}

/// A cursor over a list it keeps alive: the memtable iterator's position.
pub(crate) struct Cursor {
    list: Arc<SkipList>,
    node: Option<NonNull<Node>>,
}

// SAFETY: the node is in a block of the list the cursor holds an `Arc` of; reading it from any
// thread is what `SkipList: Sync` allows.
unsafe impl Send for Cursor {}
// SAFETY: see `Send`.
unsafe impl Sync for Cursor {}

impl std::fmt::Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("valid", &self.node.is_some())
            .finish_non_exhaustive()
    }
}

impl Cursor {
    /// A cursor over `list`, not positioned.
    pub(crate) fn new(list: Arc<SkipList>) -> Self {
        Self { list, node: None }
    }

    /// The entry under the cursor, if it is on one.
    pub(crate) fn entry(&self) -> Option<EntryRef<'_>> {
        // SAFETY: the node is in the list `self.list` keeps alive while `self` is borrowed.
        self.node.map(|node| unsafe { entry(node) })
    }

    pub(crate) fn seek_to_first(&mut self) {
        self.node = self.list.next(None, 0);
    }

    pub(crate) fn seek_to_last(&mut self) {
        self.node = self.list.find_last_before(None, false);
    }

    /// To the first entry at or after `key`.
    pub(crate) fn seek(&mut self, key: &[u8]) {
        self.node = self.list.find_ge(key, &mut [None; MAX_HEIGHT]);
    }

    /// To the last entry at or before `key`.
    pub(crate) fn seek_for_prev(&mut self, key: &[u8]) {
        self.node = self.list.find_last_before(Some(key), true);
    }

    /// To the next entry; off the end after the last. Does nothing off the list.
    pub(crate) fn next(&mut self) {
        if let Some(node) = self.node {
            self.node = self.list.next(Some(node), 0);
        }
    }

    /// To the previous entry (a search from the head: nodes link forward only); off the list
    /// before the first. Does nothing off the list.
    pub(crate) fn prev(&mut self) {
        if let Some(node) = self.node {
            // SAFETY: `node` is in the list this cursor keeps alive.
            let key = unsafe { node_key(node) };
            self.node = self.list.find_last_before(Some(key), false);
        }
    }
}

/// The link at `level` of `node`.
///
/// # Safety
/// `node` must be a node of a live list with more than `level` links, and the returned
/// reference must not outlive that list.
unsafe fn node_link<'a>(node: NonNull<Node>, level: usize) -> &'a AtomicPtr<Node> {
    // SAFETY: the links start right after the header (`LINKS_AT`), aligned as it is, and
    // `level` is below the height, so the link is in the node.
    unsafe { &*links(node.as_ptr()).add(level) }
}

/// Where the links of the node at `node` start.
///
/// # Safety
/// `node` must point to a node's header in an arena block.
#[allow(
    clippy::cast_ptr_alignment,
    reason = "`LINKS_AT` is pointer-aligned past an `ALIGN`-aligned node: asserted at compile time"
)]
unsafe fn links(node: *mut Node) -> *mut AtomicPtr<Node> {
    // SAFETY: `LINKS_AT` bytes past the node is its first link, inside the node's allocation
    // (`new_node` sizes it so), pointer-aligned (the const assert beside `ALIGN`).
    unsafe { node.cast::<u8>().add(LINKS_AT).cast::<AtomicPtr<Node>>() }
}

/// Where `node`'s key starts.
///
/// # Safety
/// `node` must be a node of a live list.
unsafe fn key_start(node: NonNull<Node>) -> *const u8 {
    // SAFETY: the header is initialized and in bounds; read by field, through the raw pointer.
    unsafe {
        let height = usize::from(ptr::addr_of!((*node.as_ptr()).height).read());
        node.as_ptr()
            .cast::<u8>()
            .add(LINKS_AT + height * std::mem::size_of::<AtomicPtr<Node>>())
    }
}

/// The internal key of `node`.
///
/// # Safety
/// `node` must be a node of a live list, and the slice must not outlive it.
unsafe fn node_key<'a>(node: NonNull<Node>) -> &'a [u8] {
    // SAFETY: the arena wrote `key_len` key bytes at `key_start` before the node was linked.
    unsafe {
        let len = ptr::addr_of!((*node.as_ptr()).key_len).read() as usize;
        std::slice::from_raw_parts(key_start(node), len)
    }
}

/// The entry in `node`.
///
/// # Safety
/// `node` must be a node of a live list, and the entry must not outlive it.
unsafe fn entry<'a>(node: NonNull<Node>) -> EntryRef<'a> {
    // SAFETY: every header field and the key and value bytes were written before the node was
    // linked; the value follows the key.
    unsafe {
        let header = node.as_ptr();
        let key_len = ptr::addr_of!((*header).key_len).read() as usize;
        let value_len = ptr::addr_of!((*header).value_len).read() as usize;
        let key = key_start(node);
        let ttl = ptr::addr_of!((*header).ttl).read();
        let has_ttl = ptr::addr_of!((*header).has_ttl).read() != 0;
        EntryRef {
            key: std::slice::from_raw_parts(key, key_len),
            meta: EntryMeta {
                write_time: ptr::addr_of!((*header).write_time).read(),
                ttl: has_ttl.then_some(ttl),
            },
            value: std::slice::from_raw_parts(key.add(key_len), value_len),
        }
    }
}

/// Memory for nodes, taken from the system in blocks and given back only when dropped.
#[derive(Default)]
struct Arena {
    blocks: Vec<Block>,
    /// The next free byte of the current block, and how many are left after it.
    free: Option<NonNull<u8>>,
    left: usize,
    used: usize,
}

impl Arena {
    fn used(&self) -> usize {
        self.used
    }

    /// Writes a node of `height` links, all null, holding the entry; `None` if a length does
    /// not fit the header.
    fn new_node(
        &mut self,
        height: usize,
        user_key: &[u8],
        trailer: [u8; 8],
        meta: EntryMeta,
        value: &[u8],
    ) -> Option<NonNull<Node>> {
        let key_len = user_key.len() + trailer.len();
        let header = Node {
            write_time: meta.write_time,
            ttl: meta.ttl.unwrap_or(0),
            key_len: u32::try_from(key_len).ok()?,
            value_len: u32::try_from(value.len()).ok()?,
            height: u8::try_from(height).ok()?,
            has_ttl: u8::from(meta.ttl.is_some()),
        };
        let links_len = height * std::mem::size_of::<AtomicPtr<Node>>();
        let size = LINKS_AT + links_len + key_len + value.len();
        let base = self.alloc(size);
        // SAFETY: `base` starts `size` writable bytes, aligned to `ALIGN`, that nothing else
        // uses; each write below stays inside them (the header, then the links, the user key,
        // the trailer and the value, laid end to end as `size` adds them up).
        unsafe {
            base.cast::<Node>().as_ptr().write(header);
            let links = links(base.cast::<Node>().as_ptr());
            for level in 0..height {
                links.add(level).write(AtomicPtr::new(ptr::null_mut()));
            }
            let key = base.as_ptr().add(LINKS_AT + links_len);
            ptr::copy_nonoverlapping(user_key.as_ptr(), key, user_key.len());
            let trailer_at = key.add(user_key.len());
            ptr::copy_nonoverlapping(trailer.as_ptr(), trailer_at, trailer.len());
            ptr::copy_nonoverlapping(value.as_ptr(), key.add(key_len), value.len());
        }
        Some(base.cast())
    }

    /// `size` bytes aligned to `ALIGN`, valid until the arena is dropped.
    fn alloc(&mut self, size: usize) -> NonNull<u8> {
        let size = size.next_multiple_of(ALIGN);
        if size > BLOCK / 4 {
            // A block of its own; the current block stays current.
            let block = Block::new(size);
            let base = block.base;
            self.blocks.push(block);
            self.used += size;
            return base;
        }
        let at = match self.free {
            Some(at) if self.left >= size => at,
            _ => {
                // What is left of the block is never used: count it, as the memory is held.
                self.used += self.left;
                let block = Block::new(BLOCK);
                let base = block.base;
                self.blocks.push(block);
                self.left = BLOCK;
                base
            }
        };
        // SAFETY: `size <= self.left`, so `at + size` is within the block or one past its end.
        self.free = Some(unsafe { at.add(size) });
        self.left -= size;
        self.used += size;
        at
    }
}

/// One block of the arena: its first byte, and what owns the memory.
struct Block {
    base: NonNull<u8>,
    _owner: BlockMemory,
}

/// A block's memory: an anonymous mapping, whose pages come from the system zeroed on first
/// touch and go back whole on drop; or, where mapping fails (and under Miri, which cannot map),
/// a heap allocation owned by raw pointer, so that moving the owner never retags what the
/// nodes point into.
enum BlockMemory {
    /// Held for its drop, which unmaps it.
    #[cfg_attr(miri, allow(dead_code, reason = "Miri cannot map memory"))]
    Mapped {
        _map: memmap2::MmapMut,
    },
    Heap(NonNull<[std::mem::MaybeUninit<u64>]>),
}

impl Drop for BlockMemory {
    fn drop(&mut self) {
        if let Self::Heap(words) = self {
            // SAFETY: the pointer came from `Box::leak` in `Block::heap` and is freed only here.
            drop(unsafe { Box::from_raw(words.as_ptr()) });
        }
    }
}

impl Block {
    /// A block of `len` bytes: mapped, or from the heap if mapping fails (a heap that cannot
    /// give it either aborts, as every allocation does).
    fn new(len: usize) -> Self {
        if cfg!(miri) {
            return Self::heap(len);
        }
        match memmap2::MmapMut::map_anon(len) {
            Ok(mut map) => {
                // Pages counted one by one, as the flush trigger counts the arena: a huge page
                // would hold 2 MiB for the first bytes written to it.
                #[cfg(target_os = "linux")]
                let _ = map.advise(memmap2::Advice::NoHugePage);
                match NonNull::new(map.as_mut_ptr()) {
                    Some(base) => Self {
                        base,
                        _owner: BlockMemory::Mapped { _map: map },
                    },
                    None => Self::heap(len),
                }
            }
            Err(_) => Self::heap(len),
        }
    }

    fn heap(len: usize) -> Self {
        let words = NonNull::from(Box::leak(Box::<[u64]>::new_uninit_slice(len.div_ceil(8))));
        Self {
            base: words.cast(),
            _owner: BlockMemory::Heap(words),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_sstable::Kind;
    use cairn_sstable::key::pack_trailer;

    fn trailer(seqno: u64) -> [u8; 8] {
        pack_trailer(seqno, Kind::Put).to_le_bytes()
    }

    fn ikey(user: &[u8], seqno: u64) -> Vec<u8> {
        let mut key = user.to_vec();
        key.extend_from_slice(&trailer(seqno));
        key
    }

    /// Keys of a model in the list's order, from a xorshift sequence (Miri runs this, so it is
    /// small and needs no `rand`).
    fn filled(n: u64, seed: u64) -> (SkipList, Vec<Vec<u8>>) {
        let list = SkipList::new();
        let mut model = Vec::new();
        let mut x = seed | 1;
        for seqno in 1..=n {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let user = format!("k{:03}", x % 97).into_bytes();
            let value = vec![
                u8::try_from(seqno % 251).expect("fits");
                usize::try_from(x % 40).expect("fits")
            ];
            assert!(list.insert(&user, trailer(seqno), EntryMeta::at(seqno), &value));
            model.push((ikey(&user, seqno), value));
        }
        model.sort_by(|a, b| compare_internal_keys(&a.0, &b.0));
        for (a, b) in list.iter().zip(&model) {
            assert_eq!(a.key, b.0.as_slice());
            assert_eq!(a.value, b.1.as_slice());
        }
        assert_eq!(list.iter().count(), model.len());
        (list, model.into_iter().map(|(k, _)| k).collect())
    }

    #[test]
    fn entries_come_back_in_key_order_with_their_values_and_metadata() {
        let (list, model) = filled(300, 7);
        let first = list.iter().next().expect("one entry");
        assert_eq!(first.key, model.first().expect("one").as_slice());
        let ttl = SkipList::new();
        let meta = EntryMeta {
            write_time: 5,
            ttl: Some(0),
        };
        assert!(ttl.insert(b"a", trailer(1), meta, b"v"));
        assert_eq!(ttl.iter().next().map(|e| e.meta), Some(meta));
    }

    #[test]
    fn an_equal_key_is_refused_and_the_first_value_kept() {
        let list = SkipList::new();
        assert!(list.insert(b"a", trailer(3), EntryMeta::at(1), b"first"));
        assert!(!list.insert(b"a", trailer(3), EntryMeta::at(2), b"second"));
        let all: Vec<_> = list.iter().map(|e| e.value.to_vec()).collect();
        assert_eq!(all, vec![b"first".to_vec()]);
    }

    #[test]
    fn cursors_seek_and_walk_both_ways() {
        let (list, model) = filled(200, 11);
        let list = Arc::new(list);
        let mut cursor = Cursor::new(Arc::clone(&list));
        let key_at = |c: &Cursor| c.entry().map(|e| e.key.to_vec());
        cursor.seek_to_last();
        assert_eq!(key_at(&cursor).as_ref(), model.last());
        for expected in model.iter().rev().skip(1) {
            cursor.prev();
            assert_eq!(key_at(&cursor).as_ref(), Some(expected));
        }
        cursor.prev();
        assert!(cursor.entry().is_none());
        for (i, target) in model.iter().enumerate().step_by(7) {
            cursor.seek(target);
            assert_eq!(key_at(&cursor).as_ref(), Some(target));
            cursor.seek_for_prev(target);
            assert_eq!(key_at(&cursor).as_ref(), Some(target));
            cursor.next();
            assert_eq!(key_at(&cursor).as_ref(), model.get(i + 1));
        }
        // Between keys: a seek lands after, a seek for prev before.
        let between = ikey(b"k050", 0);
        cursor.seek(&between);
        let after = model
            .iter()
            .find(|k| compare_internal_keys(k, &between).is_gt());
        assert_eq!(key_at(&cursor).as_ref(), after);
        cursor.seek_for_prev(&between);
        let before = model
            .iter()
            .rev()
            .find(|k| compare_internal_keys(k, &between).is_lt());
        assert_eq!(key_at(&cursor).as_ref(), before);
        cursor.seek(&ikey(b"zzz", 0));
        assert!(cursor.entry().is_none());
        cursor.seek_to_first();
        assert_eq!(key_at(&cursor).as_ref(), model.first());
    }

    #[test]
    fn large_entries_get_blocks_of_their_own_and_memory_counts_them() {
        let list = SkipList::new();
        assert_eq!(list.memory_used(), 0);
        assert!(list.is_empty());
        let big = vec![7u8; BLOCK / 2];
        assert!(list.insert(b"big", trailer(1), EntryMeta::at(0), &big));
        assert!(list.memory_used() >= big.len());
        assert!(list.insert(b"small", trailer(2), EntryMeta::at(0), b"v"));
        let values: Vec<usize> = list.iter().map(|e| e.value.len()).collect();
        assert_eq!(values, vec![big.len(), 1]);
        assert!(!list.is_empty());
    }

    /// Readers walking and seeking while the writer inserts (and the list grows taller) see
    /// every key in order and never a torn node; at least one walk overlaps inserts.
    #[test]
    fn readers_walk_in_order_while_the_writer_inserts() {
        use std::sync::atomic::AtomicBool;
        let list = Arc::new(SkipList::new());
        let n: u64 = if cfg!(miri) { 300 } else { 20_000 };
        let done = AtomicBool::new(false);
        let overlapped = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                for i in 0..n {
                    let user = format!("k{:06}", (i * 7919) % n).into_bytes();
                    let value = user.repeat(2);
                    assert!(list.insert(&user, trailer(i + 1), EntryMeta::at(i), &value));
                }
                done.store(true, AtomicOrdering::Release);
            });
            for _ in 0..2 {
                scope.spawn(|| {
                    while !done.load(AtomicOrdering::Acquire) {
                        let before = list.memory_used();
                        check_walk(&list);
                        let mut cursor = Cursor::new(Arc::clone(&list));
                        let target = ikey(b"k001000", u64::MAX >> 8);
                        cursor.seek(&target);
                        if let Some(e) = cursor.entry() {
                            assert!(compare_internal_keys(e.key, &target).is_ge());
                        }
                        if list.memory_used() != before {
                            overlapped.fetch_add(1, AtomicOrdering::Relaxed);
                        }
                    }
                });
            }
        });
        check_walk(&list);
        assert_eq!(list.iter().count(), usize::try_from(n).expect("fits"));
        assert!(
            list.height.load(AtomicOrdering::Relaxed) > 2,
            "the list grew taller"
        );
        assert!(
            overlapped.load(AtomicOrdering::Relaxed) > 0,
            "no walk overlapped an insert"
        );
    }

    /// Every entry in order, each whole (its value is its user key twice).
    fn check_walk(list: &SkipList) {
        let mut previous: Option<&[u8]> = None;
        for entry in list.iter() {
            let user = cairn_sstable::key::user_key(entry.key);
            assert_eq!(entry.value, user.repeat(2).as_slice(), "a whole node");
            if let Some(previous) = previous {
                assert!(compare_internal_keys(previous, entry.key).is_lt());
            }
            previous = Some(entry.key);
        }
    }
}
