//! What a stress run does: threads, key space, op mix, limits and engine settings.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::{Capabilities, EngineKind, Support};

/// Relative weights of the operations a worker picks from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OpWeights {
    /// Point reads, verified.
    pub get: u32,
    /// Short range scans, forward or backward, verified.
    pub scan: u32,
    /// Puts.
    pub put: u32,
    /// Batches of puts and deletes.
    pub batch: u32,
    /// Point deletes.
    pub delete: u32,
    /// Single deletes, on keys written only by put-once (where they are legal).
    pub single_delete: u32,
    /// Range deletes over a few dozen keys.
    pub delete_range: u32,
    /// Snapshot acquire, later verify and release.
    pub snapshot: u32,
    /// Optimistic transactions (read one key, write another).
    pub transaction: u32,
    /// Flushes.
    pub flush: u32,
    /// `compact_range` over a random range.
    pub compact_range: u32,
    /// Close and reopen the database (all threads pause).
    pub reopen: u32,
    /// Puts on the TTL families, with no cell TTL, a zero, short or long one.
    #[serde(default)]
    pub ttl_put: u32,
    /// Point and range deletes on the TTL families.
    #[serde(default)]
    pub ttl_delete: u32,
    /// `get` and `get_versions` on the TTL families, judged at the clock's reading.
    #[serde(default)]
    pub ttl_get: u32,
    /// Short scans of the TTL families.
    #[serde(default)]
    pub ttl_scan: u32,
    /// Flushes and `compact_range` of the TTL families.
    #[serde(default)]
    pub ttl_compact: u32,
    /// Moves the harness's clock on by up to two seconds.
    #[serde(default)]
    pub advance_clock: u32,
    /// The held-reader work (needs the TTL work's clock): writes and blocks of deletes on its
    /// family, readers held open and used later, fresh reads that record runs of deleted keys,
    /// and drops (clock, family TTL, filter) compacted away.
    #[serde(default)]
    pub held_readers: u32,
    /// A held reader, a drop and a fresh read over it written out, with every other worker
    /// paused.
    #[serde(default)]
    pub held_scene: u32,
}

impl Default for OpWeights {
    fn default() -> Self {
        // About one reopen (with a full check of every key) in ten thousand operations.
        Self {
            get: 3000,
            scan: 600,
            put: 2500,
            batch: 800,
            delete: 800,
            single_delete: 400,
            delete_range: 200,
            snapshot: 200,
            transaction: 200,
            flush: 30,
            compact_range: 20,
            reopen: 1,
            ttl_put: 900,
            ttl_delete: 250,
            ttl_get: 900,
            ttl_scan: 200,
            ttl_compact: 10,
            advance_clock: 40,
            held_readers: 300,
            held_scene: 6,
        }
    }
}

