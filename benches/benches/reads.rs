//! Reads through the public API on a settled database: 200,000 keys of 16 digits with 100-byte
//! values, filled in random order, flushed, and compacted as the engine chose (what
//! `cairn-bench` reads after `filled()`), with Cairn's default options.
//!
//! - `get/hit` and `get/miss`: one `Db::get` of a present key, of an absent one (the bloom
//!   filters answer);
//! - `seek/10`: a range iterator opened at a random key, then ten entries read (`seekrandom`);
//!   `seek/10_cursor` the same through the borrowing cursor;
//! - `seek_many_tables/10`: `seek/10` over the same keys compacted into 256 KiB tables (about
//!   100 in the last level), where a seek pays for each table it positions in;
//! - `scan/all`: every entry in order (`scanall`), per entry; `scan/all_cursor` through the
//!   cursor.
//!
//! `cargo bench -p cairn-bench --bench reads`; `-- get/miss` for one.

#![expect(
    missing_docs,
    reason = "`criterion_group!` expands to an undocumented public function"
)]

use std::time::Duration;

use cairn::{Db, Options, WriteBatch};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const NUM: u64 = 200_000;

fn key(i: u64) -> [u8; 16] {
    let mut k = [b'0'; 16];
    let mut n = i;
    for b in k.iter_mut().rev() {
        *b = b'0' + u8::try_from(n % 10).unwrap_or(0);
        n /= 10;
    }
    k
}

fn filled(dir: &std::path::Path, options: Options) -> Db {
    let db = Db::open(dir, options).expect("open db");
    let mut rng = SmallRng::seed_from_u64(7);
    let mut order: Vec<u64> = (0..NUM).collect();
    order.shuffle(&mut rng);
    let mut value = [0u8; 100];
    for chunk in order.chunks(1000) {
        let mut batch = WriteBatch::new();
        for &i in chunk {
            rng.fill(&mut value[..50]);
            batch.put(key(i), value);
        }
        db.write(batch).expect("write");
    }
    db.flush().expect("flush");
    db.wait_for_background_work().expect("wait");
    db
}

fn bench_reads(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = filled(dir.path(), Options::default());
    let mut rng = SmallRng::seed_from_u64(11);
    let mut group = c.benchmark_group("get");
    group.throughput(Throughput::Elements(1));
    group.bench_function("hit", |b| {
        b.iter(|| {
            let value = db.get(key(rng.random_range(0..NUM))).expect("get");
            assert!(value.is_some());
        });
    });
    group.bench_function("miss", |b| {
        b.iter(|| {
            let mut k = key(rng.random_range(0..NUM));
            if let Some(last) = k.last_mut() {
                *last = b'm';
            }
            assert!(db.get(k).expect("get").is_none());
        });
    });
    group.finish();

    let mut group = c.benchmark_group("seek");
    group.throughput(Throughput::Elements(1));
    group.bench_function("10", |b| {
        b.iter(|| {
            let start = key(rng.random_range(0..NUM - 10));
            let read = db.range(start..).expect("range").take(10).count();
            assert_eq!(read, 10);
        });
    });
    group.bench_function("10_cursor", |b| {
        b.iter(|| {
            let mut cursor = db.cursor().expect("cursor");
            cursor
                .seek(key(rng.random_range(0..NUM - 10)))
                .expect("seek");
            for _ in 0..10 {
                std::hint::black_box(cursor.key().zip(cursor.value()).expect("entry"));
                cursor.next().expect("next");
            }
        });
    });
    group.finish();

    // The same keys in small tables (about 100 in the last level): a seek pays for every table
    // it opens a cursor in.
    let many_dir = tempfile::tempdir().expect("tempdir");
    let many = filled(
        many_dir.path(),
        Options::default()
            .memtable_size(1 << 20)
            .target_file_size(256 * 1024),
    );
    many.compact_range::<&[u8]>(..).expect("compact");
    let tables: Vec<usize> = many.stats().levels.iter().map(|l| l.files).collect();
    eprintln!("seek_many_tables: tables per level {tables:?}");
    let mut group = c.benchmark_group("seek_many_tables");
    group.throughput(Throughput::Elements(1));
    group.bench_function("10", |b| {
        b.iter(|| {
            let start = key(rng.random_range(0..NUM - 10));
            let read = many.range(start..).expect("range").take(10).count();
            assert_eq!(read, 10);
        });
    });
    group.finish();

    let mut group = c.benchmark_group("scan");
    group.throughput(Throughput::Elements(NUM));
    group.sample_size(10);
    group.bench_function("all", |b| {
        b.iter(|| {
            let mut n = 0u64;
            for item in db.iter().expect("iter") {
                std::hint::black_box(item.expect("entry"));
                n += 1;
            }
            assert_eq!(n, NUM);
        });
    });
    group.bench_function("all_cursor", |b| {
        b.iter(|| {
            let mut cursor = db.cursor().expect("cursor");
            cursor.seek_to_first().expect("seek");
            let mut n = 0u64;
            while let Some(entry) = cursor.key().zip(cursor.value()) {
                std::hint::black_box(entry);
                n += 1;
                cursor.next().expect("next");
            }
            assert_eq!(n, NUM);
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_reads
}
criterion_main!(benches);
