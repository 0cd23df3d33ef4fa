//! The op log's first line: the settings of the run that wrote it ([`OpLogHeader`]), written
//! by the run (`harness.rs`) and read back by `stress replay` (`replay.rs`), which rebuilds the
//! run from them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{OpWeights, StressConfig};
use crate::engine::EngineKind;

/// The op log format written in the header; a replay refuses a newer one.
pub(crate) const OP_LOG_FORMAT: u32 = 1;

/// The first line of an op log: what the run was, so a replay can rebuild it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpLogHeader {
    /// The op log format version.
    pub op_log: u32,
    /// Keys in the key space.
    pub keys: usize,
    /// The largest value in bytes (a value's bytes depend on it).
    pub max_value_size: usize,
    /// The run's seed.
    pub seed: u64,
    /// Worker threads.
    pub threads: usize,
    /// Tombstone grace of the stressed family, in ms.
    pub grace_ms: u64,
    /// The delete persistence deadline, in ms.
    pub deadline_ms: Option<u64>,
    /// Memtable size in bytes.
    pub memtable_size: usize,
    /// Whether the TTL work ran (its families and the harness's clock).
    pub ttl: bool,
    /// Keys per TTL family.
    pub ttl_keys: usize,
    /// The database's column families when the run started.
    pub families: Vec<String>,
    /// The op mix.
    pub weights: OpWeights,
    /// The engine the run stressed (a replay writes into the same one).
    #[serde(default)]
    pub engine: EngineKind,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The header line (with its newline) for a run of `config` on a database with `families`.
pub(crate) fn header_line(config: &StressConfig, families: &[String]) -> String {
    let header = OpLogHeader {
        op_log: OP_LOG_FORMAT,
        keys: config.keys,
        max_value_size: config.max_value_size,
        seed: config.seed,
        threads: config.threads,
        grace_ms: millis(config.grace),
        deadline_ms: config.deadline.map(millis),
        memtable_size: config.memtable_size,
        ttl: config.ttl,
        ttl_keys: config.ttl_keys,
        families: families.to_vec(),
        weights: config.weights,
        engine: config.engine,
    };
    let mut line = serde_json::to_string(&header).unwrap_or_default();
    line.push('\n');
    line
}
