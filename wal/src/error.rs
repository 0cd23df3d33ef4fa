//! The error type of the log layer.

use std::path::PathBuf;

/// The result of a log operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong while writing or reading a log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The log's bytes are damaged where the recovery mode does not allow it.
    #[error("corrupt log {} at offset {offset}: {reason}", file.display())]
    Corruption {
        /// The log file.
        file: PathBuf,
        /// The byte offset of the damage in the file.
        offset: u64,
        /// What is wrong there.
        reason: String,
    },
    /// The file system failed an operation.
    #[error(transparent)]
    Io(#[from] cairn_fs::Error),
    /// The caller asked for something the log cannot do, such as a record over
    /// [`MAX_RECORD_LEN`](crate::MAX_RECORD_LEN).
    #[error("invalid argument for log {}: {reason}", file.display())]
    InvalidArgument {
        /// The log file.
        file: PathBuf,
        /// What is wrong with the request.
        reason: String,
    },
    /// An earlier append or sync of this log failed, so the file may end in a partial record, or
    /// hold bytes the failed sync dropped; records written after them could be read as lying in
    /// the unsynced tail and be lost. The writer refuses further records. Start a new log.
    #[error("log {} is unusable after a failed append or sync", file.display())]
    WriterFailed {
        /// The log file.
        file: PathBuf,
    },
}
