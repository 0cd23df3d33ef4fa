//! Compaction filters: user code that may remove or rewrite values as compaction passes them.

use bytes::Bytes;

/// What a filter decides about a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Keep the value as it is.
    Keep,
    /// Remove the key: its value disappears, and nothing older shows in its place.
    Remove,
    /// Keep the key with this value instead.
    ChangeValue(Bytes),
}

/// Decides, during compaction, whether a value lives on.
///
/// It is asked only about the newest version of a key, and only when no live snapshot can read
/// that version: a filter never changes what a snapshot sees. It runs on background threads and
/// must be quick and deterministic.
pub trait CompactionFilter: Send + Sync + std::fmt::Debug {
    /// Decides about `key`'s value `value` in the column family named `cf`.
    fn filter(&self, cf: &str, key: &[u8], value: &[u8]) -> Decision;
}
