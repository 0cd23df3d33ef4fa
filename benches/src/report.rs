//! Medians over the rounds, the table, the targets of DESIGN.md §8, the JSON file and the closing
//! `ratios:` line.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::json;

use crate::engine::EngineKind;
use crate::settings::Settings;
use crate::workload::Measurement;

/// One row of one engine in one round.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sample {
    /// The engine.
    pub engine: EngineKind,
    /// The round, from 0.
    pub round: u64,
    /// What was measured.
    #[serde(flatten)]
    pub measurement: Measurement,
}

/// A workload that failed on an engine.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Failure {
    /// The engine.
    pub engine: EngineKind,
    /// The round, from 0.
    pub round: u64,
    /// The workload's name.
    pub workload: &'static str,
    /// The error.
    pub error: String,
}

/// The medians of one row on one engine.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Summary {
    /// Median seconds.
    pub secs: f64,
    /// Median operations per second.
    pub ops_per_sec: f64,
    /// Median fraction, for `space_after_delete`.
    pub fraction: Option<f64>,
    /// Median operations per second of each fifth, for `queue`.
    pub fifths: Option<Vec<f64>>,
    /// For `churn`: each sample's figures, medians over the rounds sample by sample.
    pub churn: Option<Vec<crate::churn::ChurnSample>>,
    /// Medians of the extra figures.
    pub extra: BTreeMap<String, f64>,
    /// The engine's note on the row, if any.
    pub note: Option<String>,
    /// Rounds measured.
    pub runs: usize,
}

/// Everything a run measured.
#[derive(Debug)]
pub struct Report {
    /// The settings of the run.
    pub settings: Settings,
    /// The engines, in the order they ran.
    pub engines: Vec<EngineKind>,
    /// Every measurement.
    pub samples: Vec<Sample>,
    /// Every failure.
    pub failures: Vec<Failure>,
}

/// The median of `values` (the mean of the middle two for an even count); 0 for none.
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    let mid = values.get(n / 2).copied().unwrap_or(0.0);
    if n % 2 == 1 {
        mid
    } else {
        f64::midpoint(values.get(n / 2 - 1).copied().unwrap_or(0.0), mid)
    }
}

