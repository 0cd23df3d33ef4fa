//! The error type of the file-system layer.

use std::path::PathBuf;

/// The result of a file-system operation.
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong in the file-system layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system (or the fault injector) failed an operation on `path`.
    #[error("I/O error during {op} of {}: {source}", path.display())]
    Io {
        /// The operation that failed, e.g. `append` or `rename`.
        op: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Another process (or another handle in this one) holds the lock file.
    #[non_exhaustive]
    #[error("{} is locked by {}", path.display(), holder.map_or_else(|| "another process or handle".to_owned(), |pid| format!("process {pid}")))]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, as the system's lock table shows it (Linux `/proc/locks`), when it shows one.
        holder: Option<u32>,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    /// A copy of this error, for handing one failure to several waiters (`std::io::Error` is not
    /// `Clone`: the copy keeps its kind and message).
    #[must_use]
    pub fn duplicate(&self) -> Self {
        match self {
            Self::Io { op, path, source } => Self::Io {
                op,
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Self::Locked { path, holder } => Self::Locked {
                path: path.clone(),
                holder: *holder,
            },
        }
    }

    /// True when the error says the file or directory does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

impl From<std::io::Error> for Error {
    fn from(source: std::io::Error) -> Self {
        Self::io("io", PathBuf::new(), source)
    }
}
