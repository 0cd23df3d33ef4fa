//! Cairn's stress harness: random concurrent operations against the engine, every read checked
//! against an expected state, and crash loops that kill the process or cut the power.
//!
//! - [`run_stress`]: worker threads pick operations from a weighted mix (reads, scans, puts,
//!   batches, deletes, single deletes where legal, range deletes, snapshots, transactions,
//!   flushes, `compact_range`, reopens). Every read is judged against the expected state,
//!   which marks writes in flight as pending so a read that races a write is judged fairly, as
//!   `RocksDB`'s `db_stress` does. A snapshot is judged against the expected state at its own
//!   sequence number when taken and when released, whatever compactions ran meanwhile. A
//!   verification that cannot read the database is a failure, never a pass.
//! - The TTL work (on by default, off in fault runs): two more column families, one with a TTL
//!   and `max_versions = 1`, one with a TTL and `max_versions = 3`, written with plain puts,
//!   cell TTLs (zero, short, long), deletes and range deletes, flushed and compacted while the
//!   harness moves its `ManualClock`; every read of them is judged exactly at the clock's
//!   reading, and every reopen, kill cycle and run end checks all their keys.
//! - The held-reader work (on with the TTL work): cursors and iterators held open on a family
//!   of their own across compactions that drop keys they still see (by a cell TTL the clock
//!   passed, by a family TTL `set_options` tightened, by a compaction filter) while other reads
//!   record runs of deleted keys over those keys; each held reader, used later, must read what
//!   was live when it was made. Some of it runs as scenes with every other worker paused.
//! - [`blackbox`] and [`power_loss`]: the blackbox loop (a child process killed with SIGKILL, every acknowledged
//!   write must survive) and the power-loss loop (in process, on the faulty file system: every
//!   synced write survives, the rest recovered form a prefix).
//! - [`run_with_faults`]: I/O errors injected one in N, failing as disks and kernels do; each
//!   time a fault stops the database the harness waits for the engine to recover from it (or
//!   calls `Db::resume`), verifies every key, and the run goes on without a reopen. It may fail
//!   operations but never serves wrong data, and loses no acknowledged write.
//!
//! - [`engine`]: the engine under test behind one trait: Cairn always, fjall and RocksDB with
//!   the features named after them. A peer runs the core work (batches, reads, scans, snapshots
//!   stamped by the harness, flushes, compactions, reopens, the SIGKILL loop); what needs
//!   Cairn's own API is skipped there and the report says so.
//! - [`run_erasure`]: the erasure figure of any engine, deleted values still on disk by file
//!   over time, from a byte scan of every file for the values' markers.
//! - [`cluster`]: the cluster stress, `cairn serve` processes of a replicated Cairn driven
//!   through the leader while nodes are killed, the leader paused and followers kept down past
//!   the grace period; every read and every replica judged against the possible states.
//!
//! It tests through the public API only; it does not know the engine's internals.

pub mod cluster;
mod config;
mod crashtest;
mod drive;
pub mod engine;
mod erasure;
mod expected;
mod harness;
mod held_model;
mod held_readers;
mod held_work;
mod interrupt;
mod op_log;
pub mod progress;
mod replay;
mod report;
mod run;
mod ttl_model;
mod ttl_work;
mod ttl_worker;
mod value;
mod worker;

pub use config::{Limit, OpWeights, StressConfig};
pub use crashtest::{CrashConfig, CrashReport, blackbox, power_loss, power_loss_skipped, work_dir};
pub use engine::STRESS_CF;
pub use erasure::{
    ErasureConfig, ErasureReport, ErasureSample, FileFinding, run_erasure, series as erasure_series,
};
pub use harness::{Harness, MIN_FAULT_CYCLES, StressError};
pub use interrupt::{TemporaryDir, remove_temporary_dirs, request_stop, stop_requested};
pub use op_log::OpLogHeader;
pub use replay::{ReplaySettings, replay};
pub use report::{Failure, Failures, HeldCounts, StressReport, TtlCounts};
pub use run::{
    FaultPlan, STRESS_MARKER, claim, mark, mark_engine, run_stress, run_with_fault_plan,
    run_with_faults,
};
