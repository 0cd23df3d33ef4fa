//! `stress replay`: re-runs an op log's writes in order, alone, and checks the result.
//!
//! The op log records every write that took effect, in the order each completed, with the state
//! it left each key in. Replaying it single-threaded on a fresh database reproduces the key
//! states a concurrent run produced, in a form a debugger can step through.
//!
//! Its first line holds the run's settings ([`OpLogHeader`]): the key space, the value sizes
//! (a value's bytes derive from its key, version and the largest size), the families and their
//! grace and TTL settings, the seed. A replay takes them from there; a setting given that
//! disagrees is refused, since it would be judged as thousands of wrong values. Logs written
//! before the header existed replay with the settings given (or the defaults).

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Limit, OpWeights, StressConfig};
use crate::engine::WriteOp;
use crate::expected::KeyState;
use crate::harness::{Harness, StressError};
use crate::op_log::{OP_LOG_FORMAT, OpLogHeader};
use crate::report::StressReport;
use crate::value::{key, value};

/// One logged operation.
#[derive(Debug, serde::Deserialize)]
struct Logged {
    op: String,
    keys: String,
}

/// Settings a replay was given; `None` takes the op log's.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplaySettings {
    /// Keys in the original run's key space.
    pub keys: Option<usize>,
    /// The original run's largest value.
    pub max_value_size: Option<usize>,
}

/// The replay's settings: the header's, checked against those given.
fn settings(
    header: Option<&OpLogHeader>,
    given: ReplaySettings,
) -> Result<StressConfig, StressError> {
    let defaults = StressConfig::default();
    let Some(h) = header else {
        return Ok(StressConfig {
            keys: given.keys.unwrap_or(defaults.keys),
            max_value_size: given.max_value_size.unwrap_or(defaults.max_value_size),
            ..defaults
        });
    };
    if h.op_log > OP_LOG_FORMAT {
        return Err(StressError::Config(format!(
            "the op log is in format {}, newer than this replay reads ({OP_LOG_FORMAT})",
            h.op_log
        )));
    }
    for (flag, given, logged) in [
        ("--keys", given.keys, h.keys),
        ("--max-value-size", given.max_value_size, h.max_value_size),
    ] {
        if let Some(given) = given
            && given != logged
        {
            return Err(StressError::Config(format!(
                "{flag} {given} disagrees with the op log, whose run used {flag} {logged} \
                 (leave {flag} out to take the log's)"
            )));
        }
    }
    Ok(StressConfig {
        keys: h.keys,
        max_value_size: h.max_value_size,
        seed: h.seed,
        grace: Duration::from_millis(h.grace_ms),
        deadline: h.deadline_ms.map(Duration::from_millis),
        memtable_size: h.memtable_size,
        ttl: h.ttl,
        ttl_keys: h.ttl_keys,
        engine: h.engine,
        ..defaults
    })
}

/// Replays the log at `log` into a fresh database at `db` and verifies every key.
///
/// # Errors
/// `Config` if the log is malformed, holds no operation ("exercised nothing"), or was written
/// with settings that disagree with `given`; `Engine` if the engine fails.
pub fn replay(log: &Path, db: &Path, given: ReplaySettings) -> Result<StressReport, StressError> {
    let file = std::fs::File::open(log).map_err(|e| {
        StressError::Config(format!("cannot read the op log {}: {e}", log.display()))
    })?;
    let mut lines = std::io::BufReader::new(file).lines().enumerate().peekable();
    let mut header = None;
    if let Some((_, Ok(first))) = lines.peek()
        && first.contains("\"op_log\"")
    {
        header = Some(serde_json::from_str::<OpLogHeader>(first).map_err(|e| {
            StressError::Config(format!(
                "op log {} line 1 (its settings): {e}",
                log.display()
            ))
        })?);
        lines.next();
    }
    let mut config = settings(header.as_ref(), given)?;
    config.limit = Limit::Ops(1);
    config.weights = OpWeights::default();
    let keys = config.keys;
    let max_value_size = config.max_value_size;
    if lines.peek().is_none() {
        return Err(StressError::Config(format!(
            "exercised nothing: the op log {} holds no operation",
            log.display()
        )));
    }
    let harness = Harness::open(config, db, Arc::new(cairn_fs::RealFs::new()), None)?;
    let started = std::time::Instant::now();
    let mut ops: std::collections::BTreeMap<String, u64> = std::collections::BTreeMap::new();
    for (n, line) in lines {
        let line = line?;
        let logged: Logged = serde_json::from_str(&line)
            .map_err(|e| StressError::Config(format!("op log line {}: {e}", n + 1)))?;
        let targets = parse_targets(&logged.keys)
            .ok_or_else(|| StressError::Config(format!("op log line {}: bad keys", n + 1)))?;
        if let Some(&(k, _)) = targets.iter().find(|(k, _)| *k >= keys) {
            return Err(StressError::Config(format!(
                "op log line {}: key {k} lies outside a key space of {keys} (give the run's --keys)",
                n + 1
            )));
        }
        harness.replay_write(&logged.op, &targets, max_value_size)?;
        *ops.entry(logged.op.clone()).or_default() += 1;
    }
    harness.verify_all("after replay");
    let mut report = harness.report();
    // The replay's own count: its writes go around the workers that count a run's operations.
    let seconds = started.elapsed().as_secs_f64();
    #[allow(clippy::cast_precision_loss, reason = "a rate for people to read")]
    let total = ops.values().sum::<u64>() as f64;
    report.ops = ops;
    report.seconds = seconds;
    report.ops_per_sec = if seconds > 0.0 { total / seconds } else { 0.0 };
    harness.close()?;
    Ok(report)
}

fn parse_targets(keys: &str) -> Option<Vec<(usize, KeyState)>> {
    keys.split(' ')
        .filter(|s| !s.is_empty())
        .map(|t| {
            let mut parts = t.split(':');
            let k = parts.next()?.parse().ok()?;
            let exists = parts.next()? == "1";
            let version = parts.next()?.parse().ok()?;
            Some((
                k,
                if exists {
                    KeyState::present(version)
                } else {
                    KeyState::deleted(version)
                },
            ))
        })
        .collect()
}

impl Harness {
    /// Applies one logged write.
    fn replay_write(
        &self,
        op: &str,
        targets: &[(usize, KeyState)],
        max_value_size: usize,
    ) -> Result<(), StressError> {
        let guard = self.db();
        let Some(engine) = guard.as_deref() else {
            return Ok(());
        };
        let ops: Vec<WriteOp> = match (op, targets.first(), targets.last()) {
            ("delete_range", Some(&(first, _)), Some(&(last, _))) => vec![WriteOp::DeleteRange {
                start: key(first),
                end: key(last + 1),
                covered: (first..=last).map(key).collect(),
            }],
            _ => targets
                .iter()
                .map(|&(k, s)| {
                    if s.exists() {
                        WriteOp::Put {
                            key: key(k),
                            value: value(k, s.version(), max_value_size),
                        }
                    } else if op == "single_delete" {
                        WriteOp::SingleDelete { key: key(k) }
                    } else {
                        WriteOp::Delete { key: key(k) }
                    }
                })
                .collect(),
        };
        let seqno = engine.write(&ops, false)?;
        self.expected.commit(targets, seqno);
        Ok(())
    }
}
