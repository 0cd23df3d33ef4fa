//! The error type of compaction.

/// The result of a compaction operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong in a compaction.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An input table is damaged, or an output table could not be written.
    #[error(transparent)]
    Table(#[from] cairn_sstable::Error),
    /// The file system failed.
    #[error(transparent)]
    Io(#[from] cairn_fs::Error),
}
