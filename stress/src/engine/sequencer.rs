//! Sequence numbers for engines that return none. Writes run side by side, each stamped with
//! the next number after it returns; a snapshot waits for the writes in flight, is taken with
//! none running, and is stamped with the last number handed out. So a snapshot stamped S sees
//! exactly the writes stamped at most S, which is all the expected state needs of a number:
//! every such write returned before the snapshot was taken, and every later one began after.
//! Writes to one key stay in stamp order because the harness holds the key's stripe across the
//! write and its commit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use super::EngineError;
use crate::expected::SeqNo;

/// Stamps writes and snapshots in one order.
#[derive(Debug, Default)]
pub struct Sequencer {
    /// Held shared by writes in flight, exclusively by a snapshot being taken.
    gate: RwLock<()>,
    last: AtomicU64,
}

impl Sequencer {
    /// Runs the write `f` and stamps it with the next number. A failed write takes a number
    /// too: its outcome is unknown, and a snapshot taken after it may see it.
    ///
    /// # Errors
    /// `f`'s.
    pub fn write(&self, f: impl FnOnce() -> Result<(), EngineError>) -> Result<SeqNo, EngineError> {
        let _in_flight = self.gate.read().unwrap_or_else(PoisonError::into_inner);
        let written = f();
        let stamp = self.last.fetch_add(1, Ordering::AcqRel) + 1;
        written.map(|()| stamp)
    }

    /// Takes the snapshot `f` makes with no write in flight, stamped with the number of the
    /// last write.
    ///
    /// # Errors
    /// `f`'s.
    pub fn snapshot<S>(
        &self,
        f: impl FnOnce() -> Result<S, EngineError>,
    ) -> Result<(S, SeqNo), EngineError> {
        let _alone = self.gate.write().unwrap_or_else(PoisonError::into_inner);
        let stamp = self.last.load(Ordering::Acquire);
        f().map(|s| (s, stamp))
    }

    /// The number of the last write stamped.
    pub fn last(&self) -> SeqNo {
        self.last.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineKind;

    #[test]
    fn a_snapshot_is_stamped_with_the_last_write_before_it() -> Result<(), EngineError> {
        let s = Sequencer::default();
        assert_eq!(s.write(|| Ok(()))?, 1);
        assert_eq!(s.snapshot(|| Ok(()))?.1, 1);
        assert!(
            s.write(|| Err(EngineError::peer(EngineKind::Fjall, "x")))
                .is_err()
        );
        assert_eq!(s.last(), 2, "a failed write takes a number");
        assert_eq!(s.write(|| Ok(()))?, 3);
        Ok(())
    }

    /// Writes run side by side (the second starts while the first is in flight), and a
    /// snapshot waits for both.
    #[test]
    fn writes_overlap_and_a_snapshot_waits_for_them() -> Result<(), EngineError> {
        let s = Sequencer::default();
        let (started, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|scope| {
            let first = scope.spawn(|| {
                s.write(|| {
                    started.wait();
                    release.wait();
                    Ok(())
                })
            });
            started.wait();
            // The first write is in flight: a second one is not held up by it.
            assert_eq!(s.write(|| Ok(())).ok(), Some(1));
            release.wait();
            assert_eq!(first.join().ok().and_then(Result::ok), Some(2));
        });
        assert_eq!(s.snapshot(|| Ok(()))?.1, 2);
        Ok(())
    }
}
