//! Table reads through `cairn_sstable`'s public API: a block seek, a bloom probe, a point
//! lookup, and a full scan through the merging iterator.
//!
//! One table holds 100k entries (16-byte keys at seqno 1, 100-byte values that zstd halves),
//! written with the default options: 4 KiB blocks, 10 bloom bits per key, zstd level 3. Reads
//! go through a 64 MiB block cache warmed by one scan, so they time the search and decoding,
//! not the disk. `cargo bench -p cairn-bench --bench table`. The sstable crate's own
//! `sstable/benches/table.rs` covers the same ground in more variants (uncached, build).

#![expect(
    missing_docs,
    reason = "`criterion_group!` expands to an undocumented public function"
)]

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use cairn_fs::{FileSystem, RealFs};
use cairn_sstable::{
    BlockCache, EntryMeta, InternalIterator, Kind, MAX_SEQNO, MergingIter, Table, TableOptions,
    TableWriter, internal_key, seek_key,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const ENTRIES: u64 = 100_000;
const MERGE_WAYS: u64 = 4;
const PROBES: usize = 4096;
const WRITE_TIME: u64 = 1_764_000_000_000;

fn user_key(i: u64) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

/// 100 bytes whose second half repeats the first.
fn value(rng: &mut SmallRng) -> Vec<u8> {
    let half: Vec<u8> = (0..50).map(|_| rng.random_range(b' '..=b'~')).collect();
    [half.as_slice(), half.as_slice()].concat()
}

fn write_table(path: &Path, ids: impl Iterator<Item = u64>, seed: u64) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let file = RealFs::new().create(path).expect("create table file");
    let mut writer = TableWriter::new(file, TableOptions::default()).expect("table writer");
    for i in ids {
        writer
            .add(
                &internal_key(&user_key(i), 1, Kind::Put),
                EntryMeta::at(WRITE_TIME),
                &value(&mut rng),
            )
            .expect("add entry");
    }
    writer.finish().expect("finish table");
}

fn scan(iter: &mut impl InternalIterator) -> u64 {
    let mut n = 0;
    iter.seek_to_first().expect("seek_to_first");
    while iter.valid() {
        black_box((iter.key(), iter.value()));
        n += 1;
        iter.next().expect("next");
    }
    n
}

fn probes(range: std::ops::Range<u64>, seed: u64, absent: bool) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..PROBES)
        .map(|_| {
            let mut k = user_key(rng.random_range(range.clone()));
            if absent && let Some(last) = k.last_mut() {
                *last = b'm';
            }
            k
        })
        .collect()
}

fn bench_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("000001.sst");
    write_table(&path, 0..ENTRIES, 1);
    let table =
        Table::open(&RealFs::new(), &path, 1, Some(BlockCache::new(64 << 20))).expect("open table");
    assert_eq!(scan(&mut table.iter()), ENTRIES);
    let present = probes(0..ENTRIES, 2, false);
    let absent = probes(0..ENTRIES, 3, true);

    let mut group = c.benchmark_group("table");
    let mut iter = table.iter();
    let mut targets = present.iter().map(|k| seek_key(k, MAX_SEQNO)).cycle();
    group.bench_function("block_seek", |b| {
        b.iter(|| {
            iter.seek(&targets.next().expect("cycle")).expect("seek");
            black_box((iter.key(), iter.value()));
        });
    });
    for (name, keys) in [
        ("bloom_probe_present", &present),
        ("bloom_probe_absent", &absent),
    ] {
        let mut keys = keys.iter().cycle();
        group.bench_function(name, |b| {
            b.iter(|| black_box(table.may_contain(keys.next().expect("cycle"))));
        });
    }
    for (name, keys) in [
        ("point_lookup_hit", &present),
        ("point_lookup_miss", &absent),
    ] {
        let mut keys = keys.iter().cycle();
        group.bench_function(name, |b| {
            b.iter(|| {
                black_box(
                    table
                        .get(keys.next().expect("cycle"), MAX_SEQNO)
                        .expect("get"),
                )
            });
        });
    }
    group.finish();
}

/// A full scan of four tables holding every fourth key each, through `MergingIter`.
fn bench_merge(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = BlockCache::new(64 << 20);
    let tables: Vec<Table> = (0..MERGE_WAYS)
        .map(|t| {
            let path = dir.path().join(format!("{:06}.sst", t + 10));
            write_table(&path, (0..ENTRIES).filter(|i| i % MERGE_WAYS == t), 10 + t);
            Table::open(&RealFs::new(), &path, t + 10, Some(cache.clone())).expect("open table")
        })
        .collect();
    let merged = || MergingIter::new(tables.iter().map(Table::iter).collect());
    assert_eq!(scan(&mut merged()), ENTRIES);
    let mut group = c.benchmark_group("table");
    group.throughput(Throughput::Elements(ENTRIES));
    group.sample_size(20);
    group.bench_function("merging_iter_4x25k", |b| b.iter(|| scan(&mut merged())));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = bench_reads, bench_merge
}
criterion_main!(benches);