impl Report {
    /// The rows measured, in the order they were first measured.
    pub fn rows(&self) -> Vec<&'static str> {
        let mut rows: Vec<&'static str> = Vec::new();
        for s in &self.samples {
            if !rows.contains(&s.measurement.row) {
                rows.push(s.measurement.row);
            }
        }
        rows
    }

    /// The medians of `row` on `engine`, if it was measured.
    pub fn summary(&self, row: &str, engine: EngineKind) -> Option<Summary> {
        let ms: Vec<&Measurement> = self
            .samples
            .iter()
            .filter(|s| s.engine == engine && s.measurement.row == row)
            .map(|s| &s.measurement)
            .collect();
        let first = ms.first()?;
        let fractions: Vec<f64> = ms.iter().filter_map(|m| m.fraction).collect();
        let fifths = first.fifths.as_ref().map(|f| {
            (0..f.len())
                .map(|i| {
                    median(
                        ms.iter()
                            .filter_map(|m| m.fifths.as_ref()?.get(i).copied())
                            .collect(),
                    )
                })
                .collect()
        });
        let churn = first.churn.as_ref().map(|c| median_samples(&ms, c.len()));
        let mut extra = BTreeMap::new();
        for (name, _) in &first.extra {
            let values = ms
                .iter()
                .filter_map(|m| m.extra.iter().find(|(n, _)| n == name).map(|(_, v)| *v))
                .collect();
            extra.insert(name.clone(), median(values));
        }
        Some(Summary {
            secs: median(ms.iter().map(|m| m.secs).collect()),
            ops_per_sec: median(ms.iter().map(|m| m.ops_per_sec()).collect()),
            fraction: (!fractions.is_empty()).then(|| median(fractions)),
            fifths,
            churn,
            extra,
            note: ms.iter().find_map(|m| m.note.clone()),
            runs: ms.len(),
        })
    }

    fn peers(&self) -> Vec<EngineKind> {
        self.engines
            .iter()
            .copied()
            .filter(|&e| !e.is_cairn())
            .collect()
    }

    /// Cairn over `peer` on `row`, higher is better: throughput over throughput, or for
    /// `space_after_delete` the peer's fraction over Cairn's.
    fn ratio(&self, row: &str, peer: EngineKind) -> Option<f64> {
        self.ratio_of(row, EngineKind::Cairn, peer)
    }

    /// Cairn on LZ4 over fjall on `row`, when both ran: the same codec side by side.
    fn lz4_ratio(&self, row: &str) -> Option<f64> {
        self.ratio_of(row, EngineKind::CairnLz4, EngineKind::Fjall)
    }

    /// `ours` over `peer` on `row`, as [`ratio`](Self::ratio).
    fn ratio_of(&self, row: &str, ours: EngineKind, peer: EngineKind) -> Option<f64> {
        let cairn = self.summary(row, ours)?;
        let other = self.summary(row, peer)?;
        match (cairn.fraction, other.fraction) {
            (Some(c), Some(p)) => Some(if c > 0.0 { p / c } else { f64::INFINITY }),
            _ if other.ops_per_sec > 0.0 => Some(cairn.ops_per_sec / other.ops_per_sec),
            _ => None,
        }
    }

    /// Cairn over the best peer on `row` (the lowest of the per-peer ratios).
    pub fn best_ratio(&self, row: &str) -> Option<f64> {
        self.peers()
            .into_iter()
            .filter_map(|p| self.ratio(row, p))
            .min_by(f64::total_cmp)
    }

    /// The best peer's p99.9 latency on `row` over Cairn's, higher is better as every ratio
    /// (a latency is better lower, so the peer's figure is on top): the lowest over the peers.
    pub fn best_p999_ratio(&self, row: &str) -> Option<f64> {
        let p999 = |e: EngineKind| self.summary(row, e)?.extra.get("p999_us").copied();
        let cairn = p999(EngineKind::Cairn)?;
        self.peers()
            .into_iter()
            .filter_map(|p| {
                let peer = p999(p)?;
                Some(if cairn > 0.0 {
                    peer / cairn
                } else {
                    f64::INFINITY
                })
            })
            .min_by(f64::total_cmp)
    }

    /// The ratios of every row, then `ROW_p999` for the rows that time each operation.
    fn all_ratios(&self) -> Vec<(String, f64)> {
        let rows = self.rows();
        let throughput = rows
            .iter()
            .filter_map(|&row| Some((row.to_string(), self.best_ratio(row)?)));
        let latency = rows
            .iter()
            .filter_map(|&row| Some((format!("{row}_p999"), self.best_p999_ratio(row)?)));
        throughput.chain(latency).collect()
    }

    /// `scan_after_settle` time over `scan_fresh10` time on `engine` (the bar: ≤ 1.5).
    pub fn settled_scan_vs_fresh(&self, engine: EngineKind) -> Option<f64> {
        let settled = self.summary("scan_after_settle", engine)?;
        let fresh = self.summary("scan_fresh10", engine)?;
        (fresh.secs > 0.0).then(|| settled.secs / fresh.secs)
    }

    /// The whole text report; its last line is the `ratios:` line.
    pub fn text(&self) -> String {
        let mut out = String::new();
        self.write_table(&mut out);
        self.write_latency(&mut out);
        self.write_readwhilewriting(&mut out);
        self.write_peak_memory(&mut out);
        self.write_amplification(&mut out);
        self.write_space_amplification(&mut out);
        self.write_blocks_per_read(&mut out);
        self.write_churn(&mut out);
        self.write_queue(&mut out);
        self.write_deletion_figures(&mut out);
        self.write_targets(&mut out);
        for f in &self.failures {
            let _ = writeln!(
                out,
                "FAILED: {} on {} in round {}: {}",
                f.workload,
                f.engine.name(),
                f.round + 1,
                f.error
            );
        }
        out.push_str(&self.ratios_line());
        out.push('\n');
        out
    }

    fn write_table(&self, out: &mut String) {
        let peers = self.peers();
        let _ = write!(out, "{:<20}", "workload");
        for e in &self.engines {
            let _ = write!(out, " {:>24}", e.name());
        }
        for p in &peers {
            let _ = write!(out, " {:>14}", format!("cairn/{}", p.name()));
        }
        let lz4_column = self.has_lz4_pair();
        if lz4_column {
            let _ = write!(out, " {:>16}", "cairn-lz4/fjall");
        }
        out.push('\n');
        let mut notes = Vec::new();
        for row in self.rows() {
            let _ = write!(out, "{row:<20}");
            for &e in &self.engines {
                let cell = self
                    .summary(row, e)
                    .map_or_else(|| "-".into(), |s| cell(&s));
                let _ = write!(out, " {cell:>24}");
                if let Some(note) = self.summary(row, e).and_then(|s| s.note) {
                    notes.push(format!("{row} on {}: {note}", e.name()));
                }
            }
            for &p in &peers {
                let r = self.ratio(row, p).map_or_else(|| "-".into(), fmt_ratio);
                let _ = write!(out, " {r:>14}");
            }
            if lz4_column {
                let r = self.lz4_ratio(row).map_or_else(|| "-".into(), fmt_ratio);
                let _ = write!(out, " {r:>16}");
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "(medians of {} run(s); ops/s and seconds of the timed part; space_after_delete: bytes \
             after / peak bytes, and its ratio is peer fraction / cairn fraction, so higher is \
             better there too)",
            self.samples.iter().map(|s| s.round + 1).max().unwrap_or(0)
        );
        for e in &self.engines {
            let _ = writeln!(
                out,
                "compression {}: {}",
                e.name(),
                e.compression(&self.settings)
            );
        }
        if let Some(bytes) = self.settings.memtable_bytes {
            let _ = writeln!(out, "cairn memtable: {} MiB (--memtable-mib)", bytes >> 20);
        }
        if let Some(n) = self.settings.read_trigger {
            let _ = writeln!(out, "cairn read trigger: {n} (--cairn-read-trigger)");
        }
        if self.settings.zstd_dictionary_bytes > 0 {
            let _ = writeln!(
                out,
                "cairn zstd dictionary: {} KiB a table (--cairn-zstd-dictionary-kib)",
                self.settings.zstd_dictionary_bytes >> 10
            );
        }
        for n in notes {
            let _ = writeln!(out, "note: {n}");
        }
    }

    /// Each engine's peak memory: the largest over its workloads, each run in a process of its
    /// own, and the workload it came from: the resident set (mapped table pages counted once
    /// touched) and the anonymous part (heap: memtables, caches, index and filter blocks).
    fn write_peak_memory(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "\npeak memory (each workload in a process of its own; the largest over the run)"
        );
        let _ = writeln!(
            out,
            "{:<10} {:>24} {:>24}",
            "engine", "resident (with mappings)", "anonymous (heap)"
        );
        for &e in &self.engines {
            let cell = |figure: &str| match (self.unmeasured(e, figure), self.peak_of(e, figure)) {
                (Some(row), _) => format!("not measured in {row}"),
                (None, Some((mb, row))) => format!("{mb:.1} MB in {row}"),
                (None, None) => "not measured".to_string(),
            };
            let _ = writeln!(
                out,
                "{:<10} {:>24} {:>24}",
                e.name(),
                cell("peak_rss_mb"),
                cell("peak_anon_mb")
            );
        }
    }

    /// Write amplification of the workloads that only put: the bytes the engine's process had
    /// written to disk (`/proc/self/io`, its background work finished) over the key and value
    /// bytes put, medians over the rounds.
    fn write_amplification(&self, out: &mut String) {
        let rows = ["fillseq", "fillrandom", "overwrite"];
        let _ = writeln!(
            out,
            "\nwrite amplification (disk bytes written per byte put, background work finished)"
        );
        let _ = writeln!(
            out,
            "{:<10} {:>12} {:>12} {:>12}",
            "engine", rows[0], rows[1], rows[2]
        );
        for &e in &self.engines {
            let cell = |row: &str| match self.write_amp(row, e) {
                Some(amp) => format!("{amp:.2}"),
                None => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "{:<10} {:>12} {:>12} {:>12}",
                e.name(),
                cell(rows[0]),
                cell(rows[1]),
                cell(rows[2])
            );
        }
    }

    /// Space amplification after each workload that knows the keys it left live: the bytes
    /// of the database directory's files, once the engine has flushed and finished its
    /// background work, over the live keys' key and value bytes.
    fn write_space_amplification(&self, out: &mut String) {
        let rows: Vec<&str> = self
            .rows()
            .into_iter()
            .filter(|row| {
                self.engines.iter().any(|&e| {
                    self.summary(row, e)
                        .is_some_and(|s| s.extra.contains_key("space_amp"))
                })
            })
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nspace amplification after the workload, flushed, background work finished: file \
             sizes / live key+value bytes, then allocated bytes / live bytes (fjall's journal \
             is a sparse file), then (file MB / live MB)"
        );
        let _ = write!(out, "{:<22}", "after");
        for e in &self.engines {
            let _ = write!(out, " {:>24}", e.name());
        }
        out.push('\n');
        for row in rows {
            let _ = write!(out, "{row:<22}");
            for &e in &self.engines {
                let cell = self
                    .summary(row, e)
                    .and_then(|s| {
                        let get = |k: &str| s.extra.get(k).copied();
                        Some(format!(
                            "{:.2} {:.2} ({:.0}/{:.0})",
                            get("space_amp")?,
                            get("space_amp_allocated")?,
                            get("disk_mb")?,
                            get("live_mb")?
                        ))
                    })
                    .unwrap_or_else(|| "-".into());
                let _ = write!(out, " {cell:>24}");
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "(live bytes are uncompressed and the values compress to about half, so 0.5 is \
             a compressed copy and nothing more; delete90's figure is on scan_after_settle, \
             the state it ends in; space_after_delete leaves no live key and has its own \
             figure below; the JSON file also gives allocated_mb, what the file system \
             allocated)"
        );
    }

    /// Data blocks fetched per point read, where the engine counts them.
    fn write_blocks_per_read(&self, out: &mut String) {
        let rows = ["readrandom", "readmissing"];
        let measured: Vec<(EngineKind, Vec<Option<f64>>)> = self
            .engines
            .iter()
            .map(|&e| {
                let cells = rows
                    .iter()
                    .map(|row| self.summary(row, e)?.extra.get("blocks_per_read").copied())
                    .collect();
                (e, cells)
            })
            .collect();
        let ran = |e: EngineKind| rows.iter().any(|row| self.summary(row, e).is_some());
        if !measured.iter().any(|(e, _)| ran(*e)) {
            return;
        }
        let _ = writeln!(
            out,
            "\ndata blocks read per point read (from the block cache or the file)"
        );
        let _ = writeln!(out, "{:<10} {:>12} {:>12}", "engine", rows[0], rows[1]);
        for (e, cells) in measured {
            if !ran(e) {
                continue;
            }
            let cell = |c: &Option<f64>, row: &str| match c {
                Some(b) => format!("{b:.3}"),
                None if self.summary(row, e).is_some() => "not counted".into(),
                None => "-".into(),
            };
            let _ = writeln!(
                out,
                "{:<10} {:>12} {:>12}",
                e.name(),
                cell(cells.first().unwrap_or(&None), rows[0]),
                cell(cells.get(1).unwrap_or(&None), rows[1])
            );
        }
        let _ = writeln!(
            out,
            "(cairn: Stats::data_blocks_read; rocksdb: block cache data hits + misses, its \
             statistics on at tickers only; fjall counts none without its metrics feature)"
        );
    }

    /// `row`'s write amplification on `engine`, where both figures were measured.
    pub fn write_amp(&self, row: &str, engine: EngineKind) -> Option<f64> {
        let summary = self.summary(row, engine)?;
        let disk = summary.extra.get("disk_write_mb")?;
        let user = summary.extra.get("user_write_mb")?;
        (*user > 0.0).then(|| disk / user)
    }

    /// A row of `engine` whose sample lacks `figure`: its peak would be a peak of the others.
    fn unmeasured(&self, engine: EngineKind, figure: &str) -> Option<&'static str> {
        self.samples
            .iter()
            .filter(|s| s.engine == engine)
            .find(|s| !s.measurement.extra.iter().any(|(k, _)| k == figure))
            .map(|s| s.measurement.row)
    }

    /// The largest `figure` over `engine`'s samples, and its row.
    fn peak_of(&self, engine: EngineKind, figure: &str) -> Option<(f64, &'static str)> {
        self.samples
            .iter()
            .filter(|s| s.engine == engine)
            .filter_map(|s| {
                let mb = s.measurement.extra.iter().find(|(k, _)| k == figure)?.1;
                Some((mb, s.measurement.row))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// Latency percentiles of `fillrandom`'s puts, `readrandom`'s gets, and
    /// `readwhilewriting`'s gets and puts, per engine.
    fn write_latency(&self, out: &mut String) {
        for (workload, op) in [
            ("fillrandom", "put"),
            ("readrandom", "get"),
            ("readwhilewriting", "get"),
            ("readwhilewriting_puts", "put"),
        ] {
            self.write_latency_of(out, workload, op);
        }
    }

    fn write_latency_of(&self, out: &mut String, workload: &str, op: &str) {
        let rows: Vec<(EngineKind, Summary)> = self
            .engines
            .iter()
            .filter_map(|&e| Some((e, self.summary(workload, e)?)))
            .filter(|(_, s)| s.extra.contains_key("p50_us"))
            .collect();
        if rows.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\n{workload} {op} latency (medians over runs), microseconds"
        );
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "engine", "p50", "p99", "p99.9", "p99.99", "max"
        );
        for (e, s) in rows {
            let get = |name: &str| s.extra.get(name).copied().unwrap_or(0.0);
            let _ = writeln!(
                out,
                "{:<10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                e.name(),
                get("p50_us"),
                get("p99_us"),
                get("p999_us"),
                get("p9999_us"),
                get("max_us")
            );
        }
    }

    fn write_queue(&self, out: &mut String) {
        let queues: Vec<(EngineKind, Summary)> = self
            .engines
            .iter()
            .filter_map(|&e| Some((e, self.summary("queue", e)?)))
            .collect();
        if queues.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "\nqueue ops/s per fifth of the operations done (an op = find the head with an \
             iterator, delete it, push one)"
        );
        let _ = writeln!(
            out,
            "{:<10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10} {:>13}",
            "engine", "1st", "2nd", "3rd", "4th", "5th", "last/first", "MB at end", "allocated MB"
        );
        for (e, s) in queues {
            let f = s.fifths.clone().unwrap_or_default();
            let _ = write!(out, "{:<10}", e.name());
            // Five columns whatever was measured, so the rows stay aligned.
            for i in 0..5 {
                let cell = f.get(i).map_or_else(|| "-".to_string(), |x| fmt_rate(*x));
                let _ = write!(out, " {cell:>10}");
            }
            let first = f.first().copied().unwrap_or(0.0);
            let last = f.last().copied().unwrap_or(0.0);
            let _ = writeln!(
                out,
                " {:>11} {:>10} {:>13}",
                if first > 0.0 {
                    format!("{:.2}", last / first)
                } else {
                    "-".into()
                },
                mb_bare(&s, "bytes_end"),
                mb_bare(&s, "allocated_end")
            );
        }
    }

    fn write_deletion_figures(&self, out: &mut String) {
        let _ = writeln!(out, "\ndeletion figures:");
        for &e in &self.engines {
            if let Some(r) = self.settled_scan_vs_fresh(e) {
                let _ = writeln!(
                    out,
                    "  settled_scan_vs_fresh {}: {r:.2} (scan_after_settle time / scan time of a \
                     fresh db holding only the surviving 10%; target for cairn <= 1.5)",
                    e.name()
                );
            }
        }
        for &e in &self.engines {
            if let Some(s) = self.summary("space_after_delete", e)
                && let Some(f) = s.fraction
            {
                let _ = writeln!(
                    out,
                    "  space_after_delete {}: {:.2}% of peak ({} -> {}; settle {}; {} the moment \
                     the wait returned; allocated {} -> {}){}",
                    e.name(),
                    f * 100.0,
                    mb(&s, "bytes_peak"),
                    mb(&s, "bytes_after"),
                    secs(&s, "settle_secs"),
                    mb(&s, "bytes_at_wait_return"),
                    mb(&s, "allocated_peak"),
                    mb(&s, "allocated_after"),
                    if e == EngineKind::Cairn {
                        "; target < 5% with grace 0"
                    } else {
                        ""
                    }
                );
            }
        }
        for &e in &self.engines {
            if let Some(s) = self.summary("scan_after_settle", e) {
                let _ = writeln!(
                    out,
                    "  delete90 bytes {}: {} full -> {} after deletes -> {} settled ({} to \
                     settle; allocated {} -> {})",
                    e.name(),
                    mb(&s, "bytes_full"),
                    mb(&s, "bytes_after_delete"),
                    mb(&s, "bytes_after_settle"),
                    secs(&s, "settle_secs"),
                    mb(&s, "allocated_full"),
                    mb(&s, "allocated_after_settle"),
                );
            }
        }
    }

    fn write_targets(&self, out: &mut String) {
        if self.peers().is_empty() || !self.engines.contains(&EngineKind::Cairn) {
            return;
        }
        let _ = writeln!(
            out,
            "\nthe performance bar of DESIGN.md §8 (cairn / best peer, higher is better):"
        );
        for (row, target) in [
            ("fillrandom", 1.0),
            ("readrandom", 1.0),
            ("scanall", 1.0),
            ("scan_after_delete", 2.0),
            ("scan_after_settle", 2.0),
            ("queue", 10.0),
            ("space_after_delete", 1.0),
        ] {
            if let Some(r) = self.best_ratio(row) {
                let verdict = if r >= target { "met" } else { "MISSED" };
                let _ = writeln!(
                    out,
                    "  {row:<20} {:>8}  target >= {target:<5} {verdict}",
                    fmt_ratio(r)
                );
            }
        }
        if let Some(f) = self
            .summary("queue", EngineKind::Cairn)
            .and_then(|s| s.fifths)
            && let (Some(&first), Some(&last)) = (f.first(), f.last())
            && first > 0.0
        {
            let r = last / first;
            let verdict = if r >= 0.5 { "met" } else { "MISSED" };
            let _ = writeln!(
                out,
                "  {:<20} {r:>8.2}  target >= 0.5   {verdict}",
                "queue last/first"
            );
        }
    }

    /// `ratios: fillrandom=1.23 …`: Cairn over the best peer per row (empty without peers).
    /// True when both Cairn on LZ4 and fjall ran.
    fn has_lz4_pair(&self) -> bool {
        self.engines.contains(&EngineKind::CairnLz4) && self.engines.contains(&EngineKind::Fjall)
    }

    pub fn ratios_line(&self) -> String {
        let mut line = String::from("ratios:");
        for (row, r) in self.all_ratios() {
            let _ = write!(line, " {row}={}", fmt_ratio(r));
        }
        line
    }

    /// The JSON document: settings, every sample, medians, ratios and the deletion figures.
    pub fn json(&self) -> serde_json::Value {
        let mut medians = serde_json::Map::new();
        for row in self.rows() {
            let mut per = serde_json::Map::new();
            for &e in &self.engines {
                if let Some(s) = self.summary(row, e) {
                    per.insert(e.name().into(), json!(s));
                }
            }
            medians.insert(row.into(), per.into());
        }
        let ratios: BTreeMap<String, f64> = self.all_ratios().into_iter().collect();
        let lz4: BTreeMap<&str, f64> = self
            .rows()
            .into_iter()
            .filter_map(|row| Some((row, self.lz4_ratio(row)?)))
            .collect();
        let settled: BTreeMap<&str, f64> = self
            .engines
            .iter()
            .filter_map(|&e| Some((e.name(), self.settled_scan_vs_fresh(e)?)))
            .collect();
        let engines: Vec<_> = self
            .engines
            .iter()
            .map(|e| json!({"name": e.name(), "compression": e.compression(&self.settings)}))
            .collect();
        json!({
            "settings": self.settings,
            "engines": engines,
            "medians": medians,
            "ratios_cairn_over_best_peer": ratios,
            "ratios_cairn_lz4_over_fjall": lz4,
            "settled_scan_vs_fresh": settled,
            "samples": self.samples,
            "failures": self.failures,
        })
    }
}