impl OpWeights {
    /// The weights as `(name, weight)` pairs, in a fixed order.
    pub fn entries(&self) -> [(&'static str, u32); 20] {
        [
            ("get", self.get),
            ("scan", self.scan),
            ("put", self.put),
            ("batch", self.batch),
            ("delete", self.delete),
            ("single_delete", self.single_delete),
            ("delete_range", self.delete_range),
            ("snapshot", self.snapshot),
            ("transaction", self.transaction),
            ("flush", self.flush),
            ("compact_range", self.compact_range),
            ("reopen", self.reopen),
            ("ttl_put", self.ttl_put),
            ("ttl_delete", self.ttl_delete),
            ("ttl_get", self.ttl_get),
            ("ttl_scan", self.ttl_scan),
            ("ttl_compact", self.ttl_compact),
            ("advance_clock", self.advance_clock),
            ("held_readers", self.held_readers),
            ("held_scene", self.held_scene),
        ]
    }

    /// These weights with only the TTL work (and the held readers on its clock), flushes,
    /// compactions and reopens left in.
    #[must_use]
    pub fn only_ttl(self) -> Self {
        Self {
            get: 0,
            scan: 0,
            put: 0,
            batch: 0,
            delete: 0,
            single_delete: 0,
            delete_range: 0,
            snapshot: 0,
            transaction: 0,
            ..self
        }
    }

    /// These weights with the TTL work left out, and the held-reader work that runs on its
    /// clock.
    #[must_use]
    pub fn without_ttl(self) -> Self {
        Self {
            held_readers: 0,
            held_scene: 0,
            ttl_put: 0,
            ttl_delete: 0,
            ttl_get: 0,
            ttl_scan: 0,
            ttl_compact: 0,
            advance_clock: 0,
            ..self
        }
    }

    /// True if any operation that writes the stressed family has a weight.
    pub fn writes_any(&self) -> bool {
        self.put + self.batch + self.delete + self.single_delete + self.delete_range > 0
    }

    /// These weights with the operations `engine` lacks left out (emulated ones stay).
    #[must_use]
    pub fn for_engine(self, engine: &Capabilities) -> Self {
        let kept = |support: Support, weight: u32| {
            if matches!(support, Support::Missing(_)) {
                0
            } else {
                weight
            }
        };
        let mut weights = Self {
            delete_range: kept(engine.range_delete, self.delete_range),
            single_delete: kept(engine.single_delete, self.single_delete),
            compact_range: kept(engine.compact_range, self.compact_range),
            transaction: kept(engine.transactions, self.transaction),
            ..self
        };
        if matches!(engine.ttl, Support::Missing(_)) {
            weights = weights.without_ttl();
        }
        if matches!(engine.held_readers, Support::Missing(_)) {
            weights.held_readers = 0;
            weights.held_scene = 0;
        }
        weights
    }

    /// Sets a weight by name.
    ///
    /// # Errors
    /// If the name is not an operation.
    pub fn set(&mut self, name: &str, weight: u32) -> Result<(), String> {
        let slot = match name {
            "get" => &mut self.get,
            "scan" => &mut self.scan,
            "put" => &mut self.put,
            "batch" => &mut self.batch,
            "delete" => &mut self.delete,
            "single_delete" => &mut self.single_delete,
            "delete_range" => &mut self.delete_range,
            "snapshot" => &mut self.snapshot,
            "transaction" => &mut self.transaction,
            "flush" => &mut self.flush,
            "compact_range" => &mut self.compact_range,
            "reopen" => &mut self.reopen,
            "ttl_put" => &mut self.ttl_put,
            "ttl_delete" => &mut self.ttl_delete,
            "ttl_get" => &mut self.ttl_get,
            "ttl_scan" => &mut self.ttl_scan,
            "ttl_compact" => &mut self.ttl_compact,
            "advance_clock" => &mut self.advance_clock,
            "held_readers" => &mut self.held_readers,
            "held_scene" => &mut self.held_scene,
            other => return Err(format!("unknown operation {other:?} in the op mix")),
        };
        *slot = weight;
        Ok(())
    }

    /// Parses `name=weight,name=weight` over the defaults.
    ///
    /// # Errors
    /// If an entry is malformed or names no operation.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut weights = Self::default();
        for part in spec.split(',').filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("op mix entry {part:?} is not name=weight"))?;
            let weight = weight
                .trim()
                .parse()
                .map_err(|_| format!("weight {weight:?} of {name} is not a number"))?;
            weights.set(name.trim(), weight)?;
        }
        if weights.entries().iter().all(|(_, w)| *w == 0) {
            return Err("the op mix has no operation with a weight above zero".into());
        }
        Ok(weights)
    }
}

/// How long a run lasts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Limit {
    /// Stop after this long.
    Duration(Duration),
    /// Stop after this many operations in total.
    Ops(u64),
}

