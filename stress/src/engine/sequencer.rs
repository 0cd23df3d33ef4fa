//! Sequence numbers for engines that return none: a write is stamped after it returns and a
//! snapshot when it is taken, both under one lock, so a snapshot stamped S sees exactly the
//! writes stamped at most S. That is all the expected state needs of a number.

use std::sync::{Mutex, MutexGuard, PoisonError};

use super::EngineError;
use crate::expected::SeqNo;

/// Stamps writes and snapshots in one order.
#[derive(Debug, Default)]
pub struct Sequencer {
    last: Mutex<SeqNo>,
}

impl Sequencer {
    fn lock(&self) -> MutexGuard<'_, SeqNo> {
        self.last.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs the write `f` and stamps it with the next number. A failed write takes a number
    /// too: its outcome is unknown, and a snapshot taken after it may see it.
    ///
    /// # Errors
    /// `f`'s.
    pub fn write(&self, f: impl FnOnce() -> Result<(), EngineError>) -> Result<SeqNo, EngineError> {
        let mut last = self.lock();
        let written = f();
        *last += 1;
        written.map(|()| *last)
    }

    /// Takes the snapshot `f` makes, stamped with the number of the last write.
    ///
    /// # Errors
    /// `f`'s.
    pub fn snapshot<S>(
        &self,
        f: impl FnOnce() -> Result<S, EngineError>,
    ) -> Result<(S, SeqNo), EngineError> {
        let last = self.lock();
        f().map(|s| (s, *last))
    }

    /// The number of the last write stamped.
    pub fn last(&self) -> SeqNo {
        *self.lock()
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
}