/// Each of `n` churn samples, field by field the median over the rounds' `ms`.
fn median_samples(ms: &[&Measurement], n: usize) -> Vec<crate::churn::ChurnSample> {
    use crate::churn::ChurnSample;
    let of = |i: usize, pick: fn(&ChurnSample) -> Option<f64>| -> Option<f64> {
        let values: Vec<f64> = ms
            .iter()
            .filter_map(|m| pick(m.churn.as_ref()?.get(i)?))
            .collect();
        (!values.is_empty()).then(|| median(values))
    };
    (0..n)
        .map(|i| ChurnSample {
            elapsed_secs: of(i, |s| Some(s.elapsed_secs)).unwrap_or(0.0),
            disk_bytes: of(i, |s| Some(s.disk_bytes)).unwrap_or(0.0),
            allocated_bytes: of(i, |s| Some(s.allocated_bytes)).unwrap_or(0.0),
            live_bytes: of(i, |s| Some(s.live_bytes)).unwrap_or(0.0),
            disk_over_live: of(i, |s| Some(s.disk_over_live)).unwrap_or(0.0),
            tombstones_pending: of(i, |s| s.tombstones_pending),
            ops_per_sec: of(i, |s| Some(s.ops_per_sec)).unwrap_or(0.0),
            read_p99_us: of(i, |s| Some(s.read_p99_us)).unwrap_or(0.0),
        })
        .collect()
}

