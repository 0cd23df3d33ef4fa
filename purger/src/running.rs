//! The purger's background loop: a pass, then a full interval on the backend's clock, then the
//! next pass, until stopped. A pass that fails is logged; one that panics is caught and logged;
//! either way the loop goes on. One loop runs per lock name and set of tables: starting a
//! second one attaches to the first, and the loop ends when every handle has stopped.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::purge::Purger;

/// The longest real-time sleep between two readings of the backend's clock while waiting for the
/// next pass: a `ManualClock` moved by a test is noticed within this.
const CLOCK_POLL: Duration = Duration::from_millis(20);

/// The loops running in this process, by the database they purge (the backend's identity) and
/// their lock name: one loop per key.
static LOOPS: Mutex<BTreeMap<(String, String), Arc<LoopState>>> = Mutex::new(BTreeMap::new());

fn loop_key(purger: &Purger) -> (String, String) {
    (purger.backend().identity(), purger.lock_name().to_owned())
}

/// Shared by the loop's thread and every [`Running`] handle on it.
#[derive(Debug, Default)]
pub(crate) struct LoopState {
    stop: Mutex<bool>,
    /// What the pass in progress watches, to end early once the loop is stopped.
    cancel: Arc<AtomicBool>,
    wake: Condvar,
    passes: AtomicU64,
    /// Passes that failed or panicked.
    failed: AtomicU64,
    handles: AtomicUsize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A handle on a running purge loop, from [`Purger::start`]. Stopping (or dropping) the last
/// handle stops the loop: a pass in progress ends before its next table or batch, and the stop
/// waits for it.
#[derive(Debug)]
pub struct Running {
    purger: Purger,
    state: Option<Arc<LoopState>>,
    stopped: bool,
}

impl Purger {
    /// Starts the background loop: a pass now, then one a full interval after each ends. If
    /// the purger is not enabled nothing runs. If a loop for this lock name runs already on
    /// these tables, the handle attaches to it instead of starting a second one.
    ///
    /// # Errors
    /// `Io` if the thread cannot be spawned.
    pub fn start(&self) -> Result<Running> {
        if !self.config.enable {
            tracing::info!("soft-delete purge is disabled; no loop started");
            return Ok(Running {
                purger: self.clone(),
                state: None,
                stopped: false,
            });
        }
        let mut loops = LOOPS.lock().unwrap_or_else(PoisonError::into_inner);
        let key = loop_key(self);
        if let Some(state) = loops.get(&key) {
            tracing::warn!(
                lock = self.lock_name(),
                "a purge loop for this lock runs already; attaching to it (this purger's own \
                 settings and callback are not used)"
            );
            state.handles.fetch_add(1, Ordering::SeqCst);
            return Ok(Running {
                purger: self.clone(),
                state: Some(Arc::clone(state)),
                stopped: false,
            });
        }
        let state = Arc::new(LoopState {
            handles: AtomicUsize::new(1),
            ..LoopState::default()
        });
        let mut purger = self.clone();
        purger.cancel = Some(Arc::clone(&state.cancel));
        let thread_state = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name(format!("cairn-purge-{}", self.lock_name()))
            .spawn(move || run_loop(&purger, &thread_state))?;
        *state.thread.lock().unwrap_or_else(PoisonError::into_inner) = Some(thread);
        loops.insert(key, Arc::clone(&state));
        tracing::info!(lock = self.lock_name(), config = ?self.config, "purge loop started");
        Ok(Running {
            purger: self.clone(),
            state: Some(state),
            stopped: false,
        })
    }
}

fn run_loop(purger: &Purger, state: &LoopState) {
    let interval = u64::try_from(purger.config.interval.as_millis()).unwrap_or(u64::MAX);
    loop {
        match catch_unwind(AssertUnwindSafe(|| purger.run_pass())) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                state.failed.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(error = %e, "purge pass failed");
            }
            Err(panic) => {
                state.failed.fetch_add(1, Ordering::SeqCst);
                let message = panic
                    .downcast_ref::<&str>()
                    .map(ToString::to_string)
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(panic = %message, "purge pass panicked; the loop goes on");
            }
        }
        // The next pass is due a full interval after this one ended; read the clock before
        // the pass is counted, so whoever waits on the count and then moves the clock moves
        // it past this reading.
        let due = purger.backend().now_ms().saturating_add(interval);
        state.passes.fetch_add(1, Ordering::SeqCst);
        if !wait_until(purger, state, due) {
            break;
        }
    }
}

/// Waits until the backend's clock reads `due` (true) or the loop is stopped (false).
fn wait_until(purger: &Purger, state: &LoopState, due: u64) -> bool {
    let mut stop = state.stop.lock().unwrap_or_else(PoisonError::into_inner);
    loop {
        if *stop {
            return false;
        }
        let now = purger.backend().now_ms();
        if now >= due {
            return true;
        }
        let wait = Duration::from_millis(due - now).min(CLOCK_POLL);
        stop = state
            .wake
            .wait_timeout(stop, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

impl Running {
    /// Passes the loop has finished (skipped, failed and panicked ones included).
    pub fn passes(&self) -> u64 {
        self.state
            .as_ref()
            .map_or(0, |s| s.passes.load(Ordering::SeqCst))
    }

    /// Passes the loop has finished that failed (a table, the lock, the database) or panicked.
    pub fn failed_passes(&self) -> u64 {
        self.state
            .as_ref()
            .map_or(0, |s| s.failed.load(Ordering::SeqCst))
    }

    /// Whether a loop runs behind this handle (false if the purger was not enabled).
    pub fn is_running(&self) -> bool {
        self.state.is_some() && !self.stopped
    }

    /// Lets go of the loop; the last handle to let go stops it and waits for the pass in
    /// progress to end.
    ///
    /// # Errors
    /// `Engine(Panicked)` if the loop's thread died outside a pass.
    pub fn stop(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        let Some(state) = &self.state else {
            return Ok(());
        };
        {
            // Under the registry's lock, so a `start` either attaches before the count reaches
            // zero or finds no entry and starts a fresh loop: never a loop about to stop.
            let mut loops = LOOPS.lock().unwrap_or_else(PoisonError::into_inner);
            if state.handles.fetch_sub(1, Ordering::SeqCst) != 1 {
                return Ok(());
            }
            *state.stop.lock().unwrap_or_else(PoisonError::into_inner) = true;
            state.cancel.store(true, Ordering::SeqCst);
            let key = loop_key(&self.purger);
            if loops.get(&key).is_some_and(|s| Arc::ptr_eq(s, state)) {
                loops.remove(&key);
            }
        }
        state.wake.notify_all();
        let thread = state
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Stopped from inside the loop (an `on_purge` callback): the pass ends before its next
        // table and the loop with it; joining itself would deadlock.
        let thread = thread.filter(|t| t.thread().id() != std::thread::current().id());
        match thread.map(JoinHandle::join) {
            Some(Err(_)) => Err(Error::Engine(cairn::Error::Panicked(
                "the purge loop's thread died".to_owned(),
            ))),
            _ => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            tracing::warn!(error = %e, "stopping the purge loop failed");
        }
    }
}
