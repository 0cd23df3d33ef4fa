//! `FutileRewrite`: the mark an in-place compaction leaves on the tables it wrote when it
//! dropped all it could, so the picker does not rewrite them again before something changes.
//! Kept apart from `compact.rs`, which sets it, so the database state that holds it
//! (`inner.rs`) does not depend on the compaction code.

use cairn_sstable::SeqNo;

/// Why a table an in-place rewrite produced is not worth rewriting again yet: the oldest
/// snapshot the rewrite judged by, and when the first grace it kept ends.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FutileRewrite {
    pub(crate) oldest_snapshot: Option<SeqNo>,
    pub(crate) retry_at: u64,
    /// If the rewrite kept expired puts: when the first put it kept unexpired expires, the
    /// earliest a TTL rewrite could drop more.
    pub(crate) ttl_retry_at: Option<u64>,
}

impl FutileRewrite {
    /// Still futile with `oldest_snapshot` the oldest snapshot at `now`.
    pub(crate) fn holds(self, oldest_snapshot: Option<SeqNo>, now: u64) -> bool {
        self.oldest_snapshot == oldest_snapshot && now < self.retry_at
    }

    /// Still futile for the TTL picker.
    pub(crate) fn holds_for_ttl(self, oldest_snapshot: Option<SeqNo>, now: u64) -> bool {
        self.oldest_snapshot == oldest_snapshot && self.ttl_retry_at.is_some_and(|t| now < t)
    }
}
