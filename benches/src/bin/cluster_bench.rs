//! `cluster-bench`: what replication costs. The same closed-loop client load (N concurrent
//! clients, each waiting for its answer before its next call) against a three-node replicated
//! Cairn on loopback, a one-node one, and the embedded engine with every write synced, one
//! setup after the other in one run on one machine.
//!
//! For each: writes per second and the p50/p99 write latency (a write is acknowledged once
//! committed and applied on the leader; embedded, once synced), then linearizable reads per
//! second and their p99 (embedded, a plain `get`). The nodes run in this process on one tokio
//! runtime, each with its own database and its own TCP port, as `cairn serve` runs them.
//!
//! ```sh
//! cargo run --release -p cairn-bench --bin cluster-bench -- --duration 20s --clients 16
//! ```

#![allow(
    clippy::cast_precision_loss,
    reason = "counts and microseconds become rates and milliseconds for a report"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::{Db, Options, WriteBatch, WriteOptions};
use cairn_raft::client::{self, Client};
use cairn_raft::node::{Node, NodeConfig};
use cairn_raft::wire::{ClientCall, ClientReply};
use clap::Parser;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(
    about = "Writes and linearizable reads against 3-node and 1-node replicated Cairn, beside the embedded engine"
)]
struct Args {
    /// How long each phase (writes, then reads) of each setup runs.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Concurrent clients, each with one call in flight.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Keys written and read, at random.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Bytes per value.
    #[arg(long, default_value_t = 100)]
    value_size: usize,
    /// Setups to run, of cluster-3, cluster-1, embedded.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cluster-3,cluster-1,embedded"
    )]
    setups: Vec<String>,
    /// Write the results as JSON here too.
    #[arg(long)]
    out: Option<std::path::PathBuf>,
}

/// One setup's figures.
#[derive(Debug, Serialize)]
struct Outcome {
    setup: String,
    writes_per_sec: f64,
    write_p50_us: u64,
    write_p99_us: u64,
    reads_per_sec: f64,
    read_p99_us: u64,
    errors: u64,
}

/// Latencies of one phase, and its failed calls.
#[derive(Default)]
struct Phase {
    latencies: Vec<Duration>,
    errors: u64,
    elapsed: Duration,
}

