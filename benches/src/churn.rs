//! `churn`, a delete-heavy soak at a steady size: what a service that inserts, expires and
//! deletes all day sees in disk bytes, tombstones and read latency, sampled over time.
//!
//! The database is filled with `num` plain keys (untimed, as the read workloads are). Then,
//! for `churn_duration`, one thread loops over operations:
//!
//! - one in four is a **point read** of a random live plain key, timed; it must find it;
//! - the others **insert** a new key: plain (key `i`, the next index after every key so far),
//!   or one in four with a **TTL** (key `t…`, a space of its own) of `min(30 s, duration / 4)`
//!   while fewer than `num / 4` of those are live and at most `num / 4` were put per TTL period
//!   (so their expiries spread evenly);
//! - after an insert, while more than `num` keys are live, old plain keys are **deleted**,
//!   half of the keys by **point deletes** of random live keys in the older half of the
//!   plain keys, half by **range deletes** of runs of 50 to 500 keys from the oldest on.
//!
//! Keys with a TTL die when it passes: Cairn expires them itself (`put_with_ttl`); an engine
//! without a per-key TTL has them deleted by this loop at that moment (RocksDB's TTL is one
//! for the whole database and applied only when compaction meets a key, so it is not used).
//! Those deletes and fjall's key-by-key range deletes are not counted as operations: the
//! user asked for one TTL put and one range delete.
//!
//! The loop keeps a model of every live key, so it knows the live bytes exactly. One
//! operation in 64 also checks, untimed, that a deleted key reads absent, that a TTL key
//! expired over a second ago reads absent, and that a live TTL key reads present.
//!
//! Every `churn_sample` it records a [`ChurnSample`] and prints it to stderr. At the end it
//! flushes, waits for the engine's background work, and records the space amplification of
//! what is left.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::Result;
use crate::disk::{allocated_bytes, dir_bytes, settled_dir_bytes};
use crate::engine::{Expiry, RangeDelete};
use crate::keys::{KEY_LEN, key};
use crate::latency::Histogram;
use crate::workload::{Context, Measurement, as_f64, with_percentiles, with_space};

/// The longest TTL a key gets.
const MAX_TTL: Duration = Duration::from_secs(30);
/// Operations between two untimed checks of deleted and expired keys.
const CHECK_EVERY: u64 = 64;
/// Tries to find a live key at random before giving up.
const TRIES: usize = 64;
/// Expired TTL keys kept to check they read absent.
const EXPIRED_KEPT: usize = 1024;

/// One sample of the soak.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct ChurnSample {
    /// Seconds since the soak began.
    pub elapsed_secs: f64,
    /// Sizes of the files in the database's directory.
    pub disk_bytes: f64,
    /// What the file system allocated to them.
    pub allocated_bytes: f64,
    /// Key and value bytes of the live keys, from the model.
    pub live_bytes: f64,
    /// `disk_bytes / live_bytes`.
    pub disk_over_live: f64,
    /// Tombstones the engine holds, where it can say exactly.
    pub tombstones_pending: Option<f64>,
    /// Operations per second since the last sample.
    pub ops_per_sec: f64,
    /// p99 of the point reads since the last sample, in µs.
    pub read_p99_us: f64,
}

/// The key of the `i`th key put with a TTL: `t` and fifteen digits, after every plain key.
fn ttl_key(i: u64) -> [u8; KEY_LEN] {
    let mut k = key(i);
    if let Some(first) = k.first_mut() {
        *first = b't';
    }
    k
}

/// What the loop knows is live.
struct Model {
    /// The oldest plain key still tracked: every key below it is deleted.
    low: u64,
    /// Plain keys `low..low + len`: live or deleted.
    plain: VecDeque<bool>,
    plain_live: u64,
    /// The oldest TTL key not yet expired.
    ttl_low: u64,
    /// When each TTL key `ttl_low..` expires, in ms since the soak began: in key order, as
    /// every key gets the same TTL.
    ttl_expiry: VecDeque<u64>,
    /// Expired TTL keys and when they expired, the newest last.
    expired: VecDeque<(u64, u64)>,
}

impl Model {
    fn live(&self) -> u64 {
        self.plain_live + self.ttl_expiry.len() as u64
    }

