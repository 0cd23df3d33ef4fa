//! The error type of the table layer.

use std::path::PathBuf;

/// The result of a table operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong reading or writing a table.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bytes read back from a table are damaged or do not follow the format.
    #[error("corruption in {} at offset {offset}: {reason}", file.display())]
    Corruption {
        /// The table file (empty when decoding bytes that came from no file).
        file: PathBuf,
        /// The byte offset in the file of the damaged block or field.
        offset: u64,
        /// What was wrong.
        reason: String,
    },
    /// A caller passed something the table cannot hold, such as keys out of order.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The file system failed.
    #[error(transparent)]
    Io(#[from] cairn_fs::Error),
}

impl Error {
    /// `Corruption` raised by an iterator that is on no entry, so has no file to name.
    pub fn unpositioned(reason: &str) -> Self {
        Self::Corruption {
            file: PathBuf::from("<unpositioned iterator>"),
            offset: 0,
            reason: reason.to_string(),
        }
    }
}

/// Where a block came from, so decoding errors can name the file and offset.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub(crate) file: std::sync::Arc<std::path::Path>,
    pub(crate) offset: u64,
}

impl Default for Origin {
    fn default() -> Self {
        Self::new(std::sync::Arc::from(std::path::Path::new("")), 0)
    }
}

impl Origin {
    pub(crate) fn new(file: std::sync::Arc<std::path::Path>, offset: u64) -> Self {
        Self { file, offset }
    }

    /// A corruption error at `delta` bytes past this origin.
    pub(crate) fn corruption(&self, delta: usize, reason: impl Into<String>) -> Error {
        Error::Corruption {
            file: self.file.to_path_buf(),
            offset: self.offset.saturating_add(delta as u64),
            reason: reason.into(),
        }
    }
}
