//! The report's sections for the soaks, `readwhilewriting` and `churn`: beside the report,
//! not in the workloads, so a workload never reads the report that reads it.

use std::fmt::Write as _;

use crate::report::{Report, Summary, fmt_rate};

impl Report {
    /// The worst whole second of `readwhilewriting` per engine, and the puts/s it did (its
    /// latency tables are with the others').
    pub(crate) fn write_readwhilewriting(&self, out: &mut String) {
        let rows: Vec<_> = self
            .engines
            .iter()
            .filter_map(|&e| {
                Some((
                    e,
                    self.summary("readwhilewriting", e)?,
                    self.summary("readwhilewriting_puts", e)?,
                ))
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        let s = &self.settings;
        let _ = writeln!(
            out,
            "\nreadwhilewriting ({} s, {} reader(s), a writer at {} puts/s): medians over runs",
            s.rww_duration.as_secs_f64(),
            s.rww_readers,
            s.rww_write_rate
        );
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>10} {:>18} {:>23} {:>23}",
            "engine",
            "reads/s",
            "puts/s",
            "worst-second reads",
            "worst-second get p99 us",
            "worst-second put p99 us"
        );
        for (e, reads, puts) in rows {
            let get = |s: &Summary, k: &str| {
                s.extra
                    .get(k)
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.1}"))
            };
            let _ = writeln!(
                out,
                "{:<10} {:>10} {:>10} {:>18} {:>23} {:>23}",
                e.name(),
                fmt_rate(reads.ops_per_sec),
                fmt_rate(puts.ops_per_sec),
                reads
                    .extra
                    .get("worst_second_reads")
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
                get(&reads, "worst_second_p99_us"),
                get(&puts, "worst_second_p99_us")
            );
        }
    }
}

impl Report {
    /// Each engine's churn samples, medians over the rounds sample by sample, and the worst
    /// disk/live after warm-up (from the second sample on).
    pub(crate) fn write_churn(&self, out: &mut String) {
        let runs: Vec<_> = self
            .engines
            .iter()
            .filter_map(|&e| Some((e, self.summary("churn", e)?)))
            .collect();
        if runs.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nchurn ({} s, a sample every {} s; medians over runs, sample by sample)",
            self.settings.churn_duration.as_secs_f64(),
            self.settings.churn_sample.as_secs_f64()
        );
        let _ = writeln!(
            out,
            "{:<10} {:>8} {:>10} {:>12} {:>10} {:>10} {:>12} {:>10} {:>13}",
            "engine",
            "at s",
            "disk MB",
            "allocated MB",
            "live MB",
            "disk/live",
            "tombstones",
            "ops/s",
            "read p99 us"
        );
        for (e, s) in &runs {
            for x in s.churn.iter().flatten() {
                let _ = writeln!(
                    out,
                    "{:<10} {:>8.0} {:>10.1} {:>12.1} {:>10.1} {:>10.2} {:>12} {:>10} {:>13.1}",
                    e.name(),
                    x.elapsed_secs,
                    x.disk_bytes / 1e6,
                    x.allocated_bytes / 1e6,
                    x.live_bytes / 1e6,
                    x.disk_over_live,
                    x.tombstones_pending
                        .map_or_else(|| "-".to_string(), |t| format!("{t:.0}")),
                    fmt_rate(x.ops_per_sec),
                    x.read_p99_us
                );
            }
        }
        for (e, s) in &runs {
            let get = |k: &str| s.extra.get(k).copied();
            let _ = writeln!(
                out,
                "  {}: worst disk/live after warm-up {}; at the end, flushed and settled ({} s), \
                 {} ({} MB / {} MB live; TTL keys expired meanwhile are not live); read p99 over \
                 the run {} us",
                e.name(),
                get("max_disk_over_live_after_warmup")
                    .map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
                get("settle_secs").map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
                get("space_amp").map_or_else(|| "-".to_string(), |v| format!("{v:.2}")),
                get("disk_mb").map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
                get("live_mb").map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
                get("p99_us").map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
            );
        }
    }
}