    fn high(&self) -> u64 {
        self.low + self.plain.len() as u64
    }

    /// Forgets the deleted keys at the old end.
    fn trim(&mut self) {
        while self.plain.front() == Some(&false) {
            self.plain.pop_front();
            self.low += 1;
        }
    }

    /// A random live plain key at an offset below `within`, if one is found in a few tries.
    fn random_live(&self, rng: &mut impl Rng, within: usize) -> Option<u64> {
        if within == 0 {
            return None;
        }
        (0..TRIES).find_map(|_| {
            let off = rng.random_range(0..within);
            (self.plain.get(off) == Some(&true)).then(|| self.low + off as u64)
        })
    }
}

/// Counts of what the loop did.
#[derive(Default)]
struct Counts {
    ops: u64,
    reads: u64,
    inserts: u64,
    ttl_puts: u64,
    point_deletes: u64,
    range_deletes: u64,
    keys_point_deleted: u64,
    keys_range_deleted: u64,
    ttl_expired: u64,
    checks: u64,
}

/// Runs the soak; see the module doc.
///
/// # Errors
/// An engine's error, a read that found a deleted or expired key or missed a live one, or a
/// directory that cannot be read.
#[expect(clippy::too_many_lines, reason = "one loop, its steps in order")]
pub(crate) fn run(ctx: &mut Context<'_>) -> Result<Vec<Measurement>> {
    let num = ctx.s.num;
    if num < 1_000 {
        return Err("churn needs --num of at least 1000".into());
    }
    ctx.filled()?;
    let entry = (KEY_LEN + ctx.s.value_size) as u64;
    let duration = ctx.s.churn_duration;
    let every = ctx.s.churn_sample.max(Duration::from_millis(100));
    let ttl = MAX_TTL.min(duration / 4).max(Duration::from_secs(1));
    let ttl_ms = u64::try_from(ttl.as_millis())?;
    let ttl_cap = num / 4;
    let engine = ctx.engine;
    let mut m = Model {
        low: 0,
        plain: std::iter::repeat_n(true, usize::try_from(num)?).collect(),
        plain_live: num,
        ttl_low: 0,
        ttl_expiry: VecDeque::new(),
        expired: VecDeque::new(),
    };
    let mut c = Counts::default();
    let mut by_workload = false;
    let mut key_by_key = false;
    let mut samples = Vec::new();
    let mut reads = Histogram::new();
    let mut interval = Histogram::new();
    let mut interval_ops = 0;
    let start = Instant::now();
    let end = start + duration;
    let mut last_sample = start;
    let mut next_sample = start + every;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let now_ms = u64::try_from(now.duration_since(start).as_millis())?;
        // TTL keys whose time has passed: the model forgets them, and where the engine does
        // not expire them the loop deletes them now.
        while let Some(&due) = m.ttl_expiry.front() {
            if due > now_ms {
                break;
            }
            m.ttl_expiry.pop_front();
            if by_workload {
                engine.delete(&ttl_key(m.ttl_low))?;
            }
            m.expired.push_back((m.ttl_low, due));
            if m.expired.len() > EXPIRED_KEPT {
                m.expired.pop_front();
            }
            m.ttl_low += 1;
            c.ttl_expired += 1;
        }
        if now >= next_sample {
            let since = Span {
                start,
                last_sample,
                now,
            };
            samples.push(sample(ctx, &m, entry, since, interval_ops, &interval)?);
            interval = Histogram::new();
            interval_ops = 0;
            last_sample = now;
            next_sample += every;
        }
        c.ops += 1;
        interval_ops += 1;
        if c.ops % CHECK_EVERY == 0 {
            check(ctx, &mut m, now_ms)?;
            c.checks += 1;
        }
        if ctx.rng.random_range(0..4) == 0 {
            // A point read of a live plain key.
            let Some(i) = m.random_live(&mut ctx.rng, m.plain.len()) else {
                return Err("churn: no live plain key found to read".into());
            };
            let t = Instant::now();
            let found = engine.get(&key(i))?;
            let latency = t.elapsed();
            if !found {
                return Err(format!("churn: live key {i} not found").into());
            }
            reads.record(latency);
            interval.record(latency);
            c.reads += 1;
            continue;
        }
        // An insert.
        // TTL puts are paced at `ttl_cap` a TTL period at most, so their expiries spread
        // evenly over time: unpaced, the cap filled in a second and every key expired at once.
        let ttl_turn = ctx.rng.random_range(0..4) == 0
            && c.ttl_puts * ttl_ms < ttl_cap * now_ms.max(1)
            && (m.ttl_expiry.len() as u64) < ttl_cap;
        if ttl_turn {
            let i = m.ttl_low + m.ttl_expiry.len() as u64;
            let how = engine.put_with_ttl(&ttl_key(i), ctx.values.next_value(), ttl)?;
            by_workload = how == Expiry::ByWorkload;
            m.ttl_expiry.push_back(now_ms + ttl_ms);
            c.ttl_puts += 1;
        } else {
            engine.put(&key(m.high()), ctx.values.next_value())?;
            m.plain.push_back(true);
            m.plain_live += 1;
            c.inserts += 1;
        }
        // Deletes of old plain keys back down to `num` live, half of the keys each way.
        while m.live() > num {
            c.ops += 1;
            interval_ops += 1;
            let point = if c.keys_point_deleted <= c.keys_range_deleted {
                m.random_live(&mut ctx.rng, m.plain.len() / 2)
            } else {
                None
            };
            if let Some(i) = point {
                engine.delete(&key(i))?;
                if let Some(slot) = m.plain.get_mut(usize::try_from(i - m.low)?) {
                    *slot = false;
                }
                m.plain_live -= 1;
                c.point_deletes += 1;
                c.keys_point_deleted += 1;
            } else {
                if m.plain.is_empty() {
                    return Err("churn: too many TTL keys live, and no plain key to delete".into());
                }
                let len = ctx
                    .rng
                    .random_range(50..=500)
                    .min(m.plain.len() as u64 / 2)
                    .max(1);
                let how = engine.delete_range(&key(m.low), &key(m.low + len))?;
                key_by_key |= how == RangeDelete::KeyByKey;
                let gone = m
                    .plain
                    .drain(..usize::try_from(len)?)
                    .filter(|&live| live)
                    .count() as u64;
                m.low += len;
                m.plain_live -= gone;
                c.range_deletes += 1;
                c.keys_range_deleted += gone;
            }
            m.trim();
        }
    }
    // The last sample, at the end of the loop, for the interval since the one before.
    let now = Instant::now();
    let secs = now.duration_since(last_sample).as_secs_f64();
    if secs >= every.as_secs_f64() / 10.0 {
        let since = Span {
            start,
            last_sample,
            now,
        };
        samples.push(sample(ctx, &m, entry, since, interval_ops, &interval)?);
    }
    let elapsed = start.elapsed();
    // What is left once the engine has caught up: TTL keys that expire meanwhile are
    // forgotten (and, where the loop expires them, deleted) up to the moment of measuring.
    let expire_now = |m: &mut Model| -> Result<()> {
        let now_ms = u64::try_from(start.elapsed().as_millis())?;
        while m.ttl_expiry.front().is_some_and(|&due| due <= now_ms) {
            m.ttl_expiry.pop_front();
            if by_workload {
                engine.delete(&ttl_key(m.ttl_low))?;
            }
            m.ttl_low += 1;
        }
        Ok(())
    };
    expire_now(&mut m)?;
    let settle_start = Instant::now();
    engine.flush()?;
    engine.wait_idle()?;
    let settle = settle_start.elapsed();
    expire_now(&mut m)?;
    let disk = settled_dir_bytes(ctx.dir)?;
    let allocated = allocated_bytes(ctx.dir)?;
    expire_now(&mut m)?;
    let live = m.live() * entry;
    ctx.live_keys = None;
    let after_warmup = samples
        .iter()
        .skip(1)
        .map(|s| s.disk_over_live)
        .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))));
    let mut row = with_space(
        with_percentiles(Measurement::timed("churn", elapsed, c.ops), &reads),
        disk,
        allocated,
        live,
    )
    .with("reads", as_f64(c.reads))
    .with("inserts", as_f64(c.inserts))
    .with("ttl_puts", as_f64(c.ttl_puts))
    .with("ttl_secs", ttl.as_secs_f64())
    .with("ttl_expired", as_f64(c.ttl_expired))
    .with("point_deletes", as_f64(c.point_deletes))
    .with("range_deletes", as_f64(c.range_deletes))
    .with("keys_range_deleted", as_f64(c.keys_range_deleted))
    .with("checks", as_f64(c.checks))
    .with("settle_secs", settle.as_secs_f64());
    if let Some(worst) = after_warmup {
        row = row.with("max_disk_over_live_after_warmup", worst);
    }
    let mut notes = Vec::new();
    if by_workload {
        notes.push("no per-key TTL: the workload deleted each TTL key when its TTL passed");
    }
    if key_by_key {
        notes.push("no range delete: keys read and deleted one by one");
    }
    if !notes.is_empty() {
        row.note = Some(notes.join("; "));
    }
    row.churn = Some(samples);
    Ok(vec![row])
}

