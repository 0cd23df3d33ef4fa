//! `stress replay`: re-runs an op log's writes in order, alone, and checks the result.
//!
//! The op log records every write that took effect, in the order each completed, with the state
//! it left each key in. Replaying it single-threaded on a fresh database reproduces the key
//! states a concurrent run produced, in a form a debugger can step through.

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use crate::config::{Limit, OpWeights, StressConfig};
use crate::expected::KeyState;
use crate::harness::{Harness, STRESS_CF, StressError};
use crate::report::StressReport;
use crate::value::{key, value};

/// One logged operation.
#[derive(Debug, serde::Deserialize)]
struct Logged {
    op: String,
    keys: String,
}

/// Replays the log at `log` into a fresh database at `db` and verifies every key.
///
/// # Errors
/// `Config` if the log is malformed; `Engine` if the engine fails.
pub fn replay(
    log: &Path,
    db: &Path,
    keys: usize,
    max_value_size: usize,
) -> Result<StressReport, StressError> {
    let config = StressConfig {
        keys,
        max_value_size,
        limit: Limit::Ops(1),
        weights: OpWeights::default(),
        ..StressConfig::default()
    };
    let harness = Harness::open(config, db, Arc::new(cairn_fs::RealFs::new()), None)?;
    let file = std::fs::File::open(log)?;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        let logged: Logged = serde_json::from_str(&line)
            .map_err(|e| StressError::Config(format!("op log line {}: {e}", n + 1)))?;
        let targets = parse_targets(&logged.keys)
            .ok_or_else(|| StressError::Config(format!("op log line {}: bad keys", n + 1)))?;
        harness.replay_write(&logged.op, &targets, max_value_size)?;
    }
    harness.verify_all("after replay");
    let report = harness.report();
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
        let Some(db) = guard.as_ref() else {
            return Ok(());
        };
        let cf = db.column_family(STRESS_CF)?;
        let mut batch = cairn::WriteBatch::new();
        match (op, targets.first(), targets.last()) {
            ("delete_range", Some(&(first, _)), Some(&(last, _))) => {
                batch.delete_range_cf(&cf, key(first), key(last + 1));
            }
            _ => {
                for &(k, s) in targets {
                    if s.exists() {
                        batch.put_cf(&cf, key(k), value(k, s.version(), max_value_size));
                    } else if op == "single_delete" {
                        batch.single_delete_cf(&cf, key(k));
                    } else {
                        batch.delete_cf(&cf, key(k));
                    }
                }
            }
        }
        let seqno = db.write(batch)?;
        self.expected.commit(targets, seqno);
        Ok(())
    }
}
