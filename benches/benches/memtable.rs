//! Memtable inserts, measured through the public API: the engine's memtable is crate-private,
//! so each insert here is a `Db::put` (or one `WriteBatch` of 1000 puts) that also appends to
//! the write-ahead log, without an fsync. The memtable is sized at 1 GiB so that no flush runs
//! while the bench does: what is timed is the log append, the sequence number and the skiplist
//! insert.
//!
//! Keys are 16 bytes in random order, values 100 bytes. `cargo bench -p cairn-bench --bench
//! memtable`.

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

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_insert
}
criterion_main!(benches);
