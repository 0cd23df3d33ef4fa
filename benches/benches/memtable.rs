//! Memtable inserts, measured through the public API: the engine's memtable is crate-private,
//! so each insert here is a `Db::put` (or one `WriteBatch` of 1000 puts) that also appends to
//! the write-ahead log, without an fsync. The memtable is sized at 1 GiB so that no flush runs
//! while the bench does: what is timed is the log append, the sequence number and the skiplist
//! insert.
//!
//! Keys are 16 bytes in random order, values 100 bytes. `cargo bench -p cairn-bench --bench
//! memtable`.
//!
//! `range_tombstones/N`: N range deletes into one memtable, each followed by a point read (as a
//! queue or a purger interleaves them). Time per N shows how a range-tombstone insert scales
//! with the tombstones already there. Re-fragmenting every tombstone on each read made it
//! quadratic (4000 took 1.43 s); fragmenting as they arrive keeps it flat at about 4 us per
//! delete and read, 100,000 included.

#![expect(
    missing_docs,
    reason = "`criterion_group!` expands to an undocumented public function"
)]

use std::time::Duration;

use cairn::{Db, Options, WriteBatch};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const VALUE: [u8; 100] = [b'v'; 100];
const BATCH: u64 = 1000;

fn key(rng: &mut SmallRng) -> [u8; 16] {
    let mut k = [0u8; 16];
    rng.fill(&mut k[..]);
    k
}

fn open(dir: &std::path::Path) -> Db {
    Db::open(dir, Options::default().memtable_size(1 << 30)).expect("open db")
}

fn bench_insert(c: &mut Criterion) {
    let mut group = c.benchmark_group("memtable_insert");
    group.sample_size(20);

    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    let mut rng = SmallRng::seed_from_u64(1);
    group.throughput(Throughput::Elements(1));
    group.bench_function("put_wal", |b| {
        b.iter(|| db.put(key(&mut rng), VALUE).expect("put"));
    });
    drop(db);

    let dir = tempfile::tempdir().expect("tempdir");
    let db = open(dir.path());
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("batch_1000_wal", |b| {
        b.iter(|| {
            let mut batch = WriteBatch::new();
            for _ in 0..BATCH {
                batch.put(key(&mut rng), VALUE);
            }
            db.write(batch).expect("write batch")
        });
    });
    group.finish();
}

fn bench_range_tombstones(c: &mut Criterion) {
    let mut group = c.benchmark_group("range_tombstones");
    group.sample_size(10);
    for n in [500u64, 1000, 2000, 4000, 100_000] {
        group.throughput(Throughput::Elements(n));
        group.bench_function(format!("{n}"), |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().expect("tempdir");
                    let db = open(dir.path());
                    (dir, db)
                },
                |(_dir, db)| {
                    for i in 0..n {
                        let start = format!("k{:08}", i * 10);
                        let end = format!("k{:08}", i * 10 + 5);
                        db.delete_range(&start, &end).expect("delete_range");
                        std::hint::black_box(db.get(&start).expect("get"));
                    }
                },
                criterion::BatchSize::PerIteration,
            );
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_insert, bench_range_tombstones
}
criterion_main!(benches);
