//! The TTL work's state (its clock, model and counters) and the checks of what a TTL family
//! read returned: one read judged by the model, and every key of every TTL family at once (a
//! reopen's, a kill cycle's and the end's). The operations themselves are in
//! [`crate::ttl_worker`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use cairn::{Db, ManualClock};

use crate::report::{Failure, Tally, TtlCounts};
use crate::ttl_model::{TTL_FAMILIES, TtlFamily, TtlKey, TtlState, Verdict};
use crate::value::{key, key_index, parse_value};

/// The clock the TTL work drives, its model, and its counters.
#[derive(Debug)]
pub(crate) struct TtlWork {
    pub(crate) state: TtlState,
    pub(crate) clock: Arc<ManualClock>,
    /// Read by every TTL operation, written by a clock advance.
    gate: RwLock<()>,
    /// Reads of TTL keys checked.
    pub(crate) checks: AtomicU64,
    /// Of those, the ones where a candidate had expired.
    pub(crate) expiry_checks: AtomicU64,
    /// How far the clock moved in this run, ms.
    pub(crate) advanced_ms: AtomicU64,
}

impl TtlWork {
    pub(crate) fn new(state: TtlState, clock: Arc<ManualClock>) -> Self {
        Self {
            state,
            clock,
            gate: RwLock::new(()),
            checks: AtomicU64::new(0),
            expiry_checks: AtomicU64::new(0),
            advanced_ms: AtomicU64::new(0),
        }
    }

    /// What the TTL work did so far.
    pub(crate) fn counts(&self) -> TtlCounts {
        TtlCounts {
            checks: self.checks.load(Ordering::Relaxed),
            expiry_checks: self.expiry_checks.load(Ordering::Relaxed),
            clock_advanced_ms: self.advanced_ms.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn hold_clock(&self) -> std::sync::RwLockReadGuard<'_, ()> {
        self.gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Moves the clock on by `by`, recorded first, while no TTL operation runs.
    pub(crate) fn advance(&self, by: Duration) {
        let _stopped = self
            .gate
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        let to = self.clock.now_ms().saturating_add(ms);
        self.state.journal(&format!("T {to}\n"));
        self.clock.set(to);
        self.advanced_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// Judges what a read of key `k` at `now` returned (`values`, newest first, at most `limit`).
#[expect(clippy::too_many_arguments, reason = "one read's whole context")]
pub(crate) fn judge(
    tally: &Tally,
    max_value_size: usize,
    work: &TtlWork,
    family: TtlFamily,
    model: &mut TtlKey,
    k: usize,
    now: u64,
    values: &[bytes::Bytes],
    limit: usize,
    context: &str,
) {
    tally.verified();
    work.checks.fetch_add(1, Ordering::Relaxed);
    let parsed: Option<Vec<u32>> = values
        .iter()
        .map(|v| parse_value(k, v, max_value_size))
        .collect();
    let Some(observed) = parsed else {
        return tally.fail(
            Failure::WrongValue,
            format!(
                "{context} in {}: key {k} holds bytes no write produced",
                family.name
            ),
        );
    };
    match model.judge(family, now, &observed, limit) {
        Verdict::Ok { expiry_mattered } => {
            if expiry_mattered {
                work.expiry_checks.fetch_add(1, Ordering::Relaxed);
            }
        }
        Verdict::Wrong { expected } => tally.fail(
            Failure::Expiry,
            format!(
                "{context} in {} at clock {now}: key {k} read versions {observed:?}, expected one of {expected:?}",
                family.name
            ),
        ),
    }
}

/// Checks every key of every TTL family: a scan for the value, `get_versions` for the rest.
/// Nothing may write meanwhile.
pub(crate) fn verify_all(
    tally: &Tally,
    max_value_size: usize,
    work: &TtlWork,
    db: &Db,
    context: &str,
) {
    let _clock = work.hold_clock();
    let now = work.clock.now_ms();
    for (f, family) in TTL_FAMILIES.iter().enumerate() {
        let cf = match db.column_family(family.name) {
            Ok(cf) => cf,
            Err(e) => {
                return tally.fail(
                    Failure::Unreadable,
                    format!("{context}: column family {}: {e}", family.name),
                );
            }
        };
        let limit = usize::try_from(family.max_versions).unwrap_or(1);
        let mut locked = work.state.lock(f, 0..work.state.len());
        for (k, model) in locked.iter_mut().enumerate() {
            let read = cf
                .get_versions(key(k), limit)
                .map(|vs| vs.into_iter().map(|v| v.value).collect::<Vec<_>>());
            match read {
                Ok(values) => judge(
                    tally,
                    max_value_size,
                    work,
                    *family,
                    model,
                    k,
                    now,
                    &values,
                    limit,
                    context,
                ),
                Err(e) => {
                    return tally.fail(
                        Failure::Unreadable,
                        format!("{context}: get_versions in {}: {e}", family.name),
                    );
                }
            }
        }
        let scanned = cf
            .iter()
            .and_then(Iterator::collect::<cairn::Result<Vec<_>>>);
        let scanned = match scanned {
            Ok(scanned) => scanned,
            Err(e) => {
                return tally.fail(
                    Failure::Unreadable,
                    format!("{context}: scan of {}: {e}", family.name),
                );
            }
        };
        let mut by_key: Vec<Vec<bytes::Bytes>> = vec![Vec::new(); locked.len()];
        for (k, v) in scanned {
            match key_index(&k).and_then(|i| by_key.get_mut(i)) {
                Some(slot) => slot.push(v),
                None => tally.fail(
                    Failure::WrongValue,
                    format!(
                        "{context}: unknown key {:?} in {}",
                        String::from_utf8_lossy(&k),
                        family.name
                    ),
                ),
            }
        }
        for ((k, model), values) in locked.iter_mut().enumerate().zip(by_key) {
            judge(
                tally,
                max_value_size,
                work,
                *family,
                model,
                k,
                now,
                &values,
                1,
                context,
            );
        }
    }
}
