//! Compaction jobs (being written).
