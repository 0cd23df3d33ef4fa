//! `readwhilewriting`, after `db_bench`'s: the latency readers see while a writer keeps the
//! engine's flushes and compactions busy.
//!
//! The database is filled with `num` keys first (untimed, flushed, settled, as the read
//! workloads are). Then for `rww_duration` one writer puts random present keys with fresh
//! values at `rww_write_rate` puts per second, and `rww_readers` threads read random present
//! keys as fast as they can; every read must find its key. The writer is paced against the
//! clock: put `n` is due at `n / rate` seconds, and a writer behind its schedule puts without
//! pause until it catches up, so a stall is followed by a burst, as under a real load. Each
//! put and each get is timed alone (the call, not the wait for its turn).
//!
//! Two rows: `readwhilewriting` (the reads) and `readwhilewriting_puts` (the puts), each with
//! p50 to p99.99 and the largest latency, and the worst whole second of the run: the fewest
//! reads completed in any second (`worst_second_reads`) and the highest p99 of any second
//! (`worst_second_p99_us`). The writer only overwrites, so `num` keys stay live.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::Result;
use crate::engine::Engine;
use crate::keys::{Values, key};
use crate::latency::Histogram;
use crate::workload::{Context, Measurement, as_f64, with_percentiles};

/// Latencies of one kind of operation, by the second of the run they ended in.
#[derive(Default)]
struct BySecond {
    seconds: Vec<Histogram>,
}

impl BySecond {
    fn record(&mut self, since_start: Duration, latency: Duration) {
        let s = usize::try_from(since_start.as_secs()).unwrap_or(usize::MAX);
        if self.seconds.len() <= s {
            self.seconds.resize_with(s + 1, Histogram::new);
        }
        if let Some(h) = self.seconds.get_mut(s) {
            h.record(latency);
        }
    }

    fn merge(&mut self, other: &Self) {
        if self.seconds.len() < other.seconds.len() {
            self.seconds
                .resize_with(other.seconds.len(), Histogram::new);
        }
        for (mine, theirs) in self.seconds.iter_mut().zip(&other.seconds) {
            mine.merge(theirs);
        }
    }

    fn total(&self) -> Histogram {
        let mut all = Histogram::new();
        for h in &self.seconds {
            all.merge(h);
        }
        all
    }

    /// The fewest operations and the highest p99 of the first `whole` seconds, which lie wholly
    /// inside the run; `None` if the run lasted less than a second.
    fn worst(&self, whole: usize) -> Option<(u64, f64)> {
        let empty = Histogram::new();
        let seconds: Vec<&Histogram> = (0..whole)
            .map(|s| self.seconds.get(s).unwrap_or(&empty))
            .collect();
        let fewest = seconds.iter().map(|h| h.len()).min()?;
        let p99 = seconds
            .iter()
            .map(|h| h.quantile_us(0.99))
            .fold(0.0, f64::max);
        Some((fewest, p99))
    }
}

