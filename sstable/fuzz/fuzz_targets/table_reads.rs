//! Every read a table serves, bounded, for the fuzz targets to run against a table they opened.

use cairn_sstable::{InternalIterator, MAX_SEQNO, Table, seek_key};

/// Entries visited per scan: bounds the time one input can take.
const MAX_STEPS: usize = 1 << 14;
/// Keys probed per input from each source: the table's own keys and cuts of the input.
const MAX_PROBES: usize = 8;
/// Longest probe key cut from the input.
const MAX_PROBE_LEN: usize = 32;
/// Steps taken each way around a seek.
const STEPS_AROUND_SEEK: usize = 4;

/// Scans `table` both ways twice (a cache, if any, serves the second round), then looks up
/// keys seen in the scan and keys cut from `input`, and queries the range tombstones. Errors
/// are fine; panics are what the fuzzer looks for.
pub fn read_everything(table: &Table, input: &[u8]) {
    let _ = (table.properties(), table.filter_size(), table.index_size());
    let mut probes = Vec::new();
    for _round in 0..2 {
        probes = scan_forward(table);
        scan_backward(table);
    }
    probes.extend(
        input
            .chunks(input.len() / MAX_PROBES + 1)
            .map(|chunk| chunk.iter().copied().take(MAX_PROBE_LEN).collect()),
    );
    for key in &probes {
        probe(table, key);
    }
    let tombstones = table.range_tombstones();
    let _ = (tombstones.num_versions(), tombstones.is_empty());
    for tombstone in tombstones.iter_tombstones().take(MAX_STEPS) {
        let _ = tombstones.covering_seqno(&tombstone.start, tombstone.seqno);
    }
}

/// Scans forward from the start; returns the first few user keys seen.
fn scan_forward(table: &Table) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    let mut iter = table.iter();
    if iter.seek_to_first().is_err() {
        return seen;
    }
    for _ in 0..MAX_STEPS {
        if !iter.valid() {
            break;
        }
        touch(&iter);
        if seen.len() < MAX_PROBES
            && let Some(key) = iter.parsed_key()
        {
            seen.push(key.user_key.to_vec());
        }
        if iter.next().is_err() {
            break;
        }
    }
    seen
}

fn scan_backward(table: &Table) {
    let mut iter = table.iter();
    if iter.seek_to_last().is_err() {
        return;
    }
    for _ in 0..MAX_STEPS {
        if !iter.valid() {
            break;
        }
        touch(&iter);
        if iter.prev().is_err() {
            break;
        }
    }
}

/// Reads everything the iterator exposes about its current entry.
fn touch(iter: &impl InternalIterator) {
    let _ = (iter.key(), iter.value(), iter.value_bytes(), iter.meta());
    let _ = iter.parsed_key();
}

/// Looks `user_key` up every way a reader can.
fn probe(table: &Table, user_key: &[u8]) {
    let _ = table.may_contain(user_key);
    for snapshot in [MAX_SEQNO, 1, 0] {
        let _ = table.get(user_key, snapshot);
    }
    let mut iter = table.iter();
    if iter.seek(&seek_key(user_key, MAX_SEQNO)).is_ok() {
        walk(&mut iter);
    }
    if iter.seek_for_prev(&seek_key(user_key, 0)).is_ok() {
        walk(&mut iter);
    }
    let tombstones = table.range_tombstones();
    let _ = tombstones.covering_seqno(user_key, MAX_SEQNO);
    let _ = (
        tombstones.fragment_at(user_key),
        tombstones.position(user_key),
    );
}

/// A few steps forward, then back past the start, as a reader changing direction would.
fn walk(iter: &mut impl InternalIterator) {
    for _ in 0..STEPS_AROUND_SEEK {
        if !iter.valid() || iter.next().is_err() {
            break;
        }
        touch(iter);
    }
    for _ in 0..2 * STEPS_AROUND_SEEK {
        if !iter.valid() || iter.prev().is_err() {
            break;
        }
        touch(iter);
    }
}
