//! Table benchmarks: building tables, seeking in them, bloom probes, point lookups and merging.
//!
//! Every table holds 16-byte user keys `key0000000000042` at seqno 1 with 100-byte values drawn
//! from a 16-letter alphabet (so zstd roughly halves a block), written with the default options
//! (4 KiB blocks, restart interval 16, 10 bloom bits per key, zstd level 3) unless a bench says
//! otherwise. Random choices come from `SmallRng`s with fixed seeds, so runs compare.
//!
//! `cargo bench -p cairn-sstable --bench table -- seek` runs one group.

#![expect(
    missing_docs,
    reason = "`criterion_group!` expands to an undocumented public function"
)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_fs::{FileSystem, RealFs};
use cairn_sstable::{
    BlockCache, Compression, EntryMeta, InternalIterator, Kind, MAX_SEQNO, MergingIter, Table,
    TableOptions, TableWriter, internal_key, seek_key,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Entries written per iteration of the build benches.
const BUILD_ENTRIES: u64 = 10_000;
/// Entries in the table the read benches use.
const READ_ENTRIES: u64 = 100_000;
/// Tables merged by the merge bench, each holding every `MERGE_TABLES`-th key.
const MERGE_TABLES: u64 = 4;
const VALUE_LEN: usize = 100;
/// Random keys prepared per read bench, cycled through while timing.
const PROBES: usize = 4096;
const CACHE_BYTES: u64 = 64 << 20;
const WRITE_TIME: u64 = 1_764_000_000_000;

fn user_key(i: u64) -> Vec<u8> {
    format!("key{i:013}").into_bytes()
}

/// A value of `VALUE_LEN` bytes from a 16-letter alphabet: four bits of entropy a byte.
fn value(rng: &mut SmallRng) -> Vec<u8> {
    (0..VALUE_LEN)
        .map(|_| b'a' + rng.random_range(0..16u8))
        .collect()
}

/// Internal keys and values for user keys `ids`, in table order.
fn entries(ids: impl Iterator<Item = u64>, seed: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    ids.map(|i| (internal_key(&user_key(i), 1, Kind::Put), value(&mut rng)))
        .collect()
}

fn write_table(path: &Path, entries: &[(Vec<u8>, Vec<u8>)], options: TableOptions) {
    let file = RealFs::new().create(path).expect("create table file");
    let mut writer = TableWriter::new(file, options).expect("table writer");
    for (key, value) in entries {
        writer
            .add(key, EntryMeta::at(WRITE_TIME), value)
            .expect("add entry");
    }
    black_box(writer.finish().expect("finish table"));
}

fn open(path: &Path, id: u64, cache: Option<BlockCache>) -> Table {
    Table::open(&RealFs::new(), path, id, cache).expect("open table")
}

/// Reads every entry once (so a cache holds every data block); returns the count.
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

/// `PROBES` user keys drawn from `range`.
fn random_keys(range: std::ops::Range<u64>, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..PROBES)
        .map(|_| user_key(rng.random_range(range.clone())))
        .collect()
}

fn bench_build(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = entries(0..BUILD_ENTRIES, 1);
    let mut group = c.benchmark_group("build");
    group.throughput(Throughput::Elements(BUILD_ENTRIES));
    group.sample_size(20);
    for (name, level) in [
        ("raw", Compression::None),
        ("lz4", Compression::Lz4),
        ("zstd3", Compression::Zstd(3)),
    ] {
        let path = dir.path().join(format!("build-{name}.sst"));
        group.bench_function(name, |b| {
            b.iter(|| write_table(&path, &entries, TableOptions::default().compression(level)));
        });
    }
    group.finish();
}

/// Seeks, bloom probes and point lookups against one 100k-entry table.
fn bench_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("read.sst");
    write_table(&path, &entries(0..READ_ENTRIES, 2), TableOptions::default());
    let uncached = open(&path, 1, None);
    let cached = open(&path, 2, Some(BlockCache::new(CACHE_BYTES)));
    assert_eq!(scan(&mut cached.iter()), READ_ENTRIES);
    let present = random_keys(0..READ_ENTRIES, 3);
    let absent = random_keys(READ_ENTRIES..2 * READ_ENTRIES, 4);

    bench_seek(c, &cached, &uncached, &present);
    bench_bloom(c, &uncached, &present, &absent);
    bench_get(c, &cached, &present, &absent);
}

