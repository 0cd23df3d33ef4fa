//! What a TTL command can answer besides success: OceanBase's `OB_TTL_CMD_NOT_ALLOWED`,
//! `OB_TTL_NO_TASK_RUNNING` and "TTL not enabled", and the failures underneath.

/// An error of the TTL task manager.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TtlError {
    /// `enable_kv_ttl` is off: no command runs.
    #[error("TTL not enabled (enable_kv_ttl is false)")]
    NotEnabled,

    /// The tenant task's state does not allow the command: `trigger` while a task is active,
    /// `suspend` unless it is triggering, `resume` unless it is suspended, `cancel` once it is
    /// canceling or moving.
    #[error("CMD_NOT_ALLOWED: the TTL task's state does not allow this command")]
    CmdNotAllowed,

    /// `suspend`, `resume` or `cancel` with no task active.
    #[error("NO_TASK_RUNNING: no TTL task is active")]
    NoTaskRunning,

    /// A setting is malformed (the duty duration's text, say).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The task tables or the engine failed.
    #[error(transparent)]
    Tables(#[from] crate::Error),
}

impl From<cairn::Error> for TtlError {
    fn from(e: cairn::Error) -> Self {
        Self::Tables(crate::Error::Engine(e))
    }
}

/// The TTL task manager's result type.
pub type TtlResult<T> = std::result::Result<T, TtlError>;
