//! A stop asked for from outside the run (the `cairn` command's Ctrl-C or SIGTERM handler).
//!
//! Signals reach the whole process, so the request is process-wide: every stress and crash loop
//! running in it winds down as it would at its limit — workers stop after their operation, the
//! final verification runs, the report says the run was interrupted.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every run in the process to stop early; returns true if a stop was already asked for
/// (a second Ctrl-C, which the caller may treat as "stop now").
pub fn request_stop() -> bool {
    REQUESTED.swap(true, Ordering::AcqRel)
}

/// True once [`request_stop`] has been called.
pub fn stop_requested() -> bool {
    REQUESTED.load(Ordering::Acquire)
}
