//! A latency histogram of bounded size, for every workload that reports percentiles: a list of
//! every latency would grow with the run (16 bytes per operation, 160 MB for `fillrandom` at
//! 10M keys) and show in the job's peak memory as if the engine held it.
//!
//! Buckets are log-linear, as HDR histograms' are: 128 per power of two of nanoseconds, so a
//! quantile is reported within 0.8% (the upper edge of its bucket, never below the true
//! figure). The largest latency is kept exactly.

use std::time::Duration;

/// Buckets per power of two.
const SUB: u64 = 128;
/// log2 of [`SUB`].
const SUB_BITS: u32 = 7;
/// Powers of two covered above the linear range: 2^64 ns is far past any run.
const GROUPS: usize = 64 - SUB_BITS as usize;

/// Counts of latencies, by bucket.
#[derive(Debug, Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; (GROUPS + 1) * usize::try_from(SUB).unwrap_or(128)],
            total: 0,
            max_ns: 0,
        }
    }

    /// Counts one latency.
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        if let Some(c) = self.counts.get_mut(bucket(ns)) {
            *c += 1;
        }
        self.total += 1;
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Self) {
        for (c, o) in self.counts.iter_mut().zip(&other.counts) {
            *c += o;
        }
        self.total += other.total;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Latencies counted.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// The `quantile` (0..=1) in microseconds: the upper edge of the bucket holding it (the
    /// largest latency itself for 1.0 or the last bucket); 0 for an empty histogram.
    pub fn quantile_us(&self, quantile: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "a rank within 1..=total, counts far below 2^52"
        )]
        let rank = ((self.total as f64 * quantile.clamp(0.0, 1.0)).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                let edge = upper_edge(u64::try_from(i).unwrap_or(u64::MAX));
                return ns_to_us(edge.min(self.max_ns));
            }
        }
        ns_to_us(self.max_ns)
    }

    /// The largest latency, in microseconds.
    pub fn max_us(&self) -> f64 {
        ns_to_us(self.max_ns)
    }
}

#[expect(clippy::cast_precision_loss, reason = "latencies far below 2^52 ns")]
fn ns_to_us(ns: u64) -> f64 {
    ns as f64 / 1e3
}

/// The bucket of `ns`: below [`SUB`] one bucket per nanosecond; above, [`SUB`] per power of two.
fn bucket(ns: u64) -> usize {
    let index = if ns < SUB {
        ns
    } else {
        let group = u64::from(ns.ilog2() - SUB_BITS + 1);
        let shift = group - 1;
        group * SUB + ((ns >> shift) - SUB)
    };
    usize::try_from(index).unwrap_or(usize::MAX)
}

/// The largest nanosecond figure in bucket `index`.
fn upper_edge(index: u64) -> u64 {
    if index < SUB {
        return index;
    }
    let group = index / SUB;
    let shift = group - 1;
    let low = (SUB + index % SUB) << shift;
    low + ((1 << shift) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bucket_holds_what_its_edges_say() {
        for ns in (0..100_000).chain([1 << 20, (1 << 20) + 12_345, u64::from(u32::MAX)]) {
            let b = u64::try_from(bucket(ns)).unwrap_or(0);
            assert!(upper_edge(b) >= ns, "{ns} in bucket {b}");
            assert!(b == 0 || upper_edge(b - 1) < ns, "{ns} in bucket {b}");
        }
    }

    #[test]
    fn quantiles_are_within_one_percent_and_never_below() {
        let mut h = Histogram::new();
        for us in 1..=1000 {
            h.record(Duration::from_micros(us));
        }
        for (q, want) in [(0.5, 500.0), (0.99, 990.0), (0.999, 999.0)] {
            let got = h.quantile_us(q);
            assert!(got >= want && got <= want * 1.008, "q {q}: {got}");
        }
        assert!((h.quantile_us(1.0) - 1000.0).abs() < 1e-9);
        assert!((h.max_us() - 1000.0).abs() < 1e-9);
        assert!(Histogram::new().quantile_us(0.5).abs() < 1e-12);
    }

    #[test]
    fn merged_histograms_count_both() {
        let mut a = Histogram::new();
        let mut b = Histogram::new();
        a.record(Duration::from_micros(1));
        b.record(Duration::from_micros(100));
        a.merge(&b);
        assert_eq!(a.len(), 2);
        assert!((a.max_us() - 100.0).abs() < 1e-9);
    }
}