/// Runs the workload; see the module doc.
///
/// # Errors
/// An engine's error, or a read that did not find its present key.
pub(crate) fn run(ctx: &mut Context<'_>) -> Result<Vec<Measurement>> {
    ctx.filled()?;
    ctx.live_keys = Some(ctx.s.num);
    let num = ctx.s.num;
    let duration = ctx.s.rww_duration;
    let rate = ctx.s.rww_write_rate;
    let readers = ctx.s.rww_readers;
    if num == 0 || rate == 0 || readers == 0 {
        return Err(
            "readwhilewriting needs --num, --rww-write-rate and --rww-readers above 0".into(),
        );
    }
    let engine = ctx.engine;
    let seeds: Vec<u64> = (0..readers).map(|_| ctx.rng.random()).collect();
    let rng = &mut ctx.rng;
    let values = &mut ctx.values;
    let start = Instant::now();
    let (reads, puts, read_secs, write_secs) = std::thread::scope(|scope| {
        let handles: Vec<_> = seeds
            .into_iter()
            .map(|seed| scope.spawn(move || read_loop(engine, num, seed, start, duration)))
            .collect();
        let written = write_loop(engine, num, rate, rng, values, start, duration);
        let mut reads = BySecond::default();
        let mut read_secs: f64 = 0.0;
        for h in handles {
            let (mine, secs) = h.join().map_err(|_| "a reader panicked")??;
            reads.merge(&mine);
            read_secs = read_secs.max(secs);
        }
        let (puts, write_secs) = written?;
        Ok::<_, crate::Error>((reads, puts, read_secs, write_secs))
    })?;
    let whole = usize::try_from(duration.as_secs()).unwrap_or(usize::MAX);
    let read_all = reads.total();
    let put_all = puts.total();
    let mut read_row = with_percentiles(
        Measurement::timed_secs("readwhilewriting", read_secs, read_all.len()),
        &read_all,
    )
    .with("readers", as_f64(readers as u64))
    .with(
        "puts_per_sec",
        as_f64(put_all.len()) / write_secs.max(f64::MIN_POSITIVE),
    );
    let mut put_row = with_percentiles(
        Measurement::timed_secs("readwhilewriting_puts", write_secs, put_all.len()),
        &put_all,
    )
    .with("target_puts_per_sec", as_f64(rate));
    if let Some((fewest, p99)) = reads.worst(whole) {
        read_row = read_row
            .with("worst_second_reads", as_f64(fewest))
            .with("worst_second_p99_us", p99);
    }
    if let Some((fewest, p99)) = puts.worst(whole) {
        put_row = put_row
            .with("worst_second_puts", as_f64(fewest))
            .with("worst_second_p99_us", p99);
    }
    #[expect(clippy::cast_precision_loss, reason = "rates far below 2^52")]
    let behind = put_row.ops_per_sec() < rate as f64 * 0.99;
    if behind {
        put_row.note = Some(format!(
            "the writer fell behind its {rate} puts/s: {:.0} puts/s done",
            put_row.ops_per_sec()
        ));
    }
    Ok(vec![read_row, put_row])
}

/// Reads random present keys until `duration` from `start` has passed; returns the latencies
/// and the seconds it read for.
fn read_loop(
    engine: &dyn Engine,
    num: u64,
    seed: u64,
    start: Instant,
    duration: Duration,
) -> Result<(BySecond, f64)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut latencies = BySecond::default();
    loop {
        let i = rng.random_range(0..num);
        let t = Instant::now();
        let since = t.duration_since(start);
        if since >= duration {
            return Ok((latencies, since.as_secs_f64()));
        }
        if !engine.get(&key(i))? {
            return Err(format!("readwhilewriting: present key {i} not found").into());
        }
        let done = Instant::now();
        latencies.record(done.duration_since(start), done.duration_since(t));
    }
}

/// Puts random present keys at `rate` per second, paced against the clock, until `duration`
/// from `start` has passed; returns the latencies and the seconds it wrote for.
fn write_loop(
    engine: &dyn Engine,
    num: u64,
    rate: u64,
    rng: &mut SmallRng,
    values: &mut Values,
    start: Instant,
    duration: Duration,
) -> Result<(BySecond, f64)> {
    let mut latencies = BySecond::default();
    let mut n: u64 = 0;
    loop {
        let due = start + Duration::from_secs_f64(as_f64(n) / as_f64(rate));
        let mut now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
            now = Instant::now();
        }
        let since = now.duration_since(start);
        if since >= duration {
            return Ok((latencies, since.as_secs_f64()));
        }
        let i = rng.random_range(0..num);
        engine.put(&key(i), values.next_value())?;
        let done = Instant::now();
        latencies.record(done.duration_since(start), done.duration_since(now));
        n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worst_second_counts_only_whole_seconds() {
        let mut b = BySecond::default();
        for ms in 0..2500 {
            let latency = Duration::from_micros(if ms < 1000 { 10 } else { 100 });
            // Half as many operations in the second second.
            if ms < 1000 || ms % 2 == 0 {
                b.record(Duration::from_millis(ms), latency);
            }
        }
        let (fewest, p99) = b.worst(2).unwrap_or_default();
        assert_eq!(fewest, 500);
        assert!((100.0..101.0).contains(&p99), "{p99}");
        assert!(b.worst(0).is_none());
        // A second with no operation at all is the worst.
        assert_eq!(b.worst(4).map(|w| w.0), Some(0));
    }
}
