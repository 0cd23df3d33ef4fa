//! The engine's error type.

use std::path::PathBuf;
use std::sync::Arc;

/// The result of an engine operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bytes read back from a file are damaged.
    #[error("corruption in {} at offset {offset}: {reason}", file.display())]
    Corruption {
        /// The damaged file.
        file: PathBuf,
        /// Where in it.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// The file system failed.
    #[error(transparent)]
    Io(#[from] cairn_fs::Error),
    /// The caller passed something the engine does not accept.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An optimistic transaction read a key that was written after its snapshot.
    #[error("transaction conflict on key {key:?}")]
    Conflict {
        /// The key (lossily printed) whose newer write broke the transaction.
        key: String,
    },
    /// The column family does not exist (or was dropped).
    #[error("column family {0:?} does not exist")]
    ColumnFamilyNotFound(String),
    /// The database was opened read-only (`Db::open_read_only`):
    /// it takes no writes, flushes, compactions or column-family changes.
    #[error("the database is open read-only")]
    ReadOnly,
    /// A thread panicked while applying this write: whether it was applied is unknown, and the
    /// database has stopped.
    #[error("a writer panicked: {0}")]
    Panicked(String),
    /// Writes are stopped because level 0 holds `l0_stop` tables and automatic compactions are
    /// off, so no compaction will come to drain it: the write was not applied. Compact level 0
    /// (`compact_range`) or open with automatic compactions on, then write again.
    #[error(
        "writes are stopped: level 0 holds {level0_files} tables (l0_stop is {limit}) and \
         automatic compactions are off, so none will drain it; compact it (compact_range, \
         `cairn compact`) or open with automatic compactions on"
    )]
    WriteStall {
        /// The tables in the fullest family's level 0.
        level0_files: usize,
        /// The count at which writes stop.
        limit: usize,
    },
    /// The database takes no more work: it is closed, or an earlier failure left it unable to
    /// accept writes safely (reopen it). A write that fails with `Stopped` was not applied.
    #[error("database stopped: {cause}")]
    Stopped {
        /// What stopped it.
        cause: StopCause,
    },
}

/// What stopped a database.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StopCause {
    /// [`Db::close`](crate::db::Db::close) ran, or the `Db` was dropped.
    #[error("the database is closed")]
    Closed,
    /// A failure that leaves the files uncertain: a failed log or MANIFEST write or sync, a
    /// failed flush or compaction, a background panic. The first such failure is kept.
    #[error("after an earlier error: {0}")]
    Failed(Arc<Error>),
    /// Every sequence number is used.
    #[error(
        "sequence numbers are used up (the last is {})",
        cairn_sstable::MAX_SEQNO
    )]
    SequenceNumbersExhausted,
}

impl StopCause {
    /// Whether recovery (`Db::resume`) may clear this stop: an I/O error, which a new log and
    /// the memtables flushed to fresh tables leave behind.
    pub(crate) fn is_recoverable(&self) -> bool {
        matches!(self, Self::Failed(error) if matches!(**error, Error::Io(_)))
    }

    /// Why a database that fails with `error` stops: the error itself, or, if it is already a
    /// stop, that stop's cause (so a cause is never wrapped in a second stop).
    pub(crate) fn of(error: &Error) -> Self {
        match error {
            Error::Stopped { cause } => cause.clone(),
            other => Self::Failed(Arc::new(other.duplicate())),
        }
    }
}

impl From<cairn_sstable::Error> for Error {
    fn from(e: cairn_sstable::Error) -> Self {
        match e {
            cairn_sstable::Error::Corruption {
                file,
                offset,
                reason,
            } => Self::Corruption {
                file,
                offset,
                reason,
            },
            cairn_sstable::Error::InvalidArgument(why) => Self::InvalidArgument(why),
            cairn_sstable::Error::Io(e) => Self::Io(e),
            other => Self::other_io(&other),
        }
    }
}

impl From<cairn_compaction::Error> for Error {
    fn from(e: cairn_compaction::Error) -> Self {
        match e {
            cairn_compaction::Error::Table(e) => e.into(),
            cairn_compaction::Error::Io(e) => Self::Io(e),
            other => Self::other_io(&other),
        }
    }
}

impl From<cairn_wal::Error> for Error {
    fn from(e: cairn_wal::Error) -> Self {
        match e {
            cairn_wal::Error::Corruption {
                file,
                offset,
                reason,
            } => Self::Corruption {
                file,
                offset,
                reason,
            },
            cairn_wal::Error::Io(e) => Self::Io(e),
            cairn_wal::Error::InvalidArgument { file, reason } => {
                Self::InvalidArgument(format!("{}: {reason}", file.display()))
            }
            // A log writer that refuses records after a failed append or sync.
            other => Self::other_io(&other),
        }
    }
}

impl Error {
    /// What every call on a closed database returns.
    pub(crate) fn closed() -> Self {
        Self::Stopped {
            cause: StopCause::Closed,
        }
    }

    /// What every write to a database stopped by `cause` returns.
    pub(crate) fn stopped(cause: &StopCause) -> Self {
        Self::Stopped {
            cause: cause.clone(),
        }
    }

    /// An error of a lower layer that has no variant of its own here (they are
    /// `non_exhaustive`): an I/O failure, with its message.
    fn other_io(error: &dyn std::error::Error) -> Self {
        Self::Io(cairn_fs::Error::from(std::io::Error::other(
            error.to_string(),
        )))
    }

    pub(crate) fn invalid(why: impl Into<String>) -> Self {
        Self::InvalidArgument(why.into())
    }

    pub(crate) fn corruption(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Self::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// A copy of this error to hand to every waiter of a failed group write.
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Self::Corruption {
                file,
                offset,
                reason,
            } => Self::Corruption {
                file: file.clone(),
                offset: *offset,
                reason: reason.clone(),
            },
            Self::InvalidArgument(why) => Self::InvalidArgument(why.clone()),
            Self::Conflict { key } => Self::Conflict { key: key.clone() },
            Self::ColumnFamilyNotFound(name) => Self::ColumnFamilyNotFound(name.clone()),
            Self::Io(e) => Self::Io(e.duplicate()),
            Self::Stopped { cause } => Self::Stopped {
                cause: cause.clone(),
            },
            Self::Panicked(why) => Self::Panicked(why.clone()),
            Self::ReadOnly => Self::ReadOnly,
            Self::WriteStall {
                level0_files,
                limit,
            } => Self::WriteStall {
                level0_files: *level0_files,
                limit: *limit,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_keeps_its_cause_typed_and_unwrapped() {
        let exhausted = Error::Stopped {
            cause: StopCause::SequenceNumbersExhausted,
        };
        assert!(matches!(
            StopCause::of(&exhausted),
            StopCause::SequenceNumbersExhausted
        ));
        let io = Error::Io(cairn_fs::Error::from(std::io::Error::other("disk")));
        match Error::stopped(&StopCause::of(&io)) {
            Error::Stopped {
                cause: StopCause::Failed(failure),
            } => assert!(matches!(*failure, Error::Io(_)), "{failure}"),
            other => panic!("{other}"),
        }
        assert_eq!(
            Error::stopped(&StopCause::of(&exhausted)).to_string(),
            format!(
                "database stopped: sequence numbers are used up (the last is {})",
                cairn_sstable::MAX_SEQNO
            )
        );
    }
}
