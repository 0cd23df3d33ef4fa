//! `raft-log-bench`: the Raft-log workload, side by side in one run. Entries of a fixed size are
//! appended in batches (each batch synced before the next, as openraft's append requires), and
//! every `--purge-every` entries the applied prefix is purged, keeping the last `--keep`; the
//! run ends after `--total` bytes of payload. Engines:
//!
//! - `cairn`: the Cairn store of `cairn-raft` through openraft's `RaftLogStorage` API;
//! - `rocksdb` (feature `rocksdb`): the same store shape on RocksDB (entries keyed by their
//!   big-endian index in one column family, the same encoded bytes, one synced write batch per
//!   append, the purge as one range delete with the last purged id in the same batch);
//! - `raft-engine` (feature `raft-engine`): `TiKV`'s purpose-built log store, with its default
//!   configuration (`--raft-engine-purge-threshold` sets the size past which it removes files):
//!   the same encoded bytes as one Raft group's entries, one synced write per append; the purge
//!   records the last purged id (synced), compacts the group to it and
//!   removes the files wholly behind it (`purge_expired_files`, which `TiKV` runs on a timer).
//!
//! Payloads are incompressible (drawn from a random pool), so no engine's compression flatters
//! it.
//!
//! Reported per engine and entry size: throughput (MiB/s of payload and entries/s), append
//! latency (p50, p99), write amplification (bytes the process wrote to disk, from
//! `/proc/self/io`, over payload bytes) and peak disk use (sampled). A figure that cannot be
//! measured (no `/proc/self/io`) fails the run rather than reading as zero.
//!
//! ```sh
//! cargo run --release -p cairn-bench --bin raft-log-bench -- --total 2GiB --sizes 256,4096
//! cargo run --release -p cairn-bench --features rocksdb,raft-engine --bin raft-log-bench -- \
//!     --engines cairn,rocksdb,raft-engine --total 2GiB --sizes 256,4096 --json raft-log.json
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use cairn_raft::{Request, TypeConfig};
use clap::Parser;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};
use serde::Serialize;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, Parser)]
#[command(
    about = "The Raft-log workload (append in synced batches, purge the applied prefix) on Cairn and its peers"
)]
struct Args {
    /// Engines, comma-separated: cairn, rocksdb, raft-engine (each peer with its feature).
    #[arg(long, default_value = "cairn", value_delimiter = ',')]
    engines: Vec<String>,
    /// Entry payload sizes in bytes, comma-separated.
    #[arg(long, default_value = "256,4096", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Payload bytes appended per engine and size (`2GiB`, `256MiB`).
    #[arg(long, default_value = "2GiB", value_parser = parse_size)]
    total: u64,
    /// Entries per append (one synced batch).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Purge every this many entries.
    #[arg(long, default_value_t = 10_000)]
    purge_every: u64,
    /// Entries kept after a purge (the unapplied tail).
    #[arg(long, default_value_t = 10_000)]
    keep: u64,
    /// Directory for the databases (default: a temporary one).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Cairn's memtable size (default: `cairn_raft::node_options`'s, 256MiB).
    #[arg(long, value_parser = parse_size)]
    cairn_memtable: Option<u64>,
    /// raft-engine's `purge_threshold`: the log size past which `purge_expired_files` removes
    /// files (its default is 10GiB, more than a 2 GiB run writes).
    #[arg(long, default_value = "10GiB", value_parser = parse_size)]
    raft_engine_purge_threshold: u64,
}

fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" => 1,
        "kib" | "k" => 1 << 10,
        "mib" | "m" => 1 << 20,
        "gib" | "g" => 1 << 30,
        _ => return Err(format!("{text:?}: write 256MiB or 2GiB")),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("{text:?}: write 256MiB or 2GiB"))
}

/// A log store under test: synced appends and prefix purges.
trait LogEngine {
    fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> Result<()>;
    fn purge(&mut self, upto: LogId<u64>) -> Result<()>;
}