/// Prints a sample to stderr as the soak goes.
fn progress(ctx: &Context<'_>, s: &ChurnSample) {
    eprintln!(
        "churn {:<9} {:>6.0} s: disk {:>8.1} MB (allocated {:>8.1}), live {:>8.1} MB, \
         disk/live {:>5.2}, tombstones {:>9}, {:>8.0} ops/s, read p99 {:>7.1} us",
        ctx.kind.name(),
        s.elapsed_secs,
        s.disk_bytes / 1e6,
        s.allocated_bytes / 1e6,
        s.live_bytes / 1e6,
        s.disk_over_live,
        s.tombstones_pending
            .map_or_else(|| "-".to_string(), |t| format!("{t:.0}")),
        s.ops_per_sec,
        s.read_p99_us
    );
}

/// A sample of the directory, the model and the engine now (the rates are the caller's).
/// When a sample is taken: the soak's start, the sample before, and now.
#[derive(Clone, Copy)]
struct Span {
    start: Instant,
    last_sample: Instant,
    now: Instant,
}

/// Takes a sample of the interval `span` ends, in which the loop did `ops` operations with
/// the reads timed in `reads`, and prints it.
fn sample(
    ctx: &Context<'_>,
    m: &Model,
    entry: u64,
    span: Span,
    ops: u64,
    reads: &Histogram,
) -> Result<ChurnSample> {
    let disk = as_f64(dir_bytes(ctx.dir)?);
    let live = as_f64(m.live() * entry);
    let secs = span.now.duration_since(span.last_sample).as_secs_f64();
    let s = ChurnSample {
        elapsed_secs: span.now.duration_since(span.start).as_secs_f64(),
        disk_bytes: disk,
        allocated_bytes: as_f64(allocated_bytes(ctx.dir)?),
        live_bytes: live,
        disk_over_live: disk / live.max(1.0),
        tombstones_pending: ctx.engine.tombstones_pending()?.map(as_f64),
        ops_per_sec: as_f64(ops) / secs,
        read_p99_us: reads.quantile_us(0.99),
    };
    progress(ctx, &s);
    Ok(s)
}

