//! Cairn's compaction: deciding what lives and what dies, choosing what to compact, and doing it.
//!
//! - [`rules`]: the garbage-collection rules of DESIGN.md §3, stated once, with an example each:
//!   the compaction iterator, the picker and the engine's explanations and reads all ask it;
//! - [`compaction_iter`]: the rules applied to a sorted stream of versions with the live
//!   snapshots, the clock, the grace period and a [`BelowOracle`] that says whether older data
//!   may lie below the output level;
//! - [`picker`]: leveled compaction with dynamic level sizes, and the deletion-aware triggers in
//!   priority order (delete persistence deadline, tombstone density, read-triggered, TTL,
//!   snapshot release);
//! - [`job`]: merges input tables, applies the rules, and writes output tables cut at a target
//!   size and at grandparent overlap, each holding its share of the surviving range tombstones.
//!
//! It knows nothing of the engine's version set, logs or threads: it is handed tables, a
//! snapshot list, a clock reading and an oracle, and returns tables and counts.

pub mod compaction_iter;
mod error;
mod filter;
pub mod job;
pub mod picker;
pub mod planted;
pub mod rules;
mod stats;

pub use compaction_iter::{
    BelowOracle, CompactionIter, GcContext, KeyVersion, NothingBelow, OutputEntry,
};
pub use error::{Error, Result};
pub use filter::{CompactionFilter, Decision};
pub use stats::DropCounts;