/// The Cairn store of `cairn-raft`, driven through openraft's API.
struct CairnLog {
    store: cairn_raft::LogStore,
    runtime: tokio::runtime::Runtime,
}

impl CairnLog {
    fn open(dir: &Path, memtable: Option<u64>) -> Result<Self> {
        let mut options = cairn_raft::node_options();
        if let Some(bytes) = memtable {
            options = options.memtable_size(usize::try_from(bytes)?);
        }
        let db = cairn::Db::open(dir, options)?;
        let (store, _) = cairn_raft::open_db(std::sync::Arc::new(db)).map_err(|e| e.to_string())?;
        let runtime = tokio::runtime::Builder::new_current_thread().build()?;
        Ok(Self { store, runtime })
    }
}

impl LogEngine for CairnLog {
    fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> Result<()> {
        let store = &mut self.store;
        self.runtime
            .block_on(store.blocking_append(entries))
            .map_err(|e| e.to_string().into())
    }

    fn purge(&mut self, upto: LogId<u64>) -> Result<()> {
        let store = &mut self.store;
        self.runtime
            .block_on(store.purge(upto))
            .map_err(|e| e.to_string().into())
    }
}

#[cfg(feature = "rocksdb")]
mod rocks {
    use super::{Entry, LogEngine, LogId, Path, Result, TypeConfig};

    /// The same store shape on RocksDB.
    pub(crate) struct RocksLog {
        db: rocksdb::DB,
    }

    impl RocksLog {
        pub(crate) fn open(dir: &Path) -> Result<Self> {
            let mut options = rocksdb::Options::default();
            options.create_if_missing(true);
            options.create_missing_column_families(true);
            let db = rocksdb::DB::open_cf(&options, dir, ["log", "meta"])?;
            Ok(Self { db })
        }

        fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily> {
            self.db
                .cf_handle(name)
                .ok_or_else(|| format!("no family {name}").into())
        }
    }

    fn synced() -> rocksdb::WriteOptions {
        let mut w = rocksdb::WriteOptions::default();
        w.set_sync(true);
        w
    }

    impl LogEngine for RocksLog {
        fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> Result<()> {
            let log = self.cf("log")?;
            let mut batch = rocksdb::WriteBatch::default();
            for e in &entries {
                batch.put_cf(
                    log,
                    e.log_id.index.to_be_bytes(),
                    cairn_raft::codec::encode(e)?,
                );
            }
            self.db.write_opt(batch, &synced())?;
            Ok(())
        }

        fn purge(&mut self, upto: LogId<u64>) -> Result<()> {
            let (log, meta) = (self.cf("log")?, self.cf("meta")?);
            let mut batch = rocksdb::WriteBatch::default();
            batch.put_cf(meta, b"last_purged", serde_json::to_vec(&upto)?);
            batch.delete_range_cf(log, 0_u64.to_be_bytes(), (upto.index + 1).to_be_bytes());
            self.db.write_opt(batch, &synced())?;
            Ok(())
        }
    }
}

#[cfg(feature = "raft-engine")]
mod tikv {
    use protobuf::well_known_types::BytesValue;

    use super::{Entry, LogEngine, LogId, Path, Result, TypeConfig};

    /// One Raft group's entries as raft-engine stores them: a protobuf message holding the
    /// entry's index (8 bytes, big-endian) and its encoded bytes.
    struct Entries;

    impl raft_engine::MessageExt for Entries {
        type Entry = BytesValue;

        fn index(e: &BytesValue) -> u64 {
            e.value
                .first_chunk::<8>()
                .map_or(0, |index| u64::from_be_bytes(*index))
        }
    }

    const GROUP: u64 = 1;

    pub(crate) struct TikvLog {
        engine: raft_engine::Engine,
    }

    impl TikvLog {
        pub(crate) fn open(dir: &Path, purge_threshold: u64) -> Result<Self> {
            let config = raft_engine::Config {
                dir: dir
                    .to_str()
                    .ok_or("a directory that is not UTF-8")?
                    .to_owned(),
                purge_threshold: raft_engine::ReadableSize(purge_threshold),
                ..raft_engine::Config::default()
            };
            Ok(Self {
                engine: raft_engine::Engine::open(config)?,
            })
        }
    }

