//! The purger crate's error type.

use crate::report::PassReport;

/// Everything that can go wrong in the table layer, the lock or the purger.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine underneath failed (I/O, corruption of a table file, a stopped database).
    #[error(transparent)]
    Engine(#[from] cairn::Error),

    /// The operating system refused something (spawning the purge loop's thread).
    #[error(transparent)]
    Io(#[from] std::io::Error),

    /// A caller's argument is wrong: an unknown column, a value of the wrong type, a missing
    /// NOT NULL value, a bad schema.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// No table of that name is in the catalog.
    #[error("table {0:?} does not exist")]
    NoSuchTable(String),

    /// `create_table` named a table that exists.
    #[error("table {0:?} already exists")]
    TableExists(String),

    /// A write would give a unique index two rows with one key. A soft-deleted row still holds
    /// its unique keys, so this also fires against rows that scoped reads hide.
    #[error("duplicate entry for unique index {index:?} of table {table:?}")]
    UniqueViolation {
        /// The table written.
        table: String,
        /// The unique index that already holds the key.
        index: String,
    },

    /// An engine key of the table layer holds bytes it cannot decode: a damaged or foreign
    /// value. Names the key (escaped) and what was wrong.
    #[error("corruption in {key}: {reason}")]
    Corruption {
        /// The engine key, printed with non-printable bytes escaped.
        key: String,
        /// What could not be decoded.
        reason: String,
    },

    /// `release` by a session that does not hold the advisory lock.
    #[error("advisory lock {name:?}: current session did not hold lock")]
    LockNotHeld {
        /// The lock's name.
        name: String,
    },

    /// The purger's lease ran out in the middle of a pass and another holder took the lock:
    /// the pass stops rather than purge beside it.
    #[error("advisory lock {name:?} was lost during the pass")]
    LockLost {
        /// The lock's name.
        name: String,
    },

    /// A configuration value is wrong; `field` names it (`soft_delete_purge.retention`).
    #[error("config: {field}: {reason}")]
    Config {
        /// The field, as a dotted path.
        field: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The SQL server refused a statement, or the connection to it failed; `what` says which
    /// statement or connection.
    #[error("{what}: {source}")]
    Sql {
        /// The statement run, or the database connected to.
        what: String,
        /// The driver's error.
        source: sqlx::Error,
    },

    /// A database URL names a dialect the SQL backend does not speak.
    #[error(
        "unsupported dialect {0:?}: the SQL backend speaks mysql:// (MySQL, MariaDB) and \
         postgres://"
    )]
    UnsupportedDialect(String),

    /// A purge pass refused a table it could not purge safely: a zoneless `deleted_at` with
    /// no time zone configured, or a foreign key whose `ON DELETE` would change another
    /// table's rows. The pass goes on to the next table.
    #[error("table {table:?} refused: {reason}")]
    TableRefused {
        /// The table.
        table: String,
        /// Why, and what to do about it.
        reason: String,
    },

    /// A server's advisory lock could not be taken or released (neither held nor free).
    #[error("advisory lock {name:?}: {reason}")]
    LockFailed {
        /// The lock's name.
        name: String,
        /// What went wrong.
        reason: String,
    },

    /// A purge pass over SQL ran past its timeout; its connection was closed, which freed
    /// the lock.
    #[error("purge pass timed out after {0:?}; its connection was closed")]
    PassTimedOut(std::time::Duration),

    /// One or more tables of a purge pass failed. `source` is the first failure; `report`
    /// has every table's outcome (the other tables still ran).
    #[error("purge of table {table:?} failed: {source}")]
    PassFailed {
        /// The first table that failed.
        table: String,
        /// Its error.
        source: Box<Error>,
        /// The whole pass.
        report: Box<PassReport>,
    },
}

/// The purger crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }

    pub(crate) fn corruption(key: &[u8], reason: impl Into<String>) -> Self {
        Self::Corruption {
            key: key.escape_ascii().to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn sql(what: impl Into<String>, source: sqlx::Error) -> Self {
        Self::Sql {
            what: what.into(),
            source,
        }
    }

    /// Whether the connection to a SQL server failed (the session is gone or unusable), as
    /// opposed to the server refusing one statement.
    pub(crate) fn is_connection_failure(&self) -> bool {
        let Self::Sql { source, .. } = self else {
            return false;
        };
        !matches!(
            source,
            sqlx::Error::Database(_)
                | sqlx::Error::RowNotFound
                | sqlx::Error::TypeNotFound { .. }
                | sqlx::Error::ColumnIndexOutOfBounds { .. }
                | sqlx::Error::ColumnNotFound(_)
                | sqlx::Error::ColumnDecode { .. }
                | sqlx::Error::Encode(_)
                | sqlx::Error::Decode(_)
        )
    }

    /// Whether a SQL server rolled a statement back to break a deadlock (it may be retried):
    /// MySQL's 1213 (`40001`), PostgreSQL's `40P01`.
    pub(crate) fn is_deadlock(&self) -> bool {
        let Self::Sql {
            source: sqlx::Error::Database(e),
            ..
        } = self
        else {
            return false;
        };
        matches!(e.code().as_deref(), Some("40001" | "40P01"))
    }

    /// Whether a SQL server refused a delete because a foreign key of another table still
    /// references the row (`RESTRICT`/`NO ACTION`): MySQL's 1451, PostgreSQL's `23503`.
    pub(crate) fn is_foreign_key_violation(&self) -> bool {
        matches!(
            self,
            Self::Sql {
                source: sqlx::Error::Database(e),
                ..
            } if e.is_foreign_key_violation()
        )
    }

    /// The database's own message for a statement it refused (else the whole error).
    pub(crate) fn database_message(&self) -> String {
        match self {
            Self::Sql {
                source: sqlx::Error::Database(e),
                ..
            } => e.message().to_owned(),
            other => other.to_string(),
        }
    }

    /// Whether this is an optimistic-transaction conflict (the write may be retried).
    pub(crate) fn is_conflict(&self) -> bool {
        matches!(self, Self::Engine(cairn::Error::Conflict { .. }))
    }
}