/// Everything a stress run needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StressConfig {
    /// Worker threads.
    pub threads: usize,
    /// Keys in the key space.
    pub keys: usize,
    /// The seed every worker's random choices derive from.
    pub seed: u64,
    /// When to stop.
    pub limit: Limit,
    /// The op mix.
    pub weights: OpWeights,
    /// The database directory; `None` for a temporary one.
    pub db: Option<PathBuf>,
    /// Probability that a write is synced.
    pub sync_probability: f64,
    /// Tombstone grace of the stressed column family.
    pub grace: Duration,
    /// The delete persistence deadline, if any.
    pub deadline: Option<Duration>,
    /// Memtable size in bytes (small, so flushes and compactions happen).
    pub memtable_size: usize,
    /// Largest value in bytes.
    pub max_value_size: usize,
    /// Write every operation to this file, for `stress replay`.
    pub op_log: Option<PathBuf>,
    /// Record the expected state here (blackbox crash tests read it after a kill).
    pub expected_journal: Option<PathBuf>,
    /// Show a progress bar.
    pub progress: bool,
    /// Run the TTL work (families with TTLs and version limits, a clock the harness moves).
    /// Fault runs leave it out whatever this says.
    #[serde(default)]
    pub ttl: bool,
    /// Keys per TTL family.
    #[serde(default)]
    pub ttl_keys: usize,
    /// Stress `db` even if it is a non-empty directory the harness did not create (without
    /// it, such a directory is refused: it may be a user's database).
    #[serde(default)]
    pub reuse: bool,
    /// The engine under test.
    #[serde(default)]
    pub engine: EngineKind,
}

impl Default for StressConfig {
    fn default() -> Self {
        Self {
            threads: 4,
            keys: 100_000,
            seed: 0,
            limit: Limit::Duration(Duration::from_secs(60)),
            weights: OpWeights::default(),
            db: None,
            sync_probability: 0.01,
            grace: Duration::ZERO,
            deadline: None,
            memtable_size: 1 << 20,
            max_value_size: 200,
            op_log: None,
            expected_journal: None,
            progress: false,
            ttl: true,
            ttl_keys: 1_000,
            reuse: false,
            engine: EngineKind::Cairn,
        }
    }
}

impl StressConfig {
    /// Checks the settings.
    ///
    /// # Errors
    /// A message naming the bad setting.
    pub fn validate(&self) -> Result<(), String> {
        if !self.engine.compiled_in() {
            return Err(crate::engine::not_compiled_in(self.engine).to_string());
        }
        if self.engine != EngineKind::Cairn && (!self.grace.is_zero() || self.deadline.is_some()) {
            return Err(format!(
                "--grace and --deadline are Cairn's tombstone settings; {} has none",
                self.engine.name()
            ));
        }
        if self.threads == 0 || self.threads > 256 {
            return Err(format!("threads must be 1..=256, not {}", self.threads));
        }
        if self.keys < 64 || self.keys > 100_000_000 {
            return Err(format!("keys must be 64..=100000000, not {}", self.keys));
        }
        if !(0.0..=1.0).contains(&self.sync_probability) {
            return Err(format!(
                "sync probability must be within 0..=1, not {}",
                self.sync_probability
            ));
        }
        if self.max_value_size < 32 || self.max_value_size > 1 << 20 {
            return Err(format!(
                "max value size must be 32..=1048576, not {}",
                self.max_value_size
            ));
        }
        if self.ttl && !(16..=1_000_000).contains(&self.ttl_keys) {
            return Err(format!(
                "ttl keys must be 16..=1000000, not {}",
                self.ttl_keys
            ));
        }
        // Fail closed: a run that can do nothing would pass having checked nothing.
        match self.limit {
            Limit::Ops(0) => return Err("--ops 0 exercised nothing: ops must be above zero".into()),
            Limit::Duration(d) if d.is_zero() => {
                return Err("--duration 0 exercised nothing: give a duration above zero".into());
            }
            _ => {}
        }
        Ok(())
    }
}