    impl LogEngine for TikvLog {
        fn append(&mut self, entries: Vec<Entry<TypeConfig>>) -> Result<()> {
            let messages = entries
                .iter()
                .map(|e| {
                    let mut value = e.log_id.index.to_be_bytes().to_vec();
                    value.extend_from_slice(&cairn_raft::codec::encode(e)?);
                    let mut message = BytesValue::new();
                    message.value = value;
                    Ok(message)
                })
                .collect::<Result<Vec<_>>>()?;
            let mut batch = raft_engine::LogBatch::default();
            batch.add_entries::<Entries>(GROUP, &messages)?;
            self.engine.write(&mut batch, true)?;
            Ok(())
        }

        fn purge(&mut self, upto: LogId<u64>) -> Result<()> {
            let mut batch = raft_engine::LogBatch::default();
            batch.put(GROUP, b"last_purged".to_vec(), serde_json::to_vec(&upto)?)?;
            self.engine.write(&mut batch, true)?;
            self.engine.compact_to(GROUP, upto.index + 1);
            self.engine.purge_expired_files()?;
            Ok(())
        }
    }
}

fn open_engine(name: &str, dir: &Path, args: &Args) -> Result<Box<dyn LogEngine>> {
    match name {
        "cairn" => Ok(Box::new(CairnLog::open(dir, args.cairn_memtable)?)),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => Ok(Box::new(rocks::RocksLog::open(dir)?)),
        #[cfg(feature = "raft-engine")]
        "raft-engine" => Ok(Box::new(tikv::TikvLog::open(
            dir,
            args.raft_engine_purge_threshold,
        )?)),
        other => Err(format!(
            "unknown engine {other:?} (rocksdb and raft-engine need --features rocksdb,raft-engine)"
        )
        .into()),
    }
}

/// Bytes this process has caused to be written to storage (`write_bytes` of `/proc/self/io`).
fn written_bytes() -> Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io")
        .map_err(|e| format!("cannot read /proc/self/io for write amplification: {e}"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "no write_bytes in /proc/self/io".into())
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(std::result::Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[derive(Debug, Serialize)]
struct Outcome {
    engine: String,
    entry_bytes: usize,
    entries: u64,
    payload_bytes: u64,
    seconds: f64,
    mib_per_sec: f64,
    entries_per_sec: f64,
    append_p50_us: u64,
    append_p99_us: u64,
    disk_bytes_written: u64,
    write_amplification: f64,
    peak_disk_bytes: u64,
}

fn entry(index: u64, value: &[u8]) -> Entry<TypeConfig> {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Request::Put {
            key: index.to_be_bytes().to_vec(),
            value: value.to_vec(),
        }),
    }
}

/// The size of the pool payloads are drawn from.
const POOL: usize = 64 << 20;

/// `len` pseudo-random bytes (xorshift64*): incompressible, and the same in every run.
fn random_pool(len: usize) -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut pool = Vec::with_capacity(len + 8);
    while pool.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        pool.extend_from_slice(&state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    pool
}

/// Entry `index`'s payload of `size` bytes: a window of the pool, different for neighbours.
fn payload(pool: &[u8], index: u64, size: usize) -> &[u8] {
    let windows = (pool.len() - size) as u64;
    let start = usize::try_from(index.wrapping_mul(7_919) % windows).unwrap_or(0);
    pool.get(start..start + size).unwrap_or_default()
}