impl Phase {
    fn merge(&mut self, other: Phase) {
        self.latencies.extend(other.latencies);
        self.errors += other.errors;
    }

    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn percentile_us(&mut self, per_mille: usize) -> u64 {
        self.latencies.sort_unstable();
        let at =
            (self.latencies.len() * per_mille / 1000).min(self.latencies.len().saturating_sub(1));
        self.latencies
            .get(at)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.clients == 0 || args.keys == 0 || args.duration.is_zero() {
        return Err("give at least one client, one key and a duration over 0".into());
    }
    for setup in &args.setups {
        if !["cluster-3", "cluster-1", "embedded"].contains(&setup.as_str()) {
            return Err(
                format!("unknown setup {setup:?}: give cluster-3, cluster-1 or embedded").into(),
            );
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut outcomes = Vec::new();
    for setup in &args.setups {
        let dir = tempfile::tempdir()?;
        eprintln!(
            "{setup}: {} clients, {:?} of writes then {:?} of reads",
            args.clients, args.duration, args.duration
        );
        let outcome = match setup.as_str() {
            "embedded" => embedded(&args, dir.path())?,
            cluster => {
                let nodes = if cluster == "cluster-3" { 3 } else { 1 };
                runtime.block_on(replicated(&args, dir.path(), nodes))?
            }
        };
        eprintln!("{outcome:?}");
        outcomes.push(outcome);
    }
    println!(
        "| setup | writes/s | write p50 | write p99 | linearizable reads/s | read p99 | errors |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    );
    for o in &outcomes {
        println!(
            "| {} | {:.0} | {:.2} ms | {:.2} ms | {:.0} | {:.2} ms | {} |",
            o.setup,
            o.writes_per_sec,
            o.write_p50_us as f64 / 1000.0,
            o.write_p99_us as f64 / 1000.0,
            o.reads_per_sec,
            o.read_p99_us as f64 / 1000.0,
            o.errors
        );
    }
    if let Some(out) = &args.out {
        std::fs::write(out, serde_json::to_vec_pretty(&outcomes)?)?;
    }
    let failed: u64 = outcomes.iter().map(|o| o.errors).sum();
    if failed > 0 {
        // A figure with failed calls in it is not a figure.
        return Err(format!("{failed} calls failed").into());
    }
    Ok(())
}

fn key(rng: &mut SmallRng, keys: u64) -> Vec<u8> {
    format!("key{:012}", rng.random_range(0..keys)).into_bytes()
}

async fn replicated(
    args: &Args,
    dir: &Path,
    count: u64,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let mut nodes = Vec::new();
    for id in 1..=count {
        let config = NodeConfig::new(id, dir.join(format!("node-{id}")), "127.0.0.1:0");
        nodes.push(Node::start(config).await?);
    }
    let addrs: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let first = addrs.first().cloned().unwrap_or_default();
    match client::call_node(&first, ClientCall::Init, Duration::from_secs(10)).await? {
        ClientReply::Done => {}
        other => return Err(format!("init: {other:?}").into()),
    }
    let mut admin = Client::new(addrs.clone())?.deadline(Duration::from_secs(30));
    if count > 1 {
        let add: BTreeMap<u64, String> = (2..=count).zip(addrs.iter().skip(1).cloned()).collect();
        let voters: BTreeSet<u64> = (1..=count).collect();
        admin
            .call(ClientCall::ChangeMembership { add, voters })
            .await?;
    }
    // A leader is in place before the clock starts.
    admin.put(b"warm", b"up").await?;
    let mut writes = clients(args, &addrs, true).await?;
    let mut reads = clients(args, &addrs, false).await?;
    for node in nodes {
        node.shutdown().await?;
    }
    Ok(Outcome {
        setup: format!("cluster-{count}"),
        writes_per_sec: writes.rate(),
        write_p50_us: writes.percentile_us(500),
        write_p99_us: writes.percentile_us(990),
        reads_per_sec: reads.rate(),
        read_p99_us: reads.percentile_us(990),
        errors: writes.errors + reads.errors,
    })
}

/// `args.clients` clients writing (or reading) random keys for `args.duration`.
async fn clients(
    args: &Args,
    addrs: &[String],
    write: bool,
) -> Result<Phase, Box<dyn std::error::Error>> {
    let started = Instant::now();
    let end = started + args.duration;
    let mut tasks = tokio::task::JoinSet::new();
    for seed in 0..args.clients as u64 {
        let mut client = Client::new(addrs.to_vec())?;
        let (keys, value) = (args.keys, vec![b'v'; args.value_size]);
        tasks.spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut phase = Phase::default();
            while Instant::now() < end {
                let key = key(&mut rng, keys);
                let sent = Instant::now();
                let done = if write {
                    client.put(&key, &value).await.map(drop)
                } else {
                    client.get(&key).await.map(drop)
                };
                match done {
                    Ok(()) => phase.latencies.push(sent.elapsed()),
                    Err(e) => {
                        eprintln!("a call failed: {e}");
                        phase.errors += 1;
                    }
                }
            }
            phase
        });
    }
    let mut all = Phase::default();
    while let Some(phase) = tasks.join_next().await {
        all.merge(phase?);
    }
    all.elapsed = started.elapsed();
    Ok(all)
}

fn embedded(args: &Args, dir: &Path) -> Result<Outcome, Box<dyn std::error::Error>> {
    let db = Arc::new(Db::open(dir, Options::default())?);
    let run = |write: bool| -> Result<Phase, Box<dyn std::error::Error>> {
        let started = Instant::now();
        let end = started + args.duration;
        let threads: Vec<_> = (0..args.clients as u64)
            .map(|seed| {
                let db = Arc::clone(&db);
                let (keys, value) = (args.keys, vec![b'v'; args.value_size]);
                std::thread::spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(seed);
                    let mut phase = Phase::default();
                    while Instant::now() < end {
                        let key = key(&mut rng, keys);
                        let sent = Instant::now();
                        let done = if write {
                            let mut batch = WriteBatch::new();
                            batch.put(&key, &value);
                            db.write_opt(batch, &WriteOptions { sync: true }).map(drop)
                        } else {
                            db.get(&key).map(drop)
                        };
                        match done {
                            Ok(()) => phase.latencies.push(sent.elapsed()),
                            Err(_) => phase.errors += 1,
                        }
                    }
                    phase
                })
            })
            .collect();
        let mut all = Phase::default();
        for thread in threads {
            all.merge(thread.join().map_err(|_| "a client thread panicked")?);
        }
        all.elapsed = started.elapsed();
        Ok(all)
    };
    let mut writes = run(true)?;
    let mut reads = run(false)?;
    Ok(Outcome {
        setup: "embedded (synced writes)".to_owned(),
        writes_per_sec: writes.rate(),
        write_p50_us: writes.percentile_us(500),
        write_p99_us: writes.percentile_us(990),
        reads_per_sec: reads.rate(),
        read_p99_us: reads.percentile_us(990),
        errors: writes.errors + reads.errors,
    })
}
