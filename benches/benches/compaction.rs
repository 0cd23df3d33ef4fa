//! Compaction throughput through `cairn_compaction`'s public API.
//!
//! Three input tables, 170k entries in all: 100k puts (seqno 1), newer puts over every second
//! key (seqno 2) and point tombstones over every fifth key (seqno 3); no snapshots, grace 0,
//! nothing below, so the rules drop every shadowed put and every tombstone with what it
//! deletes. `compaction_iter` times the rules over a `MergingIter` of the tables' iterators
//! (blocks cached); `job_run` times `job::run`, which also writes and fsyncs the output table.
//! `compaction_iter_one_key_10k_versions` times the rules over one key with 10,000 kept puts.
//! `cargo bench -p cairn-bench --bench compaction`.

#![expect(
    missing_docs,
    reason = "`criterion_group!` expands to an undocumented public function"
)]

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_compaction::job::{JobSpec, OutputFiles};
use cairn_compaction::{CompactionIter, GcContext, NothingBelow};
use cairn_fs::{FileSystem, RealFs, WritableFile};
use cairn_sstable::{
    BlockCache, EntryMeta, FragmentedRangeTombstones, Kind, MergingIter, Table, TableOptions,
    TableWriter, internal_key,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const KEYS: u64 = 100_000;
const WRITE_TIME: u64 = 1_764_000_000_000;
const VALUE: [u8; 100] = [b'v'; 100];

fn user_key(i: u64) -> Vec<u8> {
    format!("{i:016}").into_bytes()
}

/// Writes a table of `kind` entries at `seqno` for the keys `ids`.
fn write_table(path: &Path, ids: impl Iterator<Item = u64>, seqno: u64, kind: Kind) {
    let file = RealFs::new().create(path).expect("create table file");
    let mut writer = TableWriter::new(file, TableOptions::default()).expect("table writer");
    let value: &[u8] = if kind == Kind::Put { &VALUE } else { &[] };
    for i in ids {
        writer
            .add(
                &internal_key(&user_key(i), seqno, kind),
                EntryMeta::at(WRITE_TIME),
                value,
            )
            .expect("add entry");
    }
    writer.finish().expect("finish table");
}

fn context() -> GcContext<'static> {
    GcContext {
        snapshots: &[],
        now: WRITE_TIME + 1_000,
        grace_ms: 0,
        max_versions: 1,
        cf_ttl_ms: None,
        below: &NothingBelow,
        filter: None,
    }
}

struct Outputs(PathBuf);

impl OutputFiles for Outputs {
    fn create(&mut self, index: usize) -> cairn_fs::Result<Box<dyn WritableFile>> {
        RealFs::new().create(&self.0.join(format!("out-{index}.sst")))
    }
}

fn bench_compaction(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = BlockCache::new(64 << 20);
    // (every n-th key, seqno, kind) of each input table.
    let inputs = [(1, 1, Kind::Put), (2, 2, Kind::Put), (5, 3, Kind::Delete)];
    let tables: Vec<Table> = inputs
        .iter()
        .map(|&(every, seqno, kind)| {
            let path = dir.path().join(format!("{seqno:06}.sst"));
            write_table(&path, (0..KEYS).filter(|i| i % every == 0), seqno, kind);
            Table::open(&RealFs::new(), &path, seqno, Some(cache.clone())).expect("open table")
        })
        .collect();
    let entries_in: u64 = tables.iter().map(|t| t.properties().num_entries).sum();

    let rules = || {
        let merged = MergingIter::new(tables.iter().map(Table::iter).collect());
        let mut iter = CompactionIter::new(
            merged,
            FragmentedRangeTombstones::fragment(Vec::new()),
            context(),
        )
        .expect("compaction iterator");
        let mut out = 0u64;
        while let Some(entry) = iter.next_entry().expect("next entry") {
            black_box(entry);
            out += 1;
        }
        assert_eq!(iter.entries_in(), entries_in);
        out
    };
    // Every fifth key is deleted; the rest keep their newest put.
    assert_eq!(rules(), KEYS - KEYS / 5);

    let out_dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("compaction");
    group.throughput(Throughput::Elements(entries_in));
    group.sample_size(10);
    group.bench_function("compaction_iter_170k", |b| b.iter(rules));
    group.bench_function("job_run_170k", |b| {
        b.iter(|| {
            let spec = JobSpec {
                inputs: tables.clone(),
                ctx: context(),
                table_options: TableOptions::default(),
                target_file_size: 64 << 20,
                grandparents: &[],
                max_grandparent_overlap: u64::MAX,
            };
            let output =
                cairn_compaction::job::run(spec, &mut Outputs(out_dir.path().into())).expect("job");
            assert_eq!(output.entries_out, KEYS - KEYS / 5);
            black_box(output)
        });
    });
    group.finish();
}

/// One key with 10,000 puts, all kept (`max_versions` 10,000, no snapshot): the rules' cost per
/// version of one key must not grow with the versions after it.
fn bench_many_versions(c: &mut Criterion) {
    const VERSIONS: u64 = 10_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("versions.sst");
    let file = RealFs::new().create(&path).expect("create table file");
    let mut writer = TableWriter::new(file, TableOptions::default()).expect("table writer");
    for seqno in (1..=VERSIONS).rev() {
        writer
            .add(
                &internal_key(b"hot", seqno, Kind::Put),
                EntryMeta::at(WRITE_TIME),
                &VALUE,
            )
            .expect("add entry");
    }
    writer.finish().expect("finish table");
    let table = Table::open(&RealFs::new(), &path, 1, None).expect("open table");
    let rules = || {
        let ctx = GcContext {
            max_versions: u32::try_from(VERSIONS).expect("fits"),
            ..context()
        };
        let input = FragmentedRangeTombstones::fragment(Vec::new());
        let mut iter = CompactionIter::new(table.iter(), input, ctx).expect("compaction iterator");
        let mut out = 0u64;
        while let Some(entry) = iter.next_entry().expect("next entry") {
            black_box(entry);
            out += 1;
        }
        out
    };
    assert_eq!(rules(), VERSIONS);
    let mut group = c.benchmark_group("compaction");
    group.throughput(Throughput::Elements(VERSIONS));
    group.sample_size(10);
    group.bench_function("compaction_iter_one_key_10k_versions", |b| b.iter(rules));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = bench_compaction, bench_many_versions
}
criterion_main!(benches);