#[allow(clippy::cast_precision_loss, reason = "rates for people to read")]
fn run(engine: &str, size: usize, args: &Args, dir: &Path) -> Result<Outcome> {
    let mut log = open_engine(engine, dir, args)?;
    let pool = random_pool(POOL);
    let entries = args.total / size as u64;
    let written_before = written_bytes()?;
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(usize::try_from(entries / args.batch + 1)?);
    let mut peak = 0;
    let mut next = 1;
    let mut purged_to = 0;
    while next <= entries {
        let last = (next + args.batch - 1).min(entries);
        let batch: Vec<_> = (next..=last)
            .map(|i| entry(i, payload(&pool, i, size)))
            .collect();
        let t = Instant::now();
        log.append(batch)?;
        latencies.push(t.elapsed());
        next = last + 1;
        if last - purged_to >= args.purge_every + args.keep {
            purged_to = last - args.keep;
            log.purge(LogId::new(CommittedLeaderId::new(1, 1), purged_to))?;
        }
        if latencies.len() % 256 == 0 {
            peak = peak.max(dir_bytes(dir));
        }
    }
    drop(log);
    let seconds = started.elapsed().as_secs_f64();
    peak = peak.max(dir_bytes(dir));
    let disk = written_bytes()? - written_before;
    latencies.sort();
    // The q-quantile: the latency below which a share q of the appends fell.
    let at = |per_mille: usize| {
        let i = latencies.len().saturating_sub(1) * per_mille / 1000;
        latencies.get(i).copied().unwrap_or(Duration::ZERO)
    };
    let payload = entries * size as u64;
    Ok(Outcome {
        engine: engine.to_owned(),
        entry_bytes: size,
        entries,
        payload_bytes: payload,
        seconds,
        mib_per_sec: payload as f64 / 1_048_576.0 / seconds,
        entries_per_sec: entries as f64 / seconds,
        append_p50_us: u64::try_from(at(500).as_micros())?,
        append_p99_us: u64::try_from(at(990).as_micros())?,
        disk_bytes_written: disk,
        write_amplification: disk as f64 / payload as f64,
        peak_disk_bytes: peak,
    })
}

#[allow(clippy::cast_precision_loss, reason = "sizes for people to read")]
fn main() -> Result<()> {
    let args = Args::parse();
    let temp = tempfile::tempdir()?;
    let base = args
        .dir
        .clone()
        .unwrap_or_else(|| temp.path().to_path_buf());
    if let Some(size) = args.sizes.iter().find(|s| **s == 0 || **s > POOL / 2) {
        return Err(format!("--sizes: {size} is not an entry size from 1 B to 32 MiB").into());
    }
    if let Some(size) = args.sizes.iter().find(|s| args.total < **s as u64) {
        return Err(format!(
            "--total {} is less than one entry of {size} bytes",
            args.total
        )
        .into());
    }
    for size in &args.sizes {
        let entries = args.total / *size as u64;
        if entries < args.purge_every + args.keep {
            eprintln!(
                "raft-log-bench: {entries} entries of {size} B never reach the first purge (at {} \
                 entries): the figures are of appends alone",
                args.purge_every + args.keep
            );
        }
    }
    // Every engine named is checked before the first one runs.
    for engine in &args.engines {
        let probe = tempfile::tempdir()?;
        drop(open_engine(engine, &probe.path().join("probe"), &args)?);
    }
    let mut outcomes = Vec::new();
    for &size in &args.sizes {
        for engine in &args.engines {
            let dir = base.join(format!("{engine}-{size}"));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            eprintln!("{engine}, {size}-byte entries …");
            let outcome = run(engine, size, &args, &dir)?;
            std::fs::remove_dir_all(&dir)?;
            println!(
                "{:<8} {:>5} B  {:>8.1} MiB/s  {:>9.0} entries/s  append p50 {:>6} us  p99 {:>6} us  \
                 write amp {:>5.2}  peak disk {:>6.1} MiB",
                outcome.engine,
                outcome.entry_bytes,
                outcome.mib_per_sec,
                outcome.entries_per_sec,
                outcome.append_p50_us,
                outcome.append_p99_us,
                outcome.write_amplification,
                outcome.peak_disk_bytes as f64 / 1_048_576.0
            );
            outcomes.push(outcome);
        }
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&outcomes)?)?;
    }
    Ok(())
}
