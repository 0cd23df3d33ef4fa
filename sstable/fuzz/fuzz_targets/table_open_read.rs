//! Fuzzes opening and reading a whole table file.
//!
//! The input is the file. Whatever it holds, opening it and then scanning, seeking, looking up
//! and querying range tombstones must return data or an error, never panic. Most inputs stop at
//! the footer's magic or checksum; seed the corpus with real tables to get past them, or see
//! `block_decode`, which fixes checksums up so the block decoder itself is reached.

#![no_main]

mod table_reads;

use std::path::Path;

use bytes::Bytes;
use cairn_sstable::{BlockCache, Table};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A small cache, so the second round of reads takes blocks from it.
    let cache = BlockCache::new(1 << 20);
    let file = Bytes::copy_from_slice(data);
    if let Ok(table) = Table::from_bytes(file, Path::new("fuzz.sst"), 1, Some(cache)) {
        table_reads::read_everything(&table, data);
    }
});
