//! The TTL task manager in the background: a scheduler thread that ticks every 20 ms of real
//! time (periodic launches, moves to history, recycling) and `ttl_thread_score` workers that
//! run tablet tasks as they become runnable. A failed round is logged and the loop goes on.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::error::{TtlError, TtlResult};
use super::{Inner, TtlTasks};

/// How long an idle thread waits before looking again (a `ManualClock` moved by a test, or a
/// task triggered by a command, is noticed within this).
const POLL: Duration = Duration::from_millis(20);

/// The background threads of a [`TtlTasks`], from [`TtlTasks::start`]. Stopping (or dropping)
/// it stops them; a step in progress finishes first, and its tablet task stays running, to go on
/// from where it got when the manager next runs.
#[derive(Debug)]
pub struct TtlRunning {
    inner: Arc<Inner>,
    stop: Arc<Stop>,
    threads: Vec<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Stop {
    flag: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

impl Stop {
    /// Waits up to `POLL`; true if stopped.
    fn pause(&self) -> bool {
        let guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        if self.flag.load(Ordering::SeqCst) {
            return true;
        }
        drop(
            self.wake
                .wait_timeout(guard, POLL)
                .unwrap_or_else(PoisonError::into_inner),
        );
        self.flag.load(Ordering::SeqCst)
    }
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TtlTasks").finish_non_exhaustive()
    }
}

impl TtlTasks {
    /// Starts the scheduler and the workers in the background.
    ///
    /// # Errors
    /// `NotEnabled`; `InvalidArgument` if they run already; `Tables(Io)` if a thread cannot be
    /// spawned.
    pub fn start(&self) -> TtlResult<TtlRunning> {
        self.inner.enabled()?;
        if self.inner.started.swap(true, Ordering::SeqCst) {
            return Err(TtlError::InvalidArgument(
                "the TTL task manager runs in the background already".to_owned(),
            ));
        }
        let mut running = TtlRunning {
            inner: Arc::clone(&self.inner),
            stop: Arc::new(Stop::default()),
            threads: Vec::new(),
        };
        let scheduler = self.clone();
        running.spawn("cairn-ttl-scheduler", move |stop| {
            while !stop.flag.load(Ordering::SeqCst) {
                if let Err(e) = scheduler.tick() {
                    tracing::warn!(error = %e, "TTL scheduler round failed");
                }
                if stop.pause() {
                    break;
                }
            }
        })?;
        for i in 0..self.inner.settings.ttl_thread_score.max(1) {
            let worker = self.clone();
            running.spawn(&format!("cairn-ttl-{i}"), move |stop| {
                while !stop.flag.load(Ordering::SeqCst) {
                    if let Err(e) = worker.work(&stop.flag) {
                        tracing::warn!(error = %e, "TTL worker round failed");
                    }
                    if stop.pause() {
                        break;
                    }
                }
            })?;
        }
        tracing::info!(
            threads = self.inner.settings.ttl_thread_score.max(1),
            "TTL task manager started"
        );
        Ok(running)
    }
}

impl TtlRunning {
    fn spawn(&mut self, name: &str, body: impl FnOnce(&Stop) + Send + 'static) -> TtlResult<()> {
        let stop = Arc::clone(&self.stop);
        let thread = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || body(&stop))
            .map_err(crate::Error::from)?;
        self.threads.push(thread);
        Ok(())
    }

    /// Stops the background threads and waits for them.
    ///
    /// # Errors
    /// `Tables(Engine(Panicked))` if one of them panicked.
    pub fn stop(mut self) -> TtlResult<()> {
        self.release()
    }

    fn release(&mut self) -> TtlResult<()> {
        {
            let _guard = self
                .stop
                .lock
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            self.stop.flag.store(true, Ordering::SeqCst);
        }
        self.stop.wake.notify_all();
        let mut panicked = false;
        for thread in self.threads.drain(..) {
            panicked |= thread.join().is_err();
        }
        self.inner.started.store(false, Ordering::SeqCst);
        if panicked {
            return Err(super::panicked());
        }
        Ok(())
    }
}

impl Drop for TtlRunning {
    fn drop(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        if let Err(e) = self.release() {
            tracing::warn!(error = %e, "stopping the TTL task manager failed");
        }
    }
}