fn bench_seek(c: &mut Criterion, cached: &Table, uncached: &Table, present: &[Vec<u8>]) {
    let targets: Vec<Vec<u8>> = present.iter().map(|k| seek_key(k, MAX_SEQNO)).collect();
    let mut group = c.benchmark_group("seek");
    for (name, table) in [("cached", cached), ("uncached", uncached)] {
        let mut iter = table.iter();
        let mut targets = targets.iter().cycle();
        group.bench_function(name, |b| {
            b.iter(|| {
                let target = targets.next().expect("cycle over keys");
                iter.seek(target).expect("seek");
                debug_assert!(iter.valid());
                black_box((iter.key(), iter.value()));
            });
        });
    }
    group.finish();
}

fn bench_bloom(c: &mut Criterion, table: &Table, present: &[Vec<u8>], absent: &[Vec<u8>]) {
    let mut group = c.benchmark_group("bloom");
    for (name, keys) in [("present", present), ("absent", absent)] {
        let mut keys = keys.iter().cycle();
        group.bench_function(name, |b| {
            b.iter(|| black_box(table.may_contain(keys.next().expect("cycle over keys"))));
        });
    }
    group.finish();
}

fn bench_get(c: &mut Criterion, table: &Table, present: &[Vec<u8>], absent: &[Vec<u8>]) {
    let mut group = c.benchmark_group("get");
    for (name, keys) in [("present", present), ("absent", absent)] {
        let mut keys = keys.iter().cycle();
        group.bench_function(name, |b| {
            b.iter(|| {
                let key = keys.next().expect("cycle over keys");
                black_box(table.get(key, MAX_SEQNO).expect("get"))
            });
        });
    }
    group.finish();
}

/// A full forward scan of `MERGE_TABLES` tables of interleaved keys through `MergingIter`,
/// blocks cached, next to the same entries scanned from one table.
fn bench_merge(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = BlockCache::new(CACHE_BYTES);
    let paths: Vec<PathBuf> = (0..MERGE_TABLES)
        .map(|t| {
            let path = dir.path().join(format!("merge-{t}.sst"));
            let ids = (0..READ_ENTRIES).filter(|i| i % MERGE_TABLES == t);
            write_table(&path, &entries(ids, 5 + t), TableOptions::default());
            path
        })
        .collect();
    let tables: Vec<Table> = (1..)
        .zip(&paths)
        .map(|(id, path)| open(path, id, Some(cache.clone())))
        .collect();
    let single_path = dir.path().join("single.sst");
    write_table(
        &single_path,
        &entries(0..READ_ENTRIES, 5),
        TableOptions::default(),
    );
    let single = open(&single_path, 100, Some(cache.clone()));
    let merged = || MergingIter::new(tables.iter().map(Table::iter).collect());
    assert_eq!(scan(&mut merged()), READ_ENTRIES);
    assert_eq!(scan(&mut single.iter()), READ_ENTRIES);

    let mut group = c.benchmark_group("scan");
    group.throughput(Throughput::Elements(READ_ENTRIES));
    group.sample_size(20);
    group.bench_function("merge_4x25k", |b| b.iter(|| scan(&mut merged())));
    group.bench_function("table_100k", |b| b.iter(|| scan(&mut single.iter())));
    group.finish();
}

/// A full scan of one 100k-entry table per codec with no block cache, so every step through
/// a block pays its decoding: the cost of each codec on the read path.
fn bench_decode(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let entries = entries(0..READ_ENTRIES, 9);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(READ_ENTRIES));
    group.sample_size(20);
    for (id, (name, compression, dictionary)) in (200..).zip([
        ("raw", Compression::None, 0),
        ("lz4", Compression::Lz4, 0),
        ("zstd3", Compression::Zstd(3), 0),
        ("zstd3_dict16k", Compression::Zstd(3), 16 << 10),
    ]) {
        let path = dir.path().join(format!("decode-{name}.sst"));
        write_table(
            &path,
            &entries,
            TableOptions::default()
                .compression(compression)
                .zstd_dictionary_bytes(dictionary),
        );
        let size = std::fs::metadata(&path).map_or(0, |m| m.len());
        eprintln!("decode/{name}: table of {size} bytes");
        let table = open(&path, id, None);
        assert_eq!(scan(&mut table.iter()), READ_ENTRIES);
        group.bench_function(name, |b| b.iter(|| scan(&mut table.iter())));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = bench_build, bench_reads, bench_merge, bench_decode
}
criterion_main!(benches);
