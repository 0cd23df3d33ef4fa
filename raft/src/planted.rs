//! Deliberately wrong behaviour, planted at run time so the cluster stress can show it catches
//! each (`cli/tests/cluster_planted.rs`). Only a build with the `planted-bugs` feature can plant
//! one, and only when the node's environment names it in `CAIRN_PLANTED_BUG`; in any other
//! build the node behaves as it should and this module answers no.

/// A wrong behaviour of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bug {
    /// Reads skip the read index: any node answers from its own state (`local-reads`).
    LocalReads,
    /// An append is acknowledged before it is synced; the next synced write (a vote, a purge)
    /// syncs it (`early-ack`).
    EarlyAck,
    /// A snapshot install records the snapshot as applied first, then replaces the data, with
    /// no record that would redo it after a crash (`torn-install`).
    TornInstall,
}

impl Bug {
    fn name(self) -> &'static str {
        match self {
            Self::LocalReads => "local-reads",
            Self::EarlyAck => "early-ack",
            Self::TornInstall => "torn-install",
        }
    }
}

/// True when `bug` is planted in this node.
pub(crate) fn planted(bug: Bug) -> bool {
    cfg!(feature = "planted-bugs")
        && std::env::var("CAIRN_PLANTED_BUG").is_ok_and(|named| named == bug.name())
}