/// Untimed checks of both sides: a deleted plain key reads absent, a TTL key expired over a
/// second ago reads absent, a live TTL key with over a second left reads present.
fn check(ctx: &mut Context<'_>, m: &mut Model, now_ms: u64) -> Result<()> {
    let engine = ctx.engine;
    if m.low > 0 {
        let dead = ctx.rng.random_range(m.low.saturating_sub(10_000)..m.low);
        if engine.get(&key(dead))? {
            return Err(format!("churn: deleted key {dead} still reads").into());
        }
    }
    if let Some(&(i, expired_at)) = m.expired.front()
        && now_ms >= expired_at + 1_000
    {
        m.expired.pop_front();
        if engine.get(&ttl_key(i))? {
            return Err(format!("churn: TTL key {i} still reads a second after it expired").into());
        }
    }
    if let Some(&due) = m.ttl_expiry.back()
        && due > now_ms + 1_000
    {
        let i = m.ttl_low + m.ttl_expiry.len() as u64 - 1;
        if !engine.get(&ttl_key(i))? {
            return Err(format!("churn: TTL key {i} reads absent before its TTL passed").into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_keys_sort_after_every_plain_key() {
        assert!(key(u64::MAX / 100) < ttl_key(0));
        assert_eq!(&ttl_key(7), b"t000000000000007");
    }
}