/// `extra[key]` in megabytes with its unit, or "not measured" when the run did not record it
/// (a missing figure is never shown as zero).
fn mb(s: &Summary, key: &str) -> String {
    s.extra
        .get(key)
        .map_or_else(|| "not measured".into(), |b| format!("{:.2} MB", b / 1e6))
}

/// `extra[key]` in megabytes without the unit (a table column), or "not measured".
fn mb_bare(s: &Summary, key: &str) -> String {
    s.extra
        .get(key)
        .map_or_else(|| "not measured".into(), |b| format!("{:.1}", b / 1e6))
}

/// `extra[key]` in seconds, or "not measured".
fn secs(s: &Summary, key: &str) -> String {
    s.extra
        .get(key)
        .map_or_else(|| "not measured".into(), |t| format!("{t:.1} s"))
}

fn cell(s: &Summary) -> String {
    if let Some(f) = s.fraction {
        return format!(
            "{:.2}% ({:.0}->{:.1}MB)",
            f * 100.0,
            s.extra.get("bytes_peak").copied().unwrap_or(0.0) / 1e6,
            s.extra.get("bytes_after").copied().unwrap_or(0.0) / 1e6
        );
    }
    format!("{}/s {:>8}", fmt_rate(s.ops_per_sec), fmt_secs(s.secs))
}

