//! Driving a run: the workers spawned and joined, the held readers finished, the end of a fault
//! run on a healthy disk, the final verification, and the progress line meanwhile.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::engine::StressEngine;
use crate::harness::{Harness, Reopen, StressError, per_sec};
use crate::report::{Failure, StressReport, counted};
use crate::worker::Worker;

impl Harness {
    /// Runs the workers to the end, then verifies everything and reports. The final
    /// verification runs even when an engine error ended the run, and its result counts.
    ///
    /// # Errors
    /// None today; kept for settings a run may yet refuse.
    pub fn run(&self) -> Result<StressReport, StressError> {
        self.verify_all("at start");
        std::thread::scope(|scope| {
            for id in 0..self.config.threads {
                scope.spawn(move || Worker::new(self, id).run());
            }
            if self.config.progress {
                scope.spawn(|| self.show_progress());
            }
        });
        if let (Some(held), Some(ttl)) = (&self.held, &self.ttl) {
            match self.db().as_deref().and_then(StressEngine::as_cairn) {
                Some(db) => crate::held_readers::finish(self, held, ttl, db),
                None => held.forget_readers(),
            }
        }
        if let Some(faults) = &self.faults {
            // End on a healthy disk: stop the faults, reopen, and check everything.
            faults.clear_errors();
            self.reopen(self.epoch.load(Ordering::Acquire), Reopen::Final);
            self.check_exercised();
        } else if let Some(engine) = self.db().as_deref()
            && let Err(e) = engine.wait_idle()
        {
            self.engine_error("wait_idle", e);
        }
        self.verify_all("at the end");
        if self.ops.load(Ordering::Relaxed) == 0 && self.fatal_error().is_none() {
            self.tally.fail(
                Failure::Unexercised,
                "exercised nothing: the run ended before its first operation".into(),
            );
        }
        Ok(self.report())
    }

    fn show_progress(&self) {
        let bar = crate::progress::show(indicatif::ProgressBar::new_spinner());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        let mut last = (Instant::now(), 0u64);
        while !self.should_stop() {
            std::thread::sleep(Duration::from_millis(250));
            let ops = self.ops.load(Ordering::Relaxed);
            let rate = per_sec(ops - last.1, last.0.elapsed().as_secs_f64());
            last = (Instant::now(), ops);
            let stats = self.stats();
            bar.set_message(format!(
                "{ops} ops ({rate:.0}/s) | flushes {} | compactions {} | recoveries {} | fault \
                 reopens {} | tombstones {} | failures {}",
                counted(stats.flushes),
                counted(stats.compactions),
                counted(stats.recoveries),
                self.fault_reopens.load(Ordering::Relaxed),
                counted(stats.tombstones_pending),
                self.tally.total_failures()
            ));
            bar.tick();
        }
        bar.finish_and_clear();
    }
}
