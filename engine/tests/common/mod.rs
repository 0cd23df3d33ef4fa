//! Pieces several engine test files share.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cairn::{CompactionFilter, Decision};

/// A compaction filter that holds the first compaction consulting it until the test opens the
/// gate: a way to have a compaction in flight while something else happens.
#[derive(Debug, Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct GateState {
    entered: bool,
    open: bool,
}

impl Gate {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Waits until a compaction is held at the gate; false if none came within `timeout`.
    pub fn wait_entered(&self, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, timeout, |s| !s.entered)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.entered
    }

    /// Lets every compaction through, now and later.
    pub fn open(&self) {
        self.lock().open = true;
        self.changed.notify_all();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl CompactionFilter for Gate {
    fn filter(&self, _cf: &str, _key: &[u8], _value: &[u8]) -> Decision {
        let mut state = self.lock();
        state.entered = true;
        self.changed.notify_all();
        while !state.open {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        Decision::Keep
    }
}

/// The names of the table files in `dir`, sorted.
pub fn tables_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| Path::new(n).extension().is_some_and(|e| e == "sst"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}