/// Operations per second, short: `1.50M`, `343.3k`, `178`.
pub(crate) fn fmt_rate(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

fn fmt_secs(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.1} s")
    } else if x >= 0.1 {
        format!("{x:.2} s")
    } else {
        format!("{:.1} ms", x * 1e3)
    }
}

fn fmt_ratio(r: f64) -> String {
    if r.is_infinite() {
        "inf".into()
    } else if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Settings {
        Settings {
            num: 1000,
            value_size: 100,
            reads: 1000,
            seed: 1,
            queue_ops: 10,
            queue_items: 10,
            queue_cap_secs: 1,
            idle_secs: 0,
            keep_dirs: false,
            uncompressed: false,
            memtable_bytes: None,
            read_trigger: None,
            cairn_compression: crate::settings::CairnCompression::Default,
            zstd_dictionary_bytes: 0,
            rww_duration: std::time::Duration::from_secs(1),
            rww_write_rate: 10,
            rww_readers: 1,
            churn_duration: std::time::Duration::from_secs(1),
            churn_sample: std::time::Duration::from_secs(1),
        }
    }

    fn sample(engine: EngineKind, row: &'static str, ops: u64, rss: Option<f64>) -> Sample {
        let measurement = Measurement {
            row,
            secs: 1.0,
            ops,
            fraction: None,
            fifths: None,
            churn: None,
            extra: Vec::new(),
            note: None,
        };
        Sample {
            engine,
            round: 0,
            measurement: match rss {
                Some(mb) => measurement.with("peak_rss_mb", mb),
                None => measurement,
            },
        }
    }

    #[test]
    fn a_workload_without_its_memory_figure_is_named_not_skipped() {
        let report = Report {
            settings: settings(),
            engines: vec![EngineKind::Cairn],
            samples: vec![
                sample(EngineKind::Cairn, "fillrandom", 10, Some(50.0)),
                sample(EngineKind::Cairn, "readrandom", 10, None),
            ],
            failures: Vec::new(),
        };
        let text = report.text();
        assert!(text.contains("not measured in readrandom"), "{text}");
        assert!(!text.contains("50.0 MB"), "{text}");
    }

    #[test]
    fn cairn_on_lz4_stands_beside_fjall_and_is_no_peer() {
        let report = Report {
            settings: settings(),
            engines: vec![EngineKind::Cairn, EngineKind::CairnLz4, EngineKind::Fjall],
            samples: vec![
                sample(EngineKind::Cairn, "fillrandom", 300, Some(1.0)),
                sample(EngineKind::CairnLz4, "fillrandom", 200, Some(1.0)),
                sample(EngineKind::Fjall, "fillrandom", 100, Some(1.0)),
            ],
            failures: Vec::new(),
        };
        assert_eq!(report.best_ratio("fillrandom"), Some(3.0));
        assert_eq!(report.lz4_ratio("fillrandom"), Some(2.0));
        let text = report.text();
        assert!(text.contains("cairn-lz4/fjall"), "{text}");
        assert!(!text.contains("cairn/cairn-lz4"), "{text}");
        assert_eq!(
            report
                .json()
                .pointer("/ratios_cairn_lz4_over_fjall/fillrandom")
                .and_then(serde_json::Value::as_f64),
            Some(2.0)
        );
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert!((median(vec![3.0, 1.0, 2.0]) - 2.0).abs() < 1e-12);
        assert!((median(vec![4.0, 1.0, 2.0, 3.0]) - 2.5).abs() < 1e-12);
        assert!(median(Vec::new()).abs() < 1e-12);
    }
}
